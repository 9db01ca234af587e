"""Float attention weights from a checkpoint file (``.npz`` or ``.safetensors``).

Three namings are recognised, each possibly under a prefix (``encoder.``, ``layers.3.`` ...):

``plain``
    ``Wq, Wk, Wv, Wo`` (d x d, torch ``(out, in)`` layout) and ``bq, bk, bv, bo`` (d).
``torch-mha``
    ``torch.nn.MultiheadAttention``'s state dict: ``in_proj_weight`` (3d x d, rows q, k, v),
    ``in_proj_bias`` (3d), ``out_proj.weight`` (d x d), ``out_proj.bias`` (d). A layer built
    with ``bias=False`` has neither bias: both count as zero.
``hf-bert``
    Hugging Face BERT: ``…attention.self.{query,key,value}.{weight,bias}`` and
    ``…attention.output.dense.{weight,bias}``.

When a file holds several layers (``encoder.layer.0.…``, ``encoder.layer.1.…``), the layer
index chooses one; it is the number in the prefix. Every problem (no naming matches, several
layers and no index, a wrong shape, a dtype NumPy cannot hold) raises
:class:`CheckpointError` listing what the file holds. ``.safetensors`` files are read through
``safetensors.numpy``; no torch is needed.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .reference import FloatLayer

__all__ = ["CheckpointError", "ImportedLayer", "NAMINGS", "read_tensors", "import_layer"]


class CheckpointError(ValueError):
    """A checkpoint that does not hold a usable attention layer, with what it does hold."""


# Per naming: the suffix of every tensor, keyed by what it becomes. ``None`` marks the bias
# tensors a bias-free layer may lack.
NAMINGS = {
    "plain": {"wq": "Wq", "wk": "Wk", "wv": "Wv", "wo": "Wo",
              "bq": "bq", "bk": "bk", "bv": "bv", "bo": "bo"},
    "torch-mha": {"in_w": "in_proj_weight", "in_b": "in_proj_bias",
                  "wo": "out_proj.weight", "bo": "out_proj.bias"},
    "hf-bert": {"wq": "attention.self.query.weight", "bq": "attention.self.query.bias",
                "wk": "attention.self.key.weight", "bk": "attention.self.key.bias",
                "wv": "attention.self.value.weight", "bv": "attention.self.value.bias",
                "wo": "attention.output.dense.weight", "bo": "attention.output.dense.bias"},
}
_OPTIONAL = {"torch-mha": {"in_b", "bo"}}
# The tensor whose presence marks a layer of each naming (its prefix names the layer).
_ANCHOR = {"plain": "wq", "torch-mha": "in_w", "hf-bert": "wq"}


@dataclass(frozen=True)
class ImportedLayer:
    layer: FloatLayer
    naming: str
    prefix: str            # what precedes the naming's names ("" for none)
    layer_index: int | None
    d_model: int


def _holdings(tensors: dict, limit: int = 12) -> str:
    items = [f"{k} {tuple(np.shape(v))}" for k, v in sorted(tensors.items())]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more if items else "nothing"


def read_tensors(path) -> dict:
    """Every array of a ``.npz`` or ``.safetensors`` file, by name."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise CheckpointError(f"checkpoint {path} is not a readable .npz: {e}") from None
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file
        try:
            return load_file(str(path))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"checkpoint {path} is not a readable .safetensors: {e}") \
                from None
        except TypeError:
            # NumPy has no bfloat16, the usual dtype of recent checkpoints.
            return _read_safetensors_widening(path)
    raise CheckpointError(f"checkpoint {path}: unknown file type {path.suffix!r}; allowed "
                          f".npz and .safetensors")


_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                       "I16": "<i2", "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4",
                       "U64": "<u8", "BOOL": "?", "BF16": "<u2"}


def _read_safetensors_widening(path: Path) -> dict:
    """A .safetensors file read directly, bfloat16 tensors widened to float32 (exact: a
    bfloat16 is the top half of a float32). safetensors.numpy refuses them, since NumPy has
    no bfloat16; the format is an 8-byte header length, a JSON header, then the raw data."""
    import json
    import struct

    raw = path.read_bytes()
    try:
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        data = memoryview(raw)[8 + n:]
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            if t["dtype"] not in _SAFETENSORS_DTYPES:
                continue        # e.g. float8: fine unless the layer needs it (then "lacks")
            lo, hi = t["data_offsets"]
            a = np.frombuffer(data[lo:hi], dtype=_SAFETENSORS_DTYPES[t["dtype"]])
            if t["dtype"] == "BF16":
                a = (a.astype(np.uint32) << 16).view(np.float32)
            out[name] = a.reshape(t["shape"])
        return out
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} is not a readable .safetensors: {e}") \
            from None


def _layer_number(prefix: str) -> int | None:
    numbers = re.findall(r"(?:^|\.)(\d+)\.", prefix)
    return int(numbers[-1]) if numbers else None


def _candidates(tensors: dict) -> list[tuple[str, str]]:
    """``(naming, prefix)`` of every complete-looking layer in the file."""
    found = []
    for naming, names in NAMINGS.items():
        anchor = names[_ANCHOR[naming]]
        for key in tensors:
            if key == anchor or key.endswith("." + anchor):
                found.append((naming, key[: len(key) - len(anchor)]))
    return found


def _choose(tensors: dict, path, layer_index: int | None,
            prefix: str | None = None) -> tuple[str, str]:
    cands = _candidates(tensors)
    if not cands:
        raise CheckpointError(
            f"{path}: no attention layer in any known naming (plain Wq..bo; torch "
            f"MultiheadAttention in_proj_weight/out_proj.*; Hugging Face BERT "
            f"attention.self.query.* ...); the file holds {_holdings(tensors)}")
    namings = {n for n, _ in cands}
    if len(namings) > 1:
        raise CheckpointError(f"{path}: holds layers in more than one naming "
                              f"({', '.join(sorted(namings))}): keep one per file")
    listed = ", ".join(repr(p) for _, p in sorted(cands, key=lambda c: c[1]))
    if prefix is not None:
        chosen = [c for c in cands if c[1] == prefix]
        if not chosen:
            raise CheckpointError(f"{path}: no layer under the prefix {prefix!r}; the file's "
                                  f"attention layers are under {listed}")
    elif layer_index is not None:
        chosen = [c for c in cands if _layer_number(c[1]) == layer_index]
        if not chosen:
            have = sorted({_layer_number(p) for _, p in cands} - {None})
            raise CheckpointError(
                f"{path}: no layer {layer_index}; the file holds layer"
                f"{'s ' + ', '.join(map(str, have)) if have else ' without an index'}")
    else:
        chosen = cands
    if len(chosen) > 1:
        # Several layers match (e.g. nn.Transformer's encoder.layers.0.self_attn. and
        # decoder.layers.0.self_attn.): never pick one silently.
        have = sorted({_layer_number(p) for _, p in chosen} - {None})
        by_index = (f"indices {', '.join(map(str, have))}; choose one with the layer index"
                    if len(have) == len(chosen) and layer_index is None else
                    "choose one by its prefix")
        raise CheckpointError(f"{path}: holds {len(chosen)} attention layers that match "
                              f"({', '.join(repr(p) for _, p in sorted(chosen))}); {by_index}")
    return chosen[0]


def _tensor(tensors, key, shape, path) -> np.ndarray:
    a = np.asarray(tensors[key])
    if a.shape != shape:
        raise CheckpointError(f"{path}: {key} has shape {a.shape}, expected {shape}")
    if not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(a.dtype, np.integer):
        raise CheckpointError(f"{path}: {key} has dtype {a.dtype}, expected numbers")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise CheckpointError(f"{path}: {key} holds values that are not finite")
    return a


def import_layer(path, layer_index: int | None = None,
                 prefix: str | None = None) -> ImportedLayer:
    """The float attention layer of a checkpoint file (any naming above), chosen by the number
    in its prefix (``layer_index``) or by the whole prefix (``"decoder.layers.0.self_attn."``)
    when a file holds several."""
    tensors = read_tensors(path)
    naming, prefix = _choose(tensors, path, layer_index, prefix)
    names = {k: prefix + v for k, v in NAMINGS[naming].items()}
    optional = _OPTIONAL.get(naming, set())
    missing = [n for k, n in names.items() if n not in tensors and k not in optional]
    absent_optional = [k for k in optional if names[k] not in tensors]
    if absent_optional and len(absent_optional) != len(optional):
        missing += [names[k] for k in absent_optional]
    if missing:
        raise CheckpointError(f"{path}: {naming} layer {prefix or '(no prefix)'} lacks "
                              f"{', '.join(missing)}; the file holds {_holdings(tensors)}")
    anchor = np.shape(tensors[names[_ANCHOR[naming]]])
    if len(anchor) != 2:
        raise CheckpointError(f"{path}: {names[_ANCHOR[naming]]} has shape {anchor}, expected "
                              f"a matrix")
    d = anchor[1]
    w = {}
    if naming == "torch-mha":
        in_w = _tensor(tensors, names["in_w"], (3 * d, d), path)
        w["wq"], w["wk"], w["wv"] = in_w[:d], in_w[d:2 * d], in_w[2 * d:]
        w["wo"] = _tensor(tensors, names["wo"], (d, d), path)
        if absent_optional:
            w["bq"] = w["bk"] = w["bv"] = w["bo"] = np.zeros(d)
        else:
            in_b = _tensor(tensors, names["in_b"], (3 * d,), path)
            w["bq"], w["bk"], w["bv"] = in_b[:d], in_b[d:2 * d], in_b[2 * d:]
            w["bo"] = _tensor(tensors, names["bo"], (d,), path)
    else:
        for k in ("wq", "wk", "wv", "wo"):
            w[k] = _tensor(tensors, names[k], (d, d), path)
        for k in ("bq", "bk", "bv", "bo"):
            w[k] = _tensor(tensors, names[k], (d,), path)
    # Additive scoring's vectors w_h, (heads, head_dim) with heads * head_dim = d_model, under
    # the layer's prefix as "wa" (any naming): optional.
    if prefix + "wa" in tensors:
        shape = np.shape(tensors[prefix + "wa"])
        if len(shape) != 2 or shape[0] * shape[1] != d:
            raise CheckpointError(f"{path}: {prefix}wa has shape {shape}, expected (heads, "
                                  f"head_dim) with heads * head_dim = {d}")
        w["wa"] = _tensor(tensors, prefix + "wa", shape, path)
    return ImportedLayer(FloatLayer(**w), naming, prefix, _layer_number(prefix), d)
