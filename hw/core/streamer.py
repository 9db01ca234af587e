"""Output streamer: a finished sequence's output buffer onto ``y_out``."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out

from hw.blocks.register_slice import RegisterSlice
from hw.core.arith import divmod_const, element_of
from hw.core.geometry import CoreGeometry
from hw.core.layouts import WordStream

__all__ = ["OutputStreamer", "handoff_layout"]


def handoff_layout(geom: CoreGeometry) -> data.StructLayout:
    """A computed sequence handed to the streamer: its rows, the output buffer half it was
    written into, its START timestamp and its array-busy and softmax-stall counts."""
    return data.StructLayout({"seq": geom.lb, "bank": 1, "t0": 32, "busy": 32, "stall": 32})


class OutputStreamer(wiring.Component):
    """Streams one output buffer half, row by row, as 32-bit words of ``EPW`` activations (4
    int8 or 2 int16: element ``EPW a + k`` in bits ``[A (k + 1) - 1 : A k]``), ``last`` on the
    final word; then publishes the sequence's counters.

    Members
    -------
    handoff : ``In(stream.Signature(handoff_layout(geom)))``
        A finished sequence; taken when the previous one has left (``ready`` = not streaming).
    o_read : ``In(ReadPort.Signature)`` per engine
        Output buffer reads: column ``col`` of row ``i`` is lane ``(col % d_k) % C`` of word
        ``(i * G + h // E) * TN + (col % d_k) // C`` of engine ``h % E`` (``h = col // d_k``).
    y_out : ``Out(WordStream)``
        The result rows; leaves through a register slice (``valid``, ``data`` and ``last`` from
        flip-flops; ``ready`` reaches only the slice).
    now : ``In(32)``
        Cycle counter (CYCLES = the cycle of ``done`` - 1 - the START timestamp).
    active : ``Out(1)``
        A sequence is being streamed (from its handoff until its last word's handshake).
    done : ``Out(1)``
        Strobe the cycle after the last word's handshake (a register).
    cycles, busy_cycles, stall_cycles : ``Out(32)``
        That sequence's counts, from the cycle after ``done``.

    Throughput: ``P`` elements of one row per cycle (``P = gcd(EPW, C, d_k)``: a whole word's
    when that many adjacent columns always share a buffer word), so a bus word every
    ``EPW / P`` cycles. Latency: the
    first word reaches ``y_out`` 4 cycles after the handoff (address, block RAM, output
    register, slice).
    """

    def __init__(self, geom: CoreGeometry, o_sig: ReadPort.Signature):
        self.geom = geom
        super().__init__({
            "handoff": In(stream.Signature(handoff_layout(geom))),
            "o_read": In(o_sig).array(geom.E),
            "y_out": Out(WordStream),
            "now": In(32),
            "active": Out(1), "done": Out(1),
            "cycles": Out(32), "busy_cycles": Out(32), "stall_cycles": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        C, E, G, TN, d, dk, o_aw = g.C, g.E, g.G, g.TN, g.d, g.dk, g.o_aw
        P, A = g.out_elems, g.A
        K = g.EPW // P
        st_active = self.active
        st_seq = Signal(g.lb)
        st_bank = Signal()
        st_t0 = Signal(32)
        st_busy = Signal(32)
        st_stall = Signal(32)
        o_i = Signal(range(g.SEQ + 1))
        o_col = Signal(range(d + 1))
        os1_valid = Signal()
        os1_e = Signal(range(max(E, 2)))
        os1_c = Signal(range(max(C // P, 2)))
        os1_k = Signal(range(max(K, 2)))
        os1_last = Signal()
        o_rps = list(self.o_read)
        oh, och = divmod_const(o_col, dk)
        ohe = divmod_const(oh, E)[1]               # engine of the column
        ochcl = divmod_const(och, C)[1]             # lane within the word
        # os2: the block RAM words registered as they are (a DP16KD's clock-to-output plus the
        # route out of it was the routed one-engine top's critical path), and os1's fields;
        # os1 and os2 advance together.
        os2_valid = Signal()
        os2_e = Signal.like(os1_e)
        os2_c = Signal.like(os1_c)
        os2_k = Signal.like(os1_k)
        os2_last = Signal()

        # The read address and the "rows left" and "end of row" conditions are registers,
        # updated with o_i and o_col from their next values (the address arithmetic and
        # compares sat in front of the block RAM address pins and the streamer's enables).
        def o_word(i, col):
            h_, ch_ = divmod_const(col, dk)
            return ((i * G + divmod_const(h_, E)[0]) * TN + divmod_const(ch_, C)[0])[:o_aw]

        o_addr = Signal(o_aw)
        o_more = Signal()           # o_i < st_seq
        o_wrap = Signal(init=int(P == d))  # o_col + P == d
        # o_more is set only with st_active and cleared before it falls, so it alone says
        # whether a word is to be read (st_active, set at the handoff and cleared at the
        # output slice, stays out of the streamer's enables).
        o_issue = o_more
        o_out = os2_valid & (os2_k == K - 1)
        # y_out leaves through a register slice: the streamer's enables (about 200 flip-flops
        # and the output buffers' read enables, by both engines) follow the slice's registered
        # ready, not y_out.ready, which comes from outside the IP.
        m.submodules.y_slice = y_slice = RegisterSlice(WordStream)
        o_adv = ~os2_valid | (os2_k != K - 1) | y_slice.i_stream.ready
        for e in range(E):
            m.d.comb += [o_rps[e].addr.eq(Cat(o_addr, st_bank)),
                         o_rps[e].en.eq(o_adv)]
        os2_data = [Signal.like(o_rps[e].data, name=f"os2_data{e}", reset_less=True)
                    for e in range(E)]
        chunk = Signal(A * P)
        with m.Switch(os2_e):
            for e in range(E):
                with m.Case(e):
                    m.d.comb += chunk.eq(element_of(m, os2_data[e], os2_c, C // P, A * P))
        with m.If(o_adv):
            m.d.sync += [os2_valid.eq(os1_valid), os2_e.eq(os1_e), os2_c.eq(os1_c),
                         os2_k.eq(os1_k), os2_last.eq(os1_last)]
            m.d.sync += [os2_data[e].eq(o_rps[e].data) for e in range(E)]
            m.d.sync += os1_valid.eq(o_issue)
            with m.If(o_issue):
                m.d.sync += [os1_e.eq(ohe), os1_c.eq(divmod_const(ochcl, P)[0]),
                             os1_k.eq(divmod_const(divmod_const(o_col, P)[0], K)[1]),
                             os1_last.eq((o_i + 1 == st_seq) & o_wrap),
                             o_col.eq(o_col + P), o_wrap.eq(o_col + 2 * P == d),
                             o_addr.eq(o_word(o_i, o_col + P))]
                with m.If(o_wrap):
                    m.d.sync += [o_col.eq(0), o_i.eq(o_i + 1), o_wrap.eq(P == d),
                                 o_addr.eq(o_word(o_i + 1, 0)), o_more.eq(o_i + 1 < st_seq)]
        if K > 1:
            assemble = Signal(32 - A * P)
            with m.If(os2_valid & (os2_k != K - 1) & o_adv):
                with m.Switch(os2_k):
                    for k in range(K - 1):
                        with m.Case(k):
                            m.d.sync += assemble[A * P * k:A * P * (k + 1)].eq(chunk)
            word = Cat(assemble, chunk)
        else:
            word = chunk
        m.d.comb += [y_slice.i_stream.valid.eq(o_out), y_slice.i_stream.payload.data.eq(word),
                     y_slice.i_stream.payload.last.eq(os2_last)]
        wiring.connect(m, y_slice.o_stream, wiring.flipped(self.y_out))

        # The handoff: the sequence's settings and counts, and the read position from row 0.
        h = self.handoff.payload
        m.d.comb += self.handoff.ready.eq(~st_active)
        with m.If(self.handoff.valid & ~st_active):
            m.d.sync += [st_active.eq(1), st_seq.eq(h.seq), st_bank.eq(h.bank),
                         st_t0.eq(h.t0), st_busy.eq(h.busy), st_stall.eq(h.stall),
                         # (seq >= 1: the register block refuses SEQ_LEN 0)
                         o_more.eq(1)]

        stream_end = self.y_out.valid & self.y_out.ready & self.y_out.payload.last
        # done is a register, a cycle after the last word: as a combinational strobe it was
        # one LUT shared by the streamer and the register block's DONE, placed by the
        # register block, and y_out's handshake crossed the die through it into st_active.
        # The counters are loaded from done (their 96 enables were on y_out.ready): the cycle
        # after it.
        m.d.sync += self.done.eq(stream_end)
        with m.If(stream_end):
            m.d.sync += st_active.eq(0)
        # The read position returns to row 0 with done (reset and done leave it there), not
        # at the handoff: the handoff's take, from the sequencer's state across the die,
        # then reaches only the settings' enables, not the position's resets.
        with m.If(self.done):
            m.d.sync += [self.cycles.eq(self.now - 1 - st_t0),
                         self.busy_cycles.eq(st_busy), self.stall_cycles.eq(st_stall),
                         o_i.eq(0), o_col.eq(0), o_addr.eq(0), o_wrap.eq(P == d)]
        return m
