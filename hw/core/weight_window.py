"""Weight-window writes into the engines' weight and bias buffers."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In

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
    heads' ``w`` vectors, ``d_k / 4`` words per head. Row ``n`` belongs to head
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
    wa_write : per engine, configurations with an additive scorer
        The scorer's ``w_write``: word ``g * d_k / 4 + a`` of the vectors, byte enables from
        ``strb``.

    Latency: a write reaches the buffers two cycles after its ``window.en`` cycle (a decode
    stage, then one register stage per engine by its buffers, loaded only for writes to that
    engine so synthesis cannot merge the copies: the window registers sit in the register
    block, often far from an engine's buffers). Throughput: one word per cycle.
    """

    def __init__(self, geom: CoreGeometry, w_sig: WritePort.Signature,
                 b_sig: WritePort.Signature, wa_sig: wiring.Signature | None = None):
        self.geom = geom
        ports = {
            "window": In(WindowWriteSignature(geom.window_addr_bits)),
            "w_write": In(w_sig).array(geom.E),
            "b_write": In(b_sig).array(geom.E),
        }
        if wa_sig is not None:
            ports["wa_write"] = In(wa_sig).array(geom.E)
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
        ba = win.addr - 4 * g.matrix_words
        bsel, bn = divmod_const(ba, d)
        bh, bch = divmod_const(bn, dk)
        bhg, bhe = divmod_const(bh, E)
        btn, bc = divmod_const(bch, C)
        wd_w_addr = Signal(range(4 * G * TN * D4), reset_less=True)
        wd_b_addr = Signal(range(4 * G * TN), reset_less=True)
        # (at least one bit each, so that no zero-width signal reaches the Verilog)
        wd_w_lane = Signal(range(max(C, 2)), reset_less=True)
        wd_b_lane = Signal.like(wd_w_lane)
        wd_w_engine = Signal(range(max(E, 2)), reset_less=True)
        wd_b_engine = Signal.like(wd_w_engine)
        wd_data, wd_strb = Signal(32, reset_less=True), Signal(4, reset_less=True)
        wd_w_en, wd_b_en = Signal(), Signal()    # a weight / a (whole-word) bias write
        w_is_bias = win.addr >= 4 * g.matrix_words
        if g.wa_words:
            w_is_bias = w_is_bias & (win.addr < g.wa_base)
            self._wa_writes(m, win)
        m.d.sync += [
            wd_w_addr.eq((((wsel * G + hg) * TN + tn) * D4) + kw), wd_w_lane.eq(c),
            wd_w_engine.eq(he),
            wd_b_addr.eq((bsel * G + bhg) * TN + btn), wd_b_lane.eq(bc), wd_b_engine.eq(bhe),
            wd_data.eq(win.data), wd_strb.eq(win.strb),
            wd_w_en.eq(win.en & (win.addr < 4 * g.matrix_words)),
            wd_b_en.eq(win.en & w_is_bias & (win.strb == 0xF)),
        ]
        for e in range(E):
            wp, bp = self.w_write[e], self.b_write[e]
            ew_addr = Signal.like(wd_w_addr, name=f"ww{e}_addr")
            ew_data = Signal.like(wd_data, name=f"ww{e}_data")
            ew_en = Signal(4 * C, name=f"ww{e}_en")         # byte enables, lane c holds 4
            eb_addr = Signal.like(wd_b_addr, name=f"wb{e}_addr")
            eb_data = Signal(bias_bits, name=f"wb{e}_data", reset_less=True)
            eb_en = Signal(C, name=f"wb{e}_en")
            w_here = wd_w_en & (wd_w_engine == e)
            b_here = wd_b_en & (wd_b_engine == e)
            with m.If(w_here):
                m.d.sync += [ew_addr.eq(wd_w_addr), ew_data.eq(wd_data)]
            with m.If(b_here):
                m.d.sync += [eb_addr.eq(wd_b_addr), eb_data.eq(wd_data[:bias_bits])]
            # Word layout: lane c holds 4 bytes (kk%4 = 0..3) of column c.
            m.d.sync += [
                ew_en.eq(Cat(*[Mux(w_here & (wd_w_lane == lane), wd_strb, 0)
                               for lane in range(C)])),
                eb_en.eq(Cat(*[b_here & (wd_b_lane == lane) for lane in range(C)])),
            ]
            m.d.comb += [
                wp.addr.eq(ew_addr), wp.data.eq(Cat(*[ew_data for _ in range(C)])),
                wp.en.eq(ew_en),
                bp.addr.eq(eb_addr), bp.data.eq(Cat(*[eb_data for _ in range(C)])),
                bp.en.eq(eb_en),
            ]
        return m

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
                     d_strb.eq(win.strb), d_en.eq(win.en & (win.addr >= g.wa_base))]
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
