"""Sinusoidal positional encodings, 1-D and 2-D (float reference and the integer twin of the
encoder in the input loader, ``hw/blocks/posenc.py``).

1-D (Vaswani et al.; d2l): for position ``i`` and channel pair ``j``,
``p(i, 2j) = sin(i / 10000**(2j/d))`` and ``p(i, 2j+1) = cos(i / 10000**(2j/d))``.
2-D, for an H x W grid in row-major order (position ``i`` is row ``i // W``, column
``i % W``): the first ``d/2`` channels are the 1-D encoding of the row with ``d/2`` channels,
the last ``d/2`` that of the column. Positions start at ``offset`` so a long input can be sent
in pieces.

In integers the encoding is a table ``round(p 2**PE_BITS)`` (S1.PE_BITS); the hardware adds
``round_shift(code * pe_mult, pe_shift)`` to each int8 input, ``pe_mult 2**-pe_shift =
2**-PE_BITS / s_x``, saturating: that matches a float model adding the encoding before
quantizing with ``s_x``, up to one rounding of each (docs/numerics.md).
"""

from __future__ import annotations

import numpy as np

from .fixed import as_int64, round_shift, saturate

__all__ = ["PE_MODES", "PE_BITS", "encoding_float", "encoding_int", "add_encoding"]

PE_MODES = ("off", "1d", "2d")
# S1.14 table entries (sin and cos in [-1, 1]).
PE_BITS = 14


def _sinusoid(pos, d: int) -> np.ndarray:
    pos = np.asarray(pos, dtype=np.float64)[:, None]
    j = np.arange(d // 2, dtype=np.float64)[None, :]
    angle = pos / 10000.0 ** (2.0 * j / d)
    out = np.empty((pos.shape[0], d))
    out[:, 0::2] = np.sin(angle)
    out[:, 1::2] = np.cos(angle)
    return out


def encoding_float(rows: int, d: int, mode: str = "1d", offset: int = 0,
                   grid_width: int | None = None) -> np.ndarray:
    """The float64 encoding (rows, d) of positions ``offset .. offset + rows - 1``."""
    if mode not in PE_MODES:
        raise ValueError(f"mode = {mode!r} is not one of {', '.join(PE_MODES)}")
    if d % 2 or (mode == "2d" and d % 4):
        raise ValueError(f"d = {d} must be even (a multiple of 4 for the 2-D encoding)")
    if offset < 0:
        raise ValueError(f"offset = {offset} must be >= 0")
    pos = np.arange(offset, offset + rows)
    if mode == "off":
        return np.zeros((rows, d))
    if mode == "1d":
        return _sinusoid(pos, d)
    if not grid_width or grid_width < 1:
        raise ValueError(f"grid_width = {grid_width!r}: the 2-D encoding needs a grid width >= 1")
    return np.concatenate([_sinusoid(pos // grid_width, d // 2),
                           _sinusoid(pos % grid_width, d // 2)], axis=1)


def encoding_int(rows: int, d: int, mode: str = "1d", offset: int = 0,
                 grid_width: int | None = None) -> np.ndarray:
    """The encoding's integer codes, ``round(p 2**PE_BITS)`` (what the table holds)."""
    return np.floor(encoding_float(rows, d, mode, offset, grid_width) * 2 ** PE_BITS
                    + 0.5).astype(np.int64)


def add_encoding(x, codes, pe_mult: int, pe_shift: int, act_bits: int = 8) -> np.ndarray:
    """``sat(x + round_shift(code * pe_mult, pe_shift))``: the encoding at the input's scale."""
    return saturate(as_int64(x) + round_shift(as_int64(codes) * pe_mult, pe_shift), act_bits)
