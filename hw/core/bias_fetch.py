"""Bias fetch: one engine's bias rows, one beat per output tile."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out

from hw.blocks.matmul import bias_beat_layout
from hw.core.geometry import CoreGeometry
from hw.core.jobs import job_layout

__all__ = ["BiasFetch"]


class BiasFetch(wiring.Component):
    """Reads the bias of the job's weight matrix and head group, one beat of ``C`` biases per
    output tile (row tiles outer, column tiles inner), for a job with ``bias`` set.

    One bias fetch per engine, each from its own bias buffer and advanced by its own engine
    only: a shared fetch forked to both engines had its advance, a function of both readies
    from the two ends of the die, on the routed top's worst paths. The engines run in
    lock-step on the shared operand fetch, so the fetches stay in step too.

    Members
    -------
    job : ``In(stream.Signature(job_layout(geom)))``
        ``ready`` while the fetch neither fetches nor holds a beat.
    b_read : ``In(ReadPort.Signature)``
        The bias buffer: word ``(w * G + lh) * TN + tn`` holds biases of columns
        ``tn * C .. tn * C + C - 1``.
    r_read : ``In(ReadPort.Signature)``, with ``channel_scales``
        The scale buffer, read at the bias buffer's address: lane ``c`` holds the multiplier
        and the shift minus one of column ``c``.
    bias : ``Out(stream.Signature(bias_beat_layout(cfg, C)))``
        To the engine: the biases, with ``channel_scales`` also the columns' scales.
    flush : ``In(1)``
        Drop the job (the sequence is abandoned).

    Throughput: one beat per two cycles. The fetch advances on the engine's handshake
    registered, not on its ready (that route and the enables did not fit one cycle): the beat
    is withdrawn in the cycle after its handshake, while the next one is read. The engine
    takes one per tile, at least ``cfg.min_tile_steps`` cycles apart. Read address, last-tile and
    last-row flags are counted in registers.
    """

    def __init__(self, geom: CoreGeometry, b_sig: ReadPort.Signature,
                 r_sig: ReadPort.Signature | None = None):
        self.geom = geom
        ports = {
            "job": In(stream.Signature(job_layout(geom))),
            "b_read": In(b_sig),
            "bias": Out(stream.Signature(bias_beat_layout(geom.cfg, geom.C))),
            "flush": In(1),
        }
        if geom.cfg.channel_scales:
            ports["r_read"] = In(r_sig)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        R, C, G, TN = g.R, g.C, g.G, g.TN
        bias_bits = g.cfg.bias_bits
        job, bias = self.job, self.bias
        cur = Signal.like(job.payload)         # the job being run
        active = Signal()
        row_end = Signal(range(max(g.SEQ, g.KV) + 2 * R + 1), init=R)   # (row + 1) * R
        tn = Signal(range(max(TN, g.TNk) + 1))
        # The read address (w * G + lh) * TN + tn; base is the tile row's first address.
        base = Signal(range(4 * G * TN))
        addr = Signal.like(base)
        s1_valid = Signal()
        last_tn = Signal()      # tn * C + C >= n
        last_row = Signal()     # row_end >= m
        taken = Signal()        # the beat was taken last cycle
        m.d.sync += taken.eq(bias.valid & bias.ready)
        adv = ~s1_valid | taken
        rp = self.b_read
        m.d.comb += [rp.addr.eq(addr), rp.en.eq(adv), bias.valid.eq(s1_valid & ~taken),
                     job.ready.eq(~(active | (s1_valid & ~taken)))]
        biases = bias.payload
        if g.cfg.channel_scales:
            biases = bias.payload.bias
            sp, lane, mb = self.r_read, g.scale_lane_bits, g.cfg.requant_mult_bits
            m.d.comb += [sp.addr.eq(addr), sp.en.eq(adv)]
            for c in range(C):
                word = sp.data[lane * c:lane * (c + 1)]
                m.d.comb += [bias.payload.mult[c].eq(word[:mb]),
                             bias.payload.shift_m1[c].eq(word[mb:])]
        for c in range(C):
            m.d.comb += biases[c].eq(rp.data[bias_bits * c:bias_bits * (c + 1)].as_signed())
        with m.If(adv):
            m.d.sync += s1_valid.eq(active)
            with m.If(active):
                m.d.sync += [tn.eq(tn + 1), addr.eq(addr + 1),
                             last_tn.eq(tn * C + 2 * C >= cur.n)]
                with m.If(last_tn):
                    m.d.sync += [tn.eq(0), addr.eq(base), last_tn.eq(C >= cur.n),
                                 row_end.eq(row_end + R),
                                 last_row.eq(row_end + R >= cur.m)]
                    with m.If(last_row):
                        m.d.sync += active.eq(0)
        with m.If(job.valid):
            p = job.payload
            first = (p.w * G + p.lh) * TN
            m.d.sync += [cur.eq(p), active.eq(p.bias), row_end.eq(R), tn.eq(0),
                         base.eq(first), addr.eq(first),
                         last_tn.eq(C >= p.n), last_row.eq(R >= p.m)]
        with m.If(self.flush):
            m.d.sync += [active.eq(0), s1_valid.eq(0), taken.eq(0)]
        return m
