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

__all__ = ["TileRow", "TileSoftmaxSchedule", "TileSoftmaxModel", "tile_softmax_schedule", "REDUCE", "STATE",
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


class TileSoftmaxModel:
    """The schedule row by row, for callers that learn when a row is offered only as the
    schedule goes on (the whole layer's model). ``add`` takes a row whose first beat is offered
    no earlier than ``offered`` (its beats then one per cycle) and returns its input beats
    taken, its E beats taken and its ``row_info`` entry taken."""

    def __init__(self, *, ring_depth: int, divider_latency: int, row_queue: int = 32):
        self.ring_depth, self.row_queue = ring_depth, row_queue
        self.info_lat = divider_latency + 2
        self.reads: list[int] = []          # every beat's ring read, in order
        self.release: list[int] = []
        self.info: list[int] = []
        self.go_prev = self.last_read = -1
        self.t = -1                         # last beat taken
        self.beat_index = 0

    def add(self, row: TileRow, offered: int = 0) -> tuple[list[int], list[int], int]:
        if row.beats < 1:
            raise ValueError(f"a row has at least one beat, not {row.beats}")
        k = len(self.info)
        tk = []
        for b in range(row.beats):
            t = max(self.t + 1, offered + b)
            if self.beat_index >= self.ring_depth:
                t = max(t, self.reads[self.beat_index - self.ring_depth] + 1)
            self.t = t
            tk.append(t)
            self.beat_index += 1
            # The reads of this row are not known yet; a beat that needs one of them (a ring
            # smaller than a row plus its lag) cannot be taken before: the model refuses it.
        go = max(tk[-1] + REDUCE, self.go_prev + 1)
        if not row.first and k >= row.rows:
            go = max(go, self.release[k - row.rows] + 1)
        if k >= self.row_queue:
            go = max(go, self.info[k - self.row_queue] + 1)
        self.go_prev = go
        load = max(go + STATE, self.last_read)
        row_reads = [load + 1 + i for i in range(row.beats)]
        self.reads.extend(row_reads)
        self.last_read = row_reads[-1]
        self.release.append(self.last_read + SUM)
        self.info.append(self.last_read + SUM + self.info_lat)
        if len(self.reads) < self.beat_index:
            raise ValueError("the ring is smaller than a row and its lag")
        return tk, [r + EXP for r in row_reads], self.info[-1]


def tile_softmax_schedule(rows: list[TileRow], *, ring_depth: int, divider_latency: int,
                          row_queue: int = 32) -> TileSoftmaxSchedule:
    """The schedule of ``rows`` for a unit with ``ring_depth`` ring entries, a reciprocal
    divider of ``divider_latency`` cycles and a ``row_info`` queue of ``row_queue``."""
    model = TileSoftmaxModel(ring_depth=ring_depth, divider_latency=divider_latency,
                             row_queue=row_queue)
    taken, probs, info = [], [], []
    for row in rows:
        tk, pr, inf = model.add(row)
        taken.append(tk)
        probs.append(pr)
        info.append(inf)
    return TileSoftmaxSchedule(taken, probs, info)
