"""Result writer: one engine's result rows into the buffer the job names."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.core.arith import divmod_const, mixed_radix
from hw.core.buffers import CoreBuffers
from hw.core.geometry import CoreGeometry
from hw.core.jobs import Dest, job_layout

__all__ = ["ResultWriter"]


class ResultWriter(wiring.Component):
    """Writes engine ``e``'s result beats (one row of ``C`` columns of one output tile each)
    into Q, K, V, S, A or the output buffer, as the job's ``dst`` says.

    Members
    -------
    job : ``In(stream.Signature(job_layout(geom)))``
        ``ready`` once the job's last result beat is written.
    result : ``In(stream.Signature(result_layout))``
        The engine's results (``data``: ``C`` accumulator-wide values, ``act_bits`` after
        requantization, raw scores for S; ``row``, ``col`` of the beat's first column;
        ``last``). Always ready, except to a ``Dest.ACC`` job (below).
    q_write, a_write : per bank (``R``); k_write : per bank (``C``); v_write, s_write, o_write
        The engine's buffer write ports (see :class:`~hw.core.buffers.CoreBuffers`); a head
        past ``heads`` (the last group of an engine count that does not divide it) is not
        written.
    o_bank : ``In(1)``
        The output buffer half the sequence writes.
    score_row : ``Out(1)``
        Strobe: a row of S is complete (its beat of the last column tile is written; scores
        arrive tile by tile, row tiles outer).
    flush : ``In(1)``
        The sequence is abandoned: the job counts as done.
    acc : ``Out(stream.Signature(tile_result_layout(...)))``, tiled path only
        A ``Dest.ACC`` job's raw beats (row within the query tile), to the tile accumulator;
        its ``ready`` is the engine's ``result.ready`` during such a job.

    Latency: two cycles from a result beat to its write: ``rs``, the beat registered as it is
    by the buffers it goes to (the engine's output register sits by its array; the route gets
    a cycle of its own), then the write from registers (addresses, enables, data: the address
    arithmetic gets a cycle of its own instead of sharing one with the block RAMs' address
    setup). Throughput: one beat per cycle.
    """

    def __init__(self, geom: CoreGeometry, engine: int, result_layout: data.StructLayout,
                 buffers: CoreBuffers):
        self.geom, self.engine = geom, engine
        ports = {
            "job": In(stream.Signature(job_layout(geom))),
            "result": In(stream.Signature(result_layout)),
            "o_bank": In(1), "score_row": Out(1), "flush": In(1),
        }
        if geom.tiled:
            from hw.blocks.tile_accumulator import tile_result_layout
            ports["acc"] = Out(stream.Signature(tile_result_layout(
                geom.cfg, geom.cfg.q_tile, geom.C, geom.dk)))
        for name, count in (("q", geom.R), ("a", geom.R), ("k", geom.C)):
            ports[f"{name}_write"] = In(getattr(buffers, f"{name}_write")[engine][0].signature
                                        ).array(count)
        for name in ("v", "s", "o"):
            ports[f"{name}_write"] = In(getattr(buffers, f"{name}_write")[engine].signature)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        g, e = self.geom, self.engine
        R, C, E, G, TN, TNk = g.R, g.C, g.E, g.G, g.TN, g.TNk
        SB = g.cfg.score_bits
        job, res = self.job, self.result
        cur = Signal.like(job.payload)         # the job being run
        done = Signal(init=1)
        m.d.comb += job.ready.eq(done)
        with m.If(job.valid):
            m.d.sync += [cur.eq(job.payload), done.eq(0)]
        if g.tiled:
            self._to_accumulator(m, cur)
        else:
            m.d.comb += res.ready.eq(1)

        rs_valid = Signal()
        rs = Signal.like(res.payload, reset_less=True)
        m.d.sync += [rs_valid.eq(res.valid & res.ready if g.tiled else res.valid), rs.eq(res.payload)]
        i = rs.row
        tn, _ = divmod_const(rs.col, C)
        i_r, i_rr = divmod_const(i, R)
        i_c, i_cc = divmod_const(i, C)
        head_ok = (cur.lh * E + e) < g.cfg.heads
        bytes_ = Cat(*[rs.data[c][:g.A] for c in range(C)])     # C activations
        scores = Cat(*[rs.data[c][:SB] for c in range(C)])
        we = rs_valid & head_ok

        def wreg(name, value):
            reg = Signal.like(value, name=f"w_{name}", reset_less=True)
            m.d.sync += reg.eq(value)
            return reg
        w_qa = wreg("qa", mixed_radix(i_r, (cur.lh, G), (tn, TN)))    # q and attn buffers
        w_ka = wreg("ka", mixed_radix(i_c, (cur.lh, G), (tn, TN)))
        w_va = wreg("va", mixed_radix(i, (cur.lh, G), (tn, TN)))      # v and output buffers
        w_sa = wreg("sa", mixed_radix(i, (tn, TNk)))
        w_bytes, w_scores = wreg("bytes", bytes_), wreg("scores", scores)
        w_en = {}
        for dst in Dest:
            if dst == Dest.ACC:
                continue
            w_en[dst] = Signal(name=f"w_en_{dst.name.lower()}")
            m.d.sync += w_en[dst].eq(we & (cur.dst == dst))
        w_rr, w_cc = wreg("rr", i_rr), wreg("cc", i_cc)
        for r in range(R):
            qw, aw = self.q_write[r], self.a_write[r]
            m.d.comb += [qw.addr.eq(w_qa), qw.data.eq(w_bytes),
                         qw.en.eq(w_en[Dest.Q] & (w_rr == r)),
                         aw.addr.eq(w_qa), aw.data.eq(w_bytes),
                         aw.en.eq(w_en[Dest.ATTN] & (w_rr == r))]
        for c in range(C):
            kw = self.k_write[c]
            m.d.comb += [kw.addr.eq(w_ka), kw.data.eq(w_bytes),
                         kw.en.eq(w_en[Dest.K] & (w_cc == c))]
        vw, sw, ow = self.v_write, self.s_write, self.o_write
        m.d.comb += [
            vw.addr.eq(w_va), vw.data.eq(w_bytes), vw.en.eq(w_en[Dest.V]),
            sw.addr.eq(w_sa), sw.data.eq(w_scores), sw.en.eq(w_en[Dest.S]),
            ow.addr.eq(Cat(w_va[:g.o_aw], self.o_bank)), ow.data.eq(w_bytes),
            ow.en.eq(w_en[Dest.OUT]),
        ]
        w_last = Signal()
        m.d.sync += [w_last.eq(rs_valid & rs.last),
                     self.score_row.eq(rs_valid & (cur.dst == Dest.S) & (rs.col + C >= cur.n))]
        with m.If(w_last):
            m.d.sync += done.eq(1)
        with m.If(self.flush):
            m.d.sync += done.eq(1)
        return m

    def _to_accumulator(self, m, cur):
        """A tile's raw E.V beats go straight on to the tile accumulator, which may hold them
        off (its normalising pass), stalling the engine through ``result.ready``."""
        res, acc = self.result, self.acc
        to_acc = cur.dst == Dest.ACC
        m.d.comb += [acc.valid.eq(res.valid & to_acc),
                     acc.payload.row.eq(res.payload.row), acc.payload.col.eq(res.payload.col),
                     acc.payload.last.eq(res.payload.last),
                     res.ready.eq(~to_acc | acc.ready)]
        m.d.comb += [acc.payload.data[c].eq(res.payload.data[c]) for c in range(self.geom.C)]
