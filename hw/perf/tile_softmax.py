"""Cycle model of :class:`hw.blocks.tile_softmax.TileSoftmaxUnit`, exact when ``probs`` and
``row_info`` are always ready.

Rows (of every tile, in the order they are sent) enter one beat per cycle as long as the
unit takes them, the first at cycle 0. Each row passes the four stages in order, and each
stage takes rows in order, so the schedule is a max-plus recurrence over the rows:

- input: a beat is taken one cycle after the previous one, and no earlier than the cycle
  after the exponentiate stage read the beat ``ring_depth`` places before it (the ring's
  room is reserved when a beat is taken);
- reduce: the row's descriptor is readable ``REDUCE`` cycles after its last beat is taken;
- state: lets the row through at the earliest in that cycle, a cycle after the previous row,
  and (not on a row's first tile) a cycle after the row ``rows`` places before it (its query
  tile's size) released its running sum; the row's exponent descriptor is readable
  ``STATE`` cycles later;
- exponentiate: loads the descriptor once readable and once the previous row issued its
  last read (the same cycle), reads its beats on the following cycles; each beat's E is
  taken ``EXP`` cycles after its read; the row's running sum is released ``SUM`` cycles
  after its last read and its ``row_info`` entry taken ``INFO`` cycles after that.

The tests compare these figures with the simulated cycle of every transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TileRow", "TileSoftmaxSchedule", "tile_softmax_schedule", "REDUCE", "STATE",
           "EXP", "SUM"]

# Each queue on the way (StreamQueue with LUT-RAM storage) takes two cycles from its write to
# its output.
REDUCE = 13     # last beat taken -> row descriptor readable (ExpScale 6, y, keys, max, queue)
STATE = 7       # let through -> exponent descriptor readable (read, data, M', rise, queue)
EXP = 15        # ring read -> E taken from the probs queue (data, u, (n, f), table 8, queue)
SUM = 18        # last read -> running sum written (released)


@dataclass(frozen=True)
class TileRow:
    """One row of one tile as sent: its beats, whether it is the row's first tile, and the
    number of rows of its query tile."""

    beats: int
    first: bool
    rows: int


@dataclass(frozen=True)
class TileSoftmaxSchedule:
    taken: list[list[int]]      # per row: the cycle each input beat was taken
    probs: list[list[int]]      # per row: the cycle each E beat was taken
    info: list[int]             # per row: the cycle its row_info entry was taken


def tile_softmax_schedule(rows: list[TileRow], *, ring_depth: int, divider_latency: int,
                          row_queue: int = 32) -> TileSoftmaxSchedule:
    """The schedule of ``rows`` for a unit with ``ring_depth`` ring entries, a reciprocal
    divider of ``divider_latency`` cycles and a ``row_info`` queue of ``row_queue``."""
    info_lat = divider_latency + 2
    taken, probs, info = [], [], []
    reads: list[int] = []           # every beat's ring read, in order
    release: list[int] = []
    go_prev = last_read = -1
    t = -1                          # last beat taken
    beat_index = 0
    for k, row in enumerate(rows):
        if row.beats < 1:
            raise ValueError(f"a row has at least one beat, not {row.beats}")
        tk = []
        for _ in range(row.beats):
            t += 1
            if beat_index >= ring_depth:
                t = max(t, reads[beat_index - ring_depth] + 1)
            tk.append(t)
            beat_index += 1
            # The reads of this row are not known yet; a beat that needs one of them (a ring
            # smaller than a row plus its lag) cannot be taken before: the model refuses it.
        taken.append(tk)
        go = max(tk[-1] + REDUCE, go_prev + 1)
        if not row.first and k >= row.rows:
            go = max(go, release[k - row.rows] + 1)
        if k >= row_queue:
            go = max(go, info[k - row_queue] + 1)
        go_prev = go
        load = max(go + STATE, last_read)
        row_reads = [load + 1 + i for i in range(row.beats)]
        reads.extend(row_reads)
        last_read = row_reads[-1]
        probs.append([r + EXP for r in row_reads])
        release.append(last_read + SUM)
        info.append(last_read + SUM + info_lat)
        if len(reads) < beat_index:
            raise ValueError("the ring is smaller than a row and its lag")
    return TileSoftmaxSchedule(taken, probs, info)
