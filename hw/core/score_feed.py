"""Score feed: one engine's score buffer, row by row, into its softmax unit."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out

from hw.blocks.softmax import score_beat_layout
from hw.core.arith import divmod_const
from hw.core.geometry import CoreGeometry

__all__ = ["ScoreFeed", "tile_feed_layout"]


def tile_feed_layout(geom: CoreGeometry) -> data.StructLayout:
    """What the tiled path's feed tells the softmax about a tile (with ``start``): the query
    index of its first row, the key index of its first key, whether it is the rows' first and
    final key tile."""
    return data.StructLayout({"q0": geom.lb, "key0": geom.lb, "first": 1, "final": 1})


class ScoreFeed(wiring.Component):
    """Reads the rows of S (one head's raw int32 scores, ``score_bits`` wide) as they are
    written and feeds them to the engine's softmax unit, ``L`` lanes per beat.

    One feed per engine, from its own score buffer into its own softmax unit, paced by that
    unit alone (a shared feed forked to both units had both readies, from the two ends of the
    die, in front of its enables). The engines run in lock-step, so the feeds do too.

    Members
    -------
    start : ``In(1)``
        Strobe: a scores job begins; rows from 0, ``seq`` rows of ``kvrows`` scores.
    seq, kvrows : ``In(seq_len_bits)``
        The run's query rows and key rows (stable through a run).
    flush : ``In(1)``
        Abandon the feed (an engine fault).
    score_row : ``In(1)``
        Strobe: the next row of S is completely written (its last column tile's beat).
    s_read : ``In(ReadPort.Signature)``
        The score buffer: row ``i`` at words ``i * TNk ..``, ``C`` scores per word.
    scores : ``Out(stream.Signature(score_beat_layout(cfg)))``
        Beats of ``L`` scores with the row number and ``last`` on a row's final beat; beat
        ``b`` holds keys ``b*L .. b*L+L-1``. On the tiled path the layout is
        :func:`hw.blocks.tile_softmax.tile_score_layout`: ``row`` is the query index
        (``q0`` + the row within the tile, the ``slot``), ``rows``, ``key0``, ``first`` and
        ``final`` come from ``tile``.
    tile : ``In(tile_feed_layout(geom))``, tiled path only
        The tile's fields, taken with ``start`` (as are ``seq``, the tile's rows, and
        ``kvrows``, its keys).
    idle : ``Out(1)``, tiled path only
        Every beat of the tile is taken (the score buffer may take the next tile).

    Latency: a row's first beat is valid 3 cycles after the row is written (the row count
    compare, the block RAM read, its output register). Throughput: one beat per cycle while
    ``scores.ready``.
    """

    def __init__(self, geom: CoreGeometry, s_sig: ReadPort.Signature):
        self.geom = geom
        ports = {
            "start": In(1), "seq": In(geom.lb), "kvrows": In(geom.lb), "flush": In(1),
            "score_row": In(1),
            "s_read": In(s_sig),
        }
        if geom.tiled:
            from hw.blocks.tile_softmax import tile_score_layout
            ports["scores"] = Out(stream.Signature(tile_score_layout(geom.cfg, geom.S_ROWS)))
            ports["tile"] = In(tile_feed_layout(geom))
            ports["idle"] = Out(1)
        else:
            ports["scores"] = Out(stream.Signature(score_beat_layout(geom.cfg)))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        C, L, KB, TNk, SB = g.C, g.L, g.KB, g.TNk, g.cfg.score_bits
        seq, scores = self.seq, self.scores
        if g.tiled:
            seq, tile = self._latch_tile(m)
        # Rows of S written so far (the feed reads a row only once it is complete).
        score_rows = Signal(range(g.SEQ + 1))
        with m.If(self.score_row):
            m.d.sync += score_rows.eq(score_rows + 1)

        active = Signal()
        i = Signal(range(g.SEQ + 1))
        b = Signal(range(KB + 1))
        nb = Signal(range(KB + 1))
        ss1_valid, ss2_valid = Signal(), Signal()
        # b + 1 >= nb (this beat ends its row) and i + 1 >= seq (this row is the last), kept
        # as registers: they gate the feed's enables.
        last, row_last = Signal(), Signal()
        # i < score_rows, a register that follows both counts exactly (the compare feeds it,
        # not the feed's enables).
        rows_ok = Signal()
        # ss2: the score words as read (a register straight after the block RAM, which ECP5
        # synthesis moves into the block's output register), then the lane-group multiplexer
        # into the softmax unit. ss1 and ss2 advance together.
        ss1_row, ss2_row = Signal(g.lb), Signal(g.lb)
        ss1_last, ss2_last = Signal(), Signal()
        ss1_sel = Signal(range(max(2, C // L)))
        ss2_sel = Signal.like(ss1_sel)
        s_adv = ~ss2_valid | scores.ready
        # Beat b holds lanes b*L .. b*L+L-1: score word (b*L) // C, lane group within it.
        # The read address i * TNk + word is a register counted with them (the adder in front
        # of the address pins was a near-critical routed path); base = i * TNk.
        _, lane_group = divmod_const(b, C // L)
        addr = Signal(range(g.SEQ * TNk + TNk + 1))
        base = Signal.like(addr)
        s_rp = self.s_read
        m.d.comb += [
            s_rp.addr.eq(addr), s_rp.en.eq(s_adv),
            scores.valid.eq(ss2_valid),
            scores.payload.last.eq(ss2_last),
        ]
        s_word = Signal.like(s_rp.data, reset_less=True)
        with m.If(s_adv):
            m.d.sync += s_word.eq(s_rp.data)
        with m.Switch(ss2_sel):
            for grp in range(C // L):
                with m.Case(grp):
                    for lane in range(L):
                        w = (grp * L + lane) * SB
                        m.d.comb += scores.payload.data[lane].eq(s_word[w:w + SB].as_signed())
        go = active & rows_ok
        row_adv = s_adv & go & last
        rows_next = Mux(self.score_row, score_rows + 1, score_rows)
        m.d.sync += rows_ok.eq(Mux(row_adv, i + 1 < rows_next, i < rows_next))
        with m.If(s_adv):
            m.d.sync += [ss1_valid.eq(go), ss2_valid.eq(ss1_valid),
                         ss2_row.eq(ss1_row), ss2_last.eq(ss1_last), ss2_sel.eq(ss1_sel)]
            with m.If(go):
                m.d.sync += [ss1_row.eq(i), ss1_last.eq(last), ss1_sel.eq(lane_group),
                             b.eq(b + 1), last.eq(b + 2 >= nb)]
                with m.If(lane_group == C // L - 1):
                    m.d.sync += addr.eq(addr + 1)
                with m.If(last):
                    m.d.sync += [b.eq(0), i.eq(i + 1), last.eq(nb <= 1),
                                 row_last.eq(i + 2 >= seq),
                                 base.eq(base + TNk), addr.eq(base + TNk)]
                    with m.If(row_last):
                        m.d.sync += active.eq(0)

        with m.If(self.start):
            kvrows = self.kvrows
            m.d.sync += [active.eq(1), i.eq(0), b.eq(0), addr.eq(0), base.eq(0),
                         nb.eq((kvrows + L - 1) // L), last.eq(kvrows <= L),
                         row_last.eq(self.seq <= 1), rows_ok.eq(0), score_rows.eq(0)]
        with m.If(self.flush):
            m.d.sync += [active.eq(0), ss1_valid.eq(0), ss2_valid.eq(0)]
        if g.tiled:
            m.d.comb += self.idle.eq(~active & ~ss1_valid & ~ss2_valid)
            p = scores.payload
            m.d.comb += [p.row.eq(tile.q0 + ss2_row), p.slot.eq(ss2_row), p.rows.eq(seq),
                         p.key0.eq(tile.key0), p.first.eq(tile.first),
                         p.final.eq(tile.final)]
        else:
            m.d.comb += scores.payload.row.eq(ss2_row)
        return m

    def _latch_tile(self, m):
        """The tiled path's tile fields and row count, latched at ``start`` (the sequencer
        moves on to the next tile's jobs while the feed still reads this one)."""
        tile = Signal.like(self.tile)
        rows = Signal(self.geom.lb)
        with m.If(self.start):
            m.d.sync += [tile.eq(self.tile), rows.eq(self.seq)]
        return rows, tile
