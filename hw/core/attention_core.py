"""The attention layer's datapath and controller, without bus interfaces.

``AttentionCore`` instantiates the on-chip buffers, ``cfg.engines`` head engines (one
:class:`hw.blocks.matmul.MatmulEngine` and one :class:`hw.blocks.softmax.SoftmaxUnit` each),
the head sequencer (:class:`hw.core.sequencer.HeadSequencer`) that runs one whole multi-head
attention layer per ``start``, and the blocks between them, and connects them.
:class:`hw.attention_top.AttentionTop` wraps it in AXI4-Stream and AXI4-Lite interfaces.

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

Block diagram (one file per block in :mod:`hw.core`)::

    start ─► InputLoader ─loaded─► HeadSequencer ─job─┬─► EngineCommands ──cmd──► MatmulEngine[e]
    x_in ──►     │                   │      │         ├─► OperandFetch ───a, b──►      │
                 ▼ x, kv             │      │         ├─► BiasFetch[e] ───bias──►      │
    window ─► WeightWindowWriter ─► CoreBuffers ◄─────┴── ResultWriter[e] ◄─result─────┘
                                     │   ▲ s   ▲ p
                                     │   ScoreFeed[e] ─► SoftmaxUnit[e] ─► ProbWriter[e]
                                     ▼ o (handoff from the sequencer)
                                   OutputStreamer ─► y_out

The buffers (:class:`~hw.core.buffers.CoreBuffers`): X and KV inputs (array_rows banks of
32-bit words), weights and biases per engine (only the rows of its heads), Q, K, V, scores, P,
attention and output per engine. The operand fetch reads one A vector (array_rows values) and
one B vector (array_cols values) per cycle, so the arrays never wait on memory.

Ports
-----
x_in : In(stream) of ``{data: 32, last: 1}``
    Activations: ``seq_len`` rows of d_model ``act_bits`` integers (4 int8 per word, element
    4a+k in byte k, or 2 int16, element 2a+k in half-word k), then in cross mode ``kv_len`` rows of the second sequence; ``last`` on the final word of each.
    Enters through a register slice (``ready`` from a flip-flop; up to two words are taken
    ahead of the loader).
y_out : Out(stream) of ``{data: 32, last: 1}``
    The result rows (``act_bits``) in the same packing; ``last`` on the final word. Leaves through a
    register slice (``valid``, ``data`` and ``last`` from flip-flops; ``ready`` reaches only
    the slice).
start : In(StartSignature(cfg))
    Run settings (:func:`hw.bus.settings.run_settings_layout`), one beat per sequence, checked
    beforehand by the register block; ``ready`` (STATUS.START_READY) while the input loader is
    free.
window : In(WindowWriteSignature(window_addr_bits))
    Weight-window writes (word addresses, see :mod:`hw.bus.regmap`). A write reaches the weight
    buffers two cycles after its ``en`` cycle; a run reads weights no earlier than several
    hundred cycles after ``start``, and the register block refuses window writes while
    ``busy``.
busy, done, error, error_cause, cycles, busy_cycles : Out
    Status: ``done``/``error`` are one-cycle strobes; ``error_cause`` (ERROR_CAUSE's bits, see
    :mod:`hw.bus.regmap`) is valid with ``error``.
    ``done`` comes the cycle after the last output word's handshake; ``cycles``,
    ``busy_cycles`` and ``stall_cycles`` show that sequence's counts from the cycle after
    ``done`` (when the register block's STATUS.DONE is set). ``busy`` is a register: it rises
    two cycles after ``start`` and falls the cycle after ``done`` (the register block covers
    the two cycles after its ``start`` itself).

Latency and throughput: :func:`hw.perf.layer.layer_timing`, a cycle model that the unit tests
hold equal to ``cycles`` and ``stall_cycles`` exactly.
"""

from __future__ import annotations

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from hw.blocks.additive import AdditiveScorer
from hw.blocks.matmul import MatmulEngine
from hw.blocks.register_slice import RegisterSlice
from hw.blocks.softmax import SoftmaxUnit
from hw.bus.regmap import ERROR_CAUSES as REGMAP_CAUSES
from hw.bus.settings import StartSignature, WindowWriteSignature
from hw.blocks.tile_accumulator import TileAccumulator
from hw.blocks.tile_softmax import TileSoftmaxUnit
from hw.core.attn_writer import AttnWriter
from hw.core.arith import or_all
from hw.core.bias_fetch import BiasFetch
from hw.core.buffers import CoreBuffers
from hw.core.commands import EngineCommands
from hw.core.geometry import CoreGeometry
from hw.core.layouts import WordStream
from hw.core.loader import InputLoader
from hw.core.operand_fetch import OperandFetch
from hw.core.prob_writer import ProbWriter
from hw.core.result_writer import ResultWriter
from hw.core.score_feed import ScoreFeed
from hw.core.score_select import ScoreSelect
from hw.core.sequencer import HeadSequencer
from hw.core.streamer import OutputStreamer
from hw.core.weight_window import WeightWindowWriter

__all__ = ["AttentionCore", "WordStream", "ERROR_CAUSES"]

# Bit positions of ERROR_CAUSE that the core itself raises (the rest come from the registers).
ERROR_CAUSES = {name: bit for bit, (name, _) in enumerate(REGMAP_CAUSES)
                if name in ("STREAM_SHORT", "STREAM_LONG", "BAD_POSENC", "ENGINE_FAULT")}


class AttentionCore(wiring.Component):
    def __init__(self, cfg: AttentionConfig):
        self.cfg = cfg
        self.geom = CoreGeometry(cfg)
        super().__init__({
            "x_in": In(WordStream),
            "y_out": Out(WordStream),
            "start": In(StartSignature(cfg)),
            "window": In(WindowWriteSignature(self.geom.window_addr_bits)),
            "busy": Out(1), "done": Out(1), "error": Out(1),
            "error_cause": Out(len(REGMAP_CAUSES)),
            "cycles": Out(32), "busy_cycles": Out(32), "stall_cycles": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, geom = self.cfg, self.geom
        R, E = geom.R, geom.E
        connect = wiring.connect
        now = Signal(32)            # cycle counter: START timestamps and CYCLES
        m.d.sync += now.eq(now + 1)

        m.submodules.buffers = buf = CoreBuffers(geom)
        m.submodules.weight_window = ww = WeightWindowWriter(
            geom, buf.w_write[0].signature, buf.b_write[0].signature,
            AdditiveScorer.w_write_signature(geom.G, geom.dk).flip() if cfg.additive else None,
            buf.r_write[0].signature if cfg.channel_scales else None)
        connect(m, wiring.flipped(self.window), ww.window)
        for e in range(E):
            connect(m, ww.w_write[e], buf.w_write[e])
            connect(m, ww.b_write[e], buf.b_write[e])
            if cfg.channel_scales:
                connect(m, ww.r_write[e], buf.r_write[e])

        # Three stages work on up to three sequences at once: the loader (input stream into an
        # X/KV buffer), the sequencer with the datapath (arrays and softmax), and the streamer
        # (an output buffer onto y_out). The settings pass along with the sequence.
        m.submodules.loader = loader = InputLoader(
            geom, buf.x_write[0].signature,
            buf.kv_write[0].signature if cfg.cross_attention else None)
        connect(m, wiring.flipped(self.start), loader.start)
        # x_in enters through a register slice: its ``ready`` is a flip-flop, so neither the
        # loader's state nor ``start`` (which holds the stream while a START ends a drain)
        # reaches the input pins' registers; a word waiting before START costs no cycle.
        m.submodules.x_slice = x_slice = RegisterSlice(WordStream)
        connect(m, wiring.flipped(self.x_in), x_slice.i_stream)
        connect(m, x_slice.o_stream, loader.x_in)
        for r in range(R):
            connect(m, loader.x_write[r], buf.x_write[r])
            if cfg.cross_attention:
                connect(m, loader.kv_write[r], buf.kv_write[r])
        m.d.comb += loader.now.eq(now)

        m.submodules.sequencer = seq = HeadSequencer(geom)
        connect(m, loader.loaded, seq.loaded)
        engines, softmaxes, accumulators = self._engines(m, seq.fault)
        if self._scorers:
            self._fill_tables(m, ww, loader.loaded)
        job_sinks = self._datapath(m, buf, seq, engines, softmaxes, accumulators)
        self._broadcast_jobs(m, seq, job_sinks)

        m.d.comb += [loader.x_free.eq(seq.x_free)]
        m.submodules.streamer = streamer = OutputStreamer(geom, buf.o_read[0].signature)
        for e in range(E):
            connect(m, streamer.o_read[e], buf.o_read[e])
        connect(m, seq.handoff, streamer.handoff)
        m.d.comb += seq.o_free.eq(~streamer.active)
        connect(m, streamer.y_out, wiring.flipped(self.y_out))
        m.d.comb += [streamer.now.eq(now), self.done.eq(streamer.done),
                     self.cycles.eq(streamer.cycles), self.busy_cycles.eq(streamer.busy_cycles),
                     self.stall_cycles.eq(streamer.stall_cycles)]

        m.d.comb += [
            self.error.eq(loader.error | seq.flush),
            self.error_cause.eq(loader.error_cause
                                | Mux(seq.flush, 1 << ERROR_CAUSES["ENGINE_FAULT"], 0)),
        ]
        # busy is a register (a cycle after the states it sums): it reaches the register
        # block's write guards, and from the streamer's done by the output slice the route
        # alone took most of a cycle.
        m.d.sync += self.busy.eq(loader.busy | seq.busy | streamer.active | streamer.done)
        return m

    def _fill_tables(self, m, ww, ld):
        """The scorers' ``w`` writes, and their tanh tables filled as the sequencer takes an
        additive run, from its settings (the scores job comes after every projection). The
        strobe and settings are registered: the sequencer may take a run in the cycle the
        engines are flushed after a fault, whose reset would swallow a strobe of that cycle."""
        fill = Signal()
        mult = Signal.like(ld.payload.tanh_mult)
        shift = Signal.like(ld.payload.tanh_shift)
        m.d.sync += fill.eq(ld.valid & ld.ready & ld.payload.additive)
        with m.If(ld.valid & ld.ready):
            m.d.sync += [mult.eq(ld.payload.tanh_mult), shift.eq(ld.payload.tanh_shift)]
        for e, sc in enumerate(self._scorers):
            wiring.connect(m, ww.wa_write[e], sc.w_write)
            m.d.comb += [sc.fill.eq(fill), sc.tanh_mult.eq(mult), sc.tanh_shift.eq(shift)]

    def _engines(self, m, fault):
        """One matrix engine and one softmax unit per head engine. A rejected engine command
        (which the register block's checks rule out) raises ``fault``; the engines are then
        reset for one cycle, as they may hold state of the abandoned run (a buffered bias
        beat, rows in flight)."""
        cfg, geom = self.cfg, self.geom
        engine_flush = Signal()
        engines, softmaxes, accumulators = [], [], []
        self._scorers = []
        # The tiled path's E operand is UQ1.Bt (Bt + 1 bits, plus a sign).
        a_width = geom.fmt.operand_bits if geom.tiled else None
        for e in range(geom.E):
            eng = MatmulEngine(cfg, max_m=max(geom.SEQ, geom.KV), max_n=max(geom.dk, geom.KV),
                               max_k=max(geom.d, geom.KV, geom.dk), a_width=a_width)
            flushed = ResetInserter({"sync": engine_flush})
            m.submodules[f"engine{e}"] = flushed(eng)
            if geom.tiled:
                sm = TileSoftmaxUnit(cfg, geom.fmt, cfg.q_tile)
                acc = TileAccumulator(cfg, geom.fmt, cfg.q_tile, geom.C, geom.dk,
                                      cfg.tile_norm_lanes, banks=3)
                m.submodules[f"tile_accumulator{e}"] = flushed(acc)
                accumulators.append(acc)
            else:
                sm = SoftmaxUnit(cfg)
            m.submodules[f"softmax{e}"] = flushed(sm)
            if cfg.additive:
                # the engine's operand and result formats (ScoreSelect passes either)
                sc = AdditiveScorer(geom.R, geom.C, cfg.additive_lanes, a_width=eng.a_width,
                                    b_width=eng.b_width, max_m=eng.max_m, max_n=eng.max_n,
                                    max_k=geom.dk, groups=geom.G, acc_bits=cfg.acc_bits,
                                    mult_bits=cfg.requant_mult_bits)
                m.submodules[f"additive{e}"] = flushed(sc)
                self._scorers.append(sc)
            engines.append(eng)
            softmaxes.append(sm)
        m.d.comb += fault.eq(Cat(*[eng.error for eng in engines]).any())
        m.d.sync += engine_flush.eq(fault)
        self._engine_flush = engine_flush
        return engines, softmaxes, accumulators

    def _datapath(self, m, buf, seq, engines, softmaxes, accumulators):
        """The blocks around the engines; returns the consumers of the job stream."""
        geom = self.geom
        R, C = geom.R, geom.C
        connect = wiring.connect
        run = seq.run

        m.submodules.commands = commands = EngineCommands(geom, engines[0].cmd_layout)
        m.submodules.operand_fetch = fetch = OperandFetch(
            geom, buf, engines[0].a_width, engines[0].b_width)
        m.d.comb += [commands.run.eq(run), commands.flush.eq(seq.flush),
                     fetch.bank.eq(run.bank), fetch.flush.eq(seq.flush),
                     seq.array_busy.eq(fetch.beat_taken), seq.softmax_stall.eq(fetch.p_stall)]
        for name in ("x", "kv") if self.cfg.cross_attention else ("x",):
            for r in range(R):
                connect(m, getattr(fetch, f"{name}_read")[r], getattr(buf, f"{name}_read")[r])
        sinks = [commands, fetch]
        tile_status = []            # per engine (tiled path): what the sequencer waits for
        for e, (eng, sm) in enumerate(zip(engines, softmaxes)):
            for name, count in (("q", R), ("p", R), ("a", R), ("k", C)):
                for i in range(count):
                    connect(m, getattr(fetch, f"{name}_read")[e][i],
                            getattr(buf, f"{name}_read")[e][i])
            for name in ("w", "v"):
                connect(m, getattr(fetch, f"{name}_read")[e], getattr(buf, f"{name}_read")[e])
            result = self._score_route(m, e, commands.cmd[e], fetch.a[e], fetch.b[e], eng,
                                       run, sinks)

            bias = BiasFetch(geom, buf.b_read[e].signature,
                             buf.r_read[e].signature if self.cfg.channel_scales else None)
            writer = ResultWriter(geom, e, eng.result_layout, buf)
            feed = ScoreFeed(geom, buf.s_read[e].signature)
            pwr = ProbWriter(geom, buf.p_write[e][0].signature)
            m.submodules[f"bias_fetch{e}"] = bias
            m.submodules[f"result_writer{e}"] = writer
            m.submodules[f"score_feed{e}"] = feed
            m.submodules[f"prob_writer{e}"] = pwr
            connect(m, bias.b_read, buf.b_read[e])
            if self.cfg.channel_scales:
                connect(m, bias.r_read, buf.r_read[e])
            connect(m, bias.bias, eng.bias)
            connect(m, result, writer.result)
            for name, count in (("q", R), ("k", C)):
                for i in range(count):
                    connect(m, getattr(writer, f"{name}_write")[i],
                            getattr(buf, f"{name}_write")[e][i])
            for name in ("v", "s", "o"):
                connect(m, getattr(writer, f"{name}_write"), getattr(buf, f"{name}_write")[e])
            # Softmax: rows of S as soon as they are written, rows of P counted for P.V.
            connect(m, feed.s_read, buf.s_read[e])
            connect(m, feed.scores, sm.scores)
            connect(m, sm.probs, pwr.probs)
            for r in range(R):
                connect(m, pwr.p_write[r], buf.p_write[e][r])
            connect(m, pwr.progress, fetch.progress[e])
            m.d.comb += [
                bias.flush.eq(seq.flush), writer.flush.eq(seq.flush),
                writer.o_bank.eq(seq.o_bank),
                feed.start.eq(seq.softmax_start), feed.score_row.eq(writer.score_row),
                feed.flush.eq(seq.flush),
                pwr.start.eq(seq.softmax_start),
                sm.exp_mult.eq(run.exp_mult), sm.exp_shift.eq(run.exp_shift),
                sm.causal.eq(run.causal), sm.kv_len.eq(run.keylen),
            ]
            if geom.tiled:
                tile_status.append(self._tile_datapath(m, e, buf, seq, writer, feed, pwr, sm,
                                                       accumulators[e]))
            else:
                m.d.comb += [feed.seq.eq(run.seq), feed.kvrows.eq(run.kvrows),
                             pwr.seq.eq(run.seq)]
                for r in range(R):
                    connect(m, writer.a_write[r], buf.a_write[e][r])
            sinks += [bias, writer]
        if geom.tiled:
            # Every engine's blocks must be ready; they run in lock-step (every engine's
            # tiles and passes have the same length), so the writers take a tile together.
            def every(name):
                return Cat(*[st[name] for st in tile_status]).all()
            m.d.comb += [seq.attn_idle.eq(every("attn_idle")),
                         seq.acc_ready.eq(every("acc_ready")),
                         seq.acc_full.eq(or_all([st["acc_full"] for st in tile_status])),
                         seq.feed_idle.eq(every("feed_idle")),
                         seq.attn_tile.ready.eq(every("attn_tile_ready"))]
        return sinks

    def _score_route(self, m, e, cmd, a, b, eng, run, sinks):
        """Engine ``e``'s command and operands into its matrix engine, or, with an additive
        scorer, through a :class:`~hw.core.score_select.ScoreSelect`; returns the result
        stream for the writer."""
        connect = wiring.connect
        if not self._scorers:
            connect(m, cmd, eng.cmd)
            connect(m, a, eng.a)
            connect(m, b, eng.b)
            return eng.result
        sc = self._scorers[e]
        sel = ScoreSelect(self.geom, eng, sc)
        m.submodules[f"score_select{e}"] = sel
        connect(m, cmd, sel.cmd)
        connect(m, a, sel.a)
        connect(m, b, sel.b)
        connect(m, sel.engine_cmd, eng.cmd)
        connect(m, sel.engine_a, eng.a)
        connect(m, sel.engine_b, eng.b)
        connect(m, eng.result, sel.engine_result)
        connect(m, sel.scorer_cmd, sc.cmd)
        connect(m, sel.scorer_a, sc.a)
        connect(m, sel.scorer_b, sc.b)
        connect(m, sc.result, sel.scorer_result)
        m.d.comb += sel.additive.eq(run.additive)
        sinks.append(sel)
        return sel.result

    def _tile_datapath(self, m, e, buf, seq, writer, feed, pwr, sm, acc):
        """Engine ``e``'s tiled-path blocks: the feed and P writer work on the sequencer's
        tile, the online softmax's row state and E.V results meet in the tile accumulator,
        whose normalised rows the attention writer puts into the attention buffer. Returns
        the engine's status flags the sequencer waits for."""
        geom, run = self.geom, seq.run
        connect = wiring.connect
        tile = seq.tile
        m.d.comb += [feed.seq.eq(tile.rows), feed.kvrows.eq(tile.keys), feed.tile.eq(tile.feed),
                     pwr.seq.eq(tile.rows), pwr.bank.eq(tile.pbank),
                     acc.rq_mult.eq(run.rq_pv_mult), acc.rq_shift.eq(run.rq_pv_shift)]
        connect(m, sm.row_info, acc.info)
        connect(m, writer.acc, acc.result)
        aw = AttnWriter(geom, e, acc.out.payload.shape(), buf.a_write[e][0].signature)
        m.submodules[f"attn_writer{e}"] = ResetInserter({"sync": self._engine_flush})(aw)
        connect(m, acc.out, aw.out)
        for r in range(geom.R):
            connect(m, aw.a_write[r], buf.a_write[e][r])
        m.d.comb += [aw.tile.valid.eq(seq.attn_tile.valid), aw.tile.payload.eq(
            seq.attn_tile.payload)]
        return {"attn_idle": aw.idle, "acc_ready": acc.results_ready, "acc_full": acc.bank_full,
                "feed_idle": feed.idle, "attn_tile_ready": aw.tile.ready}

    @staticmethod
    def _broadcast_jobs(m, seq, sinks):
        """The sequencer's job stream to every datapath block at once. A job beat goes through
        when every block is idle (each block's ``job.ready``); that AND of about ten blocks'
        state is registered (the sequencer decides from a flip-flop), and masked in the cycle
        after a beat, when it still shows the blocks idle."""
        idle = Signal()
        m.d.comb += idle.eq(Cat(*[s.job.ready for s in sinks]).all())
        m.d.sync += seq.job.ready.eq(idle & ~seq.job.valid)
        for s in sinks:
            m.d.comb += [s.job.valid.eq(seq.job.valid & seq.job.ready),
                         s.job.payload.eq(seq.job.payload)]
