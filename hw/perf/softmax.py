"""Cycle model of :class:`hw.blocks.softmax.SoftmaxUnit`, exact when ``probs`` is always ready.

Rows enter back to back (one beat per cycle, the first at cycle 0). Each row goes through the
three stages of the unit in order; a stage starts a row when the row's descriptor has arrived
and it has issued the previous row's last beat. With the ring buffers sized as in the unit the
input is never throttled, so the schedule is a max-plus recurrence over the rows:

- reduce: beats accepted at ``a .. a + L - 1``; the row's (max, beats) descriptor is written
  into the max queue ``reduce_latency`` cycles after the last beat, and is readable
  ``queue_latency`` cycles after that;
- exponentiate: loads the descriptor at ``max(readable, last issue of the previous row)`` and
  issues reads at the following L cycles; the row sum enters the divider ``exp_latency + 1``
  cycles after the last issue, leaves ``divider_latency`` later into the reciprocal queue;
- normalise: loads (q, lead) the same way and issues L reads; each output beat is valid
  ``normalise_latency`` cycles after its read.

The tests compare these figures with the simulated cycle of every output beat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from golden.config import AttentionConfig

__all__ = ["SoftmaxTiming", "row_beats", "softmax_schedule", "softmax_cycles"]


@dataclass(frozen=True)
class SoftmaxTiming:
    """Stage latencies of the unit for one configuration (read from the hardware class)."""

    reduce_latency: int
    queue_latency: int
    exp_latency: int
    divider_latency: int
    normalise_latency: int

    @classmethod
    def of(cls, cfg: AttentionConfig) -> "SoftmaxTiming":
        from hw.blocks.softmax import SoftmaxGeometry
        geo = SoftmaxGeometry(cfg)
        return cls(geo.reduce_latency, geo.queue_latency, geo.exp_latency,
                   geo.divider_latency, geo.normalise_latency)


def row_beats(cfg: AttentionConfig, keys: int) -> int:
    """Beats of a row of ``keys`` key positions, ``ceil(keys / softmax_lanes)``."""
    if not 1 <= keys <= cfg.max_kv_len:
        raise ValueError(f"keys = {keys} is out of range: allowed 1..{cfg.max_kv_len}")
    return math.ceil(keys / cfg.softmax_lanes)


def softmax_schedule(cfg: AttentionConfig, beats: list[int]) -> list[list[int]]:
    """Cycle of every output beat, per row, for rows of ``beats`` beats sent back to back."""
    t = SoftmaxTiming.of(cfg)
    out = []
    a = 0                   # first input beat of the row
    x_last = n_last = -1    # last read issued by the exponentiate / normalise stage
    for L in beats:
        if L < 1:
            raise ValueError(f"a row has at least one beat, not {L}")
        readable = a + L - 1 + t.reduce_latency + t.queue_latency
        x_load = max(readable, x_last)
        x_last = x_load + L
        recip_ready = x_last + t.exp_latency + 1 + t.divider_latency + t.queue_latency
        n_load = max(recip_ready, n_last)
        n_first = n_load + 1
        n_last = n_load + L
        out.append([n_first + i + t.normalise_latency for i in range(L)])
        a += L
    return out


def softmax_cycles(cfg: AttentionConfig, n_rows: int, row_len: int) -> int:
    """Cycles from the first input beat to the last output beat, inclusive, of ``n_rows``
    rows of ``row_len`` keys each (inputs always valid, outputs always ready)."""
    if n_rows < 1:
        raise ValueError(f"n_rows = {n_rows} is out of range: allowed >= 1")
    return softmax_schedule(cfg, [row_beats(cfg, row_len)] * n_rows)[-1][-1] + 1
