"""Streaming fixed-point softmax unit, bit-exact with :func:`golden.softmax.softmax_int`."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from .divider import ReciprocalDivider
from .exp2 import Exp2Unit

__all__ = ["SoftmaxUnit", "SoftmaxGeometry", "score_beat_layout", "prob_beat_layout"]


def score_beat_layout(cfg: AttentionConfig) -> data.StructLayout:
    """Payload of the ``scores`` stream: ``softmax_lanes`` signed scores of one query row."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(cfg.score_bits), cfg.softmax_lanes),
        "row": unsigned(cfg.seq_len_bits),
        "last": unsigned(1),
    })


def prob_beat_layout(cfg: AttentionConfig) -> data.StructLayout:
    """Payload of the ``probs`` stream: ``softmax_lanes`` UQ0.prob_bits probabilities."""
    return data.StructLayout({
        "data": data.ArrayLayout(unsigned(cfg.prob_bits), cfg.softmax_lanes),
        "row": unsigned(cfg.seq_len_bits),
        "last": unsigned(1),
    })


class SoftmaxGeometry:
    """Buffer sizes and stage latencies of :class:`SoftmaxUnit` for one configuration.

    A plain object (not an Elaboratable), so the cycle model (:mod:`hw.perf_softmax`) and the
    controller can read the figures without building hardware.
    """

    def __init__(self, cfg: AttentionConfig):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        self._cfg = cfg

    @property
    def max_beats(self) -> int:
        """Beats of the longest row, ``ceil(max_kv_len / lanes)``."""
        return -(-self._cfg.max_kv_len // self._cfg.softmax_lanes)

    @property
    def exp_latency(self) -> int:
        """Cycles from a score-ring read to the beat's E (read, diff register, Exp2Unit)."""
        return 2 + Exp2Unit.LATENCY

    @property
    def divider_latency(self) -> int:
        return ReciprocalDivider.latency_for(self._cfg.recip_bits)

    @property
    def queue_latency(self) -> int:
        """Cycles from a write into an empty SyncFIFOBuffered to its ``r_rdy``."""
        return 2

    @property
    def normalise_latency(self) -> int:
        """Cycles from an exp-ring read to the output register (read, register, product,
        round)."""
        return 4

    @property
    def latency_fixed(self) -> int:
        """First input beat to first output beat of a row, minus twice its beat count."""
        # reduce: queue write one cycle after the last beat, queue, load; exponentiate: last
        # read + exp + sum register; divider; queue, load; normalise. The two "- 1" are the
        # loads that happen in the cycle of the previous stage's last beat.
        return (1 + self.queue_latency + self.exp_latency + 1 + self.divider_latency
                + self.queue_latency + 1 + self.normalise_latency - 1)

    @property
    def score_ring_depth(self) -> int:
        """One row plus the beats that arrive while its max is handed over."""
        return self.max_beats + self.queue_latency + 6

    @property
    def exp_ring_depth(self) -> int:
        """One row plus the beats written while the row sum goes through the divider."""
        return (self.max_beats + self.exp_latency + self.divider_latency
                + self.queue_latency + 6)


class SoftmaxUnit(wiring.Component):
    """Row-wise softmax of attention scores, ``cfg.softmax_lanes`` scores per cycle.

    Computes exactly :func:`golden.softmax.softmax_int` (``prob_bits`` = B, ``recip_bits`` = R,
    ``exp_bits`` = W): row max, ``E = 2**-((max - S) * exp_mult * 2**-exp_shift)`` with the
    interpolated table (:class:`hw.exp2.Exp2Unit`), row sum, ``lead = floor(log2 sum)``,
    ``q = floor(2**(lead + R) / sum)`` (:class:`hw.divider.ReciprocalDivider`, pipelined) and
    ``P = min(round_shift(E * q, lead + R - B), 2**B - 1)``.

    Row format. Beat b of a row carries keys ``j = b*lanes .. b*lanes + lanes - 1``; the beat
    with ``last = 1`` ends the row. Key j *counts* iff all of

    - j < (beats sent) * lanes: the unit sees the row length only in whole beats, so the lanes
      of the last beat past the producer's N count unless the next two rules mask them
      (a producer sending N < kv_len keys with N not a multiple of lanes must pad them
      beyond the causal limit, or send N = kv_len);
    - j < ``kv_len``;
    - not ``causal`` or j <= ``row`` (the beat's ``row`` field, the query index);
    - the run-time settings are valid (``error`` low), and j < ``cfg.max_kv_len``.

    A key that does not count produces exactly 0 and takes no part in max or sum. A row with
    no counting key produces all zeros. Each input beat produces one output beat with the same
    ``row`` and ``last``.

    Invalid settings never hang the unit: ``error`` is high while ``exp_shift`` is 0 or 63,
    ``kv_len`` is 0 or above ``cfg.max_kv_len``, or ``causal`` is set on a configuration built
    without ``causal_mask``; every row is then processed as having no counting key (all-zero
    output, same beat structure). A row longer than ``ceil(max_kv_len / lanes)`` beats (a
    producer error) is cut there: its first ``max_kv_len`` keys are normalised as a row of their
    own and every further beat, up to the producer's ``last``, produces zeros.

    Architecture. Three stages work on three consecutive rows at once:

    - *reduce*: accepts beats, computes the key mask, writes scores to the score ring buffer
      (block RAM) and keeps the running max; at the end of the row it queues ``(max, beats)``;
    - *exponentiate*: re-reads the row, computes E per lane, writes E to the exp ring buffer
      and sums it; the row sum enters the pipelined divider;
    - *normalise*: with ``(q, lead)`` from the divider, re-reads E and outputs ``P``.

    The ring buffers hold ``max_beats + slack`` beats (``max_beats = ceil(max_kv_len /
    lanes)``), so while one row is normalised the next one is exponentiated and the one after
    it is reduced, for any mix of row lengths: with ``probs`` always ready, ``scores.ready``
    never drops and consecutive rows are accepted without a bubble.

    Timing (``probs`` always ready, ``scores`` always valid; L = beats of a row,
    :mod:`hw.perf_softmax` has the exact model, checked against simulation):

    - throughput: ``lanes`` scores per cycle, i.e. one row of L beats every L cycles, for any
      L >= 1 (the divider is pipelined, so even one-beat rows run at one row per cycle);
    - latency: the first output beat of a row appears ``2 L + latency_fixed`` cycles after its
      first input beat (:attr:`latency_fixed`); the row's last output beat ``L - 1`` later.

    Parameters
    ----------
    cfg : AttentionConfig

    Members
    -------
    scores : In(stream.Signature(score_beat_layout(cfg)))
        ``data``: ``lanes`` x signed(``score_bits``) scores; ``row``: query index i;
        ``last``: last beat of the row.
    probs : Out(stream.Signature(prob_beat_layout(cfg)))
        ``data``: ``lanes`` x unsigned(``prob_bits``) probabilities, UQ0.B; ``row``, ``last``
        copied from the corresponding input beat.
    exp_mult : In(unsigned(cfg.exp_mult_bits))
        Score-to-exponent multiplier, ``s_q * s_k * log2(e) / sqrt(d_k) * 2**(F + exp_shift)``.
    exp_shift : In(unsigned(6))
        1..62.
    causal : In(1)
        Mask keys j > row.
    kv_len : In(unsigned(cfg.seq_len_bits))
        Number of keys that count, 1..max_kv_len.
    error : Out(1)
        Invalid run-time settings (combinational from the four inputs above).

    All run-time inputs must be static while rows are in flight.
    """

    def __init__(self, cfg: AttentionConfig):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        self._cfg = cfg
        super().__init__({
            "scores": In(stream.Signature(score_beat_layout(cfg))),
            "probs": Out(stream.Signature(prob_beat_layout(cfg))),
            "exp_mult": In(unsigned(cfg.exp_mult_bits)),
            "exp_shift": In(unsigned(6)),
            "causal": In(1),
            "kv_len": In(unsigned(cfg.seq_len_bits)),
            "error": Out(1),
        })

    # ------------------------------------------------------------------ geometry and timing

    @property
    def cfg(self) -> AttentionConfig:
        return self._cfg

    @property
    def geometry(self) -> "SoftmaxGeometry":
        """Buffer sizes and stage latencies (also available without a unit)."""
        return SoftmaxGeometry(self._cfg)

    @property
    def latency_fixed(self) -> int:
        return self.geometry.latency_fixed

    # ------------------------------------------------------------------ hardware

    def elaborate(self, platform):
        cfg = self._cfg
        lanes = cfg.softmax_lanes
        geo = self.geometry
        max_beats = geo.max_beats
        B, R, W, S = cfg.prob_bits, cfg.recip_bits, cfg.exp_bits, cfg.sum_bits
        m = Module()

        score_entry = data.StructLayout({
            "data": data.ArrayLayout(signed(cfg.score_bits), lanes),
            "mask": unsigned(lanes),
            "row": unsigned(cfg.seq_len_bits),
            "last": unsigned(1),
        })
        exp_entry = data.StructLayout({
            "data": data.ArrayLayout(unsigned(W + 1), lanes),
            "row": unsigned(cfg.seq_len_bits),
            "last": unsigned(1),
        })
        beats_shape = unsigned(max(1, max_beats.bit_length()))
        lead_shape = unsigned((S - 1).bit_length())   # as ReciprocalDivider.o_lead
        s_depth, e_depth = geo.score_ring_depth, geo.exp_ring_depth

        # ---- run-time settings
        error = Signal()
        bad = ((self.exp_shift == 0) | (self.exp_shift == 63)
               | (self.kv_len == 0) | (self.kv_len > cfg.max_kv_len))
        if not cfg.causal_mask:
            bad = bad | self.causal
        m.d.comb += [error.eq(bad), self.error.eq(error)]

        # ---- buffers
        m.submodules.score_ring = score_ring = Memory(shape=score_entry, depth=s_depth, init=[])
        s_wr = score_ring.write_port()
        s_rd = score_ring.read_port(domain="sync")
        m.submodules.exp_ring = exp_ring = Memory(shape=exp_entry, depth=e_depth, init=[])
        e_wr = exp_ring.write_port()
        e_rd = exp_ring.read_port(domain="sync")
        # Row descriptors. Every queued row holds at least one ring slot, so a queue as deep as
        # its ring can never be full when written (no extra flow control needed).
        m.submodules.max_queue = max_queue = SyncFIFOBuffered(
            width=cfg.score_bits + beats_shape.width, depth=s_depth)
        m.submodules.recip_queue = recip_queue = SyncFIFOBuffered(
            width=R + 1 + lead_shape.width + beats_shape.width, depth=e_depth)

        s_level = Signal(range(s_depth + 1))   # score-ring slots written and not yet read
        e_level = Signal(range(e_depth + 1))   # exp-ring slots reserved and not yet read
        s_issue = Signal()                     # exponentiate stage reads a score beat
        e_issue = Signal()                     # normalise stage reads an exp beat

        # ================================================================ reduce
        # Input register r1 (mask and lane max computed on the way in), then the ring write.
        r1_valid = Signal()
        r1 = Signal(score_entry)
        r1_seg_end = Signal()
        r1_max = Signal(signed(cfg.score_bits))
        stall_in = Signal()
        m.d.comb += [stall_in.eq(r1_valid & (s_level == s_depth)),
                     self.scores.ready.eq(~stall_in)]

        beat = Signal(range(max_beats))           # beat index within the (cut) row
        key0 = Signal(range(max_beats * lanes))   # first key of this beat, beat * lanes
        overrun = Signal()                        # beats after a cut of an over-long row
        payload = self.scores.payload
        seg_end = Signal()
        m.d.comb += seg_end.eq(payload.last | (beat == max_beats - 1))

        mask = Signal(lanes)
        lowest = -(1 << (cfg.score_bits - 1))
        masked = [Signal(signed(cfg.score_bits), name=f"masked{l}") for l in range(lanes)]
        for l in range(lanes):
            j = key0 + l
            # kv_len <= max_kv_len unless error, so j < kv_len also bounds j by max_kv_len.
            counts = (j < self.kv_len) & (~self.causal | (j <= payload.row)) & ~error & ~overrun
            m.d.comb += mask[l].eq(counts)
            with m.If(counts):
                m.d.comb += masked[l].eq(payload.data[l])
            with m.Else():
                m.d.comb += masked[l].eq(lowest)
        beat_max = _tree(m, masked, _max, "lane_max")

        with m.If(~stall_in):
            m.d.sync += [r1_valid.eq(self.scores.valid),
                         r1.data.eq(payload.data), r1.mask.eq(mask),
                         r1.row.eq(payload.row), r1.last.eq(payload.last),
                         r1_seg_end.eq(seg_end), r1_max.eq(beat_max)]
            with m.If(self.scores.valid):
                with m.If(seg_end):
                    m.d.sync += [beat.eq(0), key0.eq(0), overrun.eq(~payload.last)]
                with m.Else():
                    m.d.sync += [beat.eq(beat + 1), key0.eq(key0 + lanes)]

        s_waddr = Signal(range(s_depth))
        run_max = Signal(signed(cfg.score_bits), init=lowest)
        run_beats = Signal(beats_shape)
        row_max = Signal(signed(cfg.score_bits))
        m.d.comb += row_max.eq(_max(run_max, r1_max))
        s_write = Signal()
        m.d.comb += [s_write.eq(r1_valid & ~stall_in),
                     s_wr.addr.eq(s_waddr), s_wr.data.eq(r1), s_wr.en.eq(s_write),
                     max_queue.w_data.eq(Cat(row_max, (run_beats + 1)[:beats_shape.width])),
                     max_queue.w_en.eq(s_write & r1_seg_end)]
        with m.If(s_write):
            m.d.sync += s_waddr.eq(_wrap_incr(s_waddr, s_depth))
            with m.If(r1_seg_end):
                m.d.sync += [run_max.eq(lowest), run_beats.eq(0)]
            with m.Else():
                m.d.sync += [run_max.eq(row_max), run_beats.eq(run_beats + 1)]
        m.d.sync += s_level.eq(s_level + s_write - s_issue)

        # ================================================================ exponentiate
        x_active = Signal()
        x_left = Signal(beats_shape)
        x_beats = Signal(beats_shape)
        x_max = Signal(signed(cfg.score_bits))
        x_raddr = Signal(range(s_depth))
        x_load = Signal()
        m.d.comb += [
            s_issue.eq(x_active & (e_level < e_depth)),
            x_load.eq(max_queue.r_rdy & (~x_active | (s_issue & (x_left == 1)))),
            max_queue.r_en.eq(x_load),
            s_rd.addr.eq(x_raddr), s_rd.en.eq(1),
        ]
        with m.If(s_issue):
            m.d.sync += [x_raddr.eq(_wrap_incr(x_raddr, s_depth)), x_left.eq(x_left - 1)]
            with m.If(x_left == 1):
                m.d.sync += x_active.eq(0)
        with m.If(x_load):
            m.d.sync += [x_active.eq(1),
                         x_max.eq(max_queue.r_data[:cfg.score_bits]),
                         x_left.eq(max_queue.r_data[cfg.score_bits:]),
                         x_beats.eq(max_queue.r_data[cfg.score_bits:])]

        # Side data of each beat in flight: valid, last beat of row, row beats, mask, row, last.
        side = data.StructLayout({
            "valid": unsigned(1), "row_end": unsigned(1), "beats": beats_shape,
            "mask": unsigned(lanes), "row": unsigned(cfg.seq_len_bits), "last": unsigned(1),
        })
        x1 = Signal(side)
        x1_max = Signal(signed(cfg.score_bits))
        m.d.sync += [x1.valid.eq(s_issue), x1.row_end.eq(x_left == 1), x1.beats.eq(x_beats),
                     x1_max.eq(x_max)]
        x2 = Signal(side)
        m.d.sync += [x2.eq(x1), x2.mask.eq(s_rd.data.mask), x2.row.eq(s_rd.data.row),
                     x2.last.eq(s_rd.data.last)]
        exps = []
        for l in range(lanes):
            unit = Exp2Unit(cfg)
            m.submodules[f"exp{l}"] = unit
            m.d.sync += unit.diff.eq(x1_max - s_rd.data.data[l])
            m.d.comb += [unit.exp_mult.eq(self.exp_mult), unit.exp_shift.eq(self.exp_shift)]
            exps.append(unit.exp)
        xe = x2
        for i in range(Exp2Unit.LATENCY):
            nxt = Signal(side, name=f"x_side{i}")
            m.d.sync += nxt.eq(xe)
            xe = nxt

        e_waddr = Signal(range(e_depth))
        e_beat = Signal(data.ArrayLayout(unsigned(W + 1), lanes))
        for l in range(lanes):
            m.d.comb += e_beat[l].eq(exps[l] & xe.mask[l].replicate(W + 1))
        m.d.comb += [e_wr.addr.eq(e_waddr), e_wr.en.eq(xe.valid),
                     e_wr.data.data.eq(e_beat), e_wr.data.row.eq(xe.row),
                     e_wr.data.last.eq(xe.last)]
        with m.If(xe.valid):
            m.d.sync += e_waddr.eq(_wrap_incr(e_waddr, e_depth))

        beat_sum = Signal(S)
        xs = Signal(side)
        m.d.sync += [beat_sum.eq(_tree(m, [e_beat[l] for l in range(lanes)],
                                       lambda a, b: a + b, "lane_sum")), xs.eq(xe)]
        acc = Signal(S)
        total = Signal(S)
        m.d.comb += total.eq(acc + beat_sum)
        with m.If(xs.valid):
            m.d.sync += acc.eq(total)
            with m.If(xs.row_end):
                m.d.sync += acc.eq(0)

        m.submodules.divider = divider = ReciprocalDivider(S, R, tag_width=beats_shape.width)
        m.d.comb += [divider.i_valid.eq(xs.valid & xs.row_end), divider.i_sum.eq(total),
                     divider.i_tag.eq(xs.beats),
                     recip_queue.w_en.eq(divider.o_valid),
                     recip_queue.w_data.eq(Cat(divider.o_recip, divider.o_lead, divider.o_tag))]

        # ================================================================ normalise
        stall_out = Signal()
        m.d.comb += stall_out.eq(self.probs.valid & ~self.probs.ready)
        n_active = Signal()
        n_left = Signal(beats_shape)
        n_recip = Signal(R + 1)
        n_lead = Signal(lead_shape)
        n_raddr = Signal(range(e_depth))
        n_load = Signal()
        m.d.comb += [
            e_issue.eq(n_active & ~stall_out),
            n_load.eq(recip_queue.r_rdy & ~stall_out & (~n_active | (e_issue & (n_left == 1)))),
            recip_queue.r_en.eq(n_load),
            e_rd.addr.eq(n_raddr), e_rd.en.eq(~stall_out),
        ]
        q_fields = recip_queue.r_data
        with m.If(e_issue):
            m.d.sync += [n_raddr.eq(_wrap_incr(n_raddr, e_depth)), n_left.eq(n_left - 1)]
            with m.If(n_left == 1):
                m.d.sync += n_active.eq(0)
        with m.If(n_load):
            m.d.sync += [n_active.eq(1),
                         n_recip.eq(q_fields[:R + 1]),
                         n_lead.eq(q_fields[R + 1:R + 1 + lead_shape.width]),
                         n_left.eq(q_fields[R + 1 + lead_shape.width:])]
        m.d.sync += e_level.eq(e_level + s_issue - e_issue)

        n1_valid, n1_recip, n1_lead = Signal(), Signal(R + 1), Signal(lead_shape)
        n2_valid, n2_lead = Signal(), Signal(lead_shape)
        n2_row, n2_last = Signal(cfg.seq_len_bits), Signal()
        n2_prod = [Signal(W + 1 + R + 1, name=f"prod{l}") for l in range(lanes)]
        out_valid = Signal()
        out = Signal(prob_beat_layout(cfg))
        # round_shift(x, lead + R - B) = ((x >> (lead + R - B - 1)) + 1) >> 1, and lead >= W
        # whenever the sum is non-zero: a constant shift and a small variable one.
        const_shift = W + R - B - 1
        var_bits = max(1, (S - 1 - W).bit_length())
        rounded = [Signal(len(n2_prod[l]) + 1, name=f"rounded{l}") for l in range(lanes)]
        for l in range(lanes):
            m.d.comb += rounded[l].eq(
                ((n2_prod[l] >> const_shift) >> (n2_lead - W)[:var_bits]) + 1)
        # The block RAM's output is registered once more before the multipliers: without it,
        # RAM clock-to-out plus the E * q product was the critical path on ECP5.
        n1b_valid, n1b_recip, n1b_lead = Signal(), Signal(R + 1), Signal(lead_shape)
        n1b = Signal(exp_entry)
        with m.If(~stall_out):
            m.d.sync += [n1_valid.eq(e_issue), n1_recip.eq(n_recip), n1_lead.eq(n_lead),
                         n1b_valid.eq(n1_valid), n1b_recip.eq(n1_recip),
                         n1b_lead.eq(n1_lead), n1b.eq(e_rd.data),
                         n2_valid.eq(n1b_valid), n2_lead.eq(n1b_lead),
                         n2_row.eq(n1b.row), n2_last.eq(n1b.last),
                         out_valid.eq(n2_valid), out.row.eq(n2_row), out.last.eq(n2_last)]
            for l in range(lanes):
                m.d.sync += n2_prod[l].eq(n1b.data[l] * n1b_recip)
                with m.If(rounded[l][1:] > (1 << B) - 1):
                    m.d.sync += out.data[l].eq((1 << B) - 1)
                with m.Else():
                    m.d.sync += out.data[l].eq(rounded[l][1:])
        m.d.comb += [self.probs.valid.eq(out_valid), self.probs.payload.eq(out)]
        return m


def _max(a, b):
    from amaranth.hdl import Mux
    return Mux(a > b, a, b)


def _wrap_incr(ptr, depth):
    """``ptr + 1`` modulo ``depth`` (ring buffers need not be a power of two deep)."""
    from amaranth.hdl import Mux
    return Mux(ptr == depth - 1, 0, ptr + 1)


def _tree(m, values, op, name):
    """Reduce ``values`` pairwise (log depth), combinationally."""
    level = 0
    while len(values) > 1:
        nxt = []
        for i in range(0, len(values) - 1, 2):
            v = op(values[i], values[i + 1])
            s = Signal(v.shape(), name=f"{name}_{level}_{i // 2}")
            m.d.comb += s.eq(v)
            nxt.append(s)
        if len(values) % 2:
            nxt.append(values[-1])
        values = nxt
        level += 1
    return values[0]
