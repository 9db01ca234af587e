"""Weight-window writes into the engines' weight and bias buffers."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In

from golden.config import SCALE_SHIFT_LSB
from hw.bus.settings import WindowWriteSignature
from hw.core.arith import divmod_const
from hw.core.geometry import CoreGeometry

__all__ = ["WeightWindowWriter"]


class WeightWindowWriter(wiring.Component):
    """Decodes weight-window word writes into the weight and bias buffers of the engines.

    Window layout (word addresses, see :mod:`hw.bus.regmap`): 4 matrices ``Wq, Wk, Wv, Wo`` of
    ``d*d/4`` words, torch ``(out, in)`` layout (word ``a`` of a matrix holds elements
    ``4a..4a+3`` of row ``n = 4a // d``), then 4 bias vectors of ``d`` words (a bias word is
    written whole, ``strb == 0xF``; others are ignored), then with additive scoring the
    heads' ``w`` vectors, ``d_k / 4`` words per head, then with ``channel_scales`` the scale
    table: 4 vectors (Q, K, V, O) of ``d`` words, the multiplier in bits
    ``[requant_mult_bits - 1:0]`` and the shift (1..62) in ``[29:24]``, written whole like the
    biases (the register block refuses a word with fields out of range). Row ``n`` belongs to head
    ``h = n // d_k``, stored by engine ``h % E`` at head group ``h // E``.

    Members
    -------
    window : ``In(WindowWriteSignature(window_addr_bits))``
        Word writes from the register block.
    w_write : ``In(WritePort.Signature)`` per engine
        Weight buffer writes: lane ``c`` (32 bits) of word ``((matrix * G + g) * TN + tn) * D4
        + kw`` holds bytes ``4kw..4kw+3`` of column ``tn * C + c``; byte enables from ``strb``.
    b_write : ``In(WritePort.Signature)`` per engine
        Bias buffer writes: lane ``c`` of word ``(vector * G + g) * TN + tn``.
    r_write : ``In(WritePort.Signature)`` per engine, with ``channel_scales``
        Scale buffer writes, addressed as the biases: lane ``c`` holds the multiplier and,
        above it, the shift minus one.
    wa_write : per engine, configurations with an additive scorer
        The scorer's ``w_write``: word ``g * d_k / 4 + a`` of the vectors, byte enables from
        ``strb``.

    Latency: a write reaches the buffers two cycles after its ``window.en`` cycle (a decode
    stage, then one register stage per engine by its buffers, loaded only for writes to that
    engine so synthesis cannot merge the copies: the window registers sit in the register
    block, often far from an engine's buffers). Throughput: one word per cycle.
    """

    def __init__(self, geom: CoreGeometry, w_sig: WritePort.Signature,
                 b_sig: WritePort.Signature, wa_sig: wiring.Signature | None = None,
                 r_sig: WritePort.Signature | None = None):
        self.geom = geom
        ports = {
            "window": In(WindowWriteSignature(geom.window_addr_bits)),
            "w_write": In(w_sig).array(geom.E),
            "b_write": In(b_sig).array(geom.E),
        }
        if wa_sig is not None:
            ports["wa_write"] = In(wa_sig).array(geom.E)
        if r_sig is not None:
            ports["r_write"] = In(r_sig).array(geom.E)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        bias_bits = g.cfg.bias_bits
        C, E, G, TN, D4, d, dk = g.C, g.E, g.G, g.TN, g.D4, g.d, g.dk
        win = self.window

        wsel, mw = divmod_const(win.addr, g.matrix_words)
        n, kw = divmod_const(mw, D4)
        h, ch = divmod_const(n, dk)
        tn, c = divmod_const(ch, C)
        hg, he = divmod_const(h, E)
        wd_w_addr = Signal(range(4 * G * TN * D4), reset_less=True)
        # (at least one bit each, so that no zero-width signal reaches the Verilog)
        wd_w_lane = Signal(range(max(C, 2)), reset_less=True)
        wd_w_engine = Signal(range(max(E, 2)), reset_less=True)
        wd_data, wd_strb = Signal(32, reset_less=True), Signal(4, reset_less=True)
        wd_w_en = Signal()    # a weight write
        bias_end = g.wa_base
        if g.wa_words:
            self._wa_writes(m, win)
        m.d.sync += [
            wd_w_addr.eq((((wsel * G + hg) * TN + tn) * D4) + kw), wd_w_lane.eq(c),
            wd_w_engine.eq(he), wd_data.eq(win.data), wd_strb.eq(win.strb),
            wd_w_en.eq(win.en & (win.addr < 4 * g.matrix_words)),
        ]
        self._vector_writes(m, win, 4 * g.matrix_words, bias_end, self.b_write, "wb",
                            lambda word: word[:bias_bits])
        if g.scale_words:
            mult_bits = g.cfg.requant_mult_bits
            self._vector_writes(m, win, g.scale_base, g.scale_base + g.scale_words,
                                self.r_write, "wr",
                                lambda word: Cat(word[:mult_bits],
                                                 (word[SCALE_SHIFT_LSB:SCALE_SHIFT_LSB + 6]
                                                  - 1)[:6]))
        for e in range(E):
            wp = self.w_write[e]
            ew_addr = Signal.like(wd_w_addr, name=f"ww{e}_addr")
            ew_data = Signal.like(wd_data, name=f"ww{e}_data")
            ew_en = Signal(4 * C, name=f"ww{e}_en")         # byte enables, lane c holds 4
            w_here = wd_w_en & (wd_w_engine == e)
            with m.If(w_here):
                m.d.sync += [ew_addr.eq(wd_w_addr), ew_data.eq(wd_data)]
            # Word layout: lane c holds 4 bytes (kk%4 = 0..3) of column c.
            m.d.sync += ew_en.eq(Cat(*[Mux(w_here & (wd_w_lane == lane), wd_strb, 0)
                                       for lane in range(C)]))
            m.d.comb += [
                wp.addr.eq(ew_addr), wp.data.eq(Cat(*[ew_data for _ in range(C)])),
                wp.en.eq(ew_en),
            ]
        return m

    def _vector_writes(self, m, win, base, end, ports, name, lane_value):
        """Whole-word writes of four per-channel vectors of ``d`` words at ``base..end - 1``
        (the biases, the scale table) into lane ``c`` of word ``(vector * G + g) * TN + tn``
        of the engine of the channel's head; ``lane_value`` maps the bus word to a lane. The
        same two register stages as the weights."""
        g = self.geom
        C, E, G, TN, d, dk = g.C, g.E, g.G, g.TN, g.d, g.dk
        vsel, vn = divmod_const(win.addr - base, d)
        vh, vch = divmod_const(vn, dk)
        vhg, vhe = divmod_const(vh, E)
        vtn, vc = divmod_const(vch, C)
        d_addr = Signal(range(4 * G * TN), reset_less=True)
        d_lane = Signal(range(max(C, 2)), reset_less=True)
        d_engine = Signal(range(max(E, 2)), reset_less=True)
        d_data = Signal(32, reset_less=True)
        d_en = Signal()
        m.d.sync += [d_addr.eq((vsel * G + vhg) * TN + vtn), d_lane.eq(vc), d_engine.eq(vhe),
                     d_data.eq(win.data),
                     d_en.eq(win.en & (win.addr >= base) & (win.addr < end)
                             & (win.strb == 0xF))]
        for e in range(E):
            port = ports[e]
            lane = lane_value(d_data)
            e_addr = Signal.like(d_addr, name=f"{name}{e}_addr")
            e_data = Signal(len(lane), name=f"{name}{e}_data", reset_less=True)
            e_en = Signal(C, name=f"{name}{e}_en")
            here = d_en & (d_engine == e)
            with m.If(here):
                m.d.sync += [e_addr.eq(d_addr), e_data.eq(lane)]
            m.d.sync += e_en.eq(Cat(*[here & (d_lane == c) for c in range(C)]))
            m.d.comb += [port.addr.eq(e_addr), port.data.eq(Cat(*[e_data for _ in range(C)])),
                         port.en.eq(e_en)]

    def _wa_writes(self, m, win):
        """The w vectors: the same two register stages, to the engine of the word's head."""
        g = self.geom
        E, hw = g.E, g.dk // 4
        # (the offset's low bits: a table-sized division; other addresses are not enabled)
        h, a = divmod_const((win.addr - g.wa_base)[:max(1, (g.wa_words - 1).bit_length())], hw)
        hg, he = divmod_const(h, E)
        d_addr = Signal(range(max(2, g.G * hw)), reset_less=True)
        d_engine = Signal(range(max(E, 2)), reset_less=True)
        d_data, d_strb = Signal(32, reset_less=True), Signal(4, reset_less=True)
        d_en = Signal()
        m.d.sync += [d_addr.eq(hg * hw + a), d_engine.eq(he), d_data.eq(win.data),
                     d_strb.eq(win.strb),
                     d_en.eq(win.en & (win.addr >= g.wa_base)
                             & (win.addr < g.wa_base + g.wa_words))]
        for e in range(E):
            wp = self.wa_write[e]
            here = d_en & (d_engine == e)
            e_addr = Signal.like(d_addr, name=f"wa{e}_addr")
            e_data = Signal.like(d_data, name=f"wa{e}_data")
            e_en = Signal(4, name=f"wa{e}_en")
            with m.If(here):
                m.d.sync += [e_addr.eq(d_addr), e_data.eq(d_data)]
            m.d.sync += e_en.eq(Mux(here, d_strb, 0))
            m.d.comb += [wp.en.eq(e_en), wp.addr.eq(e_addr), wp.data.eq(e_data)]
