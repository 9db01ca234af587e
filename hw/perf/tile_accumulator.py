"""Cycle model of :class:`hw.blocks.tile_accumulator.TileAccumulator`, exact when ``out`` is
always ready.

Per key/value tile: its ``info`` entries are taken one per cycle from the cycle they are
offered, once the bank they go to is free; its result beats are taken one per cycle from the
cycle they are offered, once all its entries are in (the cycle after the last), the previous
tile's last beat is written back (``WRITE`` cycles after it was taken) and, after a final
tile, the normalisation pass is over. The pass issues ``rows x dv / norm_lanes`` value groups
on consecutive cycles from ``WRITE`` cycles after the final tile's last beat was taken; each
comes out of the ``out`` queue :func:`out_latency` cycles after its issue.

The tests compare these figures with the simulated cycle of every transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AccTile", "AccSchedule", "tile_accumulator_schedule", "out_latency", "WRITE"]

WRITE = 6       # last result beat taken -> the next tile's first beat (or the pass's first issue)


def out_latency(cfg, fmt, norm_lanes: int = 1) -> int:
    """Cycles from a pass issue to its value group leaving the ``out`` queue."""
    from amaranth.hdl import signed, unsigned
    from hw.blocks.dsp import WideMultiplier
    from hw.blocks.tile_accumulator import TileAccumulator
    S, R, B, G, A = (fmt.out_acc_bits, cfg.recip_bits, cfg.prob_bits, fmt.norm_guard_bits,
                     cfg.act_bits)
    lat1 = WideMultiplier.latency_for(signed(S), unsigned(R + 1))
    lat2 = WideMultiplier.latency_for(signed(A + B + G + 2), unsigned(cfg.requant_mult_bits))
    rnd = TileAccumulator.ROUND_LATENCY
    # n1, n2, n2b, then the lanes: n3, n4, n5, the products and roundings, the queue write
    # register and the queue's two cycles.
    return 3 + 3 + lat1 + rnd + lat2 + rnd + 1 + 2


@dataclass(frozen=True)
class AccTile:
    """One key/value tile as offered: the cycles its entries and its result beats are
    offered (each at the earliest), whether it is its query tile's final one, and the value
    groups of its pass (``rows x dv / norm_lanes``; only for a final tile)."""

    info_offered: list[int]
    results_offered: list[int]
    final: bool
    groups: int = 0


@dataclass(frozen=True)
class AccSchedule:
    info: list[list[int]]       # per tile: the cycle each entry was taken
    results: list[list[int]]    # per tile: the cycle each result beat was taken
    out: list[list[int]]        # per final tile: the cycle each value group left


def tile_accumulator_schedule(tiles: list[AccTile], out_lat: int, banks: int = 2
                              ) -> AccSchedule:
    """The schedule of ``tiles`` (offered as they say, ``out`` always ready) for an
    accumulator of ``banks`` entry banks."""
    info, results, out = [], [], []
    free = [0] * banks              # the cycle from which each bank takes entries
    ready_from = 0                  # the cycle from which the next tile's results are taken
    t_info = -1
    for k, tile in enumerate(tiles):
        bank = k % banks
        ti = []
        for c in tile.info_offered:
            t_info = max(c, t_info + 1, free[bank])
            ti.append(t_info)
        info.append(ti)
        tr, t = [], max(ready_from, ti[-1] + 1) - 1
        for c in tile.results_offered:
            t = max(c, t + 1)
            tr.append(t)
        results.append(tr)
        end = tr[-1] + WRITE        # the tile is written (or the pass starts)
        if tile.final:
            issues = [end + i for i in range(tile.groups)]
            out.append([i + out_lat for i in issues])
            end = issues[-1] + 1
        free[bank] = end            # the bank takes the next entries from here on
        ready_from = end
    return AccSchedule(info, results, out)
