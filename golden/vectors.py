"""Test-vector export: the golden model's inputs, parameters and every intermediate on disk.

For testbenches outside Python (SystemVerilog, C++). :func:`export_vectors` writes into
``out_dir``:

``vectors.npz``
    ``config`` (the configuration as a JSON string), every integer parameter
    (:meth:`QuantizedLayer.arrays`), the run's inputs (``x``, ``kv``, ``causal``, ``key_len``),
    the 2^-f table ``exp_table`` and every field of :class:`AttentionTrace`.
``<name>.hex``
    One file per tensor for ``$readmemh``: one word per line, two's complement, fixed width of
    ``ceil(bits / 4)`` hex digits, row-major (C order); scalars are one word.
``manifest.json``
    For each tensor: file, shape, bit width, signedness; plus the run's mode.

Command line: ``python -m hw vectors --config configs/tiny.toml --seed 1 --out build/vectors``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .attention import QuantizedLayer, attention_int, check_run_args
from .config import AttentionConfig
from .quantize import quantize_layer, quantize_tensor
from .reference import random_float_layer
from .softmax import exp_table

__all__ = ["export_vectors", "tensor_formats", "write_hex", "load_hex"]

# Requantization and exponent shifts are 1..62: six bits, unsigned.
SHIFT_BITS = 6


def tensor_formats(cfg: AttentionConfig, layer: QuantizedLayer) -> dict[str, tuple[int, bool]]:
    """``name -> (bits, signed)`` of every exported tensor, from the configuration's widths."""
    A, Wb = cfg.act_bits, cfg.weight_bits
    fmt = {n: (Wb, True) for n in layer.WEIGHTS}
    fmt.update({n: (cfg.bias_bits, True) for n in layer.BIASES})
    for n in layer.REQUANTS:
        fmt[f"{n}_mult"] = (cfg.requant_mult_bits, False)
        fmt[f"{n}_shift"] = (SHIFT_BITS, False)
    fmt["exp_mult"] = (cfg.exp_mult_bits, False)
    fmt["exp_shift"] = (SHIFT_BITS, False)
    fmt["exp_table"] = (cfg.exp_table_bits + 1, False)       # UQ1.T, entries up to 1.0
    fmt.update({
        "x": (A, True), "kv": (A, True),
        "causal": (1, False), "key_len": (cfg.seq_len_bits, False),
        "q": (A, True), "k": (A, True), "v": (A, True),
        "scores": (cfg.score_bits, True),
        "valid": (1, False),
        "probs": (cfg.prob_bits, False),
        "attn": (A, True), "out": (A, True),
    })
    return fmt


def _digits(bits: int) -> int:
    return -(-bits // 4)


def write_hex(path, values, bits: int, signed: bool) -> None:
    """Write ``values`` (any shape, row-major) as ``$readmemh`` words of ``bits`` bits.

    Raises ``ValueError`` if a value does not fit the format.
    """
    if not 1 <= bits <= 62:
        raise ValueError(f"bits = {bits} is out of range: allowed 1..62")
    v = np.asarray(values).astype(np.int64).ravel()
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if v.size and (v.min() < lo or v.max() > hi):
        raise ValueError(f"{Path(path).name}: values {v.min()}..{v.max()} do not fit "
                         f"{'signed' if signed else 'unsigned'} {bits} bits ({lo}..{hi})")
    words = v & ((1 << bits) - 1)          # two's complement of negatives
    width = _digits(bits)
    Path(path).write_text("".join(f"{int(w):0{width}x}\n" for w in words))


def load_hex(path, bits: int, signed: bool, shape=None) -> np.ndarray:
    """Read a ``$readmemh`` file written by :func:`write_hex` back into int64 values.

    Accepts ``//`` comments, blank lines and ``_`` separators as ``$readmemh`` does
    (``@address`` jumps are not supported). ``shape`` reshapes the result (default 1-D).
    """
    if not 1 <= bits <= 62:
        raise ValueError(f"bits = {bits} is out of range: allowed 1..62")
    words = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        for tok in line.split("//", 1)[0].split():
            if tok.startswith("@"):
                raise ValueError(f"{path}:{lineno}: address jumps are not supported")
            w = int(tok.replace("_", ""), 16)
            if w >> bits:
                raise ValueError(f"{path}:{lineno}: word {tok} is wider than {bits} bits")
            words.append(w)
    v = np.array(words, dtype=np.int64)
    if signed:
        v = np.where(v >> (bits - 1) & 1, v - (1 << bits), v)
    return v.reshape(shape) if shape is not None else v


def export_vectors(cfg: AttentionConfig, layer: QuantizedLayer, x, kv=None, causal: bool = False,
                   key_len: int | None = None, *, out_dir) -> dict:
    """Run :func:`attention_int` with ``trace=True`` and write its vectors to ``out_dir``.

    Returns the manifest (also written as ``manifest.json``).
    """
    layer.check(cfg)
    x, kv_arr, key_len = check_run_args(cfg, x, kv, causal, key_len)
    tr = attention_int(cfg, layer, x, kv, causal=causal, key_len=key_len, trace=True)
    tensors = dict(layer.arrays())
    tensors["exp_table"] = exp_table(cfg)
    tensors.update(x=x, kv=kv_arr, causal=np.int64(causal), key_len=np.int64(key_len))
    for name in ("q", "k", "v", "scores", "valid", "probs", "attn", "out"):
        tensors[name] = np.asarray(getattr(tr, name)).astype(np.int64)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fmt = tensor_formats(cfg, layer)
    entries = {}
    for name, value in tensors.items():
        bits, signed = fmt[name]
        write_hex(out_dir / f"{name}.hex", value, bits, signed)
        entries[name] = {"file": f"{name}.hex", "shape": list(np.shape(value)), "bits": bits,
                         "signed": signed}
    manifest = {
        "config": cfg.name,
        "seq_len": int(x.shape[0]), "kv_rows": int(kv_arr.shape[0]), "key_len": int(key_len),
        "causal": bool(causal), "cross_attention": kv is not None,
        "format": "$readmemh, one word per line, two's complement, row-major",
        "tensors": entries,
    }
    np.savez(out_dir / "vectors.npz", config=np.array(cfg.to_json()), **tensors)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def random_run(cfg: AttentionConfig, seed: int, *, seq_len: int | None = None,
               cross: bool = False, calib_sequences: int = 8):
    """A quantized random layer and int8 inputs for one run: ``(layer, x, kv)``.

    Weights are torch-initialised floats, quantized on ``calib_sequences`` random sequences;
    the inputs are fresh normal rows quantized with the calibrated scales.
    """
    rng = np.random.default_rng(seed)
    n = cfg.max_seq_len if seq_len is None else seq_len
    if not 1 <= n <= cfg.max_seq_len:
        raise ValueError(f"seq_len = {n} is out of range: allowed 1..{cfg.max_seq_len}")
    if cross and not cfg.cross_attention:
        raise ValueError(f"cross-attention requested but {cfg.name} has cross_attention = false")
    d = cfg.d_model
    fl = random_float_layer(cfg, rng)
    calib_x = rng.normal(size=(calib_sequences, n, d))
    calib_kv = rng.normal(size=(calib_sequences, cfg.max_kv_len, d)) if cross else None
    layer = quantize_layer(cfg, fl, calib_x, calib_kv)
    x = quantize_tensor(rng.normal(size=(n, d)), layer.scales["x"], cfg.act_bits)
    kv = quantize_tensor(rng.normal(size=(cfg.max_kv_len, d)), layer.scales["kv"],
                         cfg.act_bits) if cross else None
    return layer, x, kv
