"""Streaming fixed-point softmax unit, bit-exact with :func:`golden.softmax.softmax_int`."""

from __future__ import annotations

from typing import NamedTuple

from amaranth.hdl import Cat, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from hw.blocks.divider import ReciprocalDivider
from hw.blocks.delay import DelayLine
from hw.blocks.dsp import WideMultiplier
from hw.blocks.exp2 import Exp2Unit
from hw.blocks.queue import StreamQueue

__all__ = ["SoftmaxUnit", "SoftmaxGeometry", "score_beat_layout", "prob_beat_layout",
           "settings_ports", "settings_error"]


def settings_ports(cfg: AttentionConfig) -> dict:
    """The run-time settings of a softmax unit (static while rows are in flight) and its
    ``error`` output, as component members."""
    return {
        "exp_mult": In(unsigned(cfg.exp_mult_bits)),
        "exp_shift": In(unsigned(6)),
        "causal": In(1),
        "kv_len": In(unsigned(cfg.seq_len_bits)),
        "error": Out(1),
    }


def settings_error(cfg: AttentionConfig, unit):
    """Whether ``unit``'s settings are invalid: ``exp_shift`` 0 or 63, ``kv_len`` 0 or above
    ``max_kv_len``, or ``causal`` on a configuration built without the causal mask."""
    bad = ((unit.exp_shift == 0) | (unit.exp_shift == 63)
           | (unit.kv_len == 0) | (unit.kv_len > cfg.max_kv_len))
    if not cfg.causal_mask:
        bad = bad | unit.causal
    return bad


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

    A plain object (not an Elaboratable), so the cycle model (:mod:`hw.perf.softmax`) and the
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
    def reduce_latency(self) -> int:
        """Cycles from a row's last accepted input beat to the cycle its (max, beats)
        descriptor is written into the max queue: input register, mask and lane-max register
        (with the score-ring write), row-max register."""
        return 3

    @property
    def exp_latency(self) -> int:
        """Cycles from a score-ring read to the beat's E (read, read-data register, diff
        register, Exp2Unit)."""
        return 3 + Exp2Unit.LATENCY

    @property
    def divider_latency(self) -> int:
        return ReciprocalDivider.latency_for(self._cfg.recip_bits)

    @property
    def queue_latency(self) -> int:
        """Cycles from a write into an empty row-descriptor queue to its ``r_rdy``."""
        return 2

    @property
    def normalise_latency(self) -> int:
        """Cycles from an exp-ring read to the output register (read, read-data register,
        E * q product (:class:`hw.blocks.dsp.WideMultiplier`: 3 cycles when E and q fit one
        18 x 18 block, else 4), variable shift, increment and saturation flag, output)."""
        cfg = self._cfg
        return 5 + WideMultiplier.latency_for(unsigned(cfg.exp_bits + 1),
                                              unsigned(cfg.recip_bits + 1))

    @property
    def latency_fixed(self) -> int:
        """First input beat to first output beat of a row, minus twice its beat count."""
        # reduce: queue write reduce_latency cycles after the last beat is accepted, queue,
        # load; exponentiate: last read + exp + sum register; divider; queue, load; normalise.
        # The "- 1" is the load that happens in the cycle of the previous stage's last beat.
        return (self.reduce_latency + self.queue_latency + self.exp_latency + 1
                + self.divider_latency + self.queue_latency + 1 + self.normalise_latency - 1)

    @property
    def score_ring_depth(self) -> int:
        """One row plus the beats that arrive while its max is handed over."""
        return self.max_beats + self.reduce_latency + self.queue_latency + 5

    @property
    def exp_ring_depth(self) -> int:
        """One row plus the beats written while the row sum goes through the divider."""
        return (self.max_beats + self.exp_latency + self.divider_latency
                + self.queue_latency + 6)


class SoftmaxUnit(wiring.Component):
    """Row-wise softmax of attention scores, ``cfg.softmax_lanes`` scores per cycle.

    Computes exactly :func:`golden.softmax.softmax_int` (``prob_bits`` = B, ``recip_bits`` = R,
    ``exp_bits`` = W): row max, ``E = 2**-((max - S) * exp_mult * 2**-exp_shift)`` with the
    interpolated table (:class:`hw.blocks.exp2.Exp2Unit`), row sum, ``lead = floor(log2 sum)``,
    ``q = floor(2**(lead + R) / sum)`` (:class:`hw.blocks.divider.ReciprocalDivider`, pipelined) and
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
    :mod:`hw.perf.softmax` has the exact model, checked against simulation):

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
            **settings_ports(cfg),
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
        m = Module()
        shapes = self._shapes()

        # ---- run-time settings
        error = Signal()
        m.d.comb += [error.eq(settings_error(cfg, self)), self.error.eq(error)]

        bufs = self._buffers(m, shapes)
        s_depth, e_depth = shapes.s_depth, shapes.e_depth

        s_level = Signal(range(s_depth + 1))   # score-ring slots written and not yet read
        e_level = Signal(range(e_depth + 1))   # exp-ring slots reserved and not yet read
        s_issue = Signal()                     # exponentiate stage reads a score beat
        e_issue = Signal()                     # normalise stage reads an exp beat

        red = self._reduce_input(m, shapes, error)
        self._reduce_write(m, shapes, bufs, red, s_level, s_issue)
        x_issue = self._exp_issue(m, shapes, bufs, s_issue)
        side, xe, e_beat = self._exponentiate(m, shapes, bufs, s_issue, x_issue)
        self._row_sum(m, shapes, bufs, side, xe, e_beat)
        n_issue = self._normalise_issue(m, shapes, bufs, s_issue, e_issue, e_level,
                                        x_issue.e_room)
        self._normalise_output(m, shapes, bufs, e_issue, n_issue)
        return m

    def _shapes(self) -> "_Shapes":
        """Ring-entry layouts, descriptor field shapes and ring depths (no hardware).

        Returns a :class:`_Shapes`."""
        cfg = self._cfg
        lanes = cfg.softmax_lanes
        geo = self.geometry
        max_beats = geo.max_beats
        W, S = cfg.exp_bits, cfg.sum_bits

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
        return _Shapes(score_entry, exp_entry, beats_shape, lead_shape, s_depth, e_depth)

    def _buffers(self, m, shapes: "_Shapes") -> "_Buffers":
        """Add the score and exp ring buffers (block RAM) and the two row-descriptor queues
        ``(max, beats)`` and ``(q, lead, beats)`` to ``m``.

        Returns a :class:`_Buffers` with the rings' ports and the queues."""
        cfg = self._cfg
        R = cfg.recip_bits
        score_entry, exp_entry = shapes.score_entry, shapes.exp_entry
        beats_shape, lead_shape = shapes.beats_shape, shapes.lead_shape
        s_depth, e_depth = shapes.s_depth, shapes.e_depth

        # ---- buffers
        # no_rw_check: a ring slot is read only after its row is written (its descriptor is
        # queued after the row's last write) and written only after its last read (the level
        # counts it until then), so a read that meets a write to its address is an idle read
        # whose data is never used: synthesis need not emulate read-first collisions
        # (hw/flow/synth.py, declare_no_rw_collisions), and the read data register goes into the
        # block RAM's output register.
        ring = {"no_rw_check": 1}
        m.submodules.score_ring = score_ring = Memory(shape=score_entry, depth=s_depth, init=[],
                                                      attrs=ring)
        s_wr = score_ring.write_port()
        s_rd = score_ring.read_port(domain="sync")
        m.submodules.exp_ring = exp_ring = Memory(shape=exp_entry, depth=e_depth, init=[],
                                                  attrs=ring)
        e_wr = exp_ring.write_port()
        e_rd = exp_ring.read_port(domain="sync")
        # Row descriptors. Every queued row holds at least one ring slot, so a queue as deep as
        # its ring can never be full when written (no extra flow control needed).
        m.submodules.max_queue = max_queue = StreamQueue(
            cfg.score_bits + beats_shape.width, s_depth, storage="distributed",
            checked=False)
        m.submodules.recip_queue = recip_queue = StreamQueue(
            R + 1 + lead_shape.width + beats_shape.width, e_depth, storage="distributed",
            checked=False)
        return _Buffers(s_wr, s_rd, e_wr, e_rd, max_queue, recip_queue)

    def _reduce_input(self, m, shapes: "_Shapes", error) -> "_ReduceRegs":
        """Reduce stage, first half: accept ``scores`` beats, compute the key mask and the
        masked lane max (registers r0 and r1), count beats and cut over-long rows.

        ``stall_in`` (driven by :meth:`_reduce_write`) holds every register here. Returns a
        :class:`_ReduceRegs` with r0/r1 and the stall flag."""
        cfg = self._cfg
        lanes = cfg.softmax_lanes
        max_beats = self.geometry.max_beats
        score_entry = shapes.score_entry

        # ================================================================ reduce
        # Input register r0 (with the key mask), register r1 (masked lane max), then the ring
        # write. Both registers hold while the score ring is full.
        r0_valid, r1_valid = Signal(), Signal()
        r0, r1 = Signal(score_entry), Signal(score_entry)
        r0_seg_end, r1_seg_end = Signal(), Signal()
        r1_max = Signal(cfg.score_bits)             # max key of the beat (see below)
        # stall_in: the score ring is full and r1 holds a beat. A register (computed a cycle
        # ahead, below), as it is scores.ready and enables every reduce-stage register.
        stall_in = Signal()
        m.d.comb += self.scores.ready.eq(~stall_in)

        beat = Signal(range(max_beats))           # beat index within the (cut) row
        # key index of each lane of this beat, beat * lanes + l
        keys = [Signal(range(max_beats * lanes), init=l, name=f"key{l}") for l in range(lanes)]
        overrun = Signal()                        # beats after a cut of an over-long row
        payload = self.scores.payload
        seg_end = Signal()
        m.d.comb += seg_end.eq(payload.last | (beat == max_beats - 1))

        mask = Signal(lanes)
        for l in range(lanes):
            # kv_len <= max_kv_len unless error, so j < kv_len also bounds j by max_kv_len.
            m.d.comb += mask[l].eq((keys[l] < self.kv_len)
                                   & (~self.causal | (keys[l] <= payload.row))
                                   & ~error & ~overrun)

        # Lane max of the counting keys. The comparisons work on "keys": the scores with their
        # sign bit flipped, which order as unsigned numbers exactly as the scores do as signed
        # ones, so each comparison is one carry chain straight from flip-flops with no sign
        # fix-up after it; the masks only steer the selection. The lowest key is 0.
        sign = 1 << (cfg.score_bits - 1)
        r0_key = [Signal(cfg.score_bits, name=f"r0_key{l}") for l in range(lanes)]

        def masked_max(x, y):
            (mx, vx), (my, vy) = x, y
            return mx | my, Mux(mx & (~my | (vx > vy)), vx, vy)

        beat_any, beat_top = _tree(m, [(r0.mask[l], r0_key[l]) for l in range(lanes)],
                                   masked_max, "lane_max")

        with m.If(~stall_in):
            m.d.sync += [r0_valid.eq(self.scores.valid),
                         r0.data.eq(payload.data), r0.mask.eq(mask),
                         *(r0_key[l].eq(payload.data[l].as_unsigned() ^ sign)
                           for l in range(lanes)),
                         r0.row.eq(payload.row), r0.last.eq(payload.last),
                         r0_seg_end.eq(seg_end),
                         r1_valid.eq(r0_valid), r1.eq(r0), r1_seg_end.eq(r0_seg_end),
                         r1_max.eq(beat_top)]
            # (a synchronous reset of the register rather than a multiplexer before it)
            with m.If(~beat_any):
                m.d.sync += r1_max.eq(0)
            with m.If(self.scores.valid):
                with m.If(seg_end):
                    m.d.sync += [beat.eq(0), overrun.eq(~payload.last)]
                    m.d.sync += [keys[l].eq(l) for l in range(lanes)]
                with m.Else():
                    m.d.sync += beat.eq(beat + 1)
                    m.d.sync += [keys[l].eq(keys[l] + lanes) for l in range(lanes)]
        return _ReduceRegs(r0_valid, r1_valid, r1, r1_seg_end, r1_max, stall_in, sign)

    def _reduce_write(self, m, shapes: "_Shapes", bufs: "_Buffers", red: "_ReduceRegs",
                      s_level, s_issue):
        """Reduce stage, second half: write r1 into the score ring, keep the row's running max
        and beat count, queue ``(max, beats)`` at the row's end, and keep the score-ring level
        (``s_level``, with ``s_issue`` the exponentiate stage's reads) and ``stall_in``.

        Returns nothing."""
        cfg = self._cfg
        beats_shape, s_depth = shapes.beats_shape, shapes.s_depth
        s_wr, max_queue = bufs.s_wr, bufs.max_queue
        r0_valid, r1_valid, r1, r1_seg_end = red.r0_valid, red.r1_valid, red.r1, red.r1_seg_end
        r1_max, stall_in, sign = red.r1_max, red.stall_in, red.sign

        s_waddr = Signal(range(s_depth))
        run_max = Signal(cfg.score_bits)     # max key of the row's earlier beats
        run_beats = Signal(beats_shape)
        row_max = Signal(cfg.score_bits)     # max key of the row up to this beat
        m.d.comb += row_max.eq(Mux(r1_max > run_max, r1_max, run_max))
        s_write = Signal()
        # The row's (max, beats) is registered before the queue write (the comparison and the
        # queue's write port do not fit one cycle together).
        q_wdata, q_wen = Signal(len(max_queue.w_stream.payload)), Signal()
        m.d.comb += [s_write.eq(r1_valid & ~stall_in),
                     s_wr.addr.eq(s_waddr), s_wr.data.eq(r1), s_wr.en.eq(s_write),
                     max_queue.w_stream.payload.eq(q_wdata), max_queue.w_stream.valid.eq(q_wen)]
        m.d.sync += [q_wdata.eq(Cat(row_max ^ sign, (run_beats + 1)[:beats_shape.width])),
                     q_wen.eq(s_write & r1_seg_end)]
        with m.If(s_write):
            m.d.sync += s_waddr.eq(_wrap_incr(s_waddr, s_depth))
            # At a row's end run_max restarts from the lowest key, 0: a synchronous reset of the
            # register, so the loop run_max -> comparison -> multiplexer -> run_max has one
            # LUT level after the carry chain.
            with m.If(r1_seg_end):
                m.d.sync += [run_max.eq(0), run_beats.eq(0)]
            with m.Else():
                m.d.sync += [run_max.eq(row_max), run_beats.eq(run_beats + 1)]
        # s_full / s_almost: s_level == s_depth / s_depth - 1, kept as registers so that the
        # next stall_in needs no comparison after the level's adder.
        s_level_next = Signal.like(s_level)
        s_full, s_almost = Signal(), Signal(init=(s_depth == 1))
        s_inc, s_dec = s_write & ~s_issue, ~s_write & s_issue
        s_full_next = Mux(s_inc, s_almost, Mux(s_dec, 0, s_full))
        m.d.comb += s_level_next.eq(s_level + s_write - s_issue)
        m.d.sync += [s_level.eq(s_level_next), s_full.eq(s_full_next),
                     s_almost.eq(Mux(s_inc, s_level == s_depth - 2,
                                     Mux(s_dec, s_full, s_almost))),
                     stall_in.eq(Mux(stall_in, r1_valid, r0_valid) & s_full_next)]

    def _exp_issue(self, m, shapes: "_Shapes", bufs: "_Buffers", s_issue) -> "_ExpIssue":
        """Exponentiate stage, read issue: load a row's ``(max, beats)`` from the max queue and
        read its beats from the score ring (``s_issue``, driven here) while the exp ring has
        room.

        Returns an :class:`_ExpIssue` with the row's max and beat count, the last-beat flag and
        ``e_room`` (driven by :meth:`_normalise_issue`)."""
        cfg = self._cfg
        beats_shape, s_depth = shapes.beats_shape, shapes.s_depth
        s_rd, max_queue = bufs.s_rd, bufs.max_queue

        # ================================================================ exponentiate
        x_active = Signal()
        x_left = Signal(beats_shape)
        x_beats = Signal(beats_shape)
        x_max = Signal(signed(cfg.score_bits))
        x_raddr = Signal(range(s_depth))
        x_load = Signal()
        x_one = Signal()                  # x_left == 1
        e_room = Signal(init=1)           # e_level < e_depth
        m.d.comb += [
            s_issue.eq(x_active & e_room),
            x_load.eq(max_queue.r_stream.valid & (~x_active | (s_issue & x_one))),
            max_queue.r_stream.ready.eq(x_load),
            s_rd.addr.eq(x_raddr), s_rd.en.eq(1),
        ]
        with m.If(s_issue):
            m.d.sync += [x_raddr.eq(_wrap_incr(x_raddr, s_depth)), x_left.eq(x_left - 1),
                         x_one.eq(x_left == 2)]
            with m.If(x_one):
                m.d.sync += x_active.eq(0)
        with m.If(x_load):
            x_row_beats = max_queue.r_stream.payload[cfg.score_bits:]
            m.d.sync += [x_active.eq(1),
                         x_max.eq(max_queue.r_stream.payload[:cfg.score_bits]),
                         x_left.eq(x_row_beats), x_one.eq(x_row_beats == 1),
                         x_beats.eq(x_row_beats)]
        return _ExpIssue(x_one, x_beats, x_max, e_room)

    def _exponentiate(self, m, shapes: "_Shapes", bufs: "_Buffers", s_issue,
                      x_issue: "_ExpIssue"):
        """Exponentiate stage, datapath: register the score-ring data, compute E per lane
        (:class:`hw.blocks.exp2.Exp2Unit`), mask it and write it into the exp ring.

        Returns ``(side, xe, e_beat)``: the side-data layout of a beat in flight, the side data
        of the beat written into the exp ring, and its masked E values."""
        cfg = self._cfg
        lanes = cfg.softmax_lanes
        W = cfg.exp_bits
        beats_shape, e_depth = shapes.beats_shape, shapes.e_depth
        s_rd, e_wr = bufs.s_rd, bufs.e_wr
        x_one, x_beats, x_max = x_issue.x_one, x_issue.x_beats, x_issue.x_max

        # Side data of each beat in flight: valid, last beat of row, row beats, mask, row, last.
        side = data.StructLayout({
            "valid": unsigned(1), "row_end": unsigned(1), "beats": beats_shape,
            "mask": unsigned(lanes), "row": unsigned(cfg.seq_len_bits), "last": unsigned(1),
        })
        x1 = Signal(side)
        x1_max = Signal(signed(cfg.score_bits))
        m.d.sync += [x1.valid.eq(s_issue), x1.row_end.eq(x_one), x1.beats.eq(x_beats),
                     x1_max.eq(x_max)]
        # The block RAM's output is registered before the subtraction (RAM clock-to-out plus a
        # carry chain does not fit one cycle at the target clock).
        x2 = Signal(side)
        x2_data = Signal.like(s_rd.data.data)
        x2_max = Signal(signed(cfg.score_bits))
        m.d.sync += [x2.eq(x1), x2.mask.eq(s_rd.data.mask), x2.row.eq(s_rd.data.row),
                     x2.last.eq(s_rd.data.last), x2_data.eq(s_rd.data.data),
                     x2_max.eq(x1_max)]
        x3 = Signal(side)
        m.d.sync += x3.eq(x2)
        exps = []
        for l in range(lanes):
            unit = Exp2Unit(cfg)
            m.submodules[f"exp{l}"] = unit
            m.d.sync += unit.diff.eq(x2_max - x2_data[l])
            m.d.comb += [unit.exp_mult.eq(self.exp_mult), unit.exp_shift.eq(self.exp_shift)]
            exps.append(unit.exp)
        xe = x3
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
        return side, xe, e_beat

    def _row_sum(self, m, shapes: "_Shapes", bufs: "_Buffers", side, xe, e_beat):
        """Sum/reciprocal stage: add up each beat's E (``e_beat``, side data ``xe`` of layout
        ``side``) into the row sum and, at the row's end, send it through the pipelined
        :class:`hw.blocks.divider.ReciprocalDivider`, whose ``(q, lead, beats)`` goes into the
        recip queue.

        Returns nothing."""
        cfg = self._cfg
        lanes = cfg.softmax_lanes
        R, S = cfg.recip_bits, cfg.sum_bits
        beats_shape = shapes.beats_shape
        recip_queue = bufs.recip_queue

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
                     recip_queue.w_stream.valid.eq(divider.o_valid),
                     recip_queue.w_stream.payload.eq(Cat(divider.o_recip, divider.o_lead, divider.o_tag))]

    def _normalise_issue(self, m, shapes: "_Shapes", bufs: "_Buffers", s_issue, e_issue,
                         e_level, e_room) -> "_NormIssue":
        """Normalise stage, read issue: load a row's ``(q, lead, beats)`` from the recip queue
        and read its beats from the exp ring (``e_issue``, driven here) unless the output is
        stalled; keep the exp-ring level (``e_level``, ``e_room``).

        Returns a :class:`_NormIssue` with the output-stall registers ``hold`` and ``go``
        (driven by :meth:`_normalise_output`) and the row's q and variable shift."""
        cfg = self._cfg
        R, W, S = cfg.recip_bits, cfg.exp_bits, cfg.sum_bits
        beats_shape, lead_shape, e_depth = shapes.beats_shape, shapes.lead_shape, shapes.e_depth
        e_rd, recip_queue = bufs.e_rd, bufs.recip_queue

        # ================================================================ normalise
        # The output register has a spare register behind it (a skid buffer): a beat that
        # cannot enter the output register goes there, and the pipeline stops only while the
        # spare is full, so its enable is a register instead of a function of probs.ready.
        # Two copies of that register, one inverted (so that synthesis keeps both): ``hold``
        # enables the datapath registers, ``go`` drives the control logic, which keeps each
        # copy's fanout (and routing) smaller.
        hold = Signal()
        go = Signal(init=1)
        stall_out = ~go
        n_active = Signal()
        n_left = Signal(beats_shape)
        n_recip = Signal(R + 1)
        # lead - W: the variable part of the output shift (see below)
        var_bits = max(1, (S - 1 - W).bit_length())
        n_vshift = Signal(var_bits)
        n_raddr = Signal(range(e_depth))
        n_load = Signal()
        n_one = Signal()                  # n_left == 1
        m.d.comb += [
            e_issue.eq(n_active & ~stall_out),
            n_load.eq(recip_queue.r_stream.valid & ~stall_out & (~n_active | (e_issue & n_one))),
            recip_queue.r_stream.ready.eq(n_load),
            e_rd.addr.eq(n_raddr), e_rd.en.eq(~hold),
        ]
        q_fields = recip_queue.r_stream.payload
        with m.If(e_issue):
            m.d.sync += [n_raddr.eq(_wrap_incr(n_raddr, e_depth)), n_left.eq(n_left - 1),
                         n_one.eq(n_left == 2)]
            with m.If(n_one):
                m.d.sync += n_active.eq(0)
        with m.If(n_load):
            n_row_beats = q_fields[R + 1 + lead_shape.width:]
            m.d.sync += [n_active.eq(1),
                         n_recip.eq(q_fields[:R + 1]),
                         n_vshift.eq(q_fields[R + 1:R + 1 + lead_shape.width] - W),
                         n_left.eq(n_row_beats), n_one.eq(n_row_beats == 1)]
        # e_room (e_level < e_depth) from registered flags, without the level's adder:
        # e_almost is e_level == e_depth - 1.
        e_almost = Signal(init=(e_depth == 1))
        e_inc, e_dec = s_issue & ~e_issue, ~s_issue & e_issue
        m.d.sync += [e_level.eq(e_level + s_issue - e_issue),
                     e_room.eq(~Mux(e_inc, e_almost, Mux(e_dec, 0, ~e_room))),
                     e_almost.eq(Mux(e_inc, e_level == e_depth - 2,
                                     Mux(e_dec, ~e_room, e_almost)))]
        return _NormIssue(hold, go, n_recip, n_vshift, var_bits)

    def _normalise_output(self, m, shapes: "_Shapes", bufs: "_Buffers", e_issue,
                          n_issue: "_NormIssue"):
        """Normalise stage, datapath: P = min(round_shift(E * q, lead + R - B), 2**B - 1) per
        lane, into the output register and its spare (skid) register, which drive ``probs``.

        Returns nothing."""
        cfg = self._cfg
        lanes = cfg.softmax_lanes
        B, R, W = cfg.prob_bits, cfg.recip_bits, cfg.exp_bits
        exp_entry = shapes.exp_entry
        e_rd = bufs.e_rd
        hold, go, n_recip = n_issue.hold, n_issue.go, n_issue.n_recip
        n_vshift, var_bits = n_issue.n_vshift, n_issue.var_bits

        # Read-issue register n1, block-RAM data register n1b (RAM clock-to-out straight into
        # the multiplier does not fit a cycle), E * q (WideMultiplier), the variable shift,
        # then rounding and saturation into the output register. Everything holds while the
        # output is stalled.
        # round_shift(x, lead + R - B) = ((x >> (lead + R - B - 1)) + 1) >> 1, and lead >= W
        # whenever the sum is non-zero: a constant shift and a small variable one (lead - W,
        # computed when the row's (q, lead) is loaded).
        const_shift = W + R - B - 1
        pmax = (1 << B) - 1
        n1_valid, n1_recip, n1_vshift = Signal(), Signal(R + 1), Signal(var_bits)
        n1b_valid, n1b_recip, n1b_vshift = Signal(), Signal(R + 1), Signal(var_bits)
        # n1b becomes the exp ring's DP16KD output register in ECP5 synthesis
        # (hw.flow.synth.absorb_bram_output_registers), which needs a flip-flop without reset and
        # with a plain (not inverted) clock enable: hence no reset, and ``go`` rather than
        # ``~hold`` as its enable (the two are always complements).
        n1b = Signal(exp_entry, reset_less=True)
        en = ~hold
        prods = []
        for l in range(lanes):
            mul = WideMultiplier(unsigned(W + 1), unsigned(R + 1))
            m.submodules[f"norm_mult{l}"] = mul
            m.d.comb += [mul.en.eq(en), mul.a.eq(n1b.data[l]), mul.b.eq(n1b_recip)]
            prods.append(mul.p)
        side = Cat(n1b_valid, n1b_vshift, n1b.row, n1b.last)
        p_valid, p_vshift = Signal(), Signal(var_bits)     # side data of the products
        p_row, p_last = Signal(cfg.seq_len_bits), Signal()
        n4_valid, n4_row, n4_last = Signal(), Signal(cfg.seq_len_bits), Signal()
        n4_val = [Signal(len(prods[l]), name=f"shifted{l}") for l in range(lanes)]
        n5_valid, n5_row, n5_last = Signal(), Signal(cfg.seq_len_bits), Signal()
        n5_val = [Signal(B, name=f"rounded{l}") for l in range(lanes)]
        n5_sat = Signal(lanes)
        out_valid = Signal()
        out, spare, beat = (Signal(prob_beat_layout(cfg), name=nm)
                            for nm in ("out", "spare", "beat"))
        m.submodules.norm_side = norm_side = DelayLine(
            len(side), WideMultiplier.latency_for(unsigned(W + 1), unsigned(R + 1)))
        m.d.comb += [norm_side.value.eq(side), norm_side.en.eq(en),
                     Cat(p_valid, p_vshift, p_row, p_last).eq(norm_side.delayed)]
        with m.If(en):
            m.d.sync += [n1_valid.eq(e_issue), n1_recip.eq(n_recip), n1_vshift.eq(n_vshift),
                         n1b_valid.eq(n1_valid), n1b_recip.eq(n1_recip),
                         n1b_vshift.eq(n1_vshift)]
        with m.If(go):
            m.d.sync += n1b.eq(e_rd.data)
        with m.If(en):
            m.d.sync += [n4_valid.eq(p_valid), n4_row.eq(p_row), n4_last.eq(p_last)]
            m.d.sync += [n4_val[l].eq((prods[l] >> const_shift) >> p_vshift)
                         for l in range(lanes)]
            # P = min((x + 1) >> 1, 2**B - 1), and (x + 1) >> 1 > 2**B - 1 iff
            # x >= 2**(B+1) - 1 (the comparison runs in parallel with the increment).
            m.d.sync += [n5_valid.eq(n4_valid), n5_row.eq(n4_row), n5_last.eq(n4_last)]
            m.d.sync += [n5_val[l].eq((n4_val[l] + 1) >> 1) for l in range(lanes)]
            m.d.sync += [n5_sat[l].eq(n4_val[l] >= 2 * pmax + 1) for l in range(lanes)]
        # The beat leaving the pipeline.
        m.d.comb += [beat.row.eq(n5_row), beat.last.eq(n5_last)]
        m.d.comb += [beat.data[l].eq(Mux(n5_sat[l], pmax, n5_val[l])) for l in range(lanes)]
        taken = out_valid & self.probs.ready
        with m.If(~hold):
            with m.If(~out_valid | taken):
                m.d.sync += [out_valid.eq(n5_valid), out.eq(beat)]
            with m.Elif(n5_valid):
                m.d.sync += [spare.eq(beat), hold.eq(1), go.eq(0)]
        with m.Elif(taken):
            m.d.sync += [out.eq(spare), hold.eq(0), go.eq(1)]
        m.d.comb += [self.probs.valid.eq(out_valid), self.probs.payload.eq(out)]


class _Shapes(NamedTuple):
    """Entry layouts and sizes shared by the stages of one :class:`SoftmaxUnit`."""
    score_entry: data.StructLayout   # score-ring entry: scores, key mask, row, last
    exp_entry: data.StructLayout     # exp-ring entry: masked E per lane, row, last
    beats_shape: Shape               # beats of a row (descriptor field)
    lead_shape: Shape                # as ReciprocalDivider.o_lead
    s_depth: int                     # score-ring depth
    e_depth: int                     # exp-ring depth


class _Buffers(NamedTuple):
    """Ports of the two ring buffers and the two row-descriptor queues."""
    s_wr: object                     # score ring: written by reduce
    s_rd: object                     # score ring: read by exponentiate
    e_wr: object                     # exp ring: written by exponentiate
    e_rd: object                     # exp ring: read by normalise
    max_queue: StreamQueue           # (max, beats) per row, reduce -> exponentiate
    recip_queue: StreamQueue         # (q, lead, beats) per row, divider -> normalise


class _ReduceRegs(NamedTuple):
    """Registers of the reduce stage's first half, for its second half."""
    r0_valid: Signal
    r1_valid: Signal
    r1: Signal                       # score-ring entry of the beat in r1
    r1_seg_end: Signal               # r1 ends its (cut) row
    r1_max: Signal                   # max key of r1's beat
    stall_in: Signal                 # score ring full with r1 holding a beat
    sign: int                        # score sign bit: score ^ sign is its key


class _ExpIssue(NamedTuple):
    """Read-issue state of the exponentiate stage."""
    x_one: Signal                    # the next read is the row's last
    x_beats: Signal                  # beats of the row being read
    x_max: Signal                    # max of the row being read
    e_room: Signal                   # exp-ring level below its depth


class _NormIssue(NamedTuple):
    """Read-issue state of the normalise stage."""
    hold: Signal                     # spare register full: the datapath holds
    go: Signal                       # ~hold, a separate register (see _normalise_issue)
    n_recip: Signal                  # q of the row being read
    n_vshift: Signal                 # lead - W of the row being read
    var_bits: int                    # width of n_vshift


def _wrap_incr(ptr, depth):
    """``ptr + 1`` modulo ``depth`` (ring buffers need not be a power of two deep)."""
    return Mux(ptr == depth - 1, 0, ptr + 1)


def _tree(m, values, op, name):
    """Reduce ``values`` pairwise (log depth), combinationally. A value may be a tuple of
    values (``op`` then takes and returns tuples)."""
    level = 0
    while len(values) > 1:
        nxt = []
        for i in range(0, len(values) - 1, 2):
            v = op(values[i], values[i + 1])
            parts = v if isinstance(v, tuple) else (v,)
            sigs = tuple(Signal(p.shape(), name=f"{name}_{level}_{i // 2}_{k}")
                         for k, p in enumerate(parts))
            m.d.comb += [sg.eq(p) for sg, p in zip(sigs, parts)]
            nxt.append(sigs if isinstance(v, tuple) else sigs[0])
        if len(values) % 2:
            nxt.append(values[-1])
        values = nxt
        level += 1
    return values[0]
