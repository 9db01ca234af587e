"""Streaming softmax of one key/value tile with running row state: the long-sequence path.

Bit-exact with :func:`golden.online_softmax.softmax_tile` (and, at a row's final tile, the
reciprocal of :func:`golden.online_softmax.row_reciprocal`).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig
from golden.online_softmax import TiledFormat

from hw.blocks.delay import DelayLine
from hw.blocks.divider import ReciprocalDivider
from hw.blocks.exp2 import Exp2Table, ExpScale
from hw.blocks.queue import StreamQueue
from hw.blocks.softmax import settings_error, settings_ports

__all__ = ["TileSoftmaxUnit", "tile_score_layout", "tile_prob_layout", "tile_row_layout"]


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def tile_score_layout(cfg: AttentionConfig, rows: int) -> data.StructLayout:
    """A beat of the ``scores`` stream: ``softmax_lanes`` scores of one row of one tile."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(cfg.score_bits), cfg.softmax_lanes),
        "row": unsigned(cfg.seq_len_bits),    # query index (causal mask)
        "slot": unsigned(_bits(rows)),        # the row's state entry (row within its query tile)
        "rows": unsigned(rows.bit_length()),  # rows of the query tile, 1..rows
        "key0": unsigned(cfg.seq_len_bits),   # key index of the tile's first key
        "first": unsigned(1),                 # the row's first tile: start from empty state
        "final": unsigned(1),                 # the row's final tile: divide its sum
        "last": unsigned(1),                  # last beat of the row in this tile
    })


def tile_prob_layout(cfg: AttentionConfig, fmt: TiledFormat, rows: int) -> data.StructLayout:
    """A beat of the ``probs`` stream: ``softmax_lanes`` unnormalized probabilities E."""
    return data.StructLayout({
        "data": data.ArrayLayout(unsigned(fmt.prob_bits + 1), cfg.softmax_lanes),
        "slot": unsigned(_bits(rows)),
        "last": unsigned(1),
    })


def tile_row_layout(cfg: AttentionConfig, fmt: TiledFormat, rows: int) -> data.StructLayout:
    """A beat of the ``row_info`` stream: one per row and tile."""
    return data.StructLayout({
        "slot": unsigned(_bits(rows)),
        "rise": unsigned((fmt.out_acc_bits + 1).bit_length()),
        "started": unsigned(1),
        "first": unsigned(1),                 # the row's first tile
        "final": unsigned(1),                 # the row's final tile
        "last": unsigned(1),                  # the query tile's last row
        "recip": unsigned(cfg.recip_bits + 1),
        "lead": unsigned(_bits(fmt.sum_bits)),
    })


class TileSoftmaxUnit(wiring.Component):
    """The integer online softmax of :mod:`golden.online_softmax`, one tile of keys at a time,
    ``cfg.softmax_lanes`` scores per cycle, for query tiles of up to ``rows`` rows.

    A query tile's rows come in order (``slot`` 0 .. ``rows``-1 of the beat), tile after tile
    of keys; each row keeps, between its tiles, whether a valid key was seen, its running
    maximum ``M`` (integer octaves) and its running sum ``l``. Per row and tile:

    - ``y = round_shift(S * exp_mult, exp_shift)`` per key (:class:`hw.blocks.exp2.ExpScale`);
    - ``M' = max(M, ceil(max(valid y) / 2**F))``, ``rise = min(M' - M, out_acc_bits + 1)``
      (0 on a row's first tile, or when the tile has no valid key for it);
    - ``E = 2**-(M' - y / 2**F)`` as UQ1.Bt (:class:`hw.blocks.exp2.Exp2Table`), 0 for a key
      that does not count; out on ``probs``, one beat per input beat;
    - ``l' = round_shift(l, rise) + sum(E)``; on the row's ``final`` tile, ``lead =
      floor(log2 l')`` and ``recip = floor(2**(lead + R) / l')``
      (:class:`hw.blocks.divider.ReciprocalDivider`); out on ``row_info`` with ``rise``,
      ``started`` (a valid key was seen in this or an earlier tile), the beat's ``first`` and
      ``final`` and ``last`` (the query tile's last row).

    Key ``j = key0 + b * lanes + lane`` of beat ``b`` of a row counts iff ``j < kv_len``, not
    ``causal`` or ``j <= row``, and the settings are valid (``kv_tile`` is a multiple of the
    lanes, so only a row's last tile can end inside a beat, past the keys sent). A tile row
    longer than ``kv_tile / lanes`` beats (a producer error) is cut there, and the beats after
    it form further segments of zeros, each with its own ``row_info`` entry for the same slot:
    the row's state and the entry count are then wrong, but nothing hangs.

    Architecture, four stages connected by queues, every row of every tile passing each:

    - *reduce*: accepts beats, scales them, computes the key mask, writes ``y`` into a ring
      buffer and keeps the row's maximum; at the row's end queues ``(max, beats)``;
    - *state*: reads the row's ``(started, M)``, computes ``M'`` and ``rise``, writes them back;
    - *exponentiate*: re-reads the row's ``y``, computes E (out on ``probs``) and the row sum;
    - *sum*: reads ``l``, rescales and adds, writes it back, and divides on a final tile.

    The state stage lets a row through only while fewer rows than the query tile has are
    between it and the sum stage's write, so a row never reads state that an earlier tile of
    the same row has yet to write (a one-row query tile waits for its previous tile's sum:
    26 cycles per tile). It also holds rows while ``row_info`` could not take them.

    Throughput: ``lanes`` scores per cycle for rows of any length when ``probs`` and
    ``row_info`` are always ready and the query tile has enough rows (see above). Timing:
    :func:`hw.perf.tile_softmax.tile_softmax_schedule`, exact (the cycle of every input beat
    taken, every E beat and every ``row_info`` entry).

    Parameters
    ----------
    cfg : AttentionConfig
    fmt : TiledFormat
        ``kv_tile``, the width of E (``prob_bits``, Bt), of ``l`` (``sum_bits``) and the rise
        cap (``out_acc_bits + 1``).
    rows : int
        Query rows per tile (state entries).

    Members
    -------
    scores : In(stream.Signature(tile_score_layout(cfg, rows)))
    probs : Out(stream.Signature(tile_prob_layout(cfg, fmt, rows)))
    row_info : Out(stream.Signature(tile_row_layout(cfg, fmt, rows)))
    exp_mult, exp_shift, causal, kv_len : In
        As :class:`hw.blocks.softmax.SoftmaxUnit`; static while rows are in flight.
    error : Out(1)
        Invalid run-time settings (every key then counts as masked).
    """

    RING_SLACK = 24       # ring entries beyond one tile row (the reduce-to-exponentiate lag)
    ROW_QUEUE = 32        # row_info entries (rows between the state stage and the output)
    PROB_QUEUE = 20       # probs entries (the exponentiate pipeline's length and then some)

    def __init__(self, cfg: AttentionConfig, fmt: TiledFormat, rows: int):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        if not isinstance(fmt, TiledFormat):
            raise TypeError(f"fmt must be a TiledFormat, not {fmt!r}")
        if not 1 <= rows <= cfg.max_seq_len:
            raise ValueError(f"rows = {rows} is out of range: allowed 1..{cfg.max_seq_len}")
        # A tile ends on a beat boundary: the lanes past a tile's end would otherwise count
        # keys that belong to the next tile (only the last tile of a row may be short, and
        # its lanes past the keys sent lie at or beyond kv_len).
        if fmt.kv_tile % cfg.softmax_lanes:
            raise ValueError(f"kv_tile = {fmt.kv_tile} must be a multiple of softmax_lanes = "
                             f"{cfg.softmax_lanes}")
        self.cfg, self.fmt, self.rows = cfg, fmt, rows
        self.max_beats = -(-fmt.kv_tile // cfg.softmax_lanes)
        self.ring_depth = self.max_beats + self.RING_SLACK
        super().__init__({
            "scores": In(stream.Signature(tile_score_layout(cfg, rows))),
            "probs": Out(stream.Signature(tile_prob_layout(cfg, fmt, rows))),
            "row_info": Out(stream.Signature(tile_row_layout(cfg, fmt, rows))),
            **settings_ports(cfg),
        })

    # ------------------------------------------------------------------ widths

    @property
    def y_shape(self):
        """Scores in base-2 units, ``F`` fraction bits."""
        return signed(self.cfg.score_bits + self.cfg.exp_mult_bits)

    @property
    def max_shape(self):
        """A running maximum in integer octaves."""
        return signed(self.y_shape.width - self.cfg.exp_frac_bits + 1)

    # ------------------------------------------------------------------ hardware

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        m.d.comb += self.error.eq(settings_error(cfg, self))

        side = data.StructLayout({
            "row": unsigned(cfg.seq_len_bits), "slot": unsigned(_bits(self.rows)),
            "rows": unsigned(self.rows.bit_length()), "first": 1, "final": 1, "end": 1,
        })
        ring_entry = data.StructLayout({
            "y": data.ArrayLayout(self.y_shape, cfg.softmax_lanes),
            "mask": unsigned(cfg.softmax_lanes), "slot": side["slot"].shape, "end": 1,
        })
        row_desc = data.StructLayout({
            "max": self.max_shape, "seen": 1, "beats": range(self.max_beats + 1),
            "slot": side["slot"].shape, "rows": side["rows"].shape, "first": 1, "final": 1,
        })
        exp_desc = data.StructLayout({
            "max": self.max_shape, "beats": range(self.max_beats + 1),
            "slot": side["slot"].shape, "first": 1, "final": 1, "last": 1, "started": 1,
            "rise": self.row_info.payload.rise.shape(),
        })
        m.submodules.ring = ring = Memory(shape=ring_entry, depth=self.ring_depth, init=[],
                                          attrs={"no_rw_check": 1})
        # A queued row holds at least one ring entry, so queues as deep as the ring never
        # fill (no flow control needed on them).
        m.submodules.row_queue = row_q = StreamQueue(row_desc, self.ring_depth,
                                                     storage="distributed", checked=False)
        m.submodules.exp_queue = exp_q = StreamQueue(exp_desc, self.ring_depth,
                                                     storage="distributed", checked=False)
        m.submodules.info_queue = info_q = StreamQueue(self.row_info.payload.shape(),
                                                       self.ROW_QUEUE, storage="distributed",
                                                       checked=False)
        m.submodules.prob_queue = prob_q = StreamQueue(self.probs.payload.shape(),
                                                       self.PROB_QUEUE, storage="distributed",
                                                       checked=False)
        wiring.connect(m, info_q.r_stream, wiring.flipped(self.row_info))
        wiring.connect(m, prob_q.r_stream, wiring.flipped(self.probs))

        ring_read = Signal()                  # the exponentiate stage reads a ring entry
        released = Signal()                   # the sum stage writes a row's l
        b_valid, b, b_y, b_mask = self._reduce(m, side, ring, ring_read)
        self._row_max(m, side, row_q, b_valid, b, b_y, b_mask)
        self._state(m, row_q, exp_q, info_q, released)
        self._exponentiate_and_sum(m, ring, exp_q, prob_q, info_q, ring_read, released)
        return m

    def _reduce(self, m, side, ring, ring_read):
        """Accept beats (while the ring has room for them), scale, mask and write the ring.
        Returns the registered beat written (valid, side data, ``y`` per lane, mask)."""
        cfg = self.cfg
        lanes = cfg.softmax_lanes
        payload = self.scores.payload

        # Ring entries reserved by accepted beats until the exponentiate stage reads them.
        reserved = Signal(range(self.ring_depth + 1))
        take = Signal()
        m.d.comb += [self.scores.ready.eq(reserved < self.ring_depth),
                     take.eq(self.scores.valid & self.scores.ready)]
        m.d.sync += reserved.eq(reserved + take - ring_read)

        # a: the accepted beat; the beat offset within its (cut) row; overrun after a cut.
        beat = Signal(range(self.max_beats))
        overrun = Signal()
        seg_end = Signal()
        m.d.comb += seg_end.eq(payload.last | (beat == self.max_beats - 1))
        a_valid = Signal()
        a = Signal(side)
        a_data = Signal.like(payload.data)
        a_key = Signal(cfg.seq_len_bits + 1)           # key index of lane 0
        a_over = Signal()
        m.d.sync += [a_valid.eq(take), a_data.eq(payload.data),
                     a_key.eq(payload.key0 + beat * lanes), a_over.eq(overrun),
                     a.row.eq(payload.row), a.slot.eq(payload.slot), a.rows.eq(payload.rows),
                     a.first.eq(payload.first), a.final.eq(payload.final), a.end.eq(seg_end)]
        with m.If(take):
            with m.If(seg_end):
                m.d.sync += [beat.eq(0), overrun.eq(~payload.last)]
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # Scale (ExpScale.LATENCY cycles) while the mask is computed beside it.
        scaled = []
        for l in range(lanes):
            m.submodules[f"scale{l}"] = sc = ExpScale(cfg, signed(cfg.score_bits))
            m.d.comb += [sc.x.eq(a_data[l]), sc.exp_mult.eq(self.exp_mult),
                         sc.exp_shift.eq(self.exp_shift)]
            scaled.append(sc.scaled)
        mask = Signal(lanes)
        m.d.sync += mask.eq(Cat(*[(a_key + l < self.kv_len)
                                  & (~self.causal | (a_key + l <= a.row))
                                  & ~self.error & ~a_over for l in range(lanes)]))
        lat = ExpScale.LATENCY
        m.submodules.side_delay = sd = DelayLine(Cat(a_valid, a).shape(), lat, reset_less=False)
        m.submodules.mask_delay = md = DelayLine(unsigned(lanes), lat - 1)
        m.d.comb += [sd.value.eq(Cat(a_valid, a)), md.value.eq(mask)]
        s_valid, s = sd.delayed[0], side(sd.delayed[1:])

        # b: y = (scaled + 1) >> 1, the mask, the side data; written into the ring.
        b_valid = Signal()
        b = Signal(side)
        b_y = Signal(data.ArrayLayout(self.y_shape, lanes))
        b_mask = Signal(lanes)
        m.d.sync += [b_valid.eq(s_valid), b.eq(s), b_mask.eq(md.delayed),
                     *[b_y[l].eq((scaled[l] + 1) >> 1) for l in range(lanes)]]
        wr = ring.write_port()
        waddr = Signal(range(self.ring_depth))
        m.d.comb += [wr.addr.eq(waddr), wr.en.eq(b_valid), wr.data.y.eq(b_y),
                     wr.data.mask.eq(b_mask), wr.data.slot.eq(b.slot), wr.data.end.eq(b.end)]
        with m.If(b_valid):
            m.d.sync += waddr.eq(Mux(waddr == self.ring_depth - 1, 0, waddr + 1))

        return b_valid, b, b_y, b_mask

    def _row_max(self, m, side, row_q, b_valid, b, b_y, b_mask):
        """Each row's maximum (in octaves) and beat count over its beats, into the row
        queue at its end."""
        cfg = self.cfg
        lanes, F = cfg.softmax_lanes, cfg.exp_frac_bits
        # The row's maximum in octaves: ceil is monotonic, so max(ceil(y / 2**F)) is the ceiling
        # of the maximum, and the comparisons work on octaves (fewer bits than y). They compare
        # "keys", the octaves with their sign bit flipped, which order as unsigned numbers as
        # the octaves do as signed ones; a masked lane's key is 0, the lowest, so no comparison
        # needs a mask after it (whether any key counted is kept beside).
        # c: each lane's key; c2: the beat's largest; then the row's, over its beats.
        ob = self.max_shape.width
        sign = 1 << (ob - 1)
        c_valid = Signal()
        c = Signal(side)
        c_key = [Signal(ob, name=f"c_key{l}") for l in range(lanes)]
        c_any = Signal()
        m.d.sync += [c_valid.eq(b_valid), c.eq(b), c_any.eq(b_mask.any()),
                     *[c_key[l].eq(Mux(b_mask[l],
                                       ((b_y[l] + ((1 << F) - 1)) >> F).as_unsigned() ^ sign, 0))
                       for l in range(lanes)]]
        c2_valid, c2_any = Signal(), Signal()
        c2 = Signal(side)
        c2_key = Signal(ob)
        best = c_key[0]
        for l in range(1, lanes):
            best = Mux(c_key[l] > best, c_key[l], best)
        m.d.sync += [c2_valid.eq(c_valid), c2.eq(c), c2_any.eq(c_any), c2_key.eq(best)]
        run_any = Signal()
        run_key = Signal(ob)
        run_beats = Signal(range(self.max_beats + 1))
        row_key = Signal(ob)
        m.d.comb += row_key.eq(Mux(c2_key > run_key, c2_key, run_key))
        with m.If(c2_valid):
            # At a row's end the running values restart (a synchronous reset of the
            # registers, not a multiplexer in the loop).
            with m.If(c2.end):
                m.d.sync += [run_any.eq(0), run_key.eq(0), run_beats.eq(0)]
            with m.Else():
                m.d.sync += [run_any.eq(run_any | c2_any), run_key.eq(row_key),
                             run_beats.eq(run_beats + 1)]

        # The row's end into the row queue.
        w = row_q.w_stream
        m.d.sync += [w.valid.eq(c2_valid & c2.end),
                     w.payload.max.eq((row_key ^ sign).as_signed()),
                     w.payload.seen.eq(run_any | c2_any), w.payload.beats.eq(run_beats + 1),
                     w.payload.slot.eq(c2.slot), w.payload.rows.eq(c2.rows),
                     w.payload.first.eq(c2.first), w.payload.final.eq(c2.final)]

    def _state(self, m, row_q, exp_q, info_q, released):
        """Per row: read ``(started, M)``, compute ``M'`` and ``rise``, write them back, queue
        the row for the exponentiate stage. Rows in flight (let through, ``l`` not yet
        written) are counted; a row waits while as many are in flight as its query tile has
        rows (one of them could be its own previous tile), or while ``row_info`` lacks room."""
        fmt = self.fmt
        cap = fmt.out_acc_bits + 1
        state = data.StructLayout({"started": 1, "max": self.max_shape})
        m.submodules.state_mem = mem = Memory(shape=state, depth=self.rows, init=[])
        rd = mem.read_port(domain="sync")
        wr = mem.write_port()

        # in_flight: let through, l not yet written; outstanding: let through, not yet taken
        # from row_info (so the row_info queue, as deep as ROW_QUEUE, never overflows).
        in_flight = Signal(range(self.ROW_QUEUE + 1))
        outstanding = Signal(range(self.ROW_QUEUE + 1))
        head = row_q.r_stream.payload
        go = Signal()
        m.d.comb += [go.eq(row_q.r_stream.valid
                           & (head.first | (in_flight < head.rows))
                           & (outstanding < self.ROW_QUEUE)),
                     row_q.r_stream.ready.eq(go), rd.addr.eq(head.slot), rd.en.eq(1)]
        m.d.sync += [in_flight.eq(in_flight + go - released),
                     outstanding.eq(outstanding + go
                                    - (self.row_info.valid & self.row_info.ready))]

        # A: read issued with the pop; B: state read; C: M', written back; D: the rise; then
        # the queue.
        a_valid = Signal()
        a = Signal.like(head)
        m.d.sync += [a_valid.eq(go), a.eq(head)]
        b_valid = Signal()
        b = Signal.like(head)
        b_old = Signal(state)
        m.d.sync += [b_valid.eq(a_valid), b.eq(a), b_old.eq(rd.data)]
        b_started = b_old.started & ~b.first
        c_valid, c_started = Signal(), Signal()
        c = Signal.like(head)
        c_old, c_new = Signal(self.max_shape), Signal(self.max_shape)
        m.d.sync += [c_valid.eq(b_valid), c.eq(b), c_started.eq(b_started), c_old.eq(b_old.max),
                     c_new.eq(Mux(b.seen & (~b_started | (b.max > b_old.max)), b.max,
                                  b_old.max))]
        m.d.comb += [wr.addr.eq(c.slot), wr.en.eq(c_valid),
                     wr.data.started.eq(c_started | c.seen), wr.data.max.eq(c_new)]
        # D: the rise before its cap (the subtraction and the cap's comparison do not fit
        # one cycle together); then the capped rise into the queue.
        d_valid, d_started = Signal(), Signal()
        d = Signal.like(head)
        d_new = Signal(self.max_shape)
        d_diff = Signal(self.max_shape.width + 1)
        m.d.sync += [d_valid.eq(c_valid), d.eq(c), d_started.eq(c_started), d_new.eq(c_new),
                     d_diff.eq(Mux(c_started, c_new - c_old, 0))]
        w = exp_q.w_stream
        m.d.sync += [w.valid.eq(d_valid), w.payload.max.eq(d_new), w.payload.beats.eq(d.beats),
                     w.payload.slot.eq(d.slot), w.payload.first.eq(d.first),
                     w.payload.final.eq(d.final), w.payload.last.eq(d.slot == d.rows - 1),
                     w.payload.started.eq(d_started | d.seen),
                     w.payload.rise.eq(Mux(d_diff > cap, cap, d_diff))]

    def _exponentiate_and_sum(self, m, ring, exp_q, prob_q, info_q, ring_read, released):
        """Re-read each row's ``y`` from the ring, E per lane into ``probs``, the row sum; then
        ``l' = round_shift(l, rise) + sum`` per row (read, rescale, add, write back) and the
        reciprocal on a final tile into ``row_info``."""
        cfg, fmt = self.cfg, self.fmt
        lanes, F, Bt = cfg.softmax_lanes, cfg.exp_frac_bits, fmt.prob_bits
        n_max = Bt + 2

        # Issue: a row's descriptor, then its beats, while probs has room for every beat in
        # flight (reserved until popped from the probs queue).
        active = Signal()
        left = Signal(range(self.max_beats + 1))
        cur = Signal.like(exp_q.r_stream.payload)
        p_reserved = Signal(range(self.PROB_QUEUE + 1))
        room = Signal()
        m.d.comb += room.eq(p_reserved < self.PROB_QUEUE)
        last_beat = Signal()
        m.d.comb += [ring_read.eq(active & room), last_beat.eq(left == 1)]
        load = Signal()
        m.d.comb += [load.eq(exp_q.r_stream.valid & (~active | (ring_read & last_beat))),
                     exp_q.r_stream.ready.eq(load)]
        m.d.sync += p_reserved.eq(p_reserved + ring_read - (self.probs.valid & self.probs.ready))
        raddr = Signal(range(self.ring_depth))
        rd = ring.read_port(domain="sync")
        m.d.comb += [rd.addr.eq(raddr), rd.en.eq(1)]
        with m.If(ring_read):
            m.d.sync += [raddr.eq(Mux(raddr == self.ring_depth - 1, 0, raddr + 1)),
                         left.eq(left - 1)]
            with m.If(last_beat):
                m.d.sync += active.eq(0)
        with m.If(load):
            m.d.sync += [active.eq(1), cur.eq(exp_q.r_stream.payload),
                         left.eq(exp_q.r_stream.payload.beats)]

        # x1: read issued; x2: ring data; x3: u = M' * 2**F - y; x4: (n, f) into the table.
        x1_valid, x1_end = Signal(), Signal()
        x1 = Signal.like(cur)
        m.d.sync += [x1_valid.eq(ring_read), x1_end.eq(last_beat), x1.eq(cur)]
        x2_valid, x2_end = Signal(), Signal()
        x2 = Signal.like(cur)
        x2_e = Signal.like(rd.data)
        m.d.sync += [x2_valid.eq(x1_valid), x2_end.eq(x1_end), x2.eq(x1), x2_e.eq(rd.data)]
        u = [Signal(self.y_shape.width + 2, name=f"u{l}") for l in range(lanes)]
        x3_valid, x3_end = Signal(), Signal()
        x3 = Signal.like(cur)
        x3_mask = Signal(lanes)
        m.d.sync += [x3_valid.eq(x2_valid), x3_end.eq(x2_end), x3.eq(x2),
                     x3_mask.eq(x2_e.mask),
                     *[u[l].eq((x2.max << F) - x2_e.y[l]) for l in range(lanes)]]
        tables = []
        for l in range(lanes):
            m.submodules[f"table{l}"] = t = Exp2Table(cfg, Bt)
            n_reg = Signal(range(n_max + 1), name=f"n{l}")
            f_reg = Signal(F, name=f"f{l}")
            # u >= n_max * 2**F without a carry chain across all of u: u is non-negative and
            # its integer part has a bit above n_max's width or its low part reaches n_max.
            k = n_max.bit_length()
            hi = u[l][F:]
            big = ~u[l][-1] & (hi[k:-1].any() | (hi[:k] >= n_max))
            m.d.sync += [n_reg.eq(Mux(big, n_max, hi[:k])), f_reg.eq(u[l][:F])]
            m.d.comb += [t.n.eq(n_reg), t.f.eq(f_reg)]
            tables.append(t.exp)
        side = data.StructLayout({"valid": 1, "end": 1, "mask": unsigned(lanes),
                                  "slot": x3.slot.shape()})
        m.submodules.exp_side = es = DelayLine(side, 1 + Exp2Table.LATENCY)
        m.d.comb += [es.value.valid.eq(x3_valid), es.value.end.eq(x3_end),
                     es.value.mask.eq(x3_mask), es.value.slot.eq(x3.slot)]
        e_side = es.delayed
        # The row's other fields stay in x3's copy until its last beat leaves the table.
        m.submodules.row_side = rs = DelayLine(exp_q.r_stream.payload.shape(),
                                               1 + Exp2Table.LATENCY, reset_less=True)
        m.d.comb += rs.value.eq(x3)
        e_row = exp_q.r_stream.payload.shape()(rs.delayed)

        # The masked E into the probs queue; the beat sum, then the row sum.
        e_vals = [Mux(e_side.mask[l], tables[l], 0) for l in range(lanes)]
        pw = prob_q.w_stream
        m.d.sync += [pw.valid.eq(e_side.valid), pw.payload.slot.eq(e_side.slot),
                     pw.payload.last.eq(e_side.end),
                     *[pw.payload.data[l].eq(e_vals[l]) for l in range(lanes)]]
        beat_sum = Signal(fmt.sum_bits)
        s_valid, s_end = Signal(), Signal()
        s_row = Signal.like(e_row)
        total = e_vals[0]
        for l in range(1, lanes):
            total = total + e_vals[l]
        m.d.sync += [beat_sum.eq(total), s_valid.eq(e_side.valid), s_end.eq(e_side.end),
                     s_row.eq(e_row)]
        row_sum = Signal(fmt.sum_bits)
        acc = Signal(fmt.sum_bits)
        m.d.comb += row_sum.eq(acc + beat_sum)
        with m.If(s_valid):
            m.d.sync += acc.eq(Mux(s_end, 0, row_sum))
        self._sum_stage(m, s_valid & s_end, s_row, row_sum, info_q, released)

    def _sum_stage(self, m, valid, row, row_sum, info_q, released):
        """``l' = round_shift(l, rise) + row_sum`` per row (A: read l; B: its data; C: shift by
        ``rise - 1`` (by -1, i.e. doubled, when ``rise`` is 0); D: ``(. + 1) >> 1``; E: the
        add, written back and into the divider), then the reciprocal into ``row_info``."""
        cfg, fmt = self.cfg, self.fmt
        S = fmt.sum_bits
        m.submodules.sum_mem = mem = Memory(shape=unsigned(S), depth=self.rows, init=[])
        rd = mem.read_port(domain="sync")
        wr = mem.write_port()
        m.d.comb += [rd.addr.eq(row.slot), rd.en.eq(1)]
        a_valid = Signal()
        a = Signal.like(row)
        a_sum = Signal(S)
        m.d.sync += [a_valid.eq(valid), a.eq(row), a_sum.eq(row_sum)]
        b_valid = Signal()
        b = Signal.like(row)
        b_sum, b_old = Signal(S), Signal(S)
        m.d.sync += [b_valid.eq(a_valid), b.eq(a), b_sum.eq(a_sum),
                     b_old.eq(Mux(a.first, 0, rd.data))]
        c_valid = Signal()
        c = Signal.like(row)
        c_sum, c_half = Signal(S), Signal(S + 1)
        m.d.sync += [c_valid.eq(b_valid), c.eq(b), c_sum.eq(b_sum),
                     c_half.eq(Mux(b.rise == 0, b_old << 1, b_old >> (b.rise - 1)[:len(b.rise)]))]
        d_valid = Signal()
        d = Signal.like(row)
        d_sum, d_scaled = Signal(S), Signal(S)
        m.d.sync += [d_valid.eq(c_valid), d.eq(c), d_sum.eq(c_sum),
                     d_scaled.eq((c_half + 1) >> 1)]
        e_valid = Signal()
        e = Signal.like(row)
        e_l = Signal(S)
        m.d.sync += [e_valid.eq(d_valid), e.eq(d), e_l.eq(d_scaled + d_sum)]
        m.d.comb += [wr.addr.eq(e.slot), wr.en.eq(e_valid), wr.data.eq(e_l),
                     released.eq(e_valid)]

        tag = data.StructLayout({"slot": e.slot.shape(), "rise": e.rise.shape(),
                                 "started": 1, "first": 1, "final": 1, "last": 1})
        m.submodules.divider = div = ReciprocalDivider(S, cfg.recip_bits, tag_width=tag.size)
        t_in = Signal(tag)
        m.d.comb += [t_in.slot.eq(e.slot), t_in.rise.eq(e.rise), t_in.started.eq(e.started),
                     t_in.first.eq(e.first), t_in.final.eq(e.final), t_in.last.eq(e.last),
                     # A row with no valid key (l = 0) divides 1, as the golden model does.
                     div.i_valid.eq(e_valid), div.i_sum.eq(Mux(e_l == 0, 1, e_l)),
                     div.i_tag.eq(t_in)]
        t_out = tag(div.o_tag)
        w = info_q.w_stream
        m.d.comb += [w.valid.eq(div.o_valid), w.payload.slot.eq(t_out.slot),
                     w.payload.rise.eq(t_out.rise), w.payload.started.eq(t_out.started),
                     w.payload.first.eq(t_out.first), w.payload.final.eq(t_out.final),
                     w.payload.last.eq(t_out.last), w.payload.recip.eq(div.o_recip),
                     w.payload.lead.eq(div.o_lead)]
