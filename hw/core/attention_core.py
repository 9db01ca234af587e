"""The attention layer's datapath and controller, without bus interfaces.

``AttentionCore`` owns the on-chip buffers, ``cfg.engines`` head engines (one
:class:`hw.blocks.matmul.MatmulEngine` and one :class:`hw.blocks.softmax.SoftmaxUnit` each) and the sequencer
that runs one whole multi-head attention layer per ``start``. :class:`hw.attention_top.AttentionTop`
wraps it in AXI4-Stream and AXI4-Lite interfaces.

Work split. Engine ``e`` owns heads ``h = g * engines + e`` (head group ``g``). Every matrix
product is issued to all engines at once, in lock-step, each on its own head's slice:

1. for every group: Q_h = rq_q(X Wq_h^T + bq_h), K_h and V_h likewise from KV (X, or the
   second sequence in cross mode): M = seq/kv rows, N = head_dim, K = d_model;
2. for every group: S = Q_h K_h^T (raw int32, N = kv rows, K = head_dim) into the score buffer,
   the softmax unit turns it row by row into P (UQ0.prob_bits), then A_h = rq_pv(P V_h)
   (K = kv rows, N = head_dim);
3. for every group: Y[:, cols of h] = rq_o(A Wo_h^T + bo_h), where A (all heads) is read from
   every engine's attention buffer and broadcast;
4. Y is streamed out row by row.

Buffers (``amaranth.lib.memory``, block RAM): X and KV inputs (array_rows banks of 32-bit
words), weights and biases per engine (only the rows of its heads), Q, K, V, scores, P,
attention and output per engine. Operand fetchers read one A vector (array_rows values) and
one B vector (array_cols values) per cycle, so the arrays never wait on memory.

Ports
-----
x_in : In(stream) of ``{data: 32, last: 1}``
    Activations: ``seq_len`` rows of d_model int8 (4 per word, element 4a+k in byte k), then in
    cross mode ``kv_len`` rows of the second sequence; ``last`` on the final word of each.
y_out : Out(stream) of ``{data: 32, last: 1}``
    The int8 result rows in the same packing; ``last`` on the final word. Leaves through a
    register slice (``valid``, ``data`` and ``last`` from flip-flops; ``ready`` reaches only
    the slice).
start, causal, cross, seq_len, kv_len, key_len, rq_* , exp_mult, exp_shift : In
    Run settings, sampled at ``start`` (validated beforehand by the register block).
wwin_en, wwin_addr, wwin_data, wwin_strb : In
    Weight-window writes (word addresses, see :mod:`hw.bus.regmap`). A write reaches the weight
    buffers two cycles after its ``wwin_en`` cycle (a decode stage, then one register stage
    per engine by its buffers); a run reads weights no earlier than several hundred cycles
    after ``start``, and the register block refuses window writes while ``busy``.
busy, done, error, error_cause, cycles, busy_cycles : Out
    Status: ``done``/``error`` are one-cycle strobes; ``error_cause`` is valid with ``error``.
    ``done`` comes the cycle after the last output word's handshake; ``cycles``,
    ``busy_cycles`` and ``stall_cycles`` show that sequence's counts from the cycle after
    ``done`` (when the register block's STATUS.DONE is set). ``busy`` is a register: it rises
    two cycles after ``start`` and falls the cycle after ``done`` (the register block covers
    the two cycles after its ``start`` itself).

Latency and throughput: :func:`hw.perf.layer.layer_timing`, a cycle model that the unit tests
hold equal to ``cycles`` and ``stall_cycles`` exactly.
"""

from __future__ import annotations

import math

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from hw.blocks.matmul import MatmulEngine
from hw.blocks.register_slice import RegisterSlice
from hw.blocks.softmax import SoftmaxUnit
from hw.bus.regmap import ERROR_CAUSES as REGMAP_CAUSES
from hw.bus.settings import StartSignature, WindowWriteSignature
from hw.core.arith import addr_bits as _aw, cdiv as _cdiv, divmod_const, mixed_radix, or_all as _or_all
from hw.core.buffers import CoreBuffers
from hw.core.geometry import CoreGeometry
from hw.core.layouts import WordStream, sequence_layout
from hw.core.loader import InputLoader
from hw.core.prob_writer import ProbWriter
from hw.core.score_feed import ScoreFeed
from hw.core.streamer import OutputStreamer
from hw.core.weight_window import WeightWindowWriter

__all__ = ["AttentionCore", "WordStream", "ERROR_CAUSES"]



# Bit positions of ERROR_CAUSE that the core itself raises (the rest come from the registers).
ERROR_CAUSES = {name: bit for bit, (name, _) in enumerate(REGMAP_CAUSES)
                if name in ("STREAM_SHORT", "STREAM_LONG", "ENGINE_FAULT")}

# Job selectors.
A_X, A_KV, A_Q, A_P, A_ATTN = range(5)
OPQ_DEPTH = 3          # operand beats queued per engine (see the operand fetch)
B_W, B_K, B_V = range(3)
D_Q, D_K, D_V, D_S, D_ATTN, D_OUT = range(6)
RQ_NONE, RQ_Q, RQ_K, RQ_V, RQ_PV, RQ_O = range(6)


class AttentionCore(wiring.Component):
    def __init__(self, cfg: AttentionConfig):
        self.cfg = cfg
        self.R, self.C, self.E = cfg.array_rows, cfg.array_cols, cfg.engines
        self.G = _cdiv(cfg.heads, cfg.engines)
        self.dk, self.d = cfg.head_dim, cfg.d_model
        self.TN = _cdiv(cfg.head_dim, cfg.array_cols)
        self.TNk = _cdiv(cfg.max_kv_len, cfg.array_cols)
        self.L = cfg.softmax_lanes
        self.KB = _cdiv(cfg.max_kv_len, cfg.softmax_lanes)
        self.D4 = cfg.d_model // 4
        self.geom = CoreGeometry(cfg)
        super().__init__({
            "x_in": In(WordStream),
            "y_out": Out(WordStream),
            "start": In(StartSignature(cfg)),
            "window": In(WindowWriteSignature(self.geom.window_addr_bits)),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_cause": Out(16),
            "cycles": Out(32), "busy_cycles": Out(32), "stall_cycles": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        R, C, E, G, dk, d = self.R, self.C, self.E, self.G, self.dk, self.d
        TN, TNk, L, KB, D4 = self.TN, self.TNk, self.L, self.KB, self.D4
        SEQ, KV = cfg.max_seq_len, cfg.max_kv_len
        PB, SB = cfg.prob_bits, cfg.score_bits
        lb = cfg.seq_len_bits

        engines = []
        softmaxes = []
        # After an abandoned run the engines may hold state of it (a buffered bias beat, rows
        # in flight): one cycle of reset returns them to idle.
        engine_flush = Signal()
        for e in range(E):
            eng = MatmulEngine(cfg, max_m=max(SEQ, KV), max_n=max(dk, KV),
                               max_k=max(d, KV, dk))
            sm = SoftmaxUnit(cfg)
            m.submodules[f"engine{e}"] = ResetInserter({"sync": engine_flush})(eng)
            m.submodules[f"softmax{e}"] = ResetInserter({"sync": engine_flush})(sm)
            engines.append(eng)
            softmaxes.append(sm)

        # ------------------------------------------------------------ buffers
        m.submodules.buffers = buf = CoreBuffers(self.geom)
        x_aw, kv_aw, o_aw = self.geom.x_aw, self.geom.kv_aw, self.geom.o_aw

        # ------------------------------------------------------------ weight window
        m.submodules.weight_window = ww = WeightWindowWriter(
            self.geom, buf.w_write[0].signature, buf.b_write[0].signature)
        wiring.connect(m, wiring.flipped(self.window), ww.window)
        for e in range(E):
            wiring.connect(m, ww.w_write[e], buf.w_write[e])
            wiring.connect(m, ww.b_write[e], buf.b_write[e])

        # ------------------------------------------------------------ input loader
        # Three stages work on up to three sequences at once: the loader (input stream into
        # an X/KV buffer), the compute sequencer (arrays and softmax) and the streamer (an
        # output buffer onto y_out). Each holds its sequence's settings; they pass along
        # with the sequence. ``now`` timestamps START for the CYCLES count.
        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        m.submodules.loader = loader = InputLoader(
            self.geom, buf.x_write[0].signature,
            buf.kv_write[0].signature if cfg.cross_attention else None)
        wiring.connect(m, wiring.flipped(self.start), loader.start)
        wiring.connect(m, wiring.flipped(self.x_in), loader.x_in)
        for r in range(R):
            wiring.connect(m, loader.x_write[r], buf.x_write[r])
            if cfg.cross_attention:
                wiring.connect(m, loader.kv_write[r], buf.kv_write[r])
        m.d.comb += loader.now.eq(now)

        run = Signal(sequence_layout(self.geom))   # the sequence being computed
        seq, kvrows, keylen = run.seq, run.kvrows, run.keylen
        causal, cross = run.causal, run.cross
        exp_mult, exp_shift = run.exp_mult, run.exp_shift
        x_bank = run.bank                  # X/KV buffer the computation reads
        rq = {n: (run[f"rq_{n}_mult"], run[f"rq_{n}_shift"]) for n in ("q", "k", "v", "pv", "o")}

        # ------------------------------------------------------------ job registers
        o_bank = Signal()          # output buffer the computation writes
        job_a = Signal(3)
        job_b = Signal(2)
        job_w = Signal(2)
        job_bias = Signal()
        job_rq = Signal(3)
        job_dst = Signal(3)
        job_m = Signal(lb + 1)
        job_n = Signal(max(lb, dk.bit_length()) + 1)
        job_k = Signal(max(lb, d.bit_length()) + 1)
        job_lh = Signal(range(G + 1))
        job_go = Signal()          # one-cycle pulse: a job starts

        # ------------------------------------------------------------ command issue
        # The requantization fields are registers that follow job_rq and the run settings a
        # cycle later: both change only with job_go, and the command is valid from the cycle
        # after (the selection multiplexer sat in front of the engines' command checks).
        cmd_pending = Signal(E)
        rq_mult = Signal(cfg.requant_mult_bits)
        rq_shift = Signal(6)
        rq_en = Signal()
        with m.Switch(job_rq):
            for code, n in ((RQ_Q, "q"), (RQ_K, "k"), (RQ_V, "v"), (RQ_PV, "pv"), (RQ_O, "o")):
                with m.Case(code):
                    m.d.sync += [rq_mult.eq(rq[n][0]), rq_shift.eq(rq[n][1])]
            with m.Default():
                m.d.sync += [rq_mult.eq(1), rq_shift.eq(1)]
        m.d.sync += rq_en.eq(job_rq != RQ_NONE)
        for e, eng in enumerate(engines):
            p = eng.cmd.payload
            m.d.comb += [
                eng.cmd.valid.eq(cmd_pending[e]),
                p.m.eq(job_m), p.n.eq(job_n), p.k.eq(job_k),
                p.bias_en.eq(job_bias), p.requant_en.eq(rq_en),
                p.mult.eq(rq_mult), p.shift.eq(rq_shift),
            ]
            with m.If(eng.cmd.valid & eng.cmd.ready):
                m.d.sync += cmd_pending[e].eq(0)
        with m.If(job_go):
            m.d.sync += cmd_pending.eq((1 << E) - 1)

        # ------------------------------------------------------------ operand fetch
        f_active = Signal()
        f_tm = Signal(range(max(SEQ, KV) + 1))
        f_tn = Signal(range(max(TN, TNk) + 1))
        f_kk = Signal(range(max(d, KV, dk) + 1))
        # A four-stage pipeline that advances as one (``advance``): s0 holds the block RAM
        # addresses (registered: they fan out to about 40 read ports), s1 is the block RAM
        # read, sd its output registered as it is, sb the selected element of every source
        # word. s2 is a queue of OPQ_DEPTH operand beats per engine (the source the job
        # reads, masked), which the engine takes from at its own pace.
        #
        # ``advance`` reaches about 3,000 clock enables per engine, so it is a register, not
        # a function of the engines' ready: it is computed a cycle ahead from the queues'
        # fill levels without that cycle's pops (so a full queue may still take the beat in
        # flight), hence three entries. An engine that takes a beat every cycle keeps its
        # queue at one entry, and the fetch then runs at one beat per cycle.
        s0_valid = Signal()
        s1_valid = Signal()
        sd_valid = Signal()
        sb_valid = Signal()
        advance = Signal(init=1)
        push = Signal()
        m.d.comb += push.eq(advance & sb_valid)
        opq_valid = Signal(E)          # per engine: its queue is not empty
        opq_count = [Signal(range(OPQ_DEPTH + 1), name=f"opq{e}_count") for e in range(E)]
        opq_pop = Signal(E)
        m.d.sync += advance.eq(Cat(*[c + push <= OPQ_DEPTH - 1 for c in opq_count]).all())
        for e in range(E):
            count_next = opq_count[e] + push - opq_pop[e]
            m.d.sync += [opq_count[e].eq(count_next), opq_valid[e].eq(count_next != 0)]

        # First row and column of the tile being fetched (f_tm * R, f_tn * C) and the row
        # after it, kept as registers: a multiply by R feeding the compares below set the
        # clock (Yosys put it in a DSP block, 18 ns on ECP5).
        row0 = Signal(range(max(SEQ, KV) + R + 1))
        row_end = Signal(range(max(SEQ, KV) + 2 * R + 1), init=R)     # row0 + R
        row_end2 = Signal(range(max(SEQ, KV) + 3 * R + 1), init=2 * R)  # row_end + R
        col0 = Signal(range((max(TN, TNk) + 1) * C + 1))
        # A-side address and lane select per source.
        kk = f_kk
        h_a, ch_a = divmod_const(kk, dk)
        kk_c, kk_cl = divmod_const(kk, C)
        kk_l, kk_ll = divmod_const(kk, L)
        h_ag, h_ae = divmod_const(h_a, E)
        ch_ac, ch_acl = divmod_const(ch_a, C)
        a_addr = Signal(16)
        a_lane = Signal(range(max(4, C, L) + 1))
        with m.Switch(job_a):
            with m.Case(A_X, A_KV):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (kk // 4, D4))), a_lane.eq(kk % 4)]
            with m.Case(A_Q):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (job_lh, G), (kk_c, TN))),
                             a_lane.eq(kk_cl)]
            with m.Case(A_P):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (kk_l, KB))), a_lane.eq(kk_ll)]
            with m.Case(A_ATTN):
                m.d.comb += [a_addr.eq(mixed_radix(f_tm, (h_ag, G), (ch_ac, TN))),
                             a_lane.eq(ch_acl)]
        b_addr = Signal(20)
        b_lane = Signal(range(max(4, C) + 1))
        with m.Switch(job_b):
            with m.Case(B_W):
                m.d.comb += [b_addr.eq(mixed_radix(job_w, (job_lh, G), (f_tn, TN),
                                                   (kk // 4, D4))),
                             b_lane.eq(kk % 4)]
            with m.Case(B_K):
                m.d.comb += [b_addr.eq(mixed_radix(f_tn, (job_lh, G), (kk_c, TN))),
                             b_lane.eq(kk_cl)]
            with m.Case(B_V):
                m.d.comb += [b_addr.eq(mixed_radix(kk, (job_lh, G), (f_tn, TN))), b_lane.eq(0)]

        s0_a_addr = Signal.like(a_addr)
        s0_b_addr = Signal.like(b_addr)
        s0_a_lane = Signal.like(a_lane, name="s0_a_lane")
        s1_a_lane = Signal.like(a_lane, name="s1_a_lane")
        s0_b_lane = Signal.like(b_lane, name="s0_b_lane")
        s1_b_lane = Signal.like(b_lane, name="s1_b_lane")
        s0_amask, s1_amask = Signal(R), Signal(R)
        s0_bmask, s1_bmask = Signal(C), Signal(C)
        s0_attn_e, s1_attn_e = Signal(range(max(E, 2))), Signal(range(max(E, 2)))
        s0_src_a, s1_src_a = Signal(3), Signal(3)
        s0_src_b, s1_src_b = Signal(2), Signal(2)
        sd_amask, sd_bmask = Signal(R), Signal(C)
        sd_attn_e = Signal(range(max(E, 2)))
        sd_src_a, sd_src_b = Signal(3), Signal(2)
        sb_bmask = Signal(C)
        sb_src_b = Signal(2)
        # One-hot A-source flags per row, with the row mask folded in (registers loaded with
        # sb): a_beat[r] is then an AND-OR of the sources, two LUT levels, instead of a
        # source multiplexer, the engine choice for the attention buffers, and the mask.
        a_sources = [A_X, A_KV, A_Q, A_P] + [(A_ATTN, ee) for ee in range(E)]
        sb_ahot = {src: Signal(R, name=f"sb_ahot{i}") for i, src in enumerate(a_sources)}

        # Last beat of the tile, last column tile, last row tile: registers, updated with the
        # counters (their compares would otherwise sit between the counters and f_active).
        last_kk = Signal()
        last_tn = Signal()
        last_tm = Signal()
        # P.V starts while the softmax unit is still working: a row tile of P is fetched only
        # once every engine has written all of its rows (prob_rows counts rows in order).
        # (A register that follows row_end and prob_rows exactly; computed after the P writer.)
        p_ready = Signal()
        f_row_adv = Signal()        # the fetch moves on to the next row tile
        f_go = Signal()
        # job_a == A_P as a register (job_a changes only with job_go; the fetch starts a
        # cycle after): one LUT level less in front of p_ready and the fetch counters.
        job_is_p = Signal()
        m.d.sync += job_is_p.eq(job_a == A_P)
        m.d.comb += [f_go.eq(f_active & (~job_is_p | p_ready)),
                     f_row_adv.eq(advance & f_go & last_kk & last_tn)]
        with m.If(advance):
            m.d.sync += [s0_valid.eq(f_go), s1_valid.eq(s0_valid), sd_valid.eq(s1_valid),
                         sb_valid.eq(sd_valid)]
            m.d.sync += [sd_amask.eq(s1_amask), sd_bmask.eq(s1_bmask),
                         sd_attn_e.eq(s1_attn_e), sd_src_a.eq(s1_src_a),
                         sd_src_b.eq(s1_src_b)]
            m.d.sync += [sb_bmask.eq(sd_bmask), sb_src_b.eq(sd_src_b)]
            for src, flags in sb_ahot.items():
                hit = ((sd_src_a == A_ATTN) & (sd_attn_e == src[1]) if isinstance(src, tuple)
                       else sd_src_a == src)
                m.d.sync += flags.eq(sd_amask & hit.replicate(R))
            m.d.sync += [s1_a_lane.eq(s0_a_lane), s1_b_lane.eq(s0_b_lane),
                         s1_amask.eq(s0_amask), s1_bmask.eq(s0_bmask),
                         s1_attn_e.eq(s0_attn_e), s1_src_a.eq(s0_src_a),
                         s1_src_b.eq(s0_src_b)]
            with m.If(f_go):
                m.d.sync += [
                    s0_a_addr.eq(a_addr), s0_b_addr.eq(b_addr),
                    s0_a_lane.eq(a_lane), s0_b_lane.eq(b_lane),
                    s0_amask.eq(Cat(*[row0 + r < job_m for r in range(R)])),
                    s0_bmask.eq(Cat(*[col0 + c < job_n for c in range(C)])),
                    s0_attn_e.eq(h_ae), s0_src_a.eq(job_a), s0_src_b.eq(job_b),
                ]
                m.d.sync += [f_kk.eq(f_kk + 1), last_kk.eq(f_kk + 2 >= job_k)]
                with m.If(last_kk):
                    m.d.sync += [f_kk.eq(0), f_tn.eq(f_tn + 1), col0.eq(col0 + C),
                                 last_kk.eq(job_k <= 1), last_tn.eq(col0 + 2 * C >= job_n)]
                    with m.If(last_tn):
                        m.d.sync += [f_tn.eq(0), col0.eq(0), f_tm.eq(f_tm + 1),
                                     row0.eq(row_end), row_end.eq(row_end2),
                                     row_end2.eq(row_end2 + R),
                                     last_tn.eq(C >= job_n), last_tm.eq(row_end2 >= job_m)]
                        with m.If(last_tm):
                            m.d.sync += f_active.eq(0)
        with m.If(job_go):
            m.d.sync += [f_active.eq(1), f_tm.eq(0), f_tn.eq(0), f_kk.eq(0),
                         row0.eq(0), row_end.eq(R), row_end2.eq(2 * R), col0.eq(0),
                         last_kk.eq(job_k <= 1), last_tn.eq(C >= job_n), last_tm.eq(R >= job_m)]

        def select(name, shape, sel, choices):
            """A signal equal to ``choices[sel]`` (a dict from selector codes to values)."""
            val = Signal(shape, name=name)
            with m.Switch(sel):
                for code, value in choices.items():
                    with m.Case(code):
                        m.d.comb += val.eq(value)
            return val

        def byte_of(word, idx, nbytes, width=8, key=0):
            """Element ``idx ^ key`` (``idx`` a Signal) of a word of ``nbytes`` elements of
            ``width`` bits (``key``: see ``lane_copy``)."""
            sel = Signal(width)
            with m.Switch(idx):
                for v in range(1 << len(idx)):
                    if (v ^ key) < nbytes:
                        with m.Case(v):
                            i = v ^ key
                            m.d.comb += sel.eq(word[i * width:(i + 1) * width])
            return sel

        def lane_copy(name, lane, e):
            """Engine ``e``'s own copy of a fetch lane select, stored as ``lane ^ e``.

            One shared register fanned out to every engine's lane multiplexers, at both ends
            of the die (13 failing path groups of one routed run). Equal copies would be
            merged by synthesis; stored with a different constant XORed in, each is its own
            flip-flop, placed by its engine, and ``byte_of(..., key=...)`` undoes the XOR in
            the multiplexer's case table at no cost."""
            reg = Signal.like(lane, name=name, reset_less=True)
            with m.If(advance):
                m.d.sync += reg.eq(lane ^ lane_key(lane, e))
            return reg

        def lane_key(lane, e):
            return e & ((1 << len(lane)) - 1)

        def stage_reg(name, value):
            """A register of the fetch pipeline (loads when it advances), without reset."""
            reg = Signal.like(value, name=name, reset_less=True)
            with m.If(advance):
                m.d.sync += reg.eq(value)
            return reg

        # Read ports.
        x_rp = list(buf.x_read)
        kv_rp = list(buf.kv_read) if cfg.cross_attention else None
        attn_rp = [list(buf.a_read[e]) for e in range(E)]
        for r in range(R):
            m.d.comb += [x_rp[r].addr.eq(Cat(s0_a_addr[:x_aw], x_bank)),
                         x_rp[r].en.eq(advance)]
            if kv_rp:
                m.d.comb += [kv_rp[r].addr.eq(Cat(s0_a_addr[:kv_aw], x_bank)),
                             kv_rp[r].en.eq(advance)]
            for e in range(E):
                m.d.comb += [attn_rp[e][r].addr.eq(s0_a_addr), attn_rp[e][r].en.eq(advance)]

        a_width = engines[0].a.payload.shape().elem_shape.width
        # sd: the block RAM outputs registered as they are (a DP16KD's clock-to-output is
        # 5.6 ns and the route to the lane multiplexers another 5.5 ns on the 85F).
        x_sd = [stage_reg(f"sd_x{r}", x_rp[r].data) for r in range(R)]
        kv_sd = [stage_reg(f"sd_kv{r}", kv_rp[r].data) for r in range(R)] if kv_rp else None
        attn_sd = [[stage_reg(f"sd_attn{e}_{r}", attn_rp[e][r].data) for r in range(R)]
                   for e in range(E)]
        # The lane of every engine's attention word (selected with that engine's lane copy),
        # shared by all engines' fetches; the engine is chosen after this register, with the
        # source (a 16-way multiplexer from buffers at both ends of the die did not fit one
        # cycle).
        sd_a_lane = [lane_copy(f"sd_a_lane{e}", s1_a_lane, e) for e in range(E)]
        sd_b_lane = [lane_copy(f"sd_b_lane{e}", s1_b_lane, e) for e in range(E)]
        akey = [lane_key(s1_a_lane, e) for e in range(E)]
        bkey = [lane_key(s1_b_lane, e) for e in range(E)]
        attn_sb = [[stage_reg(f"sb_attn{ee}_{r}",
                              byte_of(attn_sd[ee][r], sd_a_lane[ee], C, key=akey[ee]))
                    for r in range(R)] for ee in range(E)]
        opq_ptrs = []
        for e, eng in enumerate(engines):
            q_rp = list(buf.q_read[e])
            p_rp = list(buf.p_read[e])
            w_rp = buf.w_read[e]
            k_rp = list(buf.k_read[e])
            v_rp = buf.v_read[e]
            for rp in q_rp + p_rp:
                m.d.comb += [rp.addr.eq(s0_a_addr), rp.en.eq(advance)]
            for rp in [w_rp, v_rp] + k_rp:
                m.d.comb += [rp.addr.eq(s0_b_addr), rp.en.eq(advance)]
            w_sd = stage_reg(f"sd_w{e}", w_rp.data)
            v_sd = stage_reg(f"sd_v{e}", v_rp.data)

            a_beat, b_beat = [], []
            for r in range(R):
                # sb: the element of each source word (lane multiplexers after the block
                # RAM outputs); s2: the source the job reads, masked.
                lane, key = sd_a_lane[e], akey[e]
                xb = stage_reg(f"sb_x{e}_{r}", byte_of(x_sd[r], lane, 4, key=key))
                kvb = (stage_reg(f"sb_kv{e}_{r}", byte_of(kv_sd[r], lane, 4, key=key))
                       if kv_rp else xb)
                qb = stage_reg(f"sb_q{e}_{r}",
                               byte_of(stage_reg(f"sd_q{e}_{r}", q_rp[r].data), lane, C,
                                       key=key))
                pb = stage_reg(f"sb_p{e}_{r}",
                               byte_of(stage_reg(f"sd_p{e}_{r}", p_rp[r].data), lane, L, PB,
                                       key=key))
                values = {A_X: xb.as_signed(), A_KV: kvb.as_signed(), A_Q: qb.as_signed(),
                          A_P: pb,                     # unsigned probability
                          **{(A_ATTN, ee): attn_sb[ee][r].as_signed() for ee in range(E)}}
                terms = []
                for src, value in values.items():
                    wide = Signal(signed(a_width), name=f"a{e}_{r}_src{len(terms)}")
                    m.d.comb += wide.eq(value)
                    terms.append(wide.as_unsigned() & sb_ahot[src][r].replicate(a_width))
                val = Signal(signed(a_width), name=f"a{e}_{r}")
                m.d.comb += val.eq(_or_all(terms))
                a_beat.append(val)
            b_width = eng.b.payload.shape().elem_shape.width
            for c in range(C):
                wb = stage_reg(f"sb_w{e}_{c}",
                               byte_of(w_sd[32 * c:32 * (c + 1)], sd_b_lane[e], 4,
                                       key=bkey[e]))
                kb = stage_reg(f"sb_k{e}_{c}",
                               byte_of(stage_reg(f"sd_k{e}_{c}", k_rp[c].data), sd_b_lane[e], C,
                                       key=bkey[e]))
                vb = stage_reg(f"sb_v{e}_{c}", v_sd[8 * c:8 * (c + 1)])
                val = select(f"b{e}_{c}", signed(b_width), sb_src_b, {
                    B_W: wb.as_signed(), B_K: kb.as_signed(), B_V: vb.as_signed()})
                b_beat.append(Mux(sb_bmask[c], val, 0).as_signed())

            # s2: the engine's operand queue (registers; written in turn, read in turn).
            beat_layout = data.StructLayout({
                "a": data.ArrayLayout(signed(a_width), R),
                "b": data.ArrayLayout(signed(b_width), C)})
            entries = [Signal(beat_layout, name=f"s2_e{e}_{i}", reset_less=True)
                       for i in range(OPQ_DEPTH)]
            wr = Signal(range(OPQ_DEPTH), name=f"opq{e}_wr")
            rd = Signal(range(OPQ_DEPTH), name=f"opq{e}_rd")
            beat = Signal(beat_layout, name=f"s2_beat{e}")
            m.d.comb += [beat.a[r].eq(a_beat[r]) for r in range(R)]
            m.d.comb += [beat.b[c].eq(b_beat[c]) for c in range(C)]
            with m.If(push):
                m.d.sync += [Array(entries)[wr].eq(beat),
                             wr.eq(Mux(wr == OPQ_DEPTH - 1, 0, wr + 1))]
            with m.If(opq_pop[e]):
                m.d.sync += rd.eq(Mux(rd == OPQ_DEPTH - 1, 0, rd + 1))
            head = Array(entries)[rd]
            m.d.comb += [
                eng.a.valid.eq(opq_valid[e]), eng.b.valid.eq(opq_valid[e]),
                eng.a.payload.eq(head.a), eng.b.payload.eq(head.b),
                opq_pop[e].eq(opq_valid[e] & eng.a.ready),
            ]
            opq_ptrs.append((wr, rd))

        # ------------------------------------------------------------ bias fetch
        # One bias fetch per engine, each from its own bias buffer and advanced by its own
        # engine only: a shared fetch forked to both engines had its advance, a function of
        # both readies from the two ends of the die, on the routed top's worst paths. The
        # engines run in lock-step on the shared operand fetch, so the fetches stay in step
        # too. The fetch advances on ``taken``, the engine's handshake registered, not on
        # the engine's ready itself (that route and the enables did not fit one cycle): the
        # beat is withdrawn in the cycle after its handshake, while the next one is read, so
        # one beat per two cycles (the engine takes one per tile, at least max(R, C) cycles
        # apart). Read address, last-tile and last-row flags are counted in registers.
        bf_busy = []                # per engine: its bias fetch holds or fetches a beat
        for e, eng in enumerate(engines):
            bf_active = Signal(name=f"bf{e}_active")
            bf_row_end = Signal.like(row_end, init=R, name=f"bf{e}_row_end")   # (row+1) * R
            bf_tn = Signal.like(f_tn, name=f"bf{e}_tn")
            # The read address (job_w * G + job_lh) * TN + bf_tn; bf_base is the tile row's
            # first address.
            bf_base = Signal(range(4 * G * TN), name=f"bf{e}_base")
            bf_addr = Signal.like(bf_base, name=f"bf{e}_addr")
            bs1_valid = Signal(name=f"bf{e}_s1_valid")
            bf_last_tn = Signal(name=f"bf{e}_last_tn")      # bf_tn * C + C >= job_n
            bf_last_row = Signal(name=f"bf{e}_last_row")    # bf_row_end >= job_m
            taken = Signal(name=f"bf{e}_taken")              # the beat was taken last cycle
            m.d.sync += taken.eq(eng.bias.valid & eng.bias.ready)
            b_adv = ~bs1_valid | taken
            b_rp = buf.b_read[e]
            m.d.comb += [b_rp.addr.eq(bf_addr), b_rp.en.eq(b_adv),
                         eng.bias.valid.eq(bs1_valid & ~taken)]
            for c in range(C):
                m.d.comb += eng.bias.payload[c].eq(
                    b_rp.data[cfg.bias_bits * c:cfg.bias_bits * (c + 1)].as_signed())
            with m.If(b_adv):
                m.d.sync += bs1_valid.eq(bf_active)
                with m.If(bf_active):
                    m.d.sync += [bf_tn.eq(bf_tn + 1), bf_addr.eq(bf_addr + 1),
                                 bf_last_tn.eq(bf_tn * C + 2 * C >= job_n)]
                    with m.If(bf_last_tn):
                        m.d.sync += [bf_tn.eq(0), bf_addr.eq(bf_base),
                                     bf_last_tn.eq(C >= job_n),
                                     bf_row_end.eq(bf_row_end + R),
                                     bf_last_row.eq(bf_row_end + R >= job_m)]
                        with m.If(bf_last_row):
                            m.d.sync += bf_active.eq(0)
            with m.If(job_go):
                first = (job_w * G + job_lh) * TN
                m.d.sync += [bf_active.eq(job_bias), bf_row_end.eq(R), bf_tn.eq(0),
                             bf_base.eq(first), bf_addr.eq(first),
                             bf_last_tn.eq(C >= job_n), bf_last_row.eq(R >= job_m)]
            bf_busy.append((bf_active, bs1_valid, taken))

        # ------------------------------------------------------------ result writers
        res_done = Signal(E)
        w_score_rows = []           # per engine: a score row is counted this cycle
        with m.If(job_go):
            m.d.sync += res_done.eq(0)
        for e, eng in enumerate(engines):
            # rs: the engine's result beat registered as it is, by the buffers it goes to
            # (the engine's output register sits by its array; the route gets a cycle of its
            # own before the address arithmetic below).
            eng_res = eng.result
            m.d.comb += eng_res.ready.eq(1)
            rs_valid = Signal(name=f"rs{e}_valid")
            rs = Signal.like(eng_res.payload, name=f"rs{e}", reset_less=True)
            m.d.sync += [rs_valid.eq(eng_res.valid), rs.eq(eng_res.payload)]
            i = rs.row
            tn, _ = divmod_const(rs.col, C)
            i_r, i_rr = divmod_const(i, R)
            i_c, i_cc = divmod_const(i, C)
            head_ok = (job_lh * E + e) < cfg.heads
            bytes_ = Cat(*[rs.data[c][:8] for c in range(C)])
            scores = Cat(*[rs.data[c][:SB] for c in range(C)])
            we = rs_valid & head_ok
            qw = list(buf.q_write[e])
            kw = list(buf.k_write[e])
            vw = buf.v_write[e]
            sw = buf.s_write[e]
            aw = list(buf.a_write[e])
            ow = buf.o_write[e]
            # The writes happen a cycle after rs, from registers (addresses, enables, data):
            # the address arithmetic gets a cycle of its own instead of sharing one with the
            # block RAMs' address setup. The counters that let readers in (res_done,
            # score_rows) move with the writes.
            def wreg(name, value):
                reg = Signal.like(value, name=f"wr{e}_{name}", reset_less=True)
                m.d.sync += reg.eq(value)
                return reg
            w_qa = wreg("qa", mixed_radix(i_r, (job_lh, G), (tn, TN)))    # q and attn buffers
            w_ka = wreg("ka", mixed_radix(i_c, (job_lh, G), (tn, TN)))
            w_va = wreg("va", mixed_radix(i, (job_lh, G), (tn, TN)))      # v and output buffers
            w_sa = wreg("sa", mixed_radix(i, (tn, TNk)))
            w_bytes, w_scores = wreg("bytes", bytes_), wreg("scores", scores)
            w_en = {}
            for dst in (D_Q, D_K, D_V, D_S, D_ATTN, D_OUT):
                w_en[dst] = Signal(name=f"wr{e}_en{dst}")
                m.d.sync += w_en[dst].eq(we & (job_dst == dst))
            w_rr, w_cc = wreg("rr", i_rr), wreg("cc", i_cc)
            for r in range(R):
                m.d.comb += [qw[r].addr.eq(w_qa), qw[r].data.eq(w_bytes),
                             qw[r].en.eq(w_en[D_Q] & (w_rr == r)),
                             aw[r].addr.eq(w_qa), aw[r].data.eq(w_bytes),
                             aw[r].en.eq(w_en[D_ATTN] & (w_rr == r))]
            for c in range(C):
                m.d.comb += [kw[c].addr.eq(w_ka), kw[c].data.eq(w_bytes),
                             kw[c].en.eq(w_en[D_K] & (w_cc == c))]
            m.d.comb += [
                vw.addr.eq(w_va), vw.data.eq(w_bytes), vw.en.eq(w_en[D_V]),
                sw.addr.eq(w_sa), sw.data.eq(w_scores), sw.en.eq(w_en[D_S]),
                ow.addr.eq(Cat(w_va[:o_aw], o_bank)), ow.data.eq(w_bytes),
                ow.en.eq(w_en[D_OUT]),
            ]
            w_last = Signal(name=f"wr{e}_last")
            w_score_row = Signal(name=f"wr{e}_score_row")
            # Scores arrive tile by tile (row tiles outer): a row is complete with its beat of
            # the last column tile. The softmax feeder follows this count.
            m.d.sync += [w_last.eq(rs_valid & rs.last),
                         w_score_row.eq(rs_valid & (job_dst == D_S) & (rs.col + C >= job_n))]
            with m.If(w_last):
                m.d.sync += res_done[e].eq(1)
            w_score_rows.append(w_score_row)

        # ------------------------------------------------------------ softmax feed, P writer
        # Per engine: a feed from its score buffer into its softmax unit (rows as soon as
        # they are written), and a writer of the unit's rows into its P buffer, counting the
        # rows the P.V fetch waits for. Both start a cycle after a scores job's go pulse.
        sf_start = Signal()
        feeds, pwriters = [], []
        for e, sm in enumerate(softmaxes):
            feed = ScoreFeed(self.geom, buf.s_read[e].signature)
            pwr = ProbWriter(self.geom, buf.p_write[e][0].signature)
            m.submodules[f"score_feed{e}"] = feed
            m.submodules[f"prob_writer{e}"] = pwr
            wiring.connect(m, feed.s_read, buf.s_read[e])
            wiring.connect(m, feed.scores, sm.scores)
            wiring.connect(m, sm.probs, pwr.probs)
            for r in range(R):
                wiring.connect(m, pwr.p_write[r], buf.p_write[e][r])
            m.d.comb += [
                feed.start.eq(sf_start), feed.seq.eq(seq), feed.kvrows.eq(kvrows),
                feed.score_row.eq(w_score_rows[e]),
                pwr.start.eq(sf_start), pwr.seq.eq(seq),
                sm.exp_mult.eq(exp_mult), sm.exp_shift.eq(exp_shift),
                sm.causal.eq(causal), sm.kv_len.eq(keylen),
            ]
            feeds.append(feed)
            pwriters.append(pwr)

        # p_ready: the P.V fetch may start the row tile ending at row_end (every engine has
        # written those rows of P). Computed from the next values of row_end and prob_rows,
        # so the register equals the compare in every cycle of a P.V job. Each choice of the
        # next values is compared from registers (row_end2 = row_end + R, prob_rows1 =
        # prob_rows + 1); the handshakes that pick the next values only select a result.
        # "Every row is written" is a register per count (prob_rows >= seq, prob_rows1 >= seq),
        # moved with the counts: a compare with the job's row count sat at the head of this
        # path. (seq is the P.V job's m, and a run setting that holds for the whole run.)
        def rows_written(row_end_next, n, all_rows):
            return (row_end_next <= n) | all_rows

        def engine_ready(n, all_rows):
            return Mux(job_go, rows_written(R, n, all_rows),
                       Mux(f_row_adv, rows_written(row_end2, n, all_rows),
                           rows_written(row_end, n, all_rows)))

        m.d.sync += p_ready.eq(Cat(*[
            Mux(pw.row_done, engine_ready(pw.rows1, pw.all_rows1),
                engine_ready(pw.rows, pw.all_rows))
            for pw in pwriters
        ]).all())

        # ------------------------------------------------------------ output streamer
        m.submodules.streamer = streamer = OutputStreamer(self.geom, buf.o_read[0].signature)
        for e in range(E):
            wiring.connect(m, streamer.o_read[e], buf.o_read[e])
        wiring.connect(m, streamer.y_out, wiring.flipped(self.y_out))
        m.d.comb += [streamer.now.eq(now), self.done.eq(streamer.done),
                     self.cycles.eq(streamer.cycles), self.busy_cycles.eq(streamer.busy_cycles),
                     self.stall_cycles.eq(streamer.stall_cycles)]

        # ------------------------------------------------------------ counters
        # Per sequence: array-busy cycles (operands taken) and softmax stalls (the P.V fetch
        # waiting for probability rows) while it computes; published with its done.
        running = Signal()
        run_busy = Signal(32)
        run_stall = Signal(32)
        with m.If(running & opq_pop[0]):
            m.d.sync += run_busy.eq(run_busy + 1)
        with m.If(running & f_active & job_is_p & ~p_ready):
            m.d.sync += run_stall.eq(run_stall + 1)

        # ------------------------------------------------------------ sequencer
        g = Signal(range(G + 1))
        pj = Signal(2)   # projection: 0 = Q, 1 = K, 2 = V

        def launch(a, b, w, bias, rqsel, dst, mm_, nn, kk_):
            m.d.sync += [job_a.eq(a), job_b.eq(b), job_w.eq(w), job_bias.eq(bias),
                         job_rq.eq(rqsel), job_dst.eq(dst), job_m.eq(mm_), job_n.eq(nn),
                         job_k.eq(kk_), job_lh.eq(g)]

        job_idle = Signal()
        m.d.comb += job_idle.eq((res_done == (1 << E) - 1) & ~f_active & ~s0_valid
                                & ~s1_valid & ~sd_valid & ~sb_valid & (opq_valid == 0)
                                & ~_or_all([a | (v & ~t) for a, v, t in bf_busy])
                                & (cmd_pending == 0))
        # Registered (one cycle later), so the sequencer's decisions start from a flip-flop;
        # job_go masks the one cycle in which it still shows the job just launched as done.
        job_done = Signal()
        m.d.sync += job_done.eq(job_idle & ~job_go)

        # A rejected engine command would leave the sequencer waiting for results that never
        # come. The registers check every setting at START, so this cannot happen with a
        # correct bus master; if it does, abandon the sequence instead of hanging.
        fault = Signal()
        m.d.comb += fault.eq(Cat(*[eng.error for eng in engines]).any())

        m.d.sync += engine_flush.eq(fault)
        run_error = Signal()

        # The softmax feed of a scores job starts a cycle after its go pulse, from a register
        # (the sequencer's decision reached the feeder's and the P writers' counters by both
        # softmax units in the same cycle); its first read waits for score rows, which come
        # tens of cycles later.
        m.d.sync += sf_start.eq(0)

        def start_softmax_feed():
            m.d.sync += sf_start.eq(1)

        def abandon_on_fault():
            with m.If(fault):
                m.d.comb += run_error.eq(1)
                m.d.sync += [running.eq(0), f_active.eq(0), s0_valid.eq(0), s1_valid.eq(0),
                             sd_valid.eq(0), sb_valid.eq(0),
                             cmd_pending.eq(0), advance.eq(1), opq_valid.eq(0)]
                m.d.comb += [feed.flush.eq(1) for feed in feeds]
                m.d.sync += [c.eq(0) for c in opq_count]
                m.d.sync += [p.eq(0) for ptrs in opq_ptrs for p in ptrs]
                m.d.sync += [f.eq(0) for flags in bf_busy for f in flags]
                m.next = "IDLE"

        with m.FSM(name="seq") as seq_fsm:
            with m.State("IDLE"):
                m.d.comb += loader.loaded.ready.eq(1)
                with m.If(loader.loaded.valid):
                    # Take the loaded sequence: its settings, its input buffer.
                    m.d.sync += run.eq(loader.loaded.payload)
                    m.d.sync += [g.eq(0), pj.eq(0), running.eq(1), run_busy.eq(0),
                                 run_stall.eq(0), job_go.eq(1)]
                    m.d.sync += [job_a.eq(A_X), job_b.eq(B_W), job_w.eq(0), job_bias.eq(1),
                                 job_rq.eq(RQ_Q), job_dst.eq(D_Q), job_m.eq(loader.loaded.payload.seq),
                                 job_n.eq(dk), job_k.eq(d), job_lh.eq(0)]
                    m.next = "PROJ"
            with m.State("PROJ"):
                with m.If(job_done & ~job_go):
                    with m.If(pj == 2):
                        with m.If(g + 1 == G):
                            m.d.sync += [g.eq(0), job_lh.eq(0), pj.eq(0), job_go.eq(1)]
                            m.d.sync += [job_a.eq(A_Q), job_b.eq(B_K), job_bias.eq(0),
                                         job_rq.eq(RQ_NONE), job_dst.eq(D_S), job_m.eq(seq),
                                         job_n.eq(kvrows), job_k.eq(dk)]
                            start_softmax_feed()
                            m.next = "SCORES"
                        with m.Else():
                            m.d.sync += [g.eq(g + 1), job_lh.eq(g + 1), pj.eq(0), job_go.eq(1),
                                         job_a.eq(A_X), job_w.eq(0), job_rq.eq(RQ_Q),
                                         job_dst.eq(D_Q), job_m.eq(seq)]
                    with m.Else():
                        m.d.sync += [pj.eq(pj + 1), job_go.eq(1),
                                     job_a.eq(Mux(cross, A_KV, A_X)), job_m.eq(kvrows),
                                     job_w.eq(pj + 1),
                                     job_rq.eq(Mux(pj == 0, RQ_K, RQ_V)),
                                     job_dst.eq(Mux(pj == 0, D_K, D_V))]
                abandon_on_fault()
            with m.State("SCORES"):
                # The softmax unit works on rows as soon as their scores are written.
                with m.If(job_done & ~job_go):
                    m.d.sync += [job_go.eq(1), job_a.eq(A_P), job_b.eq(B_V), job_bias.eq(0),
                                 job_rq.eq(RQ_PV), job_dst.eq(D_ATTN), job_m.eq(seq),
                                 job_n.eq(dk), job_k.eq(kvrows)]
                    m.next = "PV"
                abandon_on_fault()
            with m.State("PV"):
                with m.If(job_done & ~job_go):
                    with m.If(g + 1 == G):
                        m.d.sync += [g.eq(0), job_lh.eq(0), job_go.eq(1),
                                     job_a.eq(A_ATTN), job_b.eq(B_W), job_w.eq(3),
                                     job_bias.eq(1), job_rq.eq(RQ_O), job_dst.eq(D_OUT),
                                     job_m.eq(seq), job_n.eq(dk), job_k.eq(d)]
                        m.next = "OPROJ"
                    with m.Else():
                        m.d.sync += [g.eq(g + 1), job_lh.eq(g + 1), job_go.eq(1),
                                     job_a.eq(A_Q), job_b.eq(B_K), job_bias.eq(0),
                                     job_rq.eq(RQ_NONE), job_dst.eq(D_S), job_m.eq(seq),
                                     job_n.eq(kvrows), job_k.eq(dk)]
                        start_softmax_feed()
                        m.next = "SCORES"
                abandon_on_fault()
            with m.State("OPROJ"):
                with m.If(job_done & ~job_go):
                    with m.If(g + 1 == G):
                        m.d.sync += running.eq(0)
                        m.next = "HANDOFF"
                    with m.Else():
                        m.d.sync += [g.eq(g + 1), job_lh.eq(g + 1), job_go.eq(1)]
                abandon_on_fault()
            with m.State("HANDOFF"):
                # The output buffer is complete: hand it to the streamer once that has
                # finished the previous sequence, and write the other buffer next. (seq >= 1:
                # the register block refuses SEQ_LEN 0, so there is a word to stream.)
                ho = streamer.handoff
                m.d.comb += [ho.valid.eq(1), ho.payload.seq.eq(seq), ho.payload.bank.eq(o_bank),
                             ho.payload.t0.eq(run.t0), ho.payload.busy.eq(run_busy),
                             ho.payload.stall.eq(run_stall)]
                with m.If(ho.ready):
                    m.d.sync += o_bank.eq(~o_bank)
                    m.next = "IDLE"
        with m.If(job_go):
            m.d.sync += job_go.eq(0)

        m.d.comb += [
            self.error.eq(loader.error | run_error),
            self.error_cause.eq(loader.error_cause
                                | Mux(run_error, 1 << ERROR_CAUSES["ENGINE_FAULT"], 0)),
        ]
        # busy is a register (a cycle after the states it sums): it reaches the register
        # block's write guards, and from done_r by the output slice the route alone took
        # most of a cycle.
        m.d.sync += self.busy.eq(loader.busy
                                 | ~seq_fsm.ongoing("IDLE") | streamer.active | streamer.done)

        return m
