"""Cycle model of the attention core's key/value-tiled path (``cfg.kv_tile`` > 0).

The projections and the output projection are timed as on the whole-row path
(:mod:`hw.perf.layer`). Between them the sequencer walks the tiles of :func:`tile_plan` (per
head group, query tile and key/value tile, causal and key-padding skips applied) one tile
ahead: S(T0), S(T1), E V(T0), S(T2), E V(T1), ..., E V(T_last). Each job takes
``matmul_cycles`` plus ``JOB_OVERHEAD`` once it goes, and goes when the previous job is done
and:

- S(T): the score feed has sent the previous tile (:data:`FEED_IDLE` cycles after the
  softmax unit took its last beat) and the accumulators' entry bank of T is free (implied by
  the order: E V of the tile before waited for that bank's tile); the score rows are written
  as on the whole-row path, the feed offers each row ``SCORE_FEED_LATENCY`` cycles after it
  may read it (or once the unit took the previous row), and the tiled softmax
  (:class:`hw.perf.tile_softmax.TileSoftmaxModel`, over every row of the layer) gives the
  cycle each row's entry reaches the accumulators;
- E V(T): every accumulator takes its results at once: :data:`ACC_READY` cycles after T's
  last entry, :data:`ACC_FREE` after the previous tile is written back or its pass is over
  (:mod:`hw.perf.tile_accumulator`); on a query tile's final key tile also the attention
  writers idle (:data:`WRITER_IDLE` cycles after the previous pass's last value group left
  the accumulator). Its results are then taken as the engine offers them (all of its E is
  written before its last entry, so the fetch never waits).

The output projection goes once the last E V is done and the last pass written. The cycles a
job waits are the run's STALL_CYCLES. The tests hold the model equal to the simulated core.
"""

from __future__ import annotations

from dataclasses import dataclass

from golden.config import AttentionConfig

__all__ = ["TileJob", "tile_plan", "tiled_attention"]

# Cycles from a tile's last row_info entry taken to the E V job's go: the accumulator's bank
# flag, its results_ready seen by the sequencer, the issue register.
ACC_READY = 2
# From the pass's last value group leaving the accumulator to the writers' idle flag seen by
# the sequencer: the word write and the pending flag.
WRITER_IDLE = 3
# From the score feed's last beat taken by the softmax unit to the next S job's go: the
# feed's output register empties, the sequencer issues.
FEED_IDLE = 2
# From a tile done in the accumulator (results written back, or its pass over) to the next S
# that needs its entry bank.
BANK_FREE = 1
# From the cycle the accumulators take the next tile's results (the previous tile written
# back, or its pass over) to the E V job's go: the sequencer sees results_ready and issues.
ACC_FREE = 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileJob:
    """One key/value tile of one query tile of one head group."""

    group: int
    q0: int
    rows: int
    k0: int
    keys: int
    first: bool
    final: bool


def tile_plan(cfg: AttentionConfig, seq: int, kv: int, causal: bool = False,
              key_len: int | None = None) -> list[TileJob]:
    """The tiles the sequencer walks, in order: per head group, per query tile of ``q_tile``
    rows, the key tiles up to the last key any of its rows counts."""
    QT, KT = cfg.q_tile, cfg.kv_tile
    keylen = kv if key_len is None else key_len
    G = _cdiv(cfg.heads, cfg.engines)
    plan = []
    for g in range(G):
        for q0 in range(0, seq, QT):
            rows = min(QT, seq - q0)
            kend = min(keylen, q0 + rows) if causal else keylen
            for k0 in range(0, kend, KT):
                plan.append(TileJob(g, q0, rows, k0, min(KT, kend - k0), k0 == 0,
                                    k0 + KT >= kend))
    return plan


def tiled_attention(cfg: AttentionConfig, t: int, seq: int, kv: int, causal: bool,
                    key_len: int | None, events: list | None = None):
    """The attention part of the layer, from the cycle ``t`` the last projection is done:
    returns ``(jobs, stall, t_end)`` with ``jobs`` as :class:`hw.perf.layer.LayerTiming`'s
    and ``t_end`` the cycle the output projection may go. ``events``, if a list, receives
    ``(job, go cycle)`` per job."""
    from hw.blocks.divider import ReciprocalDivider
    from hw.blocks.tile_softmax import TileSoftmaxUnit
    from hw.perf.layer import FETCH_LATENCY, JOB_OVERHEAD, SCORE_FEED_LATENCY, _score_row_times
    from hw.perf.matmul import matmul_cycles
    from hw.perf.tile_accumulator import WRITE, out_latency
    from hw.perf.tile_softmax import TileRow, TileSoftmaxModel
    from golden.online_softmax import tiled_format

    fmt = tiled_format(cfg, cfg.kv_tile)
    L, dk, NL = cfg.softmax_lanes, cfg.head_dim, cfg.tile_norm_lanes
    softmax = TileSoftmaxModel(
        ring_depth=_cdiv(cfg.kv_tile, L) + TileSoftmaxUnit.RING_SLACK,
        divider_latency=ReciprocalDivider.latency_for(cfg.recip_bits),
        row_queue=TileSoftmaxUnit.ROW_QUEUE)
    out_lat = out_latency(cfg, fmt, NL)
    plan = tile_plan(cfg, seq, kv, causal, key_len)
    jobs, stall = [], 0
    feed_idle = 0           # the score feed has sent the last S tile from here
    last_info = {}          # per tile: its last row_info entry taken by the accumulators
    done = {}               # per tile: the cycle its accumulator bank is free again
    acc_free = 0            # the accumulators take the next tile's results from here
    writer_idle = 0         # the attention writers have no tile pending from here
    nxt = pending = 0       # the next tile to score; tiles scored, E V not issued
    t += 1                  # DECIDE, the state after the projections
    while True:
        if pending == 2 or (pending == 1 and nxt == len(plan)):
            n = nxt - pending
            tile = plan[n]
            ready = max(last_info[n] + ACC_READY, acc_free + ACC_FREE)
            if tile.final:
                ready = max(ready, writer_idle)
            wait = max(0, ready - t)
            go = t + wait
            cycles = matmul_cycles(cfg, tile.rows, dk, tile.keys)
            jobs.append((f"pv{n}", wait + cycles + JOB_OVERHEAD))
            last_result = go + FETCH_LATENCY + cycles - 1
            acc_free = last_result + WRITE
            if tile.final:
                acc_free += tile.rows * dk // NL
                writer_idle = acc_free - 1 + out_lat + WRITER_IDLE
            done[n] = acc_free
            pending -= 1
        elif nxt < len(plan):
            n = nxt
            tile = plan[n]
            ready = feed_idle
            if n >= 3:
                ready = max(ready, done[n - 3] + BANK_FREE)
            wait = max(0, ready - t)
            go = t + wait
            cycles = matmul_cycles(cfg, tile.rows, tile.keys, dk)
            jobs.append((f"scores{n}", wait + cycles + JOB_OVERHEAD))
            beats = _cdiv(tile.keys, L)
            free = -1 << 30
            for w in _score_row_times(cfg, tile.rows, tile.keys, go + FETCH_LATENCY):
                first = max(free, w)
                taken, _, info = softmax.add(TileRow(beats, tile.first, tile.rows),
                                             first + SCORE_FEED_LATENCY)
                free = taken[-1] - SCORE_FEED_LATENCY + 1
            feed_idle = taken[-1] + FEED_IDLE
            last_info[n] = info
            nxt += 1
            pending += 1
        else:
            break
        stall += wait
        if events is not None:
            events.append((jobs[-1][0], go))
        t = go + cycles + JOB_OVERHEAD
    return jobs, stall, max(t + 1, writer_idle)
