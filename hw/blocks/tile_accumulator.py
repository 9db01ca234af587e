"""The output accumulator of the long-sequence path: ``O = round_shift(O, rise) + E V`` per
key/value tile, then once per query tile ``A = requantize(O / l)``.

Bit-exact with the accumulation in :func:`golden.online_softmax.attend_tiled` and with
:func:`golden.online_softmax.tile_output`.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig
from golden.online_softmax import NORM_SUM_BITS, TiledFormat

from hw.blocks.delay import DelayLine
from hw.blocks.dsp import WideMultiplier
from hw.blocks.queue import StreamQueue
from hw.blocks.tile_softmax import tile_row_layout

__all__ = ["TileAccumulator", "tile_result_layout", "tile_output_layout"]


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def tile_result_layout(cfg: AttentionConfig, rows: int, cols: int, dv: int):
    """A result beat of one tile's ``E V``: ``cols`` columns of one row."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(cfg.acc_bits), cols),
        "row": unsigned(_bits(rows)),         # row within the query tile
        "col": unsigned(_bits(dv)),           # first column, a multiple of cols
        "last": unsigned(1),                  # the tile's last beat
    })


def tile_output_layout(cfg: AttentionConfig, rows: int, dv: int, lanes: int):
    """An output beat: ``lanes`` attention values (int act_bits) of one row."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(cfg.act_bits), lanes),
        "row": unsigned(_bits(rows)),
        "col": unsigned(_bits(dv)),           # first column of the beat
        "last": unsigned(1),                  # the query tile's last beat
    })


class TileAccumulator(wiring.Component):
    """Running output accumulators of one query tile (``rows`` x ``dv``), one key/value tile of
    ``E V`` results at a time, and the final normalisation.

    Per tile: the ``info`` stream brings one entry per row (:func:`tile_row_layout`, from
    :class:`hw.blocks.tile_softmax.TileSoftmaxUnit`), then the ``result`` stream the tile's
    ``E V`` beats (``cols`` columns of one row each, every (row, column group) once, in any
    order, ``last`` on the tile's last). Each beat updates ``O = round_shift(O, rise) + E V``
    (``O`` taken as 0 on the row's ``first`` tile). After a ``final`` tile, a pass over the
    tile's rows emits ``A = saturate(round_shift(round_shift(O' * recip, s) * rq_mult,
    rq_shift + G))`` with ``O'`` = ``O`` rounded below ``2**(lead - NORM_SUM_BITS)`` and ``s =
    lead - drop + R - B - G`` (:func:`golden.online_softmax.tile_output`), ``norm_lanes``
    values per beat, rows in order; a row that saw no valid key gives 0.

    Flow: info entries go to ``banks`` banks in turn, so the next tiles' entries arrive while
    a tile's results are accumulated (or its pass runs: the core uses three, for the entries
    of the tile after next); a tile's results are taken once all its entries are in
    (the sequencer issues a tile's ``E V`` after its softmax anyway); the normalisation pass
    holds off the next tile's results. ``out`` has a queue whose room is reserved before a
    value enters the pipeline, so backpressure stalls the pass without loss.

    Throughput: one result beat per cycle; the pass ``cols / norm_lanes`` cycles per word of
    ``cols`` values. Latency: a result beat is written back five cycles after it is taken.
    Timing: :func:`hw.perf.tile_accumulator.tile_accumulator_schedule`, exact.

    Parameters
    ----------
    cfg : AttentionConfig
    fmt : TiledFormat
    rows : int
        Query rows per tile.
    cols : int
        Values per result beat (the array's columns).
    dv : int
        Columns of ``O`` (the head dimension).
    norm_lanes : int
        Values normalised per cycle (divides ``cols``); each lane costs four 18 x 18
        multipliers.
    banks : int
        Tiles of entries held (2 or 3).

    Members
    -------
    info : In(stream.Signature(tile_row_layout(cfg, fmt, rows)))
    result : In(stream.Signature(tile_result_layout(cfg, rows, cols, dv)))
    out : Out(stream.Signature(tile_output_layout(cfg, rows, dv, norm_lanes)))
    rq_mult : In(unsigned(cfg.requant_mult_bits)), rq_shift : In(unsigned(6))
        The P.V requantizer; ``rq_shift + G`` must be <= 62. Static while a pass runs.
    results_ready : Out(1)
        ``result.ready`` whether or not a beat is offered: the next tile's entries are all in,
        the previous tile is written back and no pass runs (the core issues a tile's E V job
        only then, so its results never wait).
    bank_full : Out(banks)
        Per bank: it holds a tile's entries not yet done with (results written back, and
        after a final tile its pass over).
    """

    OUT_QUEUE = 24

    def __init__(self, cfg: AttentionConfig, fmt: TiledFormat, rows: int, cols: int, dv: int,
                 norm_lanes: int = 1, banks: int = 2):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        if not isinstance(fmt, TiledFormat):
            raise TypeError(f"fmt must be a TiledFormat, not {fmt!r}")
        for name, value, hi in (("rows", rows, cfg.max_seq_len), ("cols", cols, 64),
                                ("dv", dv, 4096)):
            if not isinstance(value, int) or not 1 <= value <= hi:
                raise ValueError(f"{name} = {value!r} is out of range: allowed 1..{hi}")
        if dv % cols:
            raise ValueError(f"dv = {dv} must be a multiple of cols = {cols}")
        if banks not in (2, 3):
            raise ValueError(f"banks = {banks!r} is out of range: allowed 2, 3")
        if norm_lanes not in [n for n in range(1, cols + 1) if cols % n == 0]:
            raise ValueError(f"norm_lanes = {norm_lanes!r} must divide cols = {cols}")
        # A started row has l > 2**(Bt-1), so lead >= Bt - 1 and the normalising shift is
        # at least Bt - 1 + R - B - G; the pipeline needs it positive.
        low = fmt.prob_bits - 1 + cfg.recip_bits - cfg.prob_bits - fmt.norm_guard_bits
        if low < 1:
            raise ValueError(f"recip_bits = {cfg.recip_bits} is too small for the tiled path: "
                             f"allowed >= {cfg.recip_bits - low + 1}")
        self.cfg, self.fmt = cfg, fmt
        self.rows, self.cols, self.dv, self.norm_lanes = rows, cols, dv, norm_lanes
        self.banks = banks
        self.groups = dv // cols                        # words per row of O
        super().__init__({
            "info": In(stream.Signature(tile_row_layout(cfg, fmt, rows))),
            "result": In(stream.Signature(tile_result_layout(cfg, rows, cols, dv))),
            "out": Out(stream.Signature(tile_output_layout(cfg, rows, dv, norm_lanes))),
            "rq_mult": In(unsigned(cfg.requant_mult_bits)),
            "rq_shift": In(unsigned(6)),
            "results_ready": Out(1),
            "bank_full": Out(banks),
        })

    @property
    def o_shape(self):
        return signed(self.fmt.out_acc_bits)

    def elaborate(self, platform):
        m = Module()
        rows = self.rows
        # An entry keeps the row's fields but its slot (the address), and the rise as
        # rise - 1 and rise == 0, ready for the rescale's shift.
        members = dict(tile_row_layout(self.cfg, self.fmt, rows).members)
        del members["slot"]
        rise_shape = members.pop("rise")
        info_entry = data.StructLayout({**members, "rise_m1": rise_shape, "rise0": 1})
        # Entry (bank, row) at address {bank, row}: two banks of a power-of-two size.
        m.submodules.info_mem = info_mem = Memory(shape=info_entry,
                                                  depth=self._info_depth(),
                                                  init=[])
        o_word = data.ArrayLayout(self.o_shape, self.cols)
        m.submodules.o_mem = o_mem = Memory(shape=o_word, depth=rows * self.groups, init=[])

        # Banks of info entries: the writer fills bank wbank; a bank is full once its tile's
        # last row is in, and free again once its tile's results (and pass) are done.
        banks = self.banks
        full = Signal(banks)
        tile_rows = [Signal(range(rows + 1), name=f"tile_rows{b}") for b in range(banks)]
        wbank, rbank = Signal(range(banks)), Signal(range(banks))
        m.d.comb += self.bank_full.eq(full)

        def next_bank(b):
            return ~b if banks == 2 else Mux(b == banks - 1, 0, b + 1)
        done_tile = Signal()            # the result side finished the tile of bank rbank
        iw = info_mem.write_port()
        take_info = Signal()
        m.d.comb += [self.info.ready.eq(~full.bit_select(wbank, 1)),
                     take_info.eq(self.info.valid & self.info.ready),
                     iw.addr.eq(self._info_addr(self.info.payload.slot, wbank)),
                     iw.en.eq(take_info),
                     *[iw.data[k].eq(self.info.payload[k]) for k in members],
                     iw.data.rise_m1.eq(self.info.payload.rise - 1),
                     iw.data.rise0.eq(self.info.payload.rise == 0)]
        with m.If(take_info & self.info.payload.last):
            m.d.sync += [full.bit_select(wbank, 1).eq(1), wbank.eq(next_bank(wbank))]
            for b in range(banks):
                with m.If(wbank == b):
                    m.d.sync += tile_rows[b].eq(self.info.payload.slot + 1)
        with m.If(done_tile):
            m.d.sync += [full.bit_select(rbank, 1).eq(0), rbank.eq(next_bank(rbank))]

        passing = Signal()              # the normalisation pass runs
        pass_go = Signal()              # a final tile's last result is written
        # One read port per memory, shared: results are not taken while the pass runs.
        ir = info_mem.read_port(domain="sync")
        orr = o_mem.read_port(domain="sync")
        self._accumulate(m, ir, orr, o_mem.write_port(), info_entry, full, rbank, passing,
                         done_tile, pass_go)
        self._normalise(m, ir, orr, info_entry, rbank, tile_rows, passing, pass_go, done_tile)
        return m

    def _addr(self, row, group):
        if self.groups == 1:
            return row
        return row * self.groups + group

    def _info_addr(self, row, bank):
        return Cat(row[:_bits(self.rows)], bank) if self.rows > 1 else bank

    def _info_depth(self):
        # Entry (bank, row) at address {bank, row}: banks of a power-of-two size.
        per_bank = 1 << _bits(self.rows) if self.rows > 1 else 1
        return per_bank * (1 << (self.banks - 1).bit_length())

    def _accumulate(self, m, ir, orr, ow, info_entry, full, rbank, passing, done_tile,
                    pass_go):
        """Result beats: read O and the row's entry (P0), rescale (P2, P3), add (P4) and
        write back (P5). A tile's last beat ends the tile once written (or starts the pass on
        a final tile)."""
        cols, S = self.cols, self.o_shape.width
        res = self.result
        busy = Signal()                 # a tile's last beat is in the pipeline
        take = Signal()
        m.d.comb += [res.ready.eq(full.bit_select(rbank, 1) & ~passing & ~busy),
                     self.results_ready.eq(res.ready),
                     take.eq(res.valid & res.ready)]
        group = res.payload.col // cols
        addr = self._addr(res.payload.row, group)
        with m.If(~passing):
            m.d.comb += [ir.addr.eq(self._info_addr(res.payload.row, rbank)), ir.en.eq(1),
                         orr.addr.eq(addr), orr.en.eq(1)]
        with m.If(take & res.payload.last):
            m.d.sync += busy.eq(1)

        beat = data.StructLayout({"valid": 1, "last": 1, "addr": range(self.rows * self.groups),
                                  "ev": res.payload.data.shape()})
        p1 = Signal(beat)
        m.d.sync += [p1.valid.eq(take), p1.last.eq(res.payload.last), p1.addr.eq(addr),
                     p1.ev.eq(res.payload.data)]
        p2 = Signal(beat)
        p2_o = Signal(orr.data.shape())
        p2_i = Signal(info_entry)
        m.d.sync += [p2.eq(p1), p2_o.eq(orr.data), p2_i.eq(ir.data)]
        # round_shift(O, rise) as ((O >> (rise - 1)) + 1) >> 1, and O << 1 for rise 0 (the
        # same formula then gives O); 0 on the row's first tile.
        p3 = Signal(beat)
        p3_final = Signal()
        p3_half = [Signal(signed(S + 1), name=f"half{c}") for c in range(cols)]
        m.d.sync += [p3.eq(p2), p3_final.eq(p2_i.final),
                     *[p3_half[c].eq(Mux(p2_i.first, 0,
                                         Mux(p2_i.rise0, p2_o[c] << 1,
                                             p2_o[c] >> p2_i.rise_m1)))
                       for c in range(cols)]]
        p4 = Signal(beat)
        p4_final = Signal()
        p4_o = [Signal(signed(S), name=f"scaled{c}") for c in range(cols)]
        m.d.sync += [p4.eq(p3), p4_final.eq(p3_final),
                     *[p4_o[c].eq((p3_half[c] + 1) >> 1) for c in range(cols)]]
        p5 = Signal(beat)
        p5_final = Signal()
        p5_o = Signal(orr.data.shape())
        m.d.sync += [p5.eq(p4), p5_final.eq(p4_final),
                     *[p5_o[c].eq(p4_o[c] + p4.ev[c]) for c in range(cols)]]
        m.d.comb += [ow.addr.eq(p5.addr), ow.data.eq(p5_o), ow.en.eq(p5.valid)]
        with m.If(p5.valid & p5.last):
            m.d.sync += busy.eq(0)
            with m.If(p5_final):
                m.d.comb += pass_go.eq(1)
            with m.Else():
                m.d.comb += done_tile.eq(1)

    def _normalise(self, m, ir, orr, info_entry, rbank, tile_rows, passing, pass_go,
                   done_tile):
        """The pass after a final tile: every value of the tile's rows, ``norm_lanes`` per
        cycle, through :meth:`_lanes` into the ``out`` queue. A word of O and its row's entry
        are read at the word's first value group (the read ports hold them for the rest)."""
        cols, lanes, S = self.cols, self.norm_lanes, self.o_shape.width
        per_word = cols // lanes
        m.submodules.out_queue = out_q = StreamQueue(self.out.payload.shape(), self.OUT_QUEUE,
                                                     storage="distributed", checked=False)
        wiring.connect(m, out_q.r_stream, wiring.flipped(self.out))
        reserved = Signal(range(self.OUT_QUEUE + 1))
        issue = Signal()
        m.d.comb += issue.eq(passing & (reserved < self.OUT_QUEUE))
        m.d.sync += reserved.eq(reserved + issue - (self.out.valid & self.out.ready))

        row = Signal(range(self.rows))
        group = Signal(range(max(2, self.groups)))
        sub = Signal(range(max(2, per_word)))
        n_rows = Signal(range(self.rows + 1))
        for b in range(self.banks):
            with m.If(rbank == b):
                m.d.comb += n_rows.eq(tile_rows[b])
        with m.If(passing):
            m.d.comb += [ir.addr.eq(self._info_addr(row, rbank)), ir.en.eq(issue & (sub == 0)),
                         orr.addr.eq(self._addr(row, group)), orr.en.eq(issue & (sub == 0))]
        word_last = sub == per_word - 1
        row_last = word_last & (group == self.groups - 1)
        pass_last = row_last & (row == n_rows - 1)
        with m.If(pass_go):
            m.d.sync += [passing.eq(1), row.eq(0), group.eq(0), sub.eq(0)]
        with m.If(issue):
            m.d.sync += sub.eq(Mux(word_last, 0, sub + 1))
            with m.If(word_last):
                m.d.sync += group.eq(Mux(row_last, 0, group + 1))
            with m.If(row_last):
                m.d.sync += row.eq(row + 1)
            with m.If(pass_last):
                m.d.sync += passing.eq(0)
                m.d.comb += done_tile.eq(1)

        # n1: the position of the values read; n2: the word and the entry, registered as they
        # leave the block RAMs (their clock-to-output leaves no room for the lane select);
        # n2b: the lanes' values.
        side = data.StructLayout({"valid": 1, "last": 1, "row": range(self.rows),
                                  "col": self.out.payload.col.shape()})
        n1 = Signal(side)
        n1_sub = Signal.like(sub)
        m.d.sync += [n1.valid.eq(issue), n1.last.eq(pass_last), n1.row.eq(row),
                     n1.col.eq(group * cols + sub * lanes), n1_sub.eq(sub)]
        n2 = Signal(side)
        n2_sub = Signal.like(sub)
        n2_e = Signal(info_entry)
        n2_w = Signal(orr.data.shape())
        m.d.sync += [n2.eq(n1), n2_sub.eq(n1_sub), n2_e.eq(ir.data), n2_w.eq(orr.data)]
        n2b = Signal(side)
        n2b_e = Signal(info_entry)
        n2b_o = [Signal(signed(S), name=f"o{l}") for l in range(lanes)]
        m.d.sync += [n2b.eq(n2), n2b_e.eq(n2_e),
                     *[n2b_o[l].eq(n2_w[l] if per_word == 1 else
                                   n2_w.as_value().word_select(n2_sub * lanes + l,
                                                               S).as_signed())
                       for l in range(lanes)]]
        self._lanes(m, n2b, n2b_e, n2b_o, out_q)

    def _round_shift(self, m, x, amount_m1, name):
        """``round_shift(x, amount_m1 + 1)`` in three registered stages (a shift by the
        multiple of 8, by the rest, then ``(. + 1) >> 1``); ``amount_m1`` must be presented with
        ``x``. Returns the result register."""
        coarse = Signal.like(x, name=f"{name}_coarse")
        fine_amount = Signal(3, name=f"{name}_fine_amount")
        fine = Signal.like(x, name=f"{name}_fine")
        rounded = Signal(x.shape(), name=f"{name}_rounded")
        m.d.sync += [coarse.eq(x >> Cat(0, 0, 0, amount_m1[3:])), fine_amount.eq(amount_m1[:3]),
                     fine.eq(coarse >> fine_amount), rounded.eq((fine + 1) >> 1)]
        return rounded

    ROUND_LATENCY = 3

    @staticmethod
    def _saturate(x, bits):
        """``x`` clamped to ``bits``-bit two's complement, without a comparison's carry chain:
        it fits iff its bits from ``bits - 1`` up all equal its sign."""
        top = x[bits - 1:]
        fits = top.all() | ~top.any()
        limit = Mux(x[-1], -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        return Mux(fits, x[:bits].as_signed(), limit)

    def _lanes(self, m, n2, entry, values, out_q):
        """Per lane: ``o' = round_shift(o, drop)`` (n3-n5), ``o' * recip`` (WideMultiplier),
        its rounded shift by ``lead - drop + R - B - G``, times ``rq_mult``, the rounded shift
        by ``rq_shift + G``, saturation (0 for a row that never started), into ``out``."""
        cfg, fmt = self.cfg, self.fmt
        lanes, S = self.norm_lanes, self.o_shape.width
        R, B, G, A = cfg.recip_bits, cfg.prob_bits, fmt.norm_guard_bits, cfg.act_bits
        # n3: drop = max(lead - NORM_SUM_BITS, 0) (as drop - 1 and drop == 0) and the
        # normalising shift, less one.
        lead = entry.lead
        over = lead > NORM_SUM_BITS
        drop_m1 = Signal(range(max(2, fmt.sum_bits)))
        drop0 = Signal()
        shift_m1 = Signal(range(NORM_SUM_BITS + R + 1))
        n3_o = [Signal(signed(S), name=f"n3_o{l}") for l in range(lanes)]
        n3_recip = Signal.like(entry.recip)
        m.d.sync += [drop_m1.eq(lead - (NORM_SUM_BITS + 1)), drop0.eq(~over),
                     shift_m1.eq(Mux(over, NORM_SUM_BITS, lead) + (R - B - G - 1)),
                     n3_recip.eq(entry.recip), *[n3_o[l].eq(values[l]) for l in range(lanes)]]
        # n4: the shift of round_shift(o, drop); n5: its rounding, the multiplier's operands.
        n4_half = [Signal(signed(S + 1), name=f"n4_half{l}") for l in range(lanes)]
        n4_recip = Signal.like(entry.recip)
        m.d.sync += [n4_recip.eq(n3_recip),
                     *[n4_half[l].eq(Mux(drop0, n3_o[l] << 1, n3_o[l] >> drop_m1))
                       for l in range(lanes)]]
        n5_o = [Signal(signed(S), name=f"n5_o{l}") for l in range(lanes)]
        n5_recip = Signal.like(entry.recip)
        m.d.sync += [n5_recip.eq(n4_recip),
                     *[n5_o[l].eq((n4_half[l] + 1) >> 1) for l in range(lanes)]]
        lat1 = WideMultiplier.latency_for(signed(S), unsigned(R + 1))
        m.submodules.shift_delay = sd = DelayLine(shift_m1.shape(), 2 + lat1, reset_less=True)
        m.d.comb += sd.value.eq(shift_m1)
        norm_shape = signed(A + B + G + 2)
        lat2 = WideMultiplier.latency_for(norm_shape, unsigned(cfg.requant_mult_bits))
        # The output requantizer's shift, less one (static while a pass runs).
        rq_m1 = Signal(7)
        m.d.sync += rq_m1.eq(self.rq_shift + (G - 1))
        results = []
        for l in range(lanes):
            m.submodules[f"recip_mult{l}"] = mul1 = WideMultiplier(signed(S), unsigned(R + 1))
            m.d.comb += [mul1.en.eq(1), mul1.a.eq(n5_o[l]), mul1.b.eq(n5_recip)]
            norm = self._round_shift(m, mul1.p, sd.delayed, f"norm{l}")
            m.submodules[f"rq_mult{l}"] = mul2 = WideMultiplier(norm_shape,
                                                                unsigned(cfg.requant_mult_bits))
            m.d.comb += [mul2.en.eq(1), mul2.a.eq(norm[:norm_shape.width].as_signed()),
                         mul2.b.eq(self.rq_mult)]
            results.append(self._round_shift(m, mul2.p, rq_m1, f"out{l}"))
        # Side data from n2 to the results' cycle.
        total = 3 + lat1 + self.ROUND_LATENCY + lat2 + self.ROUND_LATENCY
        side_shape = data.StructLayout({"side": n2.shape(), "started": 1})
        m.submodules.side_delay = dl = DelayLine(side_shape, total)
        m.d.comb += [dl.value.side.eq(n2), dl.value.started.eq(entry.started)]
        side = dl.delayed.side
        w = out_q.w_stream
        m.d.sync += [w.valid.eq(side.valid), w.payload.row.eq(side.row),
                     w.payload.col.eq(side.col), w.payload.last.eq(side.last),
                     *[w.payload.data[l].eq(Mux(~dl.delayed.started, 0, self._saturate(r, A)))
                       for l, r in enumerate(results)]]
