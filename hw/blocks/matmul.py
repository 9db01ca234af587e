"""Matrix-multiply engine: command decoding, tiling, bias and requantization around the array."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from hw.blocks.delay import DelayLine
from hw.blocks.dsp import WideMultiplier
from hw.blocks.queue import StreamQueue
from hw.blocks.systolic import SystolicArray

__all__ = ["MatmulEngine", "operand_widths", "bias_beat_layout"]


def operand_widths(cfg: AttentionConfig) -> tuple[int, int]:
    """Signed widths of operands A and B.

    A carries int8-style activations or unsigned UQ0.prob_bits probabilities (P.V), so it has
    one more bit than ``prob_bits``; B carries activations or weights.
    """
    return max(cfg.act_bits, cfg.prob_bits + 1), max(cfg.act_bits, cfg.weight_bits)


def bias_beat_layout(cfg: AttentionConfig, cols: int) -> data.Layout:
    """One tile's ``bias`` beat: ``cols`` biases (signed ``bias_bits``); with
    ``cfg.channel_scales`` a struct of those (``bias``) and each column's requantization
    multiplier (``mult``, unsigned ``requant_mult_bits``) and shift minus one (``shift_m1``,
    unsigned 6: shifts 1..64; the scale table holds 1..62)."""
    biases = data.ArrayLayout(signed(cfg.bias_bits), cols)
    if not cfg.channel_scales:
        return biases
    return data.StructLayout({
        "bias": biases,
        "mult": data.ArrayLayout(unsigned(cfg.requant_mult_bits), cols),
        "shift_m1": data.ArrayLayout(unsigned(6), cols),
    })


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
    exact ``acc_bits + 1``-bit sum, sign-extended to ``acc_bits``. With ``channel`` (built
    with ``cfg.channel_scales``; needs ``bias_en`` and ``requant_en``) column ``c`` of a tile
    is requantized by the multiplier and shift of its bias beat instead,
    ``golden.requantize(..., ChannelRequant(mult, shift_m1 + 1))`` (per-channel weight
    scales). The accumulation itself is
    exact as long as ``|sum a*b|`` fits ``acc_bits`` (the configuration guarantees it for the
    layer's products).

    A command is *rejected* when ``m``, ``n`` or ``k`` is outside ``1..max_m``,
    ``1..max_n``, ``1..max_k``, when ``requant_en`` is set with ``shift`` outside 1..62, or
    when ``channel`` is set without ``bias_en`` and ``requant_en``:
    the engine takes the ``cmd`` beat and pulses ``error`` for one cycle in the next cycle; no
    operand, bias or result beat belongs to it, and the next command proceeds normally.

    Commands are pipelined: ``cmd.ready`` is a flip-flop (a one-entry command register,
    free while no command waits in it), and a waiting command starts in the step the current
    one issues its final operand beat, so back-to-back commands and consecutive tiles keep the
    array busy. A command taken by an idle engine starts a cycle later.
    The ``bias`` beat of a tile may arrive at any time before its rows leave the array; the
    engine stalls (without losing anything) until it does, so a producer must not hold it
    back until later operand beats have been taken.

    Timing (no stalls; see ``hw.perf.matmul.matmul_cycles`` for the exact count): one operand beat
    per cycle; tiles with a shorter ``k`` are issued ``cfg.min_tile_steps`` cycles apart
    (``max(R, C, P * R)``: the array drains one row per cycle, the requantizer takes
    ``P = cfg.requant_passes`` cycles per row, ``cfg.requant_lanes`` columns at a time, and
    row ``r`` of a tile leaves ``(P - 1) * (r + 1) + 1`` cycles later than it would at a row
    per cycle, the ``+ 1`` being the register after the row store's read; 0 with a lane per
    column, P = 1). Backpressure on ``result`` stalls the whole engine through a registered step
    enable; nothing is lost or duplicated.

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
        ``requant_en``, ``mult`` (unsigned ``cfg.requant_mult_bits``), ``shift`` (unsigned 6);
        with ``cfg.channel_scales`` also ``channel`` (per-column scales from the bias beat).
    a : In(stream.Signature(ArrayLayout(signed(a_width), R)))
        ``a_width = max(act_bits, prob_bits + 1)``, or the constructor's ``a_width`` (up to
        18: the tiled path's unnormalized probabilities).
    b : In(stream.Signature(ArrayLayout(signed(b_width), C)))
        ``b_width = max(act_bits, weight_bits)``.
    bias : In(stream.Signature(bias_beat_layout(cfg, C)))
        Biases, and with ``cfg.channel_scales`` the columns' multipliers and shifts.
    result : Out(stream.Signature(result_layout))
        ``data`` (ArrayLayout(signed(cfg.acc_bits), C)), ``row``, ``col`` (first column of the
        tile), ``last``.
    error : Out(1)
        One-cycle pulse per rejected command.
    """

    MAX_DIM = 1 << 16

    def __init__(self, cfg: AttentionConfig, *, max_m: int | None = None,
                 max_n: int | None = None, max_k: int | None = None,
                 a_width: int | None = None):
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
        # The requantizer: ``lanes`` columns of a row per step, ``passes`` steps a row; rows
        # wait in a store of ``store_depth`` (see _row_store).
        self.lanes = cfg.requant_lanes or cfg.array_cols
        self.passes = cfg.requant_passes
        self.store_depth = self.rows - (self.rows - 1) // self.passes
        self.a_width, self.b_width = operand_widths(cfg)
        if a_width is not None:
            # Wider A operands: the tiled path's unnormalized probabilities E (UQ1.16 with a
            # sign, 18 bits, still one 18 x 18 block per PE).
            if isinstance(a_width, bool) or not isinstance(a_width, int) \
                    or not self.a_width <= a_width <= 18:
                raise ValueError(f"a_width = {a_width!r} is out of range: allowed "
                                 f"{self.a_width}..18")
            self.a_width = a_width
        SystolicArray.check(self.rows, self.cols, self.a_width, self.b_width, cfg.acc_bits)

        self.cmd_layout = data.StructLayout({
            "m": unsigned(self.max_m.bit_length()),
            "n": unsigned(self.max_n.bit_length()),
            "k": unsigned(self.max_k.bit_length()),
            "bias_en": 1,
            "requant_en": 1,
            "mult": unsigned(cfg.requant_mult_bits),
            "shift": unsigned(6),
            **({"channel": 1} if cfg.channel_scales else {}),
        })
        self.bias_layout = bias_beat_layout(cfg, self.cols)
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
            "bias": In(stream.Signature(self.bias_layout)),
            "result": Out(stream.Signature(self.result_layout)),
            "error": Out(1),
        })

    # Steps for the requantization product (WideMultiplier: DSP operand registers, DSP product
    # registers, fabric product registers, partial-product sum; padded to this if shorter).
    PRODUCT_LATENCY = 4
    # Steps from a row in the array's row_data to its result beat being valid: bias sum, the
    # requantization product, coarse and fine shift, rounding, output buffer (for the first
    # group of a row that finds the requantizer free; see min_tile_steps).
    POST_LATENCY = 1 + PRODUCT_LATENCY + 3 + 1

    @property
    def group_latency(self) -> int:
        """Steps of the register between the row store's read and the requantizer: 1 with
        several groups a row (``requant_passes > 1``), else 0 (``hw.perf.matmul.row_delay``
        counts it)."""
        return int(self.passes > 1)

    @property
    def min_tile_steps(self) -> int:
        """Smallest number of cycles between two tiles' last operand beats: the array drains
        a row per cycle, the requantizer takes ``passes`` per row (``cfg.min_tile_steps``)."""
        return self.cfg.min_tile_steps

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        R = self.rows
        m.submodules.array = array = SystolicArray(self.rows, self.cols, self.a_width,
                                                   self.b_width, cfg.acc_bits)

        en = self._step_enable()
        ring = self._descriptor_store()
        row_first = Signal()          # row_data holds row 0 of a tile (a register)
        row_final = array.row_valid & (array.row_index == R - 1)
        bias_take = row_first & ring.head.bias_en
        m.d.comb += array.en.eq(en.advance)

        pos = self._tile_registers(ring.desc_layout)
        creg = self._command_register(m, pos)
        feed = self._feeder(m, array, en.go, pos, creg)
        self._tile_counters(m, en.go, ring, pos, creg, feed)
        head_next_bias_en = self._descriptor_readout(m, en.go, ring, row_final)
        bias_buf_valid_next = self._bias_buffer(m, en, bias_take)
        out_row, out_valid = self._post_process(m, array, ring.head, en.go, row_first,
                                                en.bias_buf)
        self._output_and_enable(m, array, en, row_first, head_next_bias_en,
                                bias_buf_valid_next, out_row, out_valid)
        return m

    def _step_enable(self):
        """Creates the step enable's registers and the state it is computed from; returns
        ``out_depth``, ``out_count``, ``bias_buf``, ``bias_buf_valid``, ``advance``, ``stall``
        and ``go`` (``~stall``) as a namespace."""
        cfg, C = self.cfg, self.cols
        # ---------------------------------------------------------- step enable
        # Everything from the operand inputs to the output buffer advances in lockstep, by one
        # step enable that is itself a register (it fans out to every register of the array):
        # high in a cycle when the output buffer has room for one more row and the bias a
        # tile's row 0 needs is buffered. It is computed a cycle ahead from the next state of
        # those registers; the buffer's room is counted without that cycle's pop (which would
        # make the enable depend on result.ready), hence three entries.
        OUT_DEPTH = 3
        out_count = Signal(range(OUT_DEPTH + 1))
        # Data registers below are reset_less (valid flags and counters keep their reset):
        # their values are used only under a flag, and the reset/flush net stays small.
        bias_buf = Signal(self.bias_layout, reset_less=True)
        bias_buf_valid = Signal()
        # Two copies of the enable register: ``advance`` for the array (its PEs and DSP
        # blocks) and the inverted ``stall`` for everything else, which halves each one's
        # fanout (an inverted copy is not merged with the other by synthesis). ``go`` is
        # ~stall, equal to advance in every cycle.
        advance = Signal(init=1)
        stall = Signal()
        go = ~stall
        return SimpleNamespace(out_depth=OUT_DEPTH, out_count=out_count, bias_buf=bias_buf,
                               bias_buf_valid=bias_buf_valid, advance=advance, stall=stall,
                               go=go)

    def _descriptor_store(self):
        """Creates the ring of tile descriptors and its pointers; returns ``desc_layout``,
        ``depth``, ``descs``, ``desc_wr``, ``desc_rd``, ``desc_rd_next`` and ``head`` (the
        registered copy of the entry read) as a namespace."""
        R, C = self.rows, self.cols
        S = self.min_tile_steps
        mult_bits = self.cfg.requant_mult_bits
        # Per tile, written when its last beat is issued and read when its rows leave the
        # array. Everything the row read-out needs is precomputed here (column mask, index of
        # the tile's last valid row), so the read-out compares only small registers.
        desc_layout = data.StructLayout({
            "row0": unsigned(self.max_m.bit_length()),
            "col0": unsigned(self.max_n.bit_length()),
            "col_mask": unsigned(C),
            "last_row": range(R),
            "last_tile": 1,
            "bias_en": 1,
            "requant_en": 1,
            "mult": unsigned(mult_bits),
            "shift_m1": unsigned(6),
            **({"channel": 1} if self.cfg.channel_scales else {}),
        })
        # Tiles between issuing their last beat and their last row leaving the array: a tile
        # stays R + C + 4 steps and tiles are at least S steps apart.
        depth = (R + C + 4) // S + 2
        descs = Array(Signal(desc_layout, name=f"desc_{i}", reset_less=True)
                      for i in range(depth))
        desc_wr = Signal(range(depth))
        desc_rd = Signal(range(depth))
        desc_rd_next = Signal(range(depth), init=1)   # desc_rd + 1, wrapped
        head = Signal(desc_layout, reset_less=True)   # registered copy of descs[desc_rd]
        return SimpleNamespace(desc_layout=desc_layout, depth=depth, descs=descs,
                               desc_wr=desc_wr, desc_rd=desc_rd, desc_rd_next=desc_rd_next,
                               head=head)

    def _tile_registers(self, desc_layout):
        """Creates the feeder's registers (position in the command, the command's fields, the
        beat flags and the tile spacing); returns them as a namespace of the same names."""
        S = self.min_tile_steps
        # ---------------------------------------------------------- command and feeder
        # The position in the command is kept as registered flags and down-counters (first /
        # last beat of the tile, rows and columns left), so the handshakes and the
        # descriptor depend on no adder or comparison of wide registers.
        cur_n = Signal(self.cmd_layout["n"].shape)
        cur_row0 = Signal(desc_layout["row0"].shape)
        cur_col0 = Signal(desc_layout["col0"].shape)
        rows_left = Signal(self.cmd_layout["m"].shape)   # m - row0
        cols_left = Signal(self.cmd_layout["n"].shape)   # n - col0
        cur_bias_en, cur_requant_en = Signal(), Signal()
        cur_mult = Signal(self.cfg.requant_mult_bits)
        cur_shift_m1 = Signal(6)
        cur_channel = Signal()
        cur_k_m1 = Signal(self.cmd_layout["k"].shape)    # k - 1
        cur_k_one = Signal()                             # k == 1
        kk_left = Signal.like(cur_k_m1)                  # beats of the tile after this one
        is_first, is_last = Signal(), Signal()           # this beat is the tile's first / last
        busy = Signal()
        since_last = Signal(range(S + 1), init=S)
        spaced = Signal(init=1)                          # since_last >= S
        return SimpleNamespace(
            cur_n=cur_n, cur_row0=cur_row0, cur_col0=cur_col0, rows_left=rows_left,
            cols_left=cols_left, cur_bias_en=cur_bias_en, cur_requant_en=cur_requant_en,
            cur_mult=cur_mult, cur_shift_m1=cur_shift_m1, cur_channel=cur_channel,
            cur_k_m1=cur_k_m1,
            cur_k_one=cur_k_one, kk_left=kk_left, is_first=is_first, is_last=is_last,
            busy=busy, since_last=since_last, spaced=spaced)

    def _command_register(self, m, pos):
        """Builds the one-entry command register (``cmd.ready``, the checks, ``error``);
        returns its registers (``cq_*``) as a namespace of the same names."""
        R, C = self.rows, self.cols
        # Command register: a beat is checked and decoded as it is taken (cmd.ready is
        # ~cq_valid, a flip-flop), and the tile counters load from these registers. The
        # command comes from the core's job registers, often far from this engine; the
        # checks and the k - 1 subtraction then no longer share a cycle with that route,
        # and the take below depends on this engine's flip-flops and the operand valids only.
        cmd = self.cmd.payload
        cmd_ok = ((cmd.m >= 1) & (cmd.m <= self.max_m) & (cmd.n >= 1) & (cmd.n <= self.max_n)
                  & (cmd.k >= 1) & (cmd.k <= self.max_k)
                  & (~cmd.requant_en | ((cmd.shift >= 1) & (cmd.shift <= 62))))
        cq_channel = Signal(reset_less=True)
        if self.cfg.channel_scales:
            # the columns' scales come with the bias beat of a requantized product
            cmd_ok = cmd_ok & (~cmd.channel | (cmd.bias_en & cmd.requant_en))
        cq_valid = Signal()
        cq_m = Signal.like(pos.rows_left, reset_less=True)
        cq_n = Signal.like(pos.cur_n, reset_less=True)
        cq_k_m1 = Signal.like(pos.cur_k_m1, reset_less=True)
        cq_k_one = Signal(reset_less=True)
        cq_n_le_c = Signal(reset_less=True)
        cq_m_le_r = Signal(reset_less=True)
        cq_bias_en = Signal(reset_less=True)
        cq_requant_en = Signal(reset_less=True)
        cq_mult = Signal.like(pos.cur_mult, reset_less=True)
        cq_shift_m1 = Signal.like(pos.cur_shift_m1, reset_less=True)
        cmd_in = self.cmd.valid & ~cq_valid
        m.d.comb += self.cmd.ready.eq(~cq_valid)
        # A rejected command is taken but not kept: error pulses in the next cycle.
        m.d.sync += self.error.eq(cmd_in & ~cmd_ok)
        with m.If(cmd_in):
            m.d.sync += [
                cq_valid.eq(cmd_ok),
                cq_m.eq(cmd.m), cq_n.eq(cmd.n),
                cq_k_m1.eq(cmd.k - 1), cq_k_one.eq(cmd.k == 1),
                cq_n_le_c.eq(cmd.n <= C), cq_m_le_r.eq(cmd.m <= R),
                cq_bias_en.eq(cmd.bias_en), cq_requant_en.eq(cmd.requant_en),
                # Raw results go through the requantization datapath as x * 1 >> 0.
                cq_mult.eq(Mux(cmd.requant_en, cmd.mult, 1)),
                cq_shift_m1.eq(Mux(cmd.requant_en, cmd.shift - 1, 0)),
            ]
            if self.cfg.channel_scales:
                m.d.sync += cq_channel.eq(cmd.channel)
        return SimpleNamespace(
            cq_valid=cq_valid, cq_m=cq_m, cq_n=cq_n, cq_k_m1=cq_k_m1, cq_k_one=cq_k_one,
            cq_n_le_c=cq_n_le_c, cq_m_le_r=cq_m_le_r, cq_bias_en=cq_bias_en,
            cq_requant_en=cq_requant_en, cq_mult=cq_mult, cq_shift_m1=cq_shift_m1,
            cq_channel=cq_channel)

    def _feeder(self, m, array, go, pos, creg):
        """Builds the operand handshakes into the array and the command take; returns
        ``busy_n``, ``is_last_n``, ``spaced_n`` (the flags' next values), ``issue``,
        ``row_end``, ``rows_end``, ``cmd_end`` and ``cmd_take`` as a namespace."""
        # feeding = busy & (~is_last | spaced), a register computed from the three flags'
        # next values (busy_n, is_last_n, spaced_n): the handshakes, the command take and the
        # tile counters' enables then start from one flip-flop, not three LUT levels of flags
        # (this engine is spread over a large area, and that path was the routed top's worst).
        busy_n, is_last_n, spaced_n = Signal(), Signal(), Signal()
        feeding = Signal()
        m.d.comb += [busy_n.eq(pos.busy), is_last_n.eq(pos.is_last), spaced_n.eq(pos.spaced)]
        m.d.sync += [pos.busy.eq(busy_n), pos.is_last.eq(is_last_n), pos.spaced.eq(spaced_n),
                     feeding.eq(busy_n & (~is_last_n | spaced_n))]
        issue = feeding & self.a.valid & self.b.valid
        # cols_left <= C and rows_left <= R, kept as registers next to the counters: the
        # compares would otherwise sit in the path from the handshake to the enables.
        row_end = Signal(init=1)
        rows_end = Signal(init=1)
        cmd_end = row_end & rows_end
        finishing = issue & pos.is_last & cmd_end
        cmd_take = creg.cq_valid & go & (~pos.busy | finishing)
        with m.If(cmd_take):
            m.d.sync += creg.cq_valid.eq(0)

        m.d.comb += [
            self.a.ready.eq(go & feeding & self.b.valid),
            self.b.ready.eq(go & feeding & self.a.valid),
            array.valid.eq(issue),
            array.a.eq(self.a.payload),
            array.b.eq(self.b.payload),
            array.first.eq(issue & pos.is_first),
            array.last.eq(issue & pos.is_last),
        ]
        return SimpleNamespace(busy_n=busy_n, is_last_n=is_last_n, spaced_n=spaced_n,
                               issue=issue, row_end=row_end, rows_end=rows_end,
                               cmd_end=cmd_end, cmd_take=cmd_take)

    def _tile_counters(self, m, go, ring, pos, creg, feed):
        """Builds the tile counters and the descriptor write: each issued beat moves the
        position in the command (the tile's last beat writes its descriptor), a command take
        loads it from the command register. Returns nothing."""
        R, C = self.rows, self.cols
        S = self.min_tile_steps
        issue, is_last, cmd_end = feed.issue, pos.is_last, feed.cmd_end
        new_desc = Signal(ring.desc_layout)
        m.d.comb += [
            new_desc.row0.eq(pos.cur_row0), new_desc.col0.eq(pos.cur_col0),
            new_desc.col_mask.eq(Cat(*(pos.cols_left > c for c in range(C)))),
            new_desc.last_row.eq(Mux(pos.rows_left >= R, R - 1, pos.rows_left - 1)),
            new_desc.last_tile.eq(cmd_end), new_desc.bias_en.eq(pos.cur_bias_en),
            new_desc.requant_en.eq(pos.cur_requant_en), new_desc.mult.eq(pos.cur_mult),
            new_desc.shift_m1.eq(pos.cur_shift_m1),
        ]
        if self.cfg.channel_scales:
            m.d.comb += new_desc.channel.eq(pos.cur_channel)

        with m.If(go):
            with m.If(issue & is_last):
                m.d.sync += pos.since_last.eq(1)
                m.d.comb += feed.spaced_n.eq(S <= 1)
            with m.Else():
                m.d.sync += pos.since_last.eq(Mux(pos.since_last < S, pos.since_last + 1, S))
                m.d.comb += feed.spaced_n.eq(pos.since_last >= S - 1)
            with m.If(issue):
                with m.If(is_last):
                    m.d.sync += [pos.kk_left.eq(pos.cur_k_m1), pos.is_first.eq(1)]
                    m.d.comb += feed.is_last_n.eq(pos.cur_k_one)
                with m.Else():
                    m.d.sync += [pos.kk_left.eq(pos.kk_left - 1), pos.is_first.eq(0)]
                    m.d.comb += feed.is_last_n.eq(pos.kk_left == 1)
                with m.If(is_last):
                    m.d.sync += [
                        ring.descs[ring.desc_wr].eq(new_desc),
                        ring.desc_wr.eq(Mux(ring.desc_wr == ring.depth - 1, 0, ring.desc_wr + 1)),
                    ]
                    with m.If(feed.row_end):
                        m.d.sync += [pos.cur_col0.eq(0), pos.cols_left.eq(pos.cur_n),
                                     pos.cur_row0.eq(pos.cur_row0 + R),
                                     pos.rows_left.eq(pos.rows_left - R),
                                     feed.row_end.eq(pos.cur_n <= C),
                                     feed.rows_end.eq(pos.rows_left <= 2 * R)]
                    with m.Else():
                        m.d.sync += [pos.cur_col0.eq(pos.cur_col0 + C),
                                     pos.cols_left.eq(pos.cols_left - C),
                                     feed.row_end.eq(pos.cols_left <= 2 * C)]
                    with m.If(cmd_end):
                        m.d.comb += feed.busy_n.eq(0)
            with m.If(feed.cmd_take):
                m.d.comb += [feed.busy_n.eq(1), feed.is_last_n.eq(creg.cq_k_one)]
                m.d.sync += [
                    pos.kk_left.eq(creg.cq_k_m1),
                    pos.is_first.eq(1),
                    pos.cur_k_m1.eq(creg.cq_k_m1),
                    pos.cur_k_one.eq(creg.cq_k_one),
                    pos.cur_row0.eq(0),
                    pos.cur_col0.eq(0),
                    pos.rows_left.eq(creg.cq_m),
                    pos.cols_left.eq(creg.cq_n),
                    feed.row_end.eq(creg.cq_n_le_c),
                    feed.rows_end.eq(creg.cq_m_le_r),
                    pos.cur_n.eq(creg.cq_n),
                    pos.cur_bias_en.eq(creg.cq_bias_en),
                    pos.cur_requant_en.eq(creg.cq_requant_en),
                    pos.cur_mult.eq(creg.cq_mult),
                    pos.cur_shift_m1.eq(creg.cq_shift_m1),
                    pos.cur_channel.eq(creg.cq_channel),
                ]

    def _descriptor_readout(self, m, go, ring, row_final):
        """Builds the descriptor ring's read side (``head`` and the read pointers); returns
        ``head_next``'s ``bias_en``, from registers, for the next step enable."""
        descs, desc_rd, desc_rd_next = ring.descs, ring.desc_rd, ring.desc_rd_next
        # ---------------------------------------------------------- descriptor read-out
        # head follows descs[desc_rd] one cycle later; when desc_rd moves on, it loads the
        # next entry directly. A descriptor is written at least C + 5 steps before its tile's
        # first row leaves the array, so the copy is never stale when it is used.
        advance_desc = go & row_final
        head_next = Signal(ring.desc_layout)
        m.d.comb += head_next.eq(Mux(advance_desc, descs[desc_rd_next], descs[desc_rd]))
        m.d.sync += ring.head.eq(head_next)
        desc_rd_next2 = Mux(desc_rd_next == ring.depth - 1, 0, desc_rd_next + 1)
        with m.If(advance_desc):
            m.d.sync += [desc_rd.eq(desc_rd_next), desc_rd_next.eq(desc_rd_next2)]
        # head_next.bias_en for the step enable, from registers: descs[desc_rd_next].bias_en
        # kept as a register (the descriptor multiplexer sat in front of the enable), and
        # head.bias_en, which equals descs[desc_rd].bias_en whenever a tile's row 0 is next
        # (written at least C + 5 steps before).
        next_bias_en = Signal()
        m.d.sync += next_bias_en.eq(Mux(advance_desc, descs[desc_rd_next2].bias_en,
                                        descs[desc_rd_next].bias_en))
        head_next_bias_en = Mux(advance_desc, next_bias_en, ring.head.bias_en)
        return head_next_bias_en

    def _bias_buffer(self, m, en, bias_take):
        """Builds the one-entry bias buffer (``bias.ready``, ``bias_buf``); returns
        ``bias_buf_valid_next``, its valid flag's next value."""
        # ---------------------------------------------------------- bias buffer
        bias_buf_valid_next = Signal()
        m.d.comb += [self.bias.ready.eq(~en.bias_buf_valid),
                     bias_buf_valid_next.eq(en.bias_buf_valid)]
        with m.If(self.bias.valid & self.bias.ready):
            m.d.sync += en.bias_buf.eq(self.bias.payload)
            m.d.comb += bias_buf_valid_next.eq(1)
        with m.Elif(en.go & bias_take):
            m.d.comb += bias_buf_valid_next.eq(0)
        m.d.sync += en.bias_buf_valid.eq(bias_buf_valid_next)
        return bias_buf_valid_next

    def _output_and_enable(self, m, array, en, row_first, head_next_bias_en,
                           bias_buf_valid_next, out_row, out_valid):
        """Builds the output buffer (a StreamQueue onto ``result``) and the next step enable
        (``advance``, ``stall``, ``row_first``). Returns nothing."""
        OUT_DEPTH = en.out_depth

        # ---------------------------------------------------------- output buffer
        # A ring of OUT_DEPTH result rows (a pop moves only the read pointer). A row is pushed
        # in every step whose last stage holds one: ``push`` is one LUT from flip-flops, and
        # the ring's one-hot write select keeps its entry enables one more LUT away.
        m.submodules.out_queue = out_queue = StreamQueue(
            self.result_layout, OUT_DEPTH, checked=False, one_hot=True)
        push = Signal()
        m.d.comb += [push.eq(en.go & out_valid),
                     out_queue.w_stream.valid.eq(push), out_queue.w_stream.payload.eq(out_row),
                     en.out_count.eq(out_queue.level)]
        wiring.connect(m, out_queue.r_stream, wiring.flipped(self.result))

        # ---------------------------------------------------------- next step enable
        # The next cycle's row at the array output is row 0 of a tile iff the array advances
        # now with its row-0 ready flag set (or holds such a row); its descriptor is
        # head_next, and bias_buf_valid_next says whether its bias will be buffered.
        row_first_next = Mux(en.go, array.row_ready[0], row_first)
        m.d.sync += row_first.eq(row_first_next)
        room_next = en.out_count + push < OUT_DEPTH
        advance_next = Signal()
        m.d.comb += advance_next.eq(room_next & ~(row_first_next & head_next_bias_en
                                                  & ~bias_buf_valid_next))
        m.d.sync += [en.advance.eq(advance_next), en.stall.eq(~advance_next)]

    def _post_process(self, m, array, head, go, row_first, bias_buf):
        """Bias, requantization, saturation and column mask of the rows leaving the array;
        returns the output row and its valid flag (pushed into the output buffer with ``go``).

        Stages: q1, the bias sum, into the row store; then ``requant_passes`` groups of
        ``lanes`` columns per row, one group per step (with more than one group, first
        through a register, ``group_latency``): ``PRODUCT_LATENCY`` stages of the
        product with the multiplier, "coarse" (shift by the multiple-of-8 part of shift - 1),
        "shifted" (by the rest), "rounded" ((x + 1) >> 1 and the saturation flags), then the
        saturation and column mask of the group, which the last group of a row pushes with
        the groups held before it. ``meta[i]`` is the side data of the group in stage
        q(i + 1) (``meta[0]``: the group at the requantizer's input)."""
        PL = self.PRODUCT_LATENCY
        store = self._row_store(m, array, head, go, row_first, bias_buf)
        feed = self._lane_feed(m, go, store)
        products = self._requant_products(m, go, feed.sums, feed.mults)
        q7 = [self._rounding_shift(m, go, lane, products[lane], *feed.shift_srcs[lane],
                                   feed.meta[PL + 2].requant_en)
              for lane in range(self.lanes)]
        return self._output_row(m, go, feed.meta[PL + 3], q7)

    def _row_store(self, m, array, head, go, row_first, bias_buf):
        """The bias sums of the valid rows leaving the array, with their side data (and with
        ``cfg.channel_scales`` every column's multiplier and shift minus one), in a ring of
        ``store_depth`` rows that the requantizer reads a group of columns per step.

        Rows arrive at most one per step, ``array_rows`` of a tile together, and tiles at
        least ``min_tile_steps >= requant_passes * array_rows`` steps apart, so a tile's rows
        are all read before the next tile's first arrives; the ring then holds at most
        ``array_rows - (array_rows - 1) // requant_passes`` rows (row ``r`` arrives in step
        ``r`` and leaves after step ``(r + 1) * requant_passes``). Everything advances with
        ``go``, so stalls keep that schedule. Returns ``head`` (the entry at the read
        pointer), ``group`` (the group of it to read), ``filled`` (the ring holds a row) and
        ``last_group`` as a namespace."""
        cfg, C, R, P = self.cfg, self.cols, self.rows, self.passes
        mult_bits = cfg.requant_mult_bits
        channel = cfg.channel_scales
        entry_layout = data.StructLayout({
            "sum": data.ArrayLayout(signed(cfg.acc_bits + 1), C),
            "row": self.result_layout["row"].shape,
            "col": self.result_layout["col"].shape,
            "last": 1,
            "requant_en": 1,
            "col_mask": unsigned(C),
            "mult": unsigned(mult_bits),
            "shift_m1": unsigned(6),
            **({"mults": data.ArrayLayout(unsigned(mult_bits), C),
                "shifts": data.ArrayLayout(unsigned(6), C)} if channel else {}),
        })
        D = self.store_depth
        entries = [Signal(entry_layout, name=f"row_store_{i}", reset_less=True)
                   for i in range(D)]
        filled = Signal(name="store_filled")             # a row is held, a register
        group = Signal(range(max(P, 2)), name="store_group")
        last_group = Signal(name="store_last_group")     # group == P - 1
        m.d.comb += last_group.eq(group == P - 1) if P > 1 else last_group.eq(1)

        biases = bias_buf.bias if channel else bias_buf
        tile_bias = Signal(data.ArrayLayout(signed(cfg.bias_bits), C), reset_less=True)
        new = Signal(entry_layout)
        m.d.comb += [
            new.row.eq(head.row0 + array.row_index),
            new.col.eq(head.col0),
            new.last.eq(head.last_tile & (array.row_index == head.last_row)),
            new.requant_en.eq(head.requant_en),
            new.col_mask.eq(head.col_mask),
            new.mult.eq(head.mult),
            new.shift_m1.eq(head.shift_m1),
        ]
        for c in range(C):
            bias = Mux(row_first, Mux(head.bias_en, biases[c], 0), tile_bias[c])
            m.d.comb += new.sum[c].eq(array.row_data[c] + bias)
        if channel:
            self._channel_scales(m, go, head, row_first, bias_buf, new)

        write = array.row_valid & (array.row_index <= head.last_row)
        with m.If(go & row_first):
            m.d.sync += tile_bias.eq(Mux(head.bias_en, biases, 0))
        if P == 1:
            # A lane per column (D == 1): the store is the bias-sum register, loaded in every
            # step and read in the next. No pointers: synthesis does not see that a read
            # multiplexer on a pointer that never moves is constant (about 300 LUTs an engine).
            with m.If(go):
                m.d.sync += [entries[0].eq(new), filled.eq(write)]
            return SimpleNamespace(head=entries[0], group=group, filled=filled,
                                   last_group=last_group)

        wr = Signal(range(D), name="store_wr")
        rd = Signal(range(D), name="store_rd")
        count = Signal(range(D + 1), name="store_count")
        pop = filled & last_group
        count_next = Signal.like(count)
        m.d.comb += count_next.eq(count)
        with m.If(go):
            with m.If(write):
                with m.Switch(wr):
                    for i, entry in enumerate(entries):
                        with m.Case(i):
                            m.d.sync += entry.eq(new)
                m.d.sync += wr.eq(Mux(wr == D - 1, 0, wr + 1))
            with m.If(filled):
                if P > 1:
                    m.d.sync += group.eq(Mux(last_group, 0, group + 1))
                with m.If(last_group):
                    m.d.sync += rd.eq(Mux(rd == D - 1, 0, rd + 1))
            m.d.comb += count_next.eq(count + write - pop)
        m.d.sync += [count.eq(count_next), filled.eq(count_next != 0)]

        head_entry = Signal(entry_layout)
        with m.Switch(rd):
            for i, entry in enumerate(entries):
                with m.Case(i):
                    m.d.comb += head_entry.eq(entry)
        return SimpleNamespace(head=head_entry, group=group, filled=filled,
                               last_group=last_group)

    def _lane_feed(self, m, go, store):
        """The group of columns the requantizer reads this step: each lane's sum and
        multiplier, the side data pipeline (``meta``) and each lane's shift sources (the
        registers of stages q(PL) and q(PL + 1), for the coarse and the fine amount).
        Returns them as a namespace (``sums``, ``mults``, ``meta``, ``shift_srcs``)."""
        cfg, L, P, PL = self.cfg, self.lanes, self.passes, self.PRODUCT_LATENCY
        mult_bits = cfg.requant_mult_bits
        e, group = store.head, store.group
        meta_layout = data.StructLayout({
            "valid": 1,
            "last_group": 1,
            "group": range(max(P, 2)),
            "row": self.result_layout["row"].shape,
            "col": self.result_layout["col"].shape,
            "last": 1,
            "requant_en": 1,
            "lane_mask": unsigned(L),
            "shift_m1": unsigned(6),
        })
        # With several groups a row (P > 1) the group read from the store is registered
        # before the requantizer: the store's P-way read multiplexer into the DSP operand
        # registers was the routed top's worst path. ``extra`` is that stage (GROUP_LATENCY).
        extra = self.group_latency
        meta = [Signal(meta_layout, name=f"meta_{i}") for i in range(1 - extra, PL + 5)]
        sums = [Signal(signed(cfg.acc_bits + 1), name=f"lane_sum_{lane}") for lane in range(L)]
        mults = [Signal(mult_bits, name=f"lane_mult_{lane}") for lane in range(L)]
        shifts = [Signal(6, name=f"lane_shift_{lane}") for lane in range(L)]
        m.d.comb += [
            meta[0].valid.eq(store.filled), meta[0].last_group.eq(store.last_group),
            meta[0].group.eq(group), meta[0].row.eq(e.row), meta[0].col.eq(e.col),
            meta[0].last.eq(e.last), meta[0].requant_en.eq(e.requant_en),
            meta[0].shift_m1.eq(e.shift_m1),
        ]
        with m.Switch(group):
            for g in range(P):
                with m.Case(g):
                    for lane in range(L):
                        c = g * L + lane
                        m.d.comb += [sums[lane].eq(e.sum[c]),
                                     meta[0].lane_mask[lane].eq(e.col_mask[c])]
                        if cfg.channel_scales:
                            m.d.comb += [mults[lane].eq(e.mults[c]),
                                         shifts[lane].eq(e.shifts[c])]
        if not cfg.channel_scales:
            m.d.comb += [mult.eq(e.mult) for mult in mults]
        with m.If(go):
            m.d.sync += [meta[i].eq(meta[i - 1]) for i in range(1, len(meta))]
        if extra:
            sums, mults, shifts = (self._group_register(m, go, regs, name)
                                   for regs, name in ((sums, "group_sum"),
                                                      (mults, "group_mult"),
                                                      (shifts, "group_shift")))
            meta = meta[extra:]
        if cfg.channel_scales:
            # each lane's shift carried along the product's stages to its two shifters
            pipes = [[shifts[lane]] + [Signal(6, name=f"shift_m1_{lane}_{i}", reset_less=True)
                                       for i in range(1, PL + 1)] for lane in range(L)]
            with m.If(go):
                for pipe in pipes:
                    m.d.sync += [pipe[i].eq(pipe[i - 1]) for i in range(1, PL + 1)]
            shift_srcs = [(pipe[PL - 1], pipe[PL]) for pipe in pipes]
        else:
            # one shift per row; the shifters' amounts from the side data
            shift_srcs = [(meta[PL - 1].shift_m1, meta[PL].shift_m1)] * L
        return SimpleNamespace(sums=sums, mults=mults, meta=meta, shift_srcs=shift_srcs)

    @staticmethod
    def _group_register(m, go, values, name):
        """Registered copies (with ``go``) of the lanes' ``values``; returns the copies."""
        regs = [Signal.like(v, name=f"{name}_{lane}", reset_less=True)
                for lane, v in enumerate(values)]
        with m.If(go):
            m.d.sync += [reg.eq(v) for reg, v in zip(regs, values)]
        return regs

    def _rounding_shift(self, m, go, c, product, coarse_src, fine_src, requant_en):
        """Builds lane ``c``'s coarse shift, fine shift and rounding of its ``product``
        (stages q5 to q7); returns the q7 registers as a namespace: ``value`` (the rounded
        value, or without ``requant_en`` the unshifted sum), ``sign``, ``low_ones``, ``bit_a``
        and the two flags ``hi_zero`` and ``hi_ones`` the saturation is decided from.

        Only ``act_bits + 1`` bits of the shifted product reach the rounded result; the bits
        above them matter only through whether they are all zero or all one. So the coarse
        stage keeps ``K = act_bits + 8`` bits of ``product >> 8 v`` (enough for any fine
        shift of 0..7) and, unshifted, the all-zero / all-one flags of each byte of the
        product above bit ``K``; the fine stage keeps ``act_bits + 1`` bits of the result
        and folds the bits it drops and the flags of the bytes above ``K + 8 v`` into two
        flags. The sum without requantization (shift 0) passes through as plain register
        copies of the product's low ``acc_bits`` bits. Same latency and results as shifting
        the whole ``acc_bits + 1 + requant_mult_bits``-bit product, a third of the wires.
        """
        cfg = self.cfg
        a_bits, acc_bits = cfg.act_bits, cfg.acc_bits
        K = a_bits + 8
        width = len(product)
        sign_bit = product[width - 1]
        # the bytes of the product above bit K, below its sign bit (the sign bit always
        # belongs to the bits above K + 8 v, which sign-extend the product)
        chunks = [(lo, min(lo + 8, width - 1)) for lo in range(K, width - 1, 8)]
        RL = dict(reset_less=True)
        q5_low = Signal(K, name=f"coarse_{c}", **RL)                  # (product >> 8 v)[:K]
        q5_high = Signal(max(acc_bits - K, 0), name=f"coarse_high_{c}", **RL)   # v = 0 only
        q5_zero = Signal(len(chunks), name=f"byte_zero_{c}", **RL)
        q5_ones = Signal(len(chunks), name=f"byte_ones_{c}", **RL)
        q5_sign = Signal(name=f"coarse_sign_{c}", **RL)
        q6_low = Signal(a_bits + 1, name=f"shifted_{c}", **RL)        # (q5 >> f)[:a + 1]
        q6_high = Signal(acc_bits - a_bits - 1, name=f"shifted_high_{c}", **RL)  # f = 0 only
        q6_zero = Signal(name=f"above_zero_{c}", **RL)     # (x >> (a + 1)) == 0
        q6_ones = Signal(name=f"above_ones_{c}", **RL)     # (x >> (a + 1)) == -1
        q6_sign = Signal(name=f"shifted_sign_{c}", **RL)
        q7 = SimpleNamespace(
            value=Signal(signed(acc_bits), name=f"rounded_{c}", **RL),
            sign=Signal(name=f"rounded_sign_{c}", **RL),
            low_ones=Signal(name=f"low_ones_{c}", **RL),
            bit_a=Signal(name=f"bit_a_{c}", **RL),
            hi_zero=Signal(name=f"hi_zero_{c}", **RL),
            hi_ones=Signal(name=f"hi_ones_{c}", **RL))
        # The shift amounts, as every lane's own copy (loaded with the stage before; stored
        # XORed with the lane number, so that synthesis keeps the copies apart): one
        # register per amount fanned out to every lane's shifter, about 400 LUTs, was on
        # the routed top's failing list.
        key = c & 7
        a1 = a_bits + 1
        dropped_zero, dropped_ones, bytes_zero, bytes_ones = (
            Signal(name=f"{n}_{c}") for n in ("dropped_zero", "dropped_ones", "bytes_zero",
                                              "bytes_ones"))
        sh_coarse = Signal(3, name=f"sh_coarse_{c}", **RL)
        sh_fine = Signal(3, name=f"sh_fine_{c}", **RL)
        sh_bytes = Signal(3, name=f"sh_bytes_{c}", **RL)    # the coarse amount, one stage on
        with m.If(go):
            m.d.sync += [sh_coarse.eq(coarse_src[3:] ^ key), sh_fine.eq(fine_src[:3] ^ key),
                         sh_bytes.eq(fine_src[3:] ^ key)]
            # q5: coarse shift of the low bits; byte flags and the sum's bits unshifted
            with m.Switch(sh_coarse):
                for v in range(8):
                    with m.Case(v ^ key):
                        m.d.sync += q5_low.eq(product >> (8 * v))
            m.d.sync += [
                q5_high.eq(product[K:acc_bits]),
                q5_zero.eq(Cat(*(~product[lo:hi].any() for lo, hi in chunks))),
                q5_ones.eq(Cat(*(product[lo:hi].all() for lo, hi in chunks))),
                q5_sign.eq(sign_bit),
            ]
            # q6: fine shift; the dropped bits above a + 1 and the bytes above K + 8 v fold
            # into two flags
            with m.Switch(sh_fine):
                for f in range(8):
                    with m.Case(f ^ key):
                        m.d.sync += q6_low.eq(q5_low[f:f + a1])
                        m.d.comb += [dropped_zero.eq(~q5_low[a1 + f:K].any()),
                                     dropped_ones.eq(q5_low[a1 + f:K].all())]
            with m.Switch(sh_bytes):
                for v in range(8):
                    with m.Case(v ^ key):
                        m.d.comb += [bytes_zero.eq(q5_zero[v:].all() & ~q5_sign),
                                     bytes_ones.eq(q5_ones[v:].all() & q5_sign)]
            m.d.sync += [q6_zero.eq(dropped_zero & bytes_zero),
                         q6_ones.eq(dropped_ones & bytes_ones)]
            m.d.sync += [q6_high.eq(Cat(q5_low, q5_high)[a1:acc_bits]), q6_sign.eq(q5_sign)]
            # q7: rounding (x + 2**(s-1)) >> s == ((x >> (s-1)) + 1) >> 1, exact in the low
            # a bits whenever the result does not saturate; the saturation flags
            rounded = Signal(signed(a_bits))
            m.d.comb += rounded.eq((q6_low + 1)[1:a1])
            m.d.sync += [
                q7.value.eq(Mux(requant_en, rounded, Cat(q6_low, q6_high).as_signed())),
                q7.sign.eq(q6_sign),
                q7.low_ones.eq(q6_low[:a_bits].all()),
                q7.bit_a.eq(q6_low[a_bits]),
                q7.hi_zero.eq(q6_zero),
                q7.hi_ones.eq(q6_ones),
            ]
        return q7

    def _channel_scales(self, m, go, head, row_first, bias_buf, new):
        """Per-channel scales: every column's multiplier and shift (minus one) from its tile's
        bias beat (or the command's, for a per-tensor product), into the row store's entry
        ``new`` with the bias sum."""
        C, mult_bits = self.cols, self.cfg.requant_mult_bits
        tile_mult = Signal(data.ArrayLayout(unsigned(mult_bits), C), reset_less=True)
        tile_shift = Signal(data.ArrayLayout(unsigned(6), C), reset_less=True)
        with m.If(go & row_first):
            m.d.sync += [tile_mult.eq(bias_buf.mult), tile_shift.eq(bias_buf.shift_m1)]
        for c in range(C):
            own_mult = Mux(row_first, bias_buf.mult[c], tile_mult[c])
            own_shift = Mux(row_first, bias_buf.shift_m1[c], tile_shift[c])
            m.d.comb += [new.mults[c].eq(Mux(head.channel, own_mult, head.mult)),
                         new.shifts[c].eq(Mux(head.channel, own_shift, head.shift_m1))]

    def _requant_products(self, m, go, sums, mults):
        """Builds one WideMultiplier per lane for ``sums[lane] * mults[lane]``, padded by a
        DelayLine to PRODUCT_LATENCY steps; returns the lanes' products."""
        PL = self.PRODUCT_LATENCY
        mult_bits = self.cfg.requant_mult_bits
        products = []
        for lane, (value, mult) in enumerate(zip(sums, mults)):
            mul = WideMultiplier(value.shape(), unsigned(mult_bits))
            m.submodules[f"requant_mult_{lane}"] = mul
            m.d.comb += [mul.en.eq(go), mul.a.eq(value), mul.b.eq(mult)]
            m.submodules[f"product_pad_{lane}"] = pad = DelayLine(mul.p.shape(), PL - mul.latency)
            m.d.comb += [pad.value.eq(mul.p), pad.en.eq(go)]
            products.append(pad.delayed)
        return products

    def _output_row(self, m, go, q7, lanes):
        """Builds the last stage: each lane's saturation (with ``requant_en``) and column mask
        from its q7 value and flags (``lanes``, from :meth:`_rounding_shift`), the registers
        holding a row's earlier groups, and the output row (``result_layout``) the last group
        completes. Returns the row and its valid flag."""
        cfg, L, P = self.cfg, self.lanes, self.passes
        qmax = (1 << (cfg.act_bits - 1)) - 1
        qmin = -(1 << (cfg.act_bits - 1))
        out_row = Signal(self.result_layout)
        m.d.comb += [out_row.row.eq(q7.row), out_row.col.eq(q7.col), out_row.last.eq(q7.last)]
        # With a = act_bits, the rounded value (x + 1) >> 1 is above qmax iff x >= 2**a - 1,
        # i.e. x >= 0 and (x >> a != 0 or the low a bits are all ones), and below qmin iff
        # x < -2**a - 1, i.e. x < 0 and not (x >> a == -1 or (x >> a == -2 and the low a
        # bits all ones)).
        values = []
        for lane, col in enumerate(lanes):
            upper_zero = col.hi_zero & ~col.bit_a          # x >> a == 0
            upper_m1 = col.hi_ones & col.bit_a             # x >> a == -1
            upper_m2 = col.hi_ones & ~col.bit_a            # x >> a == -2
            hi = ~col.sign & (~upper_zero | col.low_ones)
            lo = col.sign & ~upper_m1 & ~(upper_m2 & col.low_ones)
            clamped = Mux(hi, qmax, Mux(lo, qmin, col.value))
            value = Signal(signed(cfg.acc_bits), name=f"lane_out_{lane}")
            m.d.comb += value.eq(Mux(q7.lane_mask[lane],
                                     Mux(q7.requant_en, clamped, col.value), 0))
            values.append(value)
        held = [[Signal(signed(cfg.acc_bits), name=f"held_{g}_{lane}", reset_less=True)
                 for lane in range(L)] for g in range(P - 1)]
        if held:
            with m.If(go & q7.valid & ~q7.last_group):
                with m.Switch(q7.group):
                    for g, regs in enumerate(held):
                        with m.Case(g):
                            m.d.sync += [reg.eq(v) for reg, v in zip(regs, values)]
        for c, value in enumerate([v for regs in held for v in regs] + values):
            m.d.comb += out_row.data[c].eq(value)
        return out_row, q7.valid & q7.last_group
