"""``python -m hw run``: a float attention layer and its input, quantized, run on the hardware
(or the golden model), and compared with the float64 reference.

Files:

- layer (``.npz`` or ``.safetensors``): float weights in any naming of
  :mod:`golden.checkpoint`: plain ``Wq, Wk, Wv, Wo`` (d_model x d_model, torch ``(out, in)``
  layout) and ``bq, bk, bv, bo``; ``torch.nn.MultiheadAttention``'s ``in_proj_weight`` ...;
  Hugging Face BERT's ``…layer.N.attention.self.query.weight`` ... (``layer_index`` picks N);
- input (``.npz``): ``x`` (L x d_model float); optionally ``kv`` (S x d_model: cross-attention)
  and ``key_padding_mask`` (S bools, ``True`` = padding, torch's convention). The hardware
  keeps the first KEY_LEN keys, so only a mask that pads at the end can be run;
- calibration (``.npz``, optional): sequences of any lengths as ``x0, x1, …`` (and ``kv0,
  kv1, …`` for cross-attention, one per ``x``), or ``x`` (and ``kv``) as one sequence (rows x
  d_model) or several of equal length (sequences x rows x d_model). Without it the quantizer
  calibrates on the input itself;
- output (``.npz``): ``y`` (dequantized, L x d_model), ``y_int`` (the int8 output), ``y_ref``
  (float64 reference of the float layer on the float input), ``cycles``, ``busy_cycles``,
  ``stall_cycles`` (-1 where the engine does not give one: busy cycles from the golden
  model).

Every problem with the files (a missing array, a wrong shape, a length the configuration does
not allow, a mask the hardware cannot express) raises :class:`LayerFileError` naming it.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import golden as g
from golden.posenc import encoding_float

__all__ = ["LayerFileError", "RunReport", "load_float_layer", "load_input", "run_float"]



class LayerFileError(ValueError):
    """A layer, input or calibration file that cannot be used, with the reason."""


def _load_npz(path: Path, what: str) -> dict:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise LayerFileError(f"{what} file {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise LayerFileError(f"{what} file {path} is not a readable .npz: {e}") from None


def _float_array(arrays: dict, name: str, shape: tuple, path: Path) -> np.ndarray:
    a = np.asarray(arrays[name])
    if a.shape != shape:
        raise LayerFileError(f"{path}: {name} has shape {a.shape}, expected {shape}")
    if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a)):
        raise LayerFileError(f"{path}: {name} must hold finite numbers")
    return a.astype(np.float64)


def load_float_layer(cfg: g.AttentionConfig, path: Path,
                     layer_index: int | None = None,
                     prefix: str | None = None) -> g.FloatLayer:
    from golden.checkpoint import CheckpointError, import_layer
    try:
        imp = import_layer(path, layer_index, prefix)
    except CheckpointError as e:
        raise LayerFileError(str(e)) from None
    if imp.d_model != cfg.d_model:
        where = f" {imp.prefix.rstrip('.')}" if imp.prefix else ""
        raise LayerFileError(f"{path}: the {imp.naming} layer{where} has d_model "
                             f"{imp.d_model}, the configuration {cfg.name} has d_model "
                             f"{cfg.d_model}")
    wa = imp.layer.wa
    if wa is not None and wa.shape != (cfg.heads, cfg.head_dim):
        raise LayerFileError(f"{path}: wa has shape {wa.shape}, the configuration {cfg.name} "
                             f"has {cfg.heads} heads of {cfg.head_dim}")
    return imp.layer


@dataclass(frozen=True)
class LayerInput:
    x: np.ndarray
    kv: np.ndarray | None
    key_len: int | None        # None: every key


def _rows(arrays, name, cfg, path, limit, limit_name) -> np.ndarray:
    a = np.asarray(arrays[name])
    if a.ndim != 2 or a.shape[1] != cfg.d_model:
        raise LayerFileError(f"{path}: {name} has shape {a.shape}, expected (rows, "
                             f"{cfg.d_model}) for d_model {cfg.d_model}")
    if not 1 <= a.shape[0] <= limit:
        raise LayerFileError(f"{path}: {name} has {a.shape[0]} rows, allowed 1..{limit} "
                             f"({limit_name})")
    return _float_array(arrays, name, a.shape, path)


def load_input(cfg: g.AttentionConfig, path: Path) -> LayerInput:
    arrays = _load_npz(path, "input")
    if "x" not in arrays:
        raise LayerFileError(f"{path}: no array x; the file holds "
                             f"{', '.join(arrays) or 'nothing'}")
    unknown = set(arrays) - {"x", "kv", "key_padding_mask"}
    if unknown:
        raise LayerFileError(f"{path}: unknown arrays {', '.join(sorted(unknown))}; allowed: "
                             f"x, kv, key_padding_mask")
    kv = None
    if "kv" in arrays:
        if not cfg.cross_attention:
            raise LayerFileError(f"{path}: kv given (cross-attention) but the configuration "
                                 f"has cross_attention = false")
        x = _rows(arrays, "x", cfg, path, cfg.max_seq_len, "the configuration's max_seq_len")
        kv = _rows(arrays, "kv", cfg, path, cfg.max_kv_len, "the configuration's max_kv_len")
    else:
        limit = min(cfg.max_seq_len, cfg.max_kv_len)
        x = _rows(arrays, "x", cfg, path, limit, "the configuration's max_seq_len and "
                  "max_kv_len: in self-attention the queries are also the keys")
    keys = len(x) if kv is None else len(kv)
    key_len = None
    if "key_padding_mask" in arrays:
        mask = np.asarray(arrays["key_padding_mask"])
        if mask.dtype != np.bool_ or mask.shape != (keys,):
            raise LayerFileError(f"{path}: key_padding_mask must be {keys} bools (one per key), "
                                 f"not {mask.dtype} {mask.shape}")
        n = int(np.argmax(mask)) if mask.any() else keys
        if mask[n:].all() and not mask[:n].any():
            if n == 0:
                raise LayerFileError(f"{path}: key_padding_mask pads every key; at least the "
                                     f"first key must be kept")
            key_len = n if n < keys else None
        else:
            raise LayerFileError(
                f"{path}: key_padding_mask pads keys {np.flatnonzero(mask)[:8].tolist()}...: the "
                f"hardware can only pad at the end (it keeps the first KEY_LEN keys)")
    return LayerInput(x, kv, key_len)


def _numbered(arrays: dict, stem: str) -> list[str]:
    """``stem0, stem1, …`` present in ``arrays``, in index order (no gaps allowed)."""
    names = sorted((int(k[len(stem):]), k) for k in arrays
                   if k.startswith(stem) and k[len(stem):].isdigit())
    if [i for i, _ in names] != list(range(len(names))):
        raise LayerFileError(f"calibration arrays {', '.join(k for _, k in names)} must be "
                             f"numbered {stem}0, {stem}1, … without gaps")
    return [k for _, k in names]


def _calib_sequence(arrays, name, cfg, path) -> list[np.ndarray]:
    a = np.asarray(arrays[name])
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise LayerFileError(f"{path}: {name} has dtype {a.dtype}, expected numbers")
    a = a.astype(np.float64)
    if a.ndim not in (2, 3) or a.shape[-1] != cfg.d_model or not a.shape[-2]:
        raise LayerFileError(f"{path}: {name} has shape {a.shape}, expected (rows, "
                             f"{cfg.d_model}) or (sequences, rows, {cfg.d_model})")
    if not np.all(np.isfinite(a)):
        raise LayerFileError(f"{path}: {name} holds values that are not finite")
    return [a] if a.ndim == 2 else list(a)


def load_calibration(cfg: g.AttentionConfig, path: Path, cross: bool):
    """Calibration sequences ``(x list, kv list or None)``: ``x0, x1, …`` (any lengths) or
    ``x`` (one or several equal sequences), with ``kv…`` likewise for cross-attention."""
    arrays = _load_npz(path, "calibration")
    out = []
    for stem in ("x", "kv") if cross else ("x",):
        numbered = _numbered(arrays, stem)
        if stem in arrays and numbered:
            raise LayerFileError(f"{path}: holds both {stem} and {numbered[0]}…; use one form")
        names = numbered or ([stem] if stem in arrays else [])
        if not names:
            raise LayerFileError(f"{path}: needs {stem} or {stem}0, {stem}1, …; the file holds "
                                 f"{', '.join(arrays) or 'nothing'}")
        out.append([seq for n in names for seq in _calib_sequence(arrays, n, cfg, path)])
    if cross and len(out[0]) != len(out[1]):
        raise LayerFileError(f"{path}: {len(out[0])} x sequences but {len(out[1])} kv "
                             f"sequences; cross-attention calibration needs one kv per x")
    return out[0], (out[1] if cross else None)


def _check_encoding(cfg, rows: int, pos_enc: str, pe_offset: int, grid_width) -> None:
    """The encoder's own checks (BAD_POSENC in hardware), as named errors before a run."""
    P = cfg.positions if cfg.pos_enc else 0
    if pos_enc == "1d" and pe_offset + rows > P:
        raise LayerFileError(f"--pe-offset {pe_offset}: positions {pe_offset}..."
                             f"{pe_offset + rows - 1} of {rows} rows pass the table's {P} "
                             f"(max_position)")
    if pos_enc == "2d":
        if rows % grid_width:
            raise LayerFileError(f"--grid-width {grid_width} does not divide the input's "
                                 f"{rows} rows (the 2-D encoding takes whole grid rows)")
        if grid_width > P or pe_offset + rows // grid_width > P:
            raise LayerFileError(f"--grid-width {grid_width}, --pe-offset {pe_offset}: grid "
                                 f"rows {pe_offset}..{pe_offset + rows // grid_width - 1} or "
                                 f"columns 0..{grid_width - 1} pass the table's {P} "
                                 f"positions (max_position)")


@dataclass
class RunReport:
    y: np.ndarray
    y_int: np.ndarray
    y_ref: np.ndarray
    cycles: int
    busy_cycles: int
    stall_cycles: int
    cosines: np.ndarray         # per output row, y against y_ref


def run_float(cfg: g.AttentionConfig, layer_path: Path, input_path: Path, *,
              causal: bool = False, sim: str = "verilator", seed: int = 0,
              idle: float = 0.0, backpressure: float = 0.0,
              calib_path: Path | None = None, layer_index: int | None = None,
              percentile: float | None = None, layer_prefix: str | None = None,
              pos_enc: str = "off", pe_offset: int = 0, scoring: str = "dot",
              grid_width: int | None = None, weight_scales: str = "tensor") -> RunReport:
    """Quantize the float layer of ``layer_path`` (on ``calib_path``, else on the input), run
    the input of ``input_path`` on ``sim`` and compare with the float64 reference.
    ``pos_enc`` (``"off"``, ``"1d"``, ``"2d"``) has the hardware add the positional encoding
    (``pe_offset``: PE_OFFSET, ``grid_width``: PE_GRID_W); the calibration and the reference
    then add it too (the calibration from position 0). ``weight_scales`` ``"channel"`` (a
    configuration with ``channel_scales``) quantizes each projection per output channel and
    runs it from the scale table (CTRL.CHANNEL_SCALES)."""
    from sim.host import Sequence, run_layer

    if causal and not cfg.causal_mask:
        raise LayerFileError("--causal given but the configuration has causal_mask = false")
    if scoring not in ("dot", "additive"):
        raise LayerFileError(f"--scoring {scoring}: allowed dot, additive")
    if scoring == "additive" and not cfg.additive:
        raise LayerFileError(f"--scoring additive: the configuration {cfg.name} builds no "
                             f"additive scorer ([scoring] additive_lanes = 0)")
    if weight_scales not in ("tensor", "channel"):
        raise LayerFileError(f"--weight-scales {weight_scales}: allowed tensor, channel")
    if weight_scales == "channel" and not cfg.channel_scales:
        raise LayerFileError(f"--weight-scales channel: the configuration {cfg.name} builds no "
                             f"scale table ([features] channel_scales = false)")
    if pos_enc != "off" and pos_enc not in cfg.pos_enc:
        raise LayerFileError(f"--pos-enc {pos_enc}: the configuration builds "
                             f"{', '.join(cfg.pos_enc) or 'no positional encoder'} "
                             f"([posenc] pos_enc)")
    if pos_enc == "2d" and not grid_width:
        raise LayerFileError("--pos-enc 2d needs --grid-width (the grid's width in rows)")
    fl = load_float_layer(cfg, layer_path, layer_index, layer_prefix)
    if scoring == "additive" and fl.wa is None:
        raise LayerFileError(f"--scoring additive: {layer_path} holds no wa (heads, head_dim) "
                             f"vectors of additive scoring")
    inp = load_input(cfg, input_path)
    _check_encoding(cfg, len(inp.x), pos_enc, pe_offset, grid_width)
    cross = inp.kv is not None
    if calib_path is not None:
        cx, ckv = load_calibration(cfg, calib_path, cross)
        lens = None
    else:
        cx, ckv, lens = inp.x, inp.kv, inp.key_len
    est = {} if percentile is None else {"estimator": "percentile", "percentile": percentile}
    try:
        layer = g.quantize_layer(cfg, fl, cx, ckv, causal=causal, key_len=lens,
                                 pos_enc=None if pos_enc == "off" else (pos_enc, grid_width),
                                 scoring=scoring, weight_scales=weight_scales, **est)
    except ValueError as e:     # e.g. a scale the requantizer cannot express
        raise LayerFileError(f"cannot quantize the layer on this calibration data: {e}") \
            from None
    s = layer.scales
    xq = g.quantize_tensor(inp.x, s["x"], cfg.act_bits)
    kvq = g.quantize_tensor(inp.kv, s["kv"], cfg.act_bits) if cross else None
    seq = Sequence(xq, kvq, causal, inp.key_len, pos_enc, pe_offset, grid_width)
    res = run_layer(cfg, layer, [seq], sim=sim, seed=seed, idle=idle,
                    backpressure=backpressure)[0]
    y = g.dequantize(res.out, s["out"])
    pe = None
    if pos_enc != "off":
        first = pe_offset * grid_width if pos_enc == "2d" else pe_offset
        pe = encoding_float(len(inp.x), cfg.d_model, pos_enc, first, grid_width)
    y_ref = g.attention_float(cfg, fl, inp.x, inp.kv, causal=causal, key_len=inp.key_len,
                              pos_enc=pe, scoring=scoring)
    num = (y * y_ref).sum(axis=1)
    den = np.linalg.norm(y, axis=1) * np.linalg.norm(y_ref, axis=1)
    # Both rows zero: equal (1); one of them zero: nothing in common (0).
    both_zero = (np.linalg.norm(y, axis=1) == 0) & (np.linalg.norm(y_ref, axis=1) == 0)
    cos = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(both_zero, 1.0, 0.0))
    return RunReport(y, res.out, y_ref, res.cycles,
                     -1 if res.busy_cycles is None else res.busy_cycles, res.stall_cycles, cos)
