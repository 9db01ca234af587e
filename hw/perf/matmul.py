"""Cycle model of the matrix engine (pure Python, no Amaranth import).

The counts follow the pipeline of :class:`hw.blocks.matmul.MatmulEngine` exactly; the unit and cocotb
tests compare them with simulated counts.
"""

from __future__ import annotations

from golden.config import AttentionConfig

__all__ = ["ARRAY_LATENCY_EXTRA", "POST_LATENCY", "matmul_cycles", "ideal_cycles",
           "fill_drain_cycles", "row_delay"]

# Array: input register, C PEs each passing the last flag east through one register, then the
# PE's multiplier pipeline (operand and product registers, both inside the DSP block, and one
# more product register in the fabric) and its result register, and the row read: row 0 is in
# row_data C + 5 steps after the tile's last beat is taken.
ARRAY_LATENCY_EXTRA = 5
# Engine after the array: bias sum, requant product (DSP operand registers, DSP product
# registers, fabric product registers, partial-product sum), coarse and fine shift, rounding,
# output buffer. (MatmulEngine.POST_LATENCY; the unit tests check they agree.)
POST_LATENCY = 9


def row_delay(cfg: AttentionConfig, r: int) -> int:
    """Cycles row ``r`` of a tile spends waiting for the requantizer beyond the one cycle
    per row the array drains at: with ``P = cfg.requant_passes`` groups of columns a row, row
    ``r`` starts ``P * r`` cycles after row 0 and is complete ``P - 1`` cycles after its first
    group, and each group passes one register between the row store and the requantizer
    (``MatmulEngine.group_latency``); 0 with a lane per column. Tiles at least
    ``cfg.min_tile_steps`` apart never wait for the previous tile's rows."""
    P = cfg.requant_passes
    return (P - 1) * (r + 1) + (P > 1)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} = {value!r} is out of range: allowed integers >= 1")
    return value


def matmul_cycles(cfg: AttentionConfig, m: int, n: int, k: int) -> int:
    """Cycles of one command with no stalls, counted inclusively from the cycle the first
    ``a``/``b`` beat is accepted to the cycle the last ``result`` beat is accepted.

    The engine takes one operand beat per cycle; a tile's last beat waits until
    ``cfg.min_tile_steps`` cycles have passed since the previous tile's last beat (only
    matters when ``k`` is shorter). The last tile's final valid row ``r`` then needs
    ``C + ARRAY_LATENCY_EXTRA + r`` cycles through the array, :func:`row_delay` for the
    requantizer's lanes, and ``POST_LATENCY`` more through the output pipeline.
    """
    m, n, k = _check("m", m), _check("n", n), _check("k", k)
    R, C = cfg.array_rows, cfg.array_cols
    tile_rows = _ceil_div(m, R)
    tiles = tile_rows * _ceil_div(n, C)
    last_beat = (k - 1) + (tiles - 1) * max(k, cfg.min_tile_steps)
    last_row = m - (tile_rows - 1) * R - 1
    return (last_beat + C + ARRAY_LATENCY_EXTRA + last_row + row_delay(cfg, last_row)
            + POST_LATENCY + 1)


def fill_drain_cycles(cfg: AttentionConfig) -> int:
    """Cycles one tile's last beat needs to become the last result row: input register,
    ``C`` columns east, the PE's product pipeline and result register, the row read,
    ``R - 1`` more rows and the requantizer's :func:`row_delay` of the last, ``POST_LATENCY``
    post-processing stages, and the accepting cycle itself (R + C + 14 with a requantizer
    lane per column)."""
    R, C = cfg.array_rows, cfg.array_cols
    return C + ARRAY_LATENCY_EXTRA + (R - 1) + row_delay(cfg, R - 1) + POST_LATENCY + 1


def ideal_cycles(cfg: AttentionConfig, m: int, n: int, k: int) -> int:
    """``m*n*k / (R*C)`` (whole tiles) plus one fill/drain latency: what a fully busy array
    needs. ``matmul_cycles`` equals it whenever ``k >= cfg.min_tile_steps`` and ``m`` is a
    multiple of ``R``; tile spacing (a shorter ``k``) makes it larger, a short last tile
    smaller."""
    R, C = cfg.array_rows, cfg.array_cols
    tiles = _ceil_div(m, R) * _ceil_div(n, C)
    return tiles * k + fill_drain_cycles(cfg) - 1
