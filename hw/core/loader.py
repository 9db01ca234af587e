"""Input loader: the activation stream into an input buffer, one sequence at a time."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from hw.blocks.delay import DelayLine
from hw.blocks.posenc import PeMode, PositionalEncoder
from hw.bus.regmap import ERROR_CAUSES as REGMAP_CAUSES
from hw.bus.settings import StartSignature
from hw.core.geometry import CoreGeometry
from hw.core.layouts import WordStream, sequence_layout

__all__ = ["InputLoader", "LOADER_CAUSES", "ENCODER_SETTLE"]

#: Cycles the loader waits after a sequence's last word for the encoder's last write (its
#: latency beyond the one-cycle write of the path without an encoder).
ENCODER_SETTLE = PositionalEncoder.LATENCY - 1

# ERROR_CAUSE bits the loader raises.
LOADER_CAUSES = {name: bit for bit, (name, _) in enumerate(REGMAP_CAUSES)
                 if name in ("STREAM_SHORT", "STREAM_LONG", "BAD_POSENC")}


class InputLoader(wiring.Component):
    """Takes a START, then loads ``seq_len`` rows (and in cross mode ``kv_len`` rows of the
    second sequence) from ``x_in`` into one of the two input buffers, and offers the loaded
    sequence to the sequencer.

    Members
    -------
    start : ``In(StartSignature(cfg))``
        Run settings; taken (``ready``) in IDLE and DRAIN, one beat per sequence.
    x_in : ``In(WordStream)``
        Rows of ``d_model`` activations as 32-bit words of ``EPW`` (element ``EPW a + k`` in
        bits ``[A (k + 1) - 1 : A k]``, ``A = act_bits``), ``last`` on
        the final word of each sequence; ``ready`` only while loading (and while draining a
        stream that ran long).
    x_write, kv_write : ``In(WritePort.Signature)`` per bank (``R``)
        Input buffer writes; row ``i`` into bank ``i % R`` at ``(i // R) * XW + word`` of the
        buffer half ``bank``. ``kv_write`` only with ``cross_attention``.
    loaded : ``Out(stream.Signature(sequence_layout(geom)))``
        The loaded sequence's settings, valid from the cycle after its last word until taken.
    now : ``In(32)``
        Cycle counter; its value at START becomes ``loaded.t0``.
    busy : ``Out(1)``
        A sequence is being loaded or waits to be taken.
    x_free : ``In(1)``
        Without ``double_buffer``: the single input buffer may take a new sequence (the
        sequencer's projections are done with it); START waits for it.
    error, error_cause : ``Out(1)``, ``Out(len(ERROR_CAUSES))``
        One-cycle strobe with its ERROR_CAUSE bits: STREAM_SHORT (``last`` before the final
        word: back to IDLE), STREAM_LONG (no ``last`` on the final word: the rest of the
        stream is drained up to its ``last``, or until the next START), or BAD_POSENC (the
        positional encoder refused its settings, before any word was loaded: the run's
        input, two packets in a cross run, is drained likewise).

    Positional encoding (``cfg.pos_enc``): the words of X go through a
    :class:`~hw.blocks.posenc.PositionalEncoder` on their way into the buffer, with the
    settings sampled at START. After START the loader waits in CHECK for the encoder's
    verdict (2 cycles; 2-D mode ``2 + lb`` for its division, ``lb`` the width of a
    length), and after the last word in SETTLE until the encoder's last write
    (:data:`ENCODER_SETTLE` cycles): the ``pos_enc`` constants of the cycle model.

    Latency: a word is written into its buffer the cycle after its handshake (from registers:
    the buffers are spread over the die), ``PositionalEncoder.LATENCY`` cycles after it with
    an encoder; a loaded sequence is read 3 cycles after its last write at the earliest, so
    the late write is never missed. Throughput: one word per cycle.
    """

    def __init__(self, geom: CoreGeometry, x_sig: WritePort.Signature,
                 kv_sig: WritePort.Signature | None):
        self.geom = geom
        ports = {
            "start": In(StartSignature(geom.cfg)),
            "x_in": In(WordStream),
            "x_write": In(x_sig).array(geom.R),
            "loaded": Out(stream.Signature(sequence_layout(geom))),
            "now": In(32),
            "busy": Out(1), "error": Out(1), "error_cause": Out(len(REGMAP_CAUSES)),
            "x_free": In(1),
        }
        if kv_sig is not None:
            ports["kv_write"] = In(kv_sig).array(geom.R)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        XW, lb = g.XW, g.lb
        # A single input buffer takes the next sequence once the arrays are done with it.
        x_free = 1 if g.cfg.double_buffer else self.x_free
        ld_set = Signal(sequence_layout(g))
        m.d.comb += self.loaded.payload.eq(ld_set)
        st = self.start.payload
        # (the register block checks the lengths against the configuration's limits, so they
        # fit the core's ``seq_len_bits``)
        seq_len, kv_len, key_len = st.seq_len[:lb], st.kv_len[:lb], st.key_len[:lb]

        ld_bank = Signal()          # buffer the next load fills (alternates)
        ld_beat = self.x_in.valid & self.x_in.ready
        pos = self._position()
        ld_final = pos.w_last & pos.i_last
        ld_write = Signal()         # the word of this cycle's beat goes into a buffer
        enc = self._buffer_writes(m, ld_write, pos, ld_set)

        def accept_start():
            """Sample the run settings of a new sequence and start loading it."""
            with m.If(self.start.valid):
                kv_rows = Mux(st.cross, kv_len, seq_len)
                m.d.sync += [
                    ld_set.seq.eq(seq_len),
                    ld_set.kvrows.eq(kv_rows),
                    ld_set.keylen.eq(Mux(key_len == 0, kv_rows, key_len)),
                    ld_set.causal.eq(st.causal), ld_set.cross.eq(st.cross),
                    ld_set.exp_mult.eq(st.exp_mult), ld_set.exp_shift.eq(st.exp_shift),
                    ld_set.t0.eq(self.now), ld_set.bank.eq(ld_bank),
                    pos.i.eq(0), pos.w.eq(0), pos.rows.eq(seq_len), pos.kv.eq(0),
                    pos.w_last.eq(XW == 1), pos.i_last.eq(seq_len == 1),
                    pos.r.eq(0), pos.addr.eq(0), pos.base.eq(0),
                ]
                self._copy_settings(m, ld_set, st)
                if enc is not None:
                    m.d.sync += [enc.mode.eq(st.pe_mode), enc.offset.eq(st.pe_offset),
                                 enc.grid_width.eq(st.pe_grid_w), enc.seq_len.eq(seq_len),
                                 enc.pe_mult.eq(st.pe_mult), enc.pe_shift.eq(st.pe_shift),
                                 pe_restart.eq(1)]
                    m.next = "CHECK"
                else:
                    m.next = "LOAD"

        def load_error(cause):
            m.d.comb += [self.error.eq(1), self.error_cause.eq(1 << LOADER_CAUSES[cause])]

        pe_restart = Signal()       # the cycle after START: the encoder restarts its checks
        m.d.sync += pe_restart.eq(0)
        if enc is not None:
            m.d.comb += enc.restart.eq(pe_restart)
        settle = Signal(range(ENCODER_SETTLE + 1))
        drain_two = Signal()        # DRAIN discards two packets (a refused cross run)

        with m.FSM(name="load") as load_fsm:
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(x_free)
                accept_start()
            if enc is not None:
                with m.State("CHECK"):
                    # The encoder's verdict on its settings, before any word is taken: its
                    # input is ready (with an always-ready output) once the checks are done.
                    with m.If(enc.i_stream.ready):
                        with m.If(enc.error):
                            # Refused: the run's packets (two in a cross run) are discarded
                            # as they come, or until the next START if the host sends none.
                            load_error("BAD_POSENC")
                            m.d.sync += drain_two.eq(ld_set.cross)
                            m.next = "DRAIN"
                        with m.Else():
                            m.next = "LOAD"
                with m.State("SETTLE"):
                    # The last encoded words are still on their way into the buffer.
                    m.d.sync += settle.eq(settle - 1)
                    with m.If(settle == 1):
                        m.next = "WAIT"
            with m.State("LOAD"):
                m.d.comb += self.x_in.ready.eq(1)
                with m.If(ld_beat):
                    self._step_position(m, pos)
                    with m.If(self.x_in.payload.last & ~ld_final):
                        load_error("STREAM_SHORT")
                        m.next = "IDLE"
                    with m.Elif(ld_final & ~self.x_in.payload.last):
                        load_error("STREAM_LONG")
                        m.d.sync += drain_two.eq(0)
                        m.next = "DRAIN"
                    with m.Elif(ld_final & ld_set.cross & ~pos.kv):
                        m.d.sync += [pos.kv.eq(1), pos.i.eq(0), pos.w.eq(0),
                                     pos.rows.eq(ld_set.kvrows), pos.w_last.eq(XW == 1),
                                     pos.i_last.eq(ld_set.kvrows == 1)]
                    with m.Elif(ld_final):
                        if enc is not None:
                            m.d.sync += settle.eq(ENCODER_SETTLE)
                            m.next = "SETTLE"
                        else:
                            m.next = "WAIT"
            with m.State("DRAIN"):
                # A stream that ran long: discard words up to its last one. A new START ends
                # the draining and loads from the next word.
                m.d.comb += [self.x_in.ready.eq(~self.start.valid), self.start.ready.eq(x_free)]
                with m.If(ld_beat & self.x_in.payload.last):
                    m.d.sync += drain_two.eq(0)
                    with m.If(~drain_two):
                        m.next = "IDLE"
                accept_start()
            with m.State("WAIT"):
                m.d.comb += self.loaded.valid.eq(1)
                with m.If(self.loaded.ready):
                    m.d.sync += ld_bank.eq(~ld_bank)
                    m.next = "IDLE"
        m.d.comb += [ld_write.eq(self.x_in.valid & load_fsm.ongoing("LOAD")),
                     self.busy.eq(~load_fsm.ongoing("IDLE") & ~load_fsm.ongoing("DRAIN"))]
        return m

    def _position(self):
        """The loaded word's position, in registers (word of the row and whether it is the
        last, row and whether it is the last, row within its tile, buffer address
        ``(row // R) * XW + word``, the tile's base address), so the per-word decisions and
        the write address need no adder or multiply; ``kv``: the second sequence of a cross
        run."""
        g = self.geom
        addr = Signal(max(g.x_aw, g.kv_aw, 1))
        return SimpleNamespace(
            i=Signal(range(max(g.SEQ, g.KV) + 1)), w=Signal(range(g.XW + 1)),
            rows=Signal(g.lb), kv=Signal(), w_last=Signal(), i_last=Signal(),
            r=Signal(range(g.R)), addr=addr, base=Signal.like(addr))

    def _step_position(self, m, p):
        """The position after a word's beat."""
        R, XW = self.geom.R, self.geom.XW
        m.d.sync += [p.w.eq(p.w + 1), p.w_last.eq(p.w + 2 == XW), p.addr.eq(p.addr + 1)]
        with m.If(p.w_last):
            m.d.sync += [p.w.eq(0), p.i.eq(p.i + 1), p.w_last.eq(XW == 1),
                         p.i_last.eq(p.i + 2 == p.rows),
                         p.r.eq(Mux(p.r == R - 1, 0, p.r + 1)), p.addr.eq(p.base)]
            with m.If(p.r == R - 1):
                m.d.sync += [p.base.eq(p.base + XW), p.addr.eq(p.base + XW)]
            # After a sequence's last word the position restarts (for the KV sequence of a
            # cross run), whatever the checks of the caller decide: the address then does
            # not wait for them.
            with m.If(p.i_last):
                m.d.sync += [p.r.eq(0), p.addr.eq(0), p.base.eq(0)]

    def _copy_settings(self, m, ld_set, st):
        """The run settings that pass unchanged from START to the loaded sequence."""
        for n in ("q", "k", "v", "pv", "o"):
            for f in ("mult", "shift"):
                m.d.sync += ld_set[f"rq_{n}_{f}"].eq(st[f"rq_{n}_{f}"])
        if self.geom.cfg.channel_scales:
            m.d.sync += ld_set.channel_scales.eq(st.channel_scales)
        if self.geom.cfg.additive:
            m.d.sync += [ld_set.additive.eq(st.additive), ld_set.tanh_mult.eq(st.tanh_mult),
                         ld_set.tanh_shift.eq(st.tanh_shift)]

    def _buffer_writes(self, m, ld_write, pos, ld_set):
        """The X/KV buffer writes of the loaded words; returns the positional encoder (or
        None). Writes happen the cycle after the beat, from registers: one enable register
        per buffer, the address and the word (the buffers are spread over the die and their
        enables were the one-engine top's critical path, all route). Writes only in LOAD,
        where x_in.ready is 1: in DRAIN, ready depends on ``start``."""
        g = self.geom
        R, x_aw, kv_aw = g.R, g.x_aw, g.kv_aw
        ld_we_x = Signal(R)
        ld_we_kv = Signal(R)
        ld_wa = Signal(max(x_aw, kv_aw, 1) + 1)
        ld_wd = Signal(32)
        m.d.sync += [ld_we_x.eq(Cat(*[ld_write & ~pos.kv & (pos.r == r) for r in range(R)])),
                     ld_we_kv.eq(Cat(*[ld_write & pos.kv & (pos.r == r) for r in range(R)])),
                     ld_wd.eq(self.x_in.payload.data)]
        with m.If(pos.kv):
            m.d.sync += ld_wa.eq(Cat(pos.addr[:kv_aw], ld_set.bank))
        with m.Else():
            m.d.sync += ld_wa.eq(Cat(pos.addr[:x_aw], ld_set.bank))
        enc = self._encoder(m, ld_write) if g.cfg.pos_enc else None
        if enc is not None:
            # The encoded word leaves the encoder LATENCY cycles after its beat: its write
            # enables and address follow it through a delay line.
            m.submodules.write_delay = wdel = DelayLine(len(ld_we_x) + len(ld_we_kv) + len(ld_wa),
                                                        PositionalEncoder.LATENCY - 1)
            m.d.comb += wdel.value.eq(Cat(ld_we_x, ld_we_kv, ld_wa))
            we_x, we_kv, wa = (wdel.delayed[:R], wdel.delayed[R:2 * R], wdel.delayed[2 * R:])
            wd = enc.o_stream.payload.data
        else:
            we_x, we_kv, wa, wd = ld_we_x, ld_we_kv, ld_wa, ld_wd
        for r in range(R):
            m.d.comb += [self.x_write[r].addr.eq(wa), self.x_write[r].data.eq(wd),
                         self.x_write[r].en.eq(we_x[r])]
            if g.cfg.cross_attention:
                m.d.comb += [self.kv_write[r].addr.eq(wa), self.kv_write[r].data.eq(wd),
                             self.kv_write[r].en.eq(we_kv[r])]
        return enc

    def _encoder(self, m, ld_write):
        """The positional encoder on the words of the load (fed at their beats, always
        drained: its output is the buffer's write data)."""
        cfg = self.geom.cfg
        m.submodules.encoder = enc = PositionalEncoder(cfg.d_model, cfg.positions, cfg.pos_enc,
                                                       max_len=cfg.max_seq_len)
        m.d.comb += [enc.i_stream.valid.eq(ld_write),
                     enc.i_stream.payload.data.eq(self.x_in.payload.data),
                     enc.o_stream.ready.eq(1)]
        return enc
