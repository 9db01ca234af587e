"""Additive (Bahdanau) scores of one head: ``S[i, j] = sum_d w[d] tanh(q_i[d] + k_j[d])``.

Hardware twin of :func:`golden.additive.additive_scores` (docs/numerics.md, "Additive
scoring"), with the matrix engine's operand and result streams, so that a score job can run
on it instead of on the systolic array.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.additive import TANH_BITS

from hw.blocks.register_slice import RegisterSlice
from hw.blocks.tanh import TanhUnit

__all__ = ["AdditiveScorer", "Z_CODES"]

#: Entries of the tanh table: every ``z = q + k`` of two int8 values, as a 9-bit code.
Z_CODES = 512


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _partial_sums(t, w):
    """``t * w`` of two signed 8-bit values as four sums of two shifted partial products
    each (the first adder level, one carry chain from flip-flops); :func:`_sum_of` of them
    is the product. An adder tree in LUTs (about 90 LUT4), where ``*`` would take a DSP block
    per lane, which the configurations that build this need for their arrays."""
    parts = [Mux(w[i], t << i, 0) for i in range(7)]
    parts.append(Mux(w[7], -(t << 7), 0))          # the sign bit weighs -2^7
    return [parts[i] + parts[i + 1] for i in range(0, 8, 2)]


def _sum_of(values):
    """The sum of ``values`` by a balanced adder tree."""
    while len(values) > 1:
        values = [values[i] + values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


class AdditiveScorer(wiring.Component):
    """Additive scores ``S = sum_kk w[kk] tanh(arg(A[r, kk] + B[kk, c]))`` of ``R x C`` tiles,
    ``lanes`` terms per cycle.

    Contract (the matrix engine's, :class:`hw.blocks.matmul.MatmulEngine`, for ``S = Q K^T``):
    one ``cmd`` beat is one product of ``m`` query rows by ``n`` keys over ``k`` elements
    (``k`` = d_k) for head group ``lh``; tiles ``tm`` outer, ``tn`` inner; per tile ``k``
    joined beats of ``a`` (``Q[tm*R + r, kk]``, rows ``>= m`` padded by the producer) and
    ``b`` (``K[tn*C + c, kk]``, columns ``>= n`` padded). ``result`` gives per tile one beat
    per row ``< m``: ``data[c]`` the exact integer score (0 for ``col + c >= n``), ``row``,
    ``col``, ``last`` on the command's final beat. The scores are those of
    :func:`golden.additive.additive_scores` with the head's vector ``w`` (int8) and the run's
    ``tanh_mult``/``tanh_shift``.

    The tanh table: ``T[z] = tanh_int(round_shift(z * tanh_mult, tanh_shift))`` for every
    9-bit ``z`` (``Z_CODES`` entries, one copy per lane), filled after a ``fill`` strobe from
    the settings of that cycle (``z * tanh_mult`` by accumulation, the rounding shift, the
    :class:`hw.blocks.tanh.TanhUnit`): ``Z_CODES + FILL_STAGES + TanhUnit.LATENCY + 1``
    cycles, during which ``filling`` is high and no command is taken. The settings are layer parameters: fill once
    per committed layer. ``tanh_shift`` must be 1..62.

    ``w_write`` writes word ``addr = (lh * max_k + kk) / 4`` of the vectors: elements ``kk``
    to ``kk + 3`` (int8) in bytes 0..3, ``en`` the byte enables, one word per cycle
    (``max_k`` a multiple of 4).

    Pipeline: a beat is held while its ``R*C`` terms go through ``lanes`` lanes,
    ``G = ceil(R*C / lanes)`` cycles per beat (term ``i`` in lane ``i % lanes``, cycle
    ``i // lanes`` of the beat): the sum ``z``, the table read, the table word registered,
    the product with ``w[kk]`` in two stages (``TERM_STAGES`` registers in all), the
    accumulation. The tile's sums are copied to the output bank with its last term, and
    its rows leave one per cycle; a tile whose last term comes while the bank still holds rows
    waits; they reach ``result`` through a register slice (one cycle). Throughput ``lanes``
    terms per cycle: a tile takes ``k * G`` cycles, the product
    ``tiles * k * G`` plus the drain (:func:`hw.perf.additive.scorer_cycles` is exact).
    ``result`` backpressure holds the bank; nothing is lost.

    Parameters
    ----------
    rows, cols : int
        The tile (the array's ``R x C``).
    lanes : int
        Terms per cycle, 1..rows*cols.
    a_width, b_width : int
        Operand widths (the engine's; values are int8).
    max_m, max_n, max_k, groups : int
        Largest ``m``, ``n``, ``k`` and the head groups (``lh`` in ``0..groups-1``).
    acc_bits : int
        Width of a result element (the engine's ``acc_bits``).
    """

    #: Registers of a term from the held beat to the accumulator: the sum z, the table read,
    #: the table word, the product's first adder level, the product.
    TERM_STAGES = 5
    #: Registers of the table fill between ``z * tanh_mult`` and the tanh unit.
    FILL_STAGES = 3

    def __init__(self, rows: int, cols: int, lanes: int, *, a_width: int = 8,
                 b_width: int = 8, max_m: int, max_n: int, max_k: int, groups: int = 1,
                 acc_bits: int = 32, mult_bits: int = 16):
        for name, v, lo, hi in (("rows", rows, 1, 64), ("cols", cols, 1, 64),
                                ("lanes", lanes, 1, rows * cols), ("max_m", max_m, 1, 65536),
                                ("max_n", max_n, 1, 65536), ("max_k", max_k, 1, 4096),
                                ("groups", groups, 1, 256)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} = {v!r} is out of range: allowed {lo}..{hi}")
        if max_k % 4:
            raise ValueError(f"max_k = {max_k} must be a multiple of 4 (the w vectors are "
                             f"written four elements to a word)")
        self.rows, self.cols, self.lanes = rows, cols, lanes
        self.max_m, self.max_n, self.max_k, self.groups = max_m, max_n, max_k, groups
        self.G = _cdiv(rows * cols, lanes)
        # |sum| <= k * 127 * 128
        self.sum_bits = (max_k * 127 * 128).bit_length() + 1
        if self.sum_bits > acc_bits:
            raise ValueError(f"acc_bits = {acc_bits} cannot hold a score of {max_k} terms")
        self.cmd_layout = data.StructLayout({
            "m": unsigned(max_m.bit_length()), "n": unsigned(max_n.bit_length()),
            "k": unsigned(max_k.bit_length()), "lh": range(groups)})
        self.result_layout = data.StructLayout({
            "data": data.ArrayLayout(signed(acc_bits), cols),
            "row": unsigned(max(1, (max_m - 1).bit_length())),
            "col": unsigned(max(1, (max_n - 1).bit_length())),
            "last": 1,
        })
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "a": In(stream.Signature(data.ArrayLayout(signed(a_width), rows))),
            "b": In(stream.Signature(data.ArrayLayout(signed(b_width), cols))),
            "result": Out(stream.Signature(self.result_layout)),
            "w_write": In(self.w_write_signature(groups, max_k)),
            "fill": In(1), "tanh_mult": In(unsigned(mult_bits)), "tanh_shift": In(unsigned(6)),
            "filling": Out(1),
        })

    @staticmethod
    def w_write_signature(groups: int, max_k: int) -> wiring.Signature:
        """The ``w_write`` port (as its driver sees it): byte enables, word address, word."""
        return wiring.Signature({"en": Out(4), "addr": Out(range(max(2, groups * max_k // 4))),
                                 "data": Out(32)})

    # ------------------------------------------------------------------ structure
    def elaborate(self, platform):
        m = Module()
        tables = self._tables(m)
        wmem = Memory(shape=32, depth=self.groups * self.max_k // 4, init=[])
        m.submodules.w_vectors = wmem
        wp = wmem.write_port(granularity=8)
        m.d.comb += [wp.en.eq(self.w_write.en), wp.addr.eq(self.w_write.addr),
                     wp.data.eq(self.w_write.data)]
        w_rd = wmem.read_port(domain="sync")
        en = Signal()                  # the term pipeline advances
        feed = self._feeder(m, w_rd, en)
        terms = self._terms(m, tables, feed, en)
        new, final_next = self._accumulators(m, terms, en)
        self._bank(m, terms.side, new, final_next, en)
        return m

    def _tables(self, m):
        """The per-lane tanh tables and their fill; returns the tables' read ports."""
        T = TANH_BITS + 1
        # The tanh unit takes 14..32-bit arguments: a product narrower than 14 bits is
        # sign-extended, a wider one saturated (any |a| >= 8.0, 2^13, gives +-127 already).
        arg_bits = min(32, max(14, 9 + len(self.tanh_mult) + 1))
        m.submodules.tanh = tanh = TanhUnit(1, arg_bits=arg_bits)
        # z * tanh_mult by accumulation over z = -256 .. 255 (one step per cycle), then the
        # rounding shift into the tanh unit; its result is written LATENCY cycles later.
        mb = len(self.tanh_mult)
        count = Signal(range(Z_CODES + 1))
        active = Signal()
        prod = Signal(signed(9 + mb + 1))
        mult = Signal(unsigned(mb))
        sm1 = Signal(6)                # tanh_shift - 1
        with m.If(self.fill):
            m.d.sync += [active.eq(1), count.eq(0), mult.eq(self.tanh_mult),
                         sm1.eq(self.tanh_shift - 1),
                         prod.eq(-(self.tanh_mult << 8))]
        with m.Elif(active):
            m.d.sync += [prod.eq(prod + mult), count.eq(count + 1)]
            with m.If(count == Z_CODES - 1):
                m.d.sync += active.eq(0)
        # stage 1: >> (shift - 1), stage 2: (+ 1) >> 1, stage 3: saturated to the tanh unit's
        # argument (its own register: the compares and the unit's first stage, the
        # magnitude, did not fit one cycle together)
        half = Signal(signed(len(prod)), reset_less=True)
        arg = Signal(signed(len(prod)), reset_less=True)
        hi = (1 << (arg_bits - 1)) - 1
        sat = Signal(signed(arg_bits), reset_less=True)
        m.d.sync += [half.eq(prod >> sm1), arg.eq((half + 1) >> 1),
                     sat.eq(Mux(arg > hi, hi, Mux(arg < -hi, -hi, arg)))]
        m.d.comb += tanh.a[0].eq(sat)
        lat = self.FILL_STAGES + TanhUnit.LATENCY
        valid = Signal(lat)            # write enables, as a shift register
        addrs = [Signal(9, name=f"fill_addr{i}", reset_less=True) for i in range(lat)]
        m.d.sync += [valid.eq(Cat(active, valid[:-1])), addrs[0].eq((count - 256)[:9])]
        m.d.sync += [addrs[i].eq(addrs[i - 1]) for i in range(1, lat)]
        m.d.comb += self.filling.eq(self.fill | active | valid.any())
        ports = []
        for lane in range(self.lanes):
            mem = Memory(shape=signed(T), depth=Z_CODES, init=[])
            m.submodules[f"table{lane}"] = mem
            wp = mem.write_port()
            m.d.comb += [wp.en.eq(valid[-1]), wp.addr.eq(addrs[-1]), wp.data.eq(tanh.t[0])]
            ports.append(mem.read_port(domain="sync"))
        return ports

    def _feeder(self, m, w_rd, en):
        """The command register, the tile position and the held beat; returns the held beat
        (``a``, ``b``, ``w``), its group counter ``p`` and its flags as a namespace."""
        R, C, G = self.rows, self.cols, self.G
        cmd = self.cmd.payload
        # command: taken when no product runs (and the table is full)
        busy = Signal()
        cur = Signal(self.cmd_layout)
        m.d.comb += self.cmd.ready.eq(~busy & ~self.filling)
        # position: row0, col0, kk of the next beat; rows and columns left
        row0 = Signal(range(self.max_m + R))
        col0 = Signal(range(self.max_n + C))
        kk = Signal(range(self.max_k))
        # rows and columns left from the tile position (m - row0, n - col0), kept as counters
        # beside it: the subtractions and the compares after them did not fit a cycle
        rows_left = Signal(range(self.max_m + 1))
        cols_left = Signal(range(self.max_n + 1))
        # The last-beat flags are registers: each is loaded with its compare on the value
        # its counter takes, computed beside the take logic from registers (from the
        # command's k, n and m on a command), so no carry chain lies behind the take. As
        # compares on the counters (kk == k - 1, cols_left <= C, rows_left <= R) the
        # feeder's take did not fit a cycle.
        last_kk = Signal()
        last_col = Signal()
        last_row = Signal()
        k_one = Signal()               # the command's k is 1
        n_one = Signal()               # the command's n fits one tile
        # the held beat
        held = Signal()
        # (the ports' widths: the values are int8, the sum z takes their low 9 bits)
        a_h = Signal(self.a.payload.shape(), reset_less=True)
        b_h = Signal(self.b.payload.shape(), reset_less=True)
        meta_layout = data.StructLayout({
            "first": 1, "last": 1, "row0": len(row0), "col0": len(col0),
            "row_mask": R, "col_mask": C, "last_tile": 1})
        meta_h = Signal(meta_layout, reset_less=True)
        p = Signal(range(G))
        issue = held & en                         # group p enters the pipeline
        frees = ~held | (issue & (p == G - 1))
        take = busy & frees & self.a.valid & self.b.valid
        m.d.comb += [self.a.ready.eq(take), self.b.ready.eq(take),
                     w_rd.addr.eq(cur.lh * (self.max_k // 4) + kk[2:]),
                     w_rd.en.eq(take)]
        w_byte = Signal(2)             # the element of the word read for the held beat
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [busy.eq(1), cur.eq(cmd), row0.eq(0), col0.eq(0), kk.eq(0),
                         rows_left.eq(cmd.m), cols_left.eq(cmd.n),
                         k_one.eq(cmd.k == 1), n_one.eq(cmd.n <= C),
                         last_kk.eq(cmd.k == 1), last_col.eq(cmd.n <= C),
                         last_row.eq(cmd.m <= R)]
        with m.If(issue):
            m.d.sync += p.eq(Mux(p == G - 1, 0, p + 1))
            with m.If(p == G - 1):
                m.d.sync += held.eq(0)
        with m.If(take):
            m.d.sync += [
                held.eq(1), p.eq(0), w_byte.eq(kk[:2]),
                a_h.eq(self.a.payload), b_h.eq(self.b.payload),
                meta_h.first.eq(kk == 0), meta_h.last.eq(last_kk),
                meta_h.row0.eq(row0), meta_h.col0.eq(col0),
                meta_h.row_mask.eq(Cat(*(rows_left > r for r in range(R)))),
                meta_h.col_mask.eq(Cat(*(cols_left > c for c in range(C)))),
                meta_h.last_tile.eq(last_col & last_row),
                kk.eq(Mux(last_kk, 0, kk + 1)),
                last_kk.eq(Mux(last_kk, k_one, kk + 2 == cur.k)),
            ]
            with m.If(last_kk):
                m.d.sync += [col0.eq(Mux(last_col, 0, col0 + C)),
                             cols_left.eq(Mux(last_col, cur.n, cols_left - C)),
                             last_col.eq(Mux(last_col, n_one, cols_left <= 2 * C))]
                with m.If(last_col):
                    m.d.sync += [row0.eq(row0 + R), rows_left.eq(rows_left - R),
                                 last_row.eq(rows_left <= 2 * R)]
                    with m.If(last_row):
                        m.d.sync += busy.eq(0)
        return SimpleNamespace(a=a_h, b=b_h, w=w_rd.data.word_select(w_byte, 8).as_signed(),
                               meta=meta_h, p=p, issue=issue, take=take,
                               meta_layout=meta_layout)

    def _terms(self, m, tables, feed, en):
        """Lanes: s1 the sum z, s2 the table read, s3 the table word registered, s4 the
        product's first adder level, s5 the product with w, then the accumulation (in
        :meth:`_output`). A block RAM's data arrives late in its cycle (about 8.7 ns after the
        clock on ECP5) and the product is three adder levels, so read, product and
        accumulation each get their own cycle (one stage for all ran at about 53 MHz).
        Returns the s5 registers as a namespace."""
        R, C, L, G = self.rows, self.cols, self.lanes, self.G
        side = data.StructLayout({"valid": 1, "p": range(G), "meta": feed.meta_layout})
        stages = [Signal(side, name=f"s{i + 1}") for i in range(self.TERM_STAGES)]
        ws = [Signal(signed(8), name=f"w{i + 1}", reset_less=True) for i in range(3)]
        with m.If(en):
            m.d.sync += [stages[0].valid.eq(feed.issue), stages[0].p.eq(feed.p),
                         stages[0].meta.eq(feed.meta), ws[0].eq(feed.w)]
            m.d.sync += [stages[i].eq(stages[i - 1]) for i in range(1, len(stages))]
            m.d.sync += [ws[i].eq(ws[i - 1]) for i in range(1, len(ws))]
        prods = []
        for lane in range(L):
            # the lane's term in each group: (r, c) of term p * L + lane (None past R*C)
            pairs = [divmod(p * L + lane, C) if p * L + lane < R * C else None
                     for p in range(G)]
            # The lane's operands of group p, registers stepped with p: on a take those of
            # group 0 of the beat taken, on an issue those of group p + 1 of the held beat.
            # (A multiplexer on p and the sum z behind it did not fit a cycle.)
            def operand(regs, which, q):
                rc = pairs[q] if q < G else None
                return regs[rc[which]] if rc else Const(0, signed(8))
            op_a = Signal(signed(8), name=f"op_a{lane}", reset_less=True)
            op_b = Signal(signed(8), name=f"op_b{lane}", reset_less=True)
            with m.If(feed.take):
                m.d.sync += [op_a.eq(operand(self.a.payload, 0, 0)),
                             op_b.eq(operand(self.b.payload, 1, 0))]
            with m.Elif(feed.issue):
                m.d.sync += [op_a.eq(Array(operand(feed.a, 0, q + 1) for q in range(G))[feed.p]),
                             op_b.eq(Array(operand(feed.b, 1, q + 1) for q in range(G))[feed.p])]
            z1 = Signal(signed(9), name=f"z{lane}", reset_less=True)
            rd = tables[lane]
            t3 = Signal.like(rd.data, name=f"t{lane}", reset_less=True)
            halves = [Signal(signed(16), name=f"half{lane}_{j}", reset_less=True)
                      for j in range(4)]
            prod = Signal(signed(16), name=f"term{lane}", reset_less=True)
            m.d.comb += [rd.addr.eq(z1.as_unsigned()), rd.en.eq(en)]
            with m.If(en):
                m.d.sync += [z1.eq(op_a + op_b), t3.eq(rd.data),
                             *(h.eq(v) for h, v in zip(halves, _partial_sums(t3, ws[2]))),
                             prod.eq(_sum_of(halves))]
            prods.append(prod)
        return SimpleNamespace(side=stages[-1], before=stages[-2], prods=prods)

    def _accumulators(self, m, terms, en):
        """The accumulators (term ``i`` in register ``i``); returns the values the bank
        takes with a tile's last group, and the next state of ``final`` (the last stage
        holds a tile's last group)."""
        R, C, L, G = self.rows, self.cols, self.lanes, self.G
        acc = [Signal(signed(self.sum_bits), name=f"acc{i}", reset_less=True)
               for i in range(R * C)]
        # Per group, "the last stage holds this group" and "... of a tile's first beat", as
        # registers beside the last stage: each reaches one group's accumulators, where the
        # last stage's own first flag reached all of them (about 1,000 LUTs) and did not fit
        # a cycle.
        mine_g = Signal(G)
        first_g = Signal(G)
        with m.If(en):
            m.d.sync += [mine_g.eq(Cat(*(terms.before.valid & (terms.before.p == p)
                                         for p in range(G)))),
                         first_g.eq(Cat(*(terms.before.valid & terms.before.meta.first
                                          & (terms.before.p == p) for p in range(G))))]
        new = []
        for i in range(R * C):
            p, lane = divmod(i, L)
            mine = mine_g[p]
            nxt = Mux(first_g[p], 0, acc[i]) + terms.prods[lane]
            with m.If(en & mine):
                m.d.sync += acc[i].eq(nxt)
            # the value the copy takes in the cycle of the tile's last group
            new.append(Mux(mine, nxt, acc[i]) if p == G - 1 else acc[i])

        def ends_tile(st):
            return st.valid & st.meta.last & (st.p == G - 1)
        # final (the last stage holds a tile's last group) and the enable are registers,
        # computed a cycle ahead from the next state: the enable reaches about 1,900
        # flip-flops, and from the last stage's flags through a LUT it did not fit a cycle.
        final = Signal()
        final_next = Mux(en, ends_tile(terms.before), final)
        m.d.sync += final.eq(final_next)
        return new, final_next

    def _bank(self, m, side, new, final_next, en):
        """The output bank (the tile's sums) and the result rows leaving it; drives ``en``
        (the term pipeline advances unless a finished tile waits for the bank)."""
        R, C = self.rows, self.cols
        # pend[r]: bank row r holds a row still to send
        bank = [Signal(signed(self.sum_bits), name=f"bank{i}", reset_less=True)
                for i in range(R * C)]
        b_meta = Signal(side.meta.shape(), reset_less=True)
        b_row = Signal(range(R))
        pend = Signal(R)
        b_full = pend[0]
        en_r = Signal(init=1)
        load = Signal()                # en & final, a register computed a cycle ahead
        m.d.comb += en.eq(en_r)
        # The rows leave through a register slice: the column mask, then the score select
        # and the result writer beyond it, did not fit a cycle.
        m.submodules.result_slice = out_slice = RegisterSlice(
            stream.Signature(self.result_layout))
        wiring.connect(m, out_slice.o_stream, wiring.flipped(self.result))
        res = out_slice.i_stream
        shift = res.valid & res.ready
        with m.If(load):
            m.d.sync += [b_row.eq(0), b_meta.eq(side.meta)]
        # Each row taken shifts the bank up a row, so the row leaving is always row 0: a row
        # multiplexer on b_row (a net to every result bit) did not fit a cycle. Row r moves
        # only while row r + 1 is pending, and its data select is its own pend[r] (a load
        # needs an empty bank, a shift a full one): each row's enable and select are nets of
        # one row, where one shift enable for the whole bank (about 1,500 flip-flops) did not
        # fit a cycle.
        for r in range(R):
            move = shift & pend[r + 1] if r + 1 < R else Const(0)
            with m.If(load | move):
                for c in range(C):
                    up = bank[(r + 1) * C + c] if r + 1 < R else bank[r * C + c]
                    m.d.sync += bank[r * C + c].eq(Mux(pend[r], up, new[r * C + c]))
        for c in range(C):
            m.d.comb += res.payload.data[c].eq(Mux(b_meta.col_mask[c], bank[c], 0))
        m.d.comb += [res.valid.eq(b_full),
                     res.payload.row.eq(b_meta.row0 + b_row),
                     res.payload.col.eq(b_meta.col0),
                     res.payload.last.eq(b_meta.last_tile & ~pend[1] if R > 1
                                         else b_meta.last_tile)]
        pend_next = Signal(R)
        m.d.comb += pend_next.eq(pend)
        with m.If(shift):
            m.d.sync += b_row.eq(b_row + 1)
            m.d.comb += pend_next.eq(pend >> 1)
        with m.If(load):
            m.d.comb += pend_next.eq(side.meta.row_mask)
        b_full_next = pend_next[0]
        m.d.sync += [pend.eq(pend_next), en_r.eq(~(final_next & b_full_next)),
                     load.eq(final_next & ~b_full_next)]
