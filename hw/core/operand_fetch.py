"""Operand fetch: the A and B vectors of every job, for every engine, one beat per cycle."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.blocks.queue import StreamQueue
from hw.core.arith import divmod_const, element_of, kept_copy, mixed_radix, or_all
from hw.core.buffers import CoreBuffers
from hw.core.geometry import CoreGeometry
from hw.core.jobs import ASource, BSource, job_layout
from hw.core.prob_writer import ProbProgressSignature

__all__ = ["OperandFetch", "OPQ_DEPTH"]

OPQ_DEPTH = 3          # operand beats queued per engine (see the class docstring)


class OperandFetch(wiring.Component):
    """Reads operand A (``R`` elements, one per array row) and operand B (``C`` elements, one
    per array column) of every step of the job, tile by tile (row tiles outer, then column
    tiles, then ``k``), for all engines at once: engine ``e`` reads its own head's buffers
    and weights, the inputs are shared.

    A four-stage pipeline that advances as one (``advance``): s0 holds the block RAM
    addresses (registered: they fan out to about 40 read ports), s1 is the block RAM read, sd
    its output registered as it is, sb the selected element of every source word. s2 is a
    queue of ``OPQ_DEPTH`` operand beats per engine (the source the job reads, masked), which
    the engine takes from at its own pace. ``advance`` reaches about 3,000 clock enables per
    engine, so it is a register, not a function of the engines' ready: it is computed a cycle
    ahead from the queues' fill levels without that cycle's pops (so a full queue may still
    take the beat in flight), hence three entries. An engine that takes a beat every cycle
    keeps its queue at one entry, and the fetch then runs at one beat per cycle.

    A P.V job starts while the softmax units still work: a row tile of P is fetched only once
    every engine has written all of its rows (``progress``). On the tiled path a job's
    operands start at its tile's offsets (``m0`` row tiles of Q, ``n0`` column tiles of K,
    ``k0`` rows of V), and P holds one tile's E.

    Members
    -------
    job : ``In(stream.Signature(job_layout(geom)))``
        ``ready`` while the fetch is idle (nothing fetched, queued or in flight).
    bank : ``In(1)``
        The input buffer half (X/KV) of the sequence.
    <buffer>_read : ``In(ReadPort.Signature)``
        Read ports of x, kv (cross only), q, p, a (per engine and bank), w, v (per engine), k
        (per engine and column bank); see :class:`~hw.core.buffers.CoreBuffers`.
    a, b : ``Out(stream.Signature(ArrayLayout(...)))`` per engine
        The operand beats (``valid`` together; a beat is popped on ``a``'s handshake).
        Elements past the job's ``m`` rows or ``n`` columns are 0.
    progress : ``In(ProbProgressSignature(geom))`` per engine
        Rows of P written, for a P.V job.
    flush : ``In(1)``
        Drop the job and empty the pipeline and queues (the sequence is abandoned).
    beat_taken, p_stall : ``Out(1)``
        Engine 0 took a beat; a P.V job waits for rows of P (the BUSY and STALL counts).
    """

    def __init__(self, geom: CoreGeometry, buffers: CoreBuffers, a_width: int, b_width: int):
        self.geom = geom
        R, C, E = geom.R, geom.C, geom.E
        self.a_width, self.b_width = a_width, b_width
        ports = {
            "job": In(stream.Signature(job_layout(geom))),
            "bank": In(1),
            "x_read": In(buffers.x_read[0].signature).array(R),
            "q_read": In(buffers.q_read[0][0].signature).array(E, R),
            "p_read": In(buffers.p_read[0][0].signature).array(E, R),
            "a_read": In(buffers.a_read[0][0].signature).array(E, R),
            "w_read": In(buffers.w_read[0].signature).array(E),
            "v_read": In(buffers.v_read[0].signature).array(E),
            "k_read": In(buffers.k_read[0][0].signature).array(E, C),
            "a": Out(stream.Signature(data.ArrayLayout(signed(a_width), R))).array(E),
            "b": Out(stream.Signature(data.ArrayLayout(signed(b_width), C))).array(E),
            "progress": In(ProbProgressSignature(geom)).array(E),
            "flush": In(1),
            "beat_taken": Out(1), "p_stall": Out(1),
        }
        if geom.cfg.cross_attention:
            ports["kv_read"] = In(buffers.kv_read[0].signature).array(R)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        R, C, E, TN, TNk = g.R, g.C, g.E, g.TN, g.TNk
        dk, d, SEQ, KV = g.dk, g.d, g.SEQ, g.KV
        job = self.job
        job_go = job.valid
        cur = Signal.like(job.payload)         # the job being run
        with m.If(job_go):
            m.d.sync += cur.eq(job.payload)
        self._cur = cur

        f_active = Signal()
        f_tm = Signal(range(max(SEQ, KV) + 1))
        f_tn = Signal(range(max(TN, TNk) + 1))
        f_kk = Signal(range(max(d, KV, dk) + 1))
        s0_valid = Signal()
        s1_valid = Signal()
        sd_valid = Signal()
        sb_valid = Signal()
        advance = Signal(init=1)
        push = Signal()
        m.d.comb += push.eq(advance & sb_valid)
        # s2: each engine's operand queue, emptied by a flush.
        beat_layout = data.StructLayout({
            "a": data.ArrayLayout(signed(self.a_width), R),
            "b": data.ArrayLayout(signed(self.b_width), C)})
        queues = []
        for e in range(E):
            q = StreamQueue(beat_layout, OPQ_DEPTH, checked=False)
            m.submodules[f"operand_queue{e}"] = ResetInserter({"sync": self.flush})(q)
            a, b = self.a[e], self.b[e]
            m.d.comb += [q.w_stream.valid.eq(push),
                         a.valid.eq(q.r_stream.valid), b.valid.eq(q.r_stream.valid),
                         a.payload.eq(q.r_stream.payload.a), b.payload.eq(q.r_stream.payload.b),
                         q.r_stream.ready.eq(a.ready)]
            queues.append(q)
        opq_valid = Cat(*[q.r_stream.valid for q in queues])
        opq_pop = Cat(*[q.r_stream.valid & q.r_stream.ready for q in queues])
        m.d.sync += advance.eq(Cat(*[q.level + push <= OPQ_DEPTH - 1 for q in queues]).all())
        m.d.comb += [job.ready.eq(~f_active & ~s0_valid & ~s1_valid & ~sd_valid & ~sb_valid
                                  & (opq_valid == 0)),
                     self.beat_taken.eq(opq_pop[0])]

        # First row and column of the tile being fetched (f_tm * R, f_tn * C) and the row
        # after it, kept as registers: a multiply by R feeding the compares below set the
        # clock (Yosys put it in a DSP block, 18 ns on ECP5).
        row0 = Signal(range(max(SEQ, KV) + R + 1))
        row_end = Signal(range(max(SEQ, KV) + 2 * R + 1), init=R)     # row0 + R
        row_end2 = Signal(range(max(SEQ, KV) + 3 * R + 1), init=2 * R)  # row_end + R
        col0 = Signal(range((max(TN, TNk) + 1) * C + 1))
        a_addr, a_lane, b_addr, b_lane, h_ae = self._addresses(m, cur, f_tm, f_tn, f_kk)

        s0_a_addr = Signal.like(a_addr)
        s0_b_addr = Signal.like(b_addr)
        s0_a_lane = Signal.like(a_lane, name="s0_a_lane")
        s1_a_lane = Signal.like(a_lane, name="s1_a_lane")
        s0_b_lane = Signal.like(b_lane, name="s0_b_lane")
        s1_b_lane = Signal.like(b_lane, name="s1_b_lane")
        s0_amask, s1_amask = Signal(R), Signal(R)
        s0_bmask, s1_bmask = Signal(C), Signal(C)
        s0_attn_e, s1_attn_e = Signal(range(max(E, 2))), Signal(range(max(E, 2)))
        s0_src_a, s1_src_a = Signal(ASource), Signal(ASource)
        s0_src_b, s1_src_b = Signal(BSource), Signal(BSource)
        sd_amask, sd_bmask = Signal(R), Signal(C)
        sd_attn_e = Signal(range(max(E, 2)))
        sd_src_a, sd_src_b = Signal(ASource), Signal(BSource)
        sb_bmask = Signal(C)
        sb_src_b = Signal(BSource)
        # One-hot A-source flags per row, with the row mask folded in (registers loaded with
        # sb): a_beat[r] is then an AND-OR of the sources, two LUT levels, instead of a
        # source multiplexer, the engine choice for the attention buffers, and the mask.
        a_sources = ([ASource.X, ASource.KV, ASource.Q, ASource.P]
                     + [(ASource.ATTN, ee) for ee in range(E)])
        sb_ahot = {src: Signal(R, name=f"sb_ahot{i}") for i, src in enumerate(a_sources)}

        # Last beat of the tile, last column tile, last row tile: registers, updated with the
        # counters (their compares would otherwise sit between the counters and f_active).
        last_kk = Signal()
        last_tn = Signal()
        last_tm = Signal()
        # P.V: a row tile of P is fetched once every engine has written all of its rows (a
        # register that follows row_end and the rows written exactly, see below).
        p_ready = Signal()
        f_row_adv = Signal()        # the fetch moves on to the next row tile
        f_go = Signal()
        # cur.a == P as a register loaded with the job: one LUT level less in front of
        # p_ready and the fetch counters.
        job_is_p = Signal()
        with m.If(job_go):
            m.d.sync += job_is_p.eq(job.payload.a == ASource.P)
        if g.tiled:
            # The tiled path's E V job is issued once its tile's E is complete.
            m.d.comb += [f_go.eq(f_active), self.p_stall.eq(0)]
        else:
            m.d.comb += [f_go.eq(f_active & (~job_is_p | p_ready)),
                         self.p_stall.eq(f_active & job_is_p & ~p_ready)]
        m.d.comb += f_row_adv.eq(advance & f_go & last_kk & last_tn)
        with m.If(advance):
            m.d.sync += [s0_valid.eq(f_go), s1_valid.eq(s0_valid), sd_valid.eq(s1_valid),
                         sb_valid.eq(sd_valid)]
            m.d.sync += [sd_amask.eq(s1_amask), sd_bmask.eq(s1_bmask),
                         sd_attn_e.eq(s1_attn_e), sd_src_a.eq(s1_src_a),
                         sd_src_b.eq(s1_src_b)]
            m.d.sync += [sb_bmask.eq(sd_bmask), sb_src_b.eq(sd_src_b)]
            for src, flags in sb_ahot.items():
                hit = ((sd_src_a == ASource.ATTN) & (sd_attn_e == src[1])
                       if isinstance(src, tuple) else sd_src_a == src)
                m.d.sync += flags.eq(sd_amask & hit.replicate(R))
            m.d.sync += [s1_a_lane.eq(s0_a_lane), s1_b_lane.eq(s0_b_lane),
                         s1_amask.eq(s0_amask), s1_bmask.eq(s0_bmask),
                         s1_attn_e.eq(s0_attn_e), s1_src_a.eq(s0_src_a),
                         s1_src_b.eq(s0_src_b)]
            with m.If(f_go):
                m.d.sync += [
                    s0_a_addr.eq(a_addr), s0_b_addr.eq(b_addr),
                    s0_a_lane.eq(a_lane), s0_b_lane.eq(b_lane),
                    s0_amask.eq(Cat(*[row0 + r < cur.m for r in range(R)])),
                    s0_bmask.eq(Cat(*[col0 + c < cur.n for c in range(C)])),
                    s0_attn_e.eq(h_ae), s0_src_a.eq(cur.a), s0_src_b.eq(cur.b),
                ]
                m.d.sync += [f_kk.eq(f_kk + 1), last_kk.eq(f_kk + 2 >= cur.k)]
                with m.If(last_kk):
                    m.d.sync += [f_kk.eq(0), f_tn.eq(f_tn + 1), col0.eq(col0 + C),
                                 last_kk.eq(cur.k <= 1), last_tn.eq(col0 + 2 * C >= cur.n)]
                    with m.If(last_tn):
                        m.d.sync += [f_tn.eq(0), col0.eq(0), f_tm.eq(f_tm + 1),
                                     row0.eq(row_end), row_end.eq(row_end2),
                                     row_end2.eq(row_end2 + R),
                                     last_tn.eq(C >= cur.n), last_tm.eq(row_end2 >= cur.m)]
                        with m.If(last_tm):
                            m.d.sync += f_active.eq(0)
        with m.If(job_go):
            p = job.payload
            m.d.sync += [f_active.eq(1), f_tm.eq(0), f_tn.eq(0), f_kk.eq(0),
                         row0.eq(0), row_end.eq(R), row_end2.eq(2 * R), col0.eq(0),
                         last_kk.eq(p.k <= 1), last_tn.eq(C >= p.n), last_tm.eq(R >= p.m)]

        m.d.sync += p_ready.eq(self._p_ready(job_go, f_row_adv, row_end, row_end2))

        self._datapath(m, advance, queues, s0_a_addr, s0_b_addr, s1_a_lane, s1_b_lane, sb_ahot,
                       sb_src_b, sb_bmask)

        with m.If(self.flush):
            m.d.sync += [f_active.eq(0), s0_valid.eq(0), s1_valid.eq(0), sd_valid.eq(0),
                         sb_valid.eq(0), advance.eq(1)]
        return m

    def _addresses(self, m, cur, f_tm, f_tn, f_kk):
        """Buffer word address and element (lane) of operand A and B at tile row ``f_tm``,
        column tile ``f_tn`` and step ``f_kk`` of the job ``cur``, per source."""
        g = self.geom
        C, E, G, TN, L, KB, D4, dk = g.C, g.E, g.G, g.TN, g.L, g.KB, g.D4, g.dk
        EPW, XW = g.EPW, g.XW
        kk = f_kk
        h_a, ch_a = divmod_const(kk, dk)
        kk_c, kk_cl = divmod_const(kk, C)
        kk_l, kk_ll = divmod_const(kk, L)
        h_ag, h_ae = divmod_const(h_a, E)
        ch_ac, ch_acl = divmod_const(ch_a, C)
        # The tiled path's tile offsets (none on the whole-row path: no adders there).
        def at(index, offset):
            return index + cur[offset] if g.tiled else index
        a_addr = Signal(16)
        a_lane = Signal(range(max(4, C, L) + 1))
        with m.Switch(cur.a):
            with m.Case(ASource.X, ASource.KV):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (kk // EPW, XW))),
                             a_lane.eq(kk % EPW)]
            with m.Case(ASource.Q):
                m.d.comb += [a_addr.eq(mixed_radix(at(f_tm, "m0"), (cur.lh, G), (kk_c, TN))),
                             a_lane.eq(kk_cl)]
            with m.Case(ASource.P):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (kk_l, KB))), a_lane.eq(kk_ll)]
            with m.Case(ASource.ATTN):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (h_ag, G), (ch_ac, TN))),
                             a_lane.eq(ch_acl)]
        b_addr = Signal(20)
        b_lane = Signal(range(max(4, C) + 1))
        with m.Switch(cur.b):
            with m.Case(BSource.W):
                m.d.comb += [b_addr.eq(mixed_radix(cur.w, (cur.lh, G), (f_tn, TN),
                                                   (kk // 4, D4))),
                             b_lane.eq(kk % 4)]
            with m.Case(BSource.K):
                m.d.comb += [b_addr.eq(mixed_radix(at(f_tn, "n0"), (cur.lh, G), (kk_c, TN))),
                             b_lane.eq(kk_cl)]
            with m.Case(BSource.V):
                m.d.comb += [b_addr.eq(mixed_radix(at(kk, "k0"), (cur.lh, G), (f_tn, TN))),
                             b_lane.eq(0)]
        return a_addr, a_lane, b_addr, b_lane, h_ae

    def _p_ready(self, job_go, f_row_adv, row_end, row_end2):
        """The next value of ``p_ready``: the P.V fetch may start the row tile ending at
        ``row_end`` (every engine has written those rows of P).

        Computed from the next values of row_end and the rows written, so the register equals
        the compare in every cycle of a P.V job. Each choice of the next values is compared
        from registers (row_end2 = row_end + R, rows1 = rows + 1); the handshakes that pick
        the next values only select a result. "Every row is written" is a register per count
        (all_rows, all_rows1), moved with the counts: a compare with the job's row count sat
        at the head of this path."""
        R = self.geom.R
        def rows_written(row_end_next, n, all_rows):
            return (row_end_next <= n) | all_rows

        def engine_ready(n, all_rows):
            return Mux(job_go, rows_written(R, n, all_rows),
                       Mux(f_row_adv, rows_written(row_end2, n, all_rows),
                           rows_written(row_end, n, all_rows)))

        return Cat(*[
            Mux(pg.row_done, engine_ready(pg.rows1, pg.all_rows1),
                engine_ready(pg.rows, pg.all_rows))
            for pg in self.progress
        ]).all()

    def _datapath(self, m, advance, queues, s0_a_addr, s0_b_addr, s1_a_lane, s1_b_lane,
                  sb_ahot, sb_src_b, sb_bmask):
        """Read ports, the sd and sb stages, and the beats into each engine's queue (s2)."""
        g = self.geom
        R, C, E, L, A, EPW = g.R, g.C, g.E, g.L, g.A, g.EPW
        PB = g.p_bits
        a_width, b_width = self.a_width, self.b_width
        cross = g.cfg.cross_attention

        def stage_reg(name, value):
            """A register of the fetch pipeline (loads when it advances), without reset."""
            reg = Signal.like(value, name=name, reset_less=True)
            with m.If(advance):
                m.d.sync += reg.eq(value)
            return reg

        def select(name, shape, sel, choices):
            """A signal equal to ``choices[sel]`` (a dict from selector codes to values)."""
            val = Signal(shape, name=name)
            with m.Switch(sel):
                for code, value in choices.items():
                    with m.Case(code):
                        m.d.comb += val.eq(value)
            return val

        x_rp = list(self.x_read)
        kv_rp = list(self.kv_read) if cross else None
        attn_rp = [list(self.a_read[e]) for e in range(E)]
        for r in range(R):
            m.d.comb += [x_rp[r].addr.eq(Cat(s0_a_addr[:g.x_aw], self.bank)),
                         x_rp[r].en.eq(advance)]
            if kv_rp:
                m.d.comb += [kv_rp[r].addr.eq(Cat(s0_a_addr[:g.kv_aw], self.bank)),
                             kv_rp[r].en.eq(advance)]
            for e in range(E):
                m.d.comb += [attn_rp[e][r].addr.eq(s0_a_addr), attn_rp[e][r].en.eq(advance)]

        # sd: the block RAM outputs registered as they are (a DP16KD's clock-to-output is
        # 5.6 ns and the route to the lane multiplexers another 5.5 ns on the 85F).
        x_sd = [stage_reg(f"sd_x{r}", x_rp[r].data) for r in range(R)]
        kv_sd = [stage_reg(f"sd_kv{r}", kv_rp[r].data) for r in range(R)] if kv_rp else None
        attn_sd = [[stage_reg(f"sd_attn{e}_{r}", attn_rp[e][r].data) for r in range(R)]
                   for e in range(E)]
        # The lane selects, one kept copy per engine and array row (A) or column (B): one
        # register per engine drove all of its rows' multiplexers, and its route across the
        # engine's buffers was the routed top's worst path (8.6 of 10.05 ns).
        a_lane = [[kept_copy(m, f"sd_a_lane{e}_{r}", s1_a_lane, advance) for r in range(R)]
                  for e in range(E)]
        b_lane = [[kept_copy(m, f"sd_b_lane{e}_{c}", s1_b_lane, advance) for c in range(C)]
                  for e in range(E)]
        # The lane of every engine's attention word, shared by all engines' fetches; the
        # engine is chosen after this register, with the source (a 16-way multiplexer from
        # buffers at both ends of the die did not fit one cycle).
        attn_sb = [[stage_reg(f"sb_attn{ee}_{r}", element_of(m, attn_sd[ee][r], a_lane[ee][r],
                                                             C, A))
                    for r in range(R)] for ee in range(E)]
        for e in range(E):
            q_rp, p_rp = list(self.q_read[e]), list(self.p_read[e])
            w_rp, v_rp, k_rp = self.w_read[e], self.v_read[e], list(self.k_read[e])
            p_addr = Cat(s0_a_addr[:g.p_aw], self._cur.pbank) if g.tiled else s0_a_addr
            for rp in q_rp:
                m.d.comb += [rp.addr.eq(s0_a_addr), rp.en.eq(advance)]
            for rp in p_rp:
                m.d.comb += [rp.addr.eq(p_addr), rp.en.eq(advance)]
            for rp in [w_rp, v_rp] + k_rp:
                m.d.comb += [rp.addr.eq(s0_b_addr), rp.en.eq(advance)]
            w_sd = stage_reg(f"sd_w{e}", w_rp.data)
            v_sd = stage_reg(f"sd_v{e}", v_rp.data)

            a_beat, b_beat = [], []
            for r in range(R):
                # sb: the element of each source word (lane multiplexers after the block
                # RAM outputs); s2: the source the job reads, masked.
                lane = a_lane[e][r]
                xb = stage_reg(f"sb_x{e}_{r}", element_of(m, x_sd[r], lane, EPW, A))
                kvb = (stage_reg(f"sb_kv{e}_{r}", element_of(m, kv_sd[r], lane, EPW, A))
                       if kv_rp else xb)
                qb = stage_reg(f"sb_q{e}_{r}",
                               element_of(m, stage_reg(f"sd_q{e}_{r}", q_rp[r].data), lane, C,
                                          A))
                pb = stage_reg(f"sb_p{e}_{r}",
                               element_of(m, stage_reg(f"sd_p{e}_{r}", p_rp[r].data), lane, L,
                                          PB))
                values = {ASource.X: xb.as_signed(), ASource.KV: kvb.as_signed(),
                          ASource.Q: qb.as_signed(),
                          ASource.P: pb,                     # unsigned probability
                          **{(ASource.ATTN, ee): attn_sb[ee][r].as_signed()
                             for ee in range(E)}}
                terms = []
                for src, value in values.items():
                    wide = Signal(signed(a_width), name=f"a{e}_{r}_src{len(terms)}")
                    m.d.comb += wide.eq(value)
                    terms.append(wide.as_unsigned() & sb_ahot[src][r].replicate(a_width))
                val = Signal(signed(a_width), name=f"a{e}_{r}")
                m.d.comb += val.eq(or_all(terms))
                a_beat.append(val)
            for c in range(C):
                wb = stage_reg(f"sb_w{e}_{c}",
                               element_of(m, w_sd[32 * c:32 * (c + 1)], b_lane[e][c], 4))
                kb = stage_reg(f"sb_k{e}_{c}",
                               element_of(m, stage_reg(f"sd_k{e}_{c}", k_rp[c].data),
                                          b_lane[e][c], C, A))
                vb = stage_reg(f"sb_v{e}_{c}", v_sd[A * c:A * (c + 1)])
                val = select(f"b{e}_{c}", signed(b_width), sb_src_b, {
                    BSource.W: wb.as_signed(), BSource.K: kb.as_signed(),
                    BSource.V: vb.as_signed()})
                b_beat.append(Mux(sb_bmask[c], val, 0).as_signed())

            beat = queues[e].w_stream.payload
            m.d.comb += [beat.a[r].eq(a_beat[r]) for r in range(R)]
            m.d.comb += [beat.b[c].eq(b_beat[c]) for c in range(C)]
