"""Probability writer: one softmax unit's rows of P into the engine's probability buffer."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from hw.blocks.softmax import prob_beat_layout
from hw.core.arith import cdiv, divmod_const, mixed_radix
from hw.core.geometry import CoreGeometry

__all__ = ["ProbWriter", "ProbProgressSignature"]


def ProbProgressSignature(geom: CoreGeometry) -> wiring.Signature:
    """Rows of P written (the writer's side), see :class:`ProbWriter`."""
    return wiring.Signature({
        "rows": Out(range(geom.SEQ + 1)), "rows1": Out(range(geom.SEQ + 2), init=1),
        "row_done": Out(1), "all_rows": Out(1), "all_rows1": Out(1),
    })


class ProbWriter(wiring.Component):
    """Writes the softmax unit's probability beats into the P buffer and counts the rows
    written, which the P.V operand fetch waits for.

    Members
    -------
    start : ``In(1)``
        Strobe: a scores job begins (rows from 0; ``seq`` rows of P to come).
    seq : ``In(seq_len_bits)``
        The run's query rows.
    probs : ``In(stream.Signature(prob_beat_layout(cfg)))``
        Beats of ``L`` probabilities (UQ0.prob_bits), rows in order from row 0, ``last`` on a
        row's final beat. Always ready. On the tiled path
        (:func:`hw.blocks.tile_softmax.tile_prob_layout`) one tile's unnormalized E (UQ1.Bt),
        written to the tile bank ``bank`` (taken with ``start``; ``seq`` and ``progress`` are
        unused there).
    p_write : ``In(WritePort.Signature)`` per bank (``R``)
        Row ``i`` into bank ``i % R`` at word ``(i // R) * KB + beat``.
    progress : ``Out(ProbProgressSignature(geom))``
        ``rows``: rows written; ``rows1``: that count plus one (a register kept with it, so a
        consumer compares both from registers and only selects with ``row_done``);
        ``row_done``: a row's last beat is written in this cycle (``rows`` moves on the next);
        ``all_rows``, ``all_rows1``: ``rows >= seq`` and ``rows1 >= seq``, registers moved
        with the counts.

    Latency: a beat is written in the cycle of its handshake. Throughput: one beat per cycle.
    The write position is counted in registers (row within its tile, which buffer, and the
    word address): computing it from the row number was the whole top's critical path.
    """

    def __init__(self, geom: CoreGeometry, p_sig: WritePort.Signature):
        self.geom = geom
        if geom.tiled:
            from hw.blocks.tile_softmax import tile_prob_layout
            beat = tile_prob_layout(geom.cfg, geom.fmt, geom.S_ROWS)
        else:
            beat = prob_beat_layout(geom.cfg)
        super().__init__({
            "start": In(1), "seq": In(geom.lb),
            "probs": In(stream.Signature(beat)),
            "p_write": In(p_sig).array(geom.R),
            "progress": Out(ProbProgressSignature(geom)),
            **({"bank": In(1)} if geom.tiled else {}),
        })

    def elaborate(self, platform):
        m = Module()
        if self.geom.tiled:
            self._tiled(m)
            return m
        g = self.geom
        R, L, KB = g.R, g.L, g.KB
        pr, seq, pg = self.probs, self.seq, self.progress
        m.d.comb += pr.ready.eq(1)
        pw_rr = Signal(range(R))
        pw_addr = Signal(range(cdiv(g.SEQ, R) * KB + 1))
        pw_base = Signal.like(pw_addr)    # KB * (row // R)
        for r in range(R):
            m.d.comb += [self.p_write[r].addr.eq(pw_addr),
                         self.p_write[r].data.eq(Cat(*[pr.payload.data[lane]
                                                       for lane in range(L)])),
                         self.p_write[r].en.eq(pr.valid & (pw_rr == r))]
        with m.If(pr.valid):
            m.d.sync += pw_addr.eq(pw_addr + 1)
            with m.If(pr.payload.last):
                m.d.sync += [pg.rows.eq(pg.rows1), pg.rows1.eq(pg.rows1 + 1),
                             pg.all_rows.eq(pg.all_rows1),
                             pg.all_rows1.eq(pg.rows1 + 1 >= seq),
                             pw_rr.eq(pw_rr + 1), pw_addr.eq(pw_base)]
                with m.If(pw_rr == R - 1):
                    m.d.sync += [pw_rr.eq(0), pw_base.eq(pw_base + KB),
                                 pw_addr.eq(pw_base + KB)]
        m.d.comb += pg.row_done.eq(pr.valid & pr.payload.last)
        with m.If(self.start):
            m.d.sync += [pg.rows.eq(0), pg.rows1.eq(1), pw_rr.eq(0), pw_addr.eq(0),
                         pw_base.eq(0), pg.all_rows.eq(seq == 0), pg.all_rows1.eq(seq <= 1)]
        return m

    def _tiled(self, m):
        """The tiled path: a beat's place follows from its row within the query tile
        (``slot``) and its beat within the row; the tile's bank of E is the one its ``start``
        named (a queue of two: the next tile's start comes while this tile's last rows are
        still in the softmax unit). A tile begins with a row of slot 0. Progress is not
        counted: the sequencer issues a tile's E V once all of its E is written."""
        g = self.geom
        R, L, KB = g.R, g.L, g.KB
        pr = self.probs
        m.d.comb += pr.ready.eq(1)
        banks = Signal(2)                   # queued banks, oldest in bit 0
        count = Signal(range(3))
        bank = Signal()                     # the bank of the tile being written
        mid_row = Signal()                  # a row's beats are under way
        beat = Signal(range(KB + 1))
        new_tile = pr.valid & ~mid_row & (pr.payload.slot == 0)
        cur = Mux(new_tile, banks[0], bank)
        pop = Mux(new_tile, 1, 0)
        push = self.start
        with m.If(new_tile):
            m.d.sync += bank.eq(banks[0])
        shifted = Mux(new_tile, banks >> 1, banks)
        m.d.sync += count.eq(count + push - pop)
        m.d.sync += banks.eq(shifted)
        with m.If(push):
            # The new bank goes behind the entries that stay.
            with m.If((count - pop)[:2] == 0):
                m.d.sync += banks[0].eq(self.bank)
            with m.Else():
                m.d.sync += banks[1].eq(self.bank)
        with m.If(pr.valid):
            m.d.sync += [mid_row.eq(~pr.payload.last), beat.eq(Mux(pr.payload.last, 0, beat + 1))]
        row_tile, row_bank = divmod_const(pr.payload.slot, R)
        addr = Cat(mixed_radix(row_tile, (beat, KB))[:g.p_aw], cur)
        for r in range(R):
            m.d.comb += [self.p_write[r].addr.eq(addr),
                         self.p_write[r].data.eq(Cat(*[pr.payload.data[lane]
                                                       for lane in range(L)])),
                         self.p_write[r].en.eq(pr.valid & (row_bank == r))]
