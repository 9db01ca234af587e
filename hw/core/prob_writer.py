"""Probability writer: one softmax unit's rows of P into the engine's probability buffer."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from hw.blocks.softmax import prob_beat_layout
from hw.core.arith import cdiv
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
        ``seq`` the tile's rows.
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
        })

    def elaborate(self, platform):
        m = Module()
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
