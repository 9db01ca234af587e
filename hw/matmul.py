"""Matrix-multiply engine: command decoding, tiling, bias and requantization around the array."""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from .systolic import SystolicArray

__all__ = ["MatmulEngine", "operand_widths"]


def operand_widths(cfg: AttentionConfig) -> tuple[int, int]:
    """Signed widths of operands A and B.

    A carries int8-style activations or unsigned UQ0.prob_bits probabilities (P.V), so it has
    one more bit than ``prob_bits``; B carries activations or weights.
    """
    return max(cfg.act_bits, cfg.prob_bits + 1), max(cfg.act_bits, cfg.weight_bits)


class MatmulEngine(wiring.Component):
    """``C = A @ B (+ bias)``, optionally requantized, on one systolic array.

    Contract
    --------
    One ``cmd`` beat describes one product: A is ``m`` x ``k``, B is ``k`` x ``n``. The
    engine splits C into ``R`` x ``C`` tiles (``R, C = cfg.array_rows, cfg.array_cols``)
    visited ``tm`` outer (``ceil(m / R)``), ``tn`` inner (``ceil(n / C)``). For each tile and
    each ``kk`` in ``0..k-1`` it takes one beat from ``a`` (``A[tm*R + r, kk]`` for ``r`` in
    ``0..R-1``, rows ``>= m`` padded with 0 by the producer) together with one beat from ``b``
    (``B[kk, tn*C + c]``, columns ``>= n`` padded with 0). A and B are re-sent for every tile.
    With ``bias_en``, one ``bias`` beat per tile (same tile order) gives the bias of the
    tile's ``C`` columns.

    ``result`` gives, per tile, one beat per row ``tm*R + r < m`` in increasing row order:
    ``data[c]`` is element ``(row, col + c)``, 0 for ``col + c >= n``; ``last`` marks the
    command's final beat. Without ``requant_en`` the value is the exact sum ``acc + bias``
    (bit-exact with ``golden.matmul_acc``; it wraps modulo ``2**acc_bits`` where golden would
    raise ``OverflowError``). With ``requant_en`` it is
    ``golden.requantize(acc + bias, Requant(mult, shift), cfg.act_bits)``, computed on the
    exact ``acc_bits + 1``-bit sum, sign-extended to ``acc_bits``. The accumulation itself is
    exact as long as ``|sum a*b|`` fits ``acc_bits`` (the configuration guarantees it for the
    layer's products).

    A command is *rejected* when ``m``, ``n`` or ``k`` is outside ``1..max_m``,
    ``1..max_n``, ``1..max_k``, or when ``requant_en`` is set with ``shift`` outside 1..62:
    the engine takes the ``cmd`` beat and pulses ``error`` for one cycle in the next cycle; no
    operand, bias or result beat belongs to it, and the next command proceeds normally.

    Commands are pipelined: the next command is taken in the step the current one issues its
    final operand beat, so back-to-back commands and consecutive tiles keep the array busy.
    The ``bias`` beat of a tile may arrive at any time before its rows leave the array; the
    engine stalls (without losing anything) until it does, so a producer must not hold it
    back until later operand beats have been taken.

    Timing (no stalls; see ``hw.perf.matmul_cycles`` for the exact count): one operand beat
    per cycle; tiles with ``k < max(R, C)`` are issued ``max(R, C)`` cycles apart (the array
    drains one row per cycle). Backpressure on ``result`` stalls the whole engine through a
    registered step enable; nothing is lost or duplicated.

    Parameters
    ----------
    cfg : AttentionConfig
        Array size and number widths.
    max_m, max_n, max_k : int
        Largest ``m``, ``n``, ``k`` accepted, 1..65536. Defaults:
        ``max(cfg.max_seq_len, cfg.max_kv_len)``, ``max(cfg.d_model, cfg.max_kv_len)``,
        ``max(cfg.d_model, cfg.max_kv_len)``.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        ``m``, ``n``, ``k`` (unsigned, ``max_*.bit_length()`` bits), ``bias_en``,
        ``requant_en``, ``mult`` (unsigned ``cfg.requant_mult_bits``), ``shift`` (unsigned 6).
    a : In(stream.Signature(ArrayLayout(signed(a_width), R)))
        ``a_width = max(act_bits, prob_bits + 1)``.
    b : In(stream.Signature(ArrayLayout(signed(b_width), C)))
        ``b_width = max(act_bits, weight_bits)``.
    bias : In(stream.Signature(ArrayLayout(signed(cfg.bias_bits), C)))
    result : Out(stream.Signature(result_layout))
        ``data`` (ArrayLayout(signed(cfg.acc_bits), C)), ``row``, ``col`` (first column of the
        tile), ``last``.
    error : Out(1)
        One-cycle pulse per rejected command.
    """

    MAX_DIM = 1 << 16

    def __init__(self, cfg: AttentionConfig, *, max_m: int | None = None,
                 max_n: int | None = None, max_k: int | None = None):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        defaults = {
            "max_m": max(cfg.max_seq_len, cfg.max_kv_len),
            "max_n": max(cfg.d_model, cfg.max_kv_len),
            "max_k": max(cfg.d_model, cfg.max_kv_len),
        }
        given = {"max_m": max_m, "max_n": max_n, "max_k": max_k}
        for name, value in given.items():
            if value is None:
                given[name] = defaults[name]
            elif isinstance(value, bool) or not isinstance(value, int) \
                    or not 1 <= value <= self.MAX_DIM:
                raise ValueError(f"{name} = {value!r} is out of range: allowed integers "
                                 f"1..{self.MAX_DIM}")
        self.cfg = cfg
        self.max_m, self.max_n, self.max_k = given["max_m"], given["max_n"], given["max_k"]
        self.rows, self.cols = cfg.array_rows, cfg.array_cols
        self.a_width, self.b_width = operand_widths(cfg)
        SystolicArray.check(self.rows, self.cols, self.a_width, self.b_width, cfg.acc_bits)

        self.cmd_layout = data.StructLayout({
            "m": unsigned(self.max_m.bit_length()),
            "n": unsigned(self.max_n.bit_length()),
            "k": unsigned(self.max_k.bit_length()),
            "bias_en": 1,
            "requant_en": 1,
            "mult": unsigned(cfg.requant_mult_bits),
            "shift": unsigned(6),
        })
        self.result_layout = data.StructLayout({
            "data": data.ArrayLayout(signed(cfg.acc_bits), self.cols),
            "row": unsigned(max(1, (self.max_m - 1).bit_length())),
            "col": unsigned(max(1, (self.max_n - 1).bit_length())),
            "last": 1,
        })
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "a": In(stream.Signature(data.ArrayLayout(signed(self.a_width), self.rows))),
            "b": In(stream.Signature(data.ArrayLayout(signed(self.b_width), self.cols))),
            "bias": In(stream.Signature(data.ArrayLayout(signed(cfg.bias_bits), self.cols))),
            "result": Out(stream.Signature(self.result_layout)),
            "error": Out(1),
        })

    # Steps from a row in the array's row_data to its result beat being valid: sum, product,
    # rounding shift, output buffer.
    POST_LATENCY = 4

    @property
    def min_tile_steps(self) -> int:
        """Smallest number of cycles between two tiles' last operand beats."""
        return max(self.rows, self.cols)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        R, C = self.rows, self.cols
        S = self.min_tile_steps
        m.submodules.array = array = SystolicArray(R, C, self.a_width, self.b_width,
                                                   cfg.acc_bits)

        # ---------------------------------------------------------- step enable
        # Everything from the operand inputs to the output buffer advances in lockstep. The
        # enable is a function of registers only: the output buffer has room for one more
        # row, and the bias a tile's row 0 needs is already buffered.
        out_count = Signal(range(3))
        bias_buf = Signal(data.ArrayLayout(signed(cfg.bias_bits), C))
        bias_buf_valid = Signal()
        advance = Signal()

        desc_layout = data.StructLayout({
            "row0": unsigned(self.max_m.bit_length()),
            "col0": unsigned(self.max_n.bit_length()),
            "m": unsigned(self.max_m.bit_length()),
            "n": unsigned(self.max_n.bit_length()),
            "bias_en": 1,
            "requant_en": 1,
            "mult": unsigned(cfg.requant_mult_bits),
            "shift_m1": unsigned(6),
            "last_tile": 1,
        })
        # Tiles between issuing their last beat and their last row leaving the array: a tile
        # stays R + C + 2 steps and tiles are at least S steps apart.
        depth = (R + C + 2) // S + 2
        descs = Array(Signal(desc_layout, name=f"desc_{i}") for i in range(depth))
        desc_wr = Signal(range(depth))
        desc_rd = Signal(range(depth))
        head = descs[desc_rd]

        row_first = array.row_valid & (array.row_index == 0)
        row_final = array.row_valid & (array.row_index == R - 1)
        bias_take = row_first & head.bias_en
        m.d.comb += advance.eq((out_count < 2) & ~(bias_take & ~bias_buf_valid))
        m.d.comb += array.en.eq(advance)

        # ---------------------------------------------------------- command and feeder
        cur = Signal(desc_layout)          # row0/col0 of the tile being fed; last_tile unused
        cur_k = Signal(self.cmd_layout["k"].shape)
        kk = Signal.like(cur_k)
        busy = Signal()
        since_last = Signal(range(S + 1), init=S)

        cmd = self.cmd.payload
        cmd_ok = ((cmd.m >= 1) & (cmd.m <= self.max_m) & (cmd.n >= 1) & (cmd.n <= self.max_n)
                  & (cmd.k >= 1) & (cmd.k <= self.max_k)
                  & (~cmd.requant_en | ((cmd.shift >= 1) & (cmd.shift <= 62))))

        last_k = kk == cur_k - 1
        gap_ok = ~last_k | (since_last >= S)
        feeding = busy & gap_ok
        issue = feeding & self.a.valid & self.b.valid
        row_end = cur.col0 + C >= cur.n
        cmd_end = row_end & (cur.row0 + R >= cur.m)
        finishing = issue & last_k & cmd_end

        m.d.comb += [
            self.a.ready.eq(advance & feeding & self.b.valid),
            self.b.ready.eq(advance & feeding & self.a.valid),
            self.cmd.ready.eq(advance & (~busy | finishing)),
            array.a.eq(Mux(issue, self.a.payload, 0)),
            array.b.eq(Mux(issue, self.b.payload, 0)),
            array.first.eq(issue & (kk == 0)),
            array.last.eq(issue & last_k),
        ]
        m.d.sync += self.error.eq(self.cmd.valid & self.cmd.ready & ~cmd_ok)

        with m.If(advance):
            m.d.sync += since_last.eq(Mux(since_last < S, since_last + 1, S))
            with m.If(issue):
                m.d.sync += kk.eq(Mux(last_k, 0, kk + 1))
                with m.If(last_k):
                    m.d.sync += [
                        since_last.eq(1),
                        descs[desc_wr].eq(cur),
                        descs[desc_wr].last_tile.eq(cmd_end),
                        desc_wr.eq(Mux(desc_wr == depth - 1, 0, desc_wr + 1)),
                    ]
                    with m.If(row_end):
                        m.d.sync += [cur.col0.eq(0), cur.row0.eq(cur.row0 + R)]
                    with m.Else():
                        m.d.sync += cur.col0.eq(cur.col0 + C)
                    with m.If(cmd_end):
                        m.d.sync += busy.eq(0)
            with m.If(self.cmd.valid & self.cmd.ready & cmd_ok):
                m.d.sync += [
                    busy.eq(1),
                    kk.eq(0),
                    cur_k.eq(cmd.k),
                    cur.row0.eq(0),
                    cur.col0.eq(0),
                    cur.m.eq(cmd.m),
                    cur.n.eq(cmd.n),
                    cur.bias_en.eq(cmd.bias_en),
                    cur.requant_en.eq(cmd.requant_en),
                    cur.mult.eq(cmd.mult),
                    cur.shift_m1.eq(cmd.shift - 1),
                ]

        # ---------------------------------------------------------- bias buffer
        m.d.comb += self.bias.ready.eq(~bias_buf_valid)
        with m.If(self.bias.valid & self.bias.ready):
            m.d.sync += [bias_buf.eq(self.bias.payload), bias_buf_valid.eq(1)]
        with m.Elif(advance & bias_take):
            m.d.sync += bias_buf_valid.eq(0)

        # ---------------------------------------------------------- post-processing
        acc_bits = cfg.acc_bits
        sum_shape = signed(acc_bits + 1)
        wide_shape = signed(acc_bits + 2 + cfg.requant_mult_bits)
        meta_layout = data.StructLayout({
            "valid": 1,
            "row": self.result_layout["row"].shape,
            "col": self.result_layout["col"].shape,
            "last": 1,
            "requant_en": 1,
            "mult": unsigned(cfg.requant_mult_bits),
            "shift_m1": unsigned(6),
        })
        tile_bias = Signal(data.ArrayLayout(signed(cfg.bias_bits), C))
        s2, s3, s4 = (Signal(meta_layout, name=f"meta_{i}") for i in (2, 3, 4))
        s2_sum = [Signal(sum_shape, name=f"sum_{c}") for c in range(C)]
        s3_val = [Signal(wide_shape, name=f"scaled_{c}") for c in range(C)]
        s4_val = [Signal(wide_shape, name=f"shifted_{c}") for c in range(C)]

        row = head.row0 + array.row_index
        with m.If(advance):
            with m.If(row_first):
                m.d.sync += tile_bias.eq(Mux(head.bias_en, bias_buf, 0))
            with m.If(row_final):
                m.d.sync += desc_rd.eq(Mux(desc_rd == depth - 1, 0, desc_rd + 1))
            m.d.sync += [
                s2.valid.eq(array.row_valid & (row < head.m)),
                s2.row.eq(row),
                s2.col.eq(head.col0),
                s2.last.eq(head.last_tile & ((array.row_index == R - 1) | (row + 1 == head.m))),
                s2.requant_en.eq(head.requant_en),
                s2.mult.eq(head.mult),
                s2.shift_m1.eq(head.shift_m1),
                s3.eq(s2),
                s4.eq(s3),
            ]
            for c in range(C):
                bias = Mux(row_first, Mux(head.bias_en, bias_buf[c], 0), tile_bias[c])
                m.d.sync += [
                    s2_sum[c].eq(Mux(head.col0 + c < head.n, array.row_data[c] + bias, 0)),
                    s3_val[c].eq(Mux(s2.requant_en, s2_sum[c] * s2.mult, s2_sum[c])),
                    s4_val[c].eq(Mux(s3.requant_en, s3_val[c] >> s3.shift_m1, s3_val[c])),
                ]

        # Rounding half up: (x + 2**(s-1)) >> s == ((x >> (s-1)) + 1) >> 1.
        qmax = (1 << (cfg.act_bits - 1)) - 1
        qmin = -(1 << (cfg.act_bits - 1))
        out_row = Signal(self.result_layout)
        m.d.comb += [out_row.row.eq(s4.row), out_row.col.eq(s4.col), out_row.last.eq(s4.last)]
        for c in range(C):
            rounded = Signal(wide_shape, name=f"rounded_{c}")
            m.d.comb += rounded.eq((s4_val[c] + 1) >> 1)
            clamped = Mux(rounded > qmax, qmax, Mux(rounded < qmin, qmin, rounded))
            m.d.comb += out_row.data[c].eq(Mux(s4.requant_en, clamped, s4_val[c]))

        # ---------------------------------------------------------- output buffer
        # Two entries: the registered enable stops the pipeline only once both are taken.
        entries = Array(Signal(self.result_layout, name=f"out_{i}") for i in range(2))
        out_wr = Signal()
        out_rd = Signal()
        push = advance & s4.valid
        pop = self.result.valid & self.result.ready
        m.d.comb += [self.result.valid.eq(out_count != 0),
                     self.result.payload.eq(entries[out_rd])]
        with m.If(push):
            m.d.sync += [entries[out_wr].eq(out_row), out_wr.eq(~out_wr)]
        with m.If(pop):
            m.d.sync += out_rd.eq(~out_rd)
        m.d.sync += out_count.eq(out_count + push - pop)
        return m
