"""Sinusoidal positional encoding (1-D and 2-D) added to the input rows as they stream in.

Hardware twin of :func:`golden.posenc.add_encoding` with the codes of
:func:`golden.posenc.encoding_int` (docs/numerics.md, "Positional encodings").
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.posenc import PE_BITS, encoding_int

from hw.blocks.dsp import RegisteredMultiplier

__all__ = ["PositionalEncoder", "PeMode", "PE_WORD"]

#: 32-bit words of four int8 elements (element 4a + k in byte k) with the stream's last flag.
PE_WORD = stream.Signature(data.StructLayout({"data": 32, "last": 1}))


class PeMode(enum.Enum, shape=2):
    OFF = 0
    ONE_D = 1       # position = offset + row
    TWO_D = 2       # grid row and column of position offset * W + row (offset in grid rows)


class PositionalEncoder(wiring.Component):
    """Adds ``round_shift(code * pe_mult, pe_shift)`` to each int8 element of the first
    ``seq_len`` rows of a stream of ``d / 4``-word rows, saturating, where ``code`` is
    ``round(p 2**14)`` of the sinusoidal encoding of the element's position and channel; the
    words after them (the second sequence of a cross run) pass unchanged.

    - 1-D: position ``offset + i`` for row ``i``; ``p(pos, 2j) = sin(pos / 10000**(2j/d))``,
      ``p(pos, 2j+1)`` the cosine.
    - 2-D, an H x W grid in row-major order, ``W = grid_width``: row ``i`` is grid row
      ``offset + i // W`` (``offset`` counts whole grid rows here, so a long image is sent in
      pieces of whole rows) and column ``i % W``; the first ``d/2`` channels are the 1-D
      encoding with ``d/2`` channels of the grid row, the last ``d/2`` that of the column.

    One table serves both: the codes of positions ``0 .. max_position - 1`` and ``d``
    channels (block RAM, ``max_position x d/8`` words of eight 16-bit codes); the ``d/2``
    channel encoding's pair ``j`` is the ``d`` channel encoding's pair ``2j``.

    Invalid settings raise ``error`` and the words pass unchanged: a mode not built
    (``modes``), ``pe_shift`` outside 1..62 in an encoding mode, 2-D with ``grid_width`` 0 or
    not dividing ``seq_len``, or positions past the table (1-D: ``offset + seq_len >
    max_position``; 2-D: ``offset + seq_len / W`` or ``W`` above it). In 2-D mode the check
    is a restoring division of ``seq_len`` by ``W`` after ``restart`` (``lb`` steps, ``lb``
    the width of ``seq_len``; the first word is taken ``lb + 1`` cycles after ``restart``);
    ``error`` is valid from then on, in the other modes from the cycle after ``restart``
    (``i_stream.ready`` with an always-ready ``o_stream`` says when).

    Ports: ``i_stream``/``o_stream`` words (:data:`PE_WORD`); ``restart`` (a strobe before a
    sequence's first word: the row and channel counters restart); the settings ``mode``,
    ``offset``, ``grid_width`` (16 bits, the register fields: every value is checked),
    ``seq_len`` (up to ``max_len``), ``pe_mult`` (16 bits), ``pe_shift`` (1..62), static from
    ``restart`` to the sequence's last word. Latency: 9 cycles from a word's handshake to its
    output word's ``valid``; throughput one word per cycle; backpressure stalls the whole
    pipeline (``i_stream.ready`` is low while ``o_stream`` holds a word it cannot hand on).

    Parameters
    ----------
    d : int
        Elements per row (a multiple of 8).
    max_position : int
        Positions in the table (1..65536).
    modes : tuple of str
        Which of ``"1d"``, ``"2d"`` are built.
    act_bits : int
        8 (four elements per word).
    max_len : int or None
        Largest ``seq_len`` (default ``max_position``): the row counter's and the 2-D
        division's width.
    """

    LATENCY = 9

    def __init__(self, d: int, max_position: int, modes=("1d", "2d"), act_bits: int = 8,
                 max_len: int | None = None):
        if not isinstance(d, int) or d < 8 or d % 8:
            raise ValueError(f"d = {d!r} must be a multiple of 8 (>= 8)")
        if not isinstance(max_position, int) or not 1 <= max_position <= 65536:
            raise ValueError(f"max_position = {max_position!r} is out of range: allowed "
                             f"1..65536")
        bad = [m for m in modes if m not in ("1d", "2d")]
        if bad or not modes:
            raise ValueError(f"modes = {modes!r}: allowed a non-empty subset of '1d', '2d'")
        if act_bits != 8:
            raise ValueError(f"act_bits = {act_bits!r}: the encoder packs four int8 per word")
        max_len = max_position if max_len is None else max_len
        if not isinstance(max_len, int) or not 1 <= max_len <= 65535:
            raise ValueError(f"max_len = {max_len!r} is out of range: allowed 1..65535")
        self.d, self.max_position, self.modes = d, max_position, tuple(modes)
        self.max_len = max_len
        super().__init__({
            "i_stream": In(PE_WORD), "o_stream": Out(PE_WORD),
            "restart": In(1),
            "mode": In(PeMode), "offset": In(unsigned(16)), "grid_width": In(unsigned(16)),
            "seq_len": In(unsigned(max_len.bit_length())),
            "pe_mult": In(unsigned(16)), "pe_shift": In(unsigned(6)),
            "error": Out(1),
        })

    def table(self) -> np.ndarray:
        """The ROM: (max_position, d/8, 8) codes."""
        return encoding_int(self.max_position, self.d).reshape(self.max_position, -1, 8)

    def elaborate(self, platform):
        m = Module()
        code_shape = signed(PE_BITS + 2)
        rom = Memory(shape=data.ArrayLayout(code_shape, 8),
                     depth=self.max_position * (self.d // 8),
                     init=[[int(v) for v in word] for pos in self.table() for word in pos])
        m.submodules.rom = rom
        rd = rom.read_port(domain="sync")
        checking = self._check(m)
        advance = Signal()                # the pipeline moves
        take = Signal()
        m.d.comb += [advance.eq(~self.o_stream.valid | self.o_stream.ready),
                     self.i_stream.ready.eq(advance & ~checking & ~self.restart),
                     take.eq(self.i_stream.valid & self.i_stream.ready)]
        encoding, odd = self._address(m, rd, advance, take)
        self._pipeline(m, rd, code_shape, advance, take, encoding, odd)
        return m

    def _check(self, m):
        """The settings check into ``error``. 2-D needs seq_len / W and seq_len % W: a
        restoring division of ``lb`` steps after ``restart``. Returns ``checking`` (high
        while it runs; ``i_stream`` waits, so 2-D sequences start ``lb + 1`` cycles later)."""
        lb = len(self.seq_len)
        P = self.max_position
        two_d = self.mode == PeMode.TWO_D
        W = self.grid_width
        built_bad = (self.mode.as_value() == 3)
        for name, mode in (("1d", PeMode.ONE_D), ("2d", PeMode.TWO_D)):
            if name not in self.modes:
                built_bad = built_bad | (self.mode == mode)
        shift_bad = (self.mode != PeMode.OFF) & ((self.pe_shift == 0) | (self.pe_shift > 62))
        one_bad = (self.mode == PeMode.ONE_D) & (self.offset + self.seq_len > P)
        checking = Signal()
        step = Signal(range(lb))
        rem = Signal(lb + 1)              # < W and <= seq_len
        quo = Signal(lb)
        with m.If(self.restart):
            m.d.sync += [checking.eq(two_d), step.eq(lb - 1), rem.eq(0), quo.eq(0)]
        with m.Elif(checking):
            nxt = Cat(self.seq_len.bit_select(step, 1), rem[:lb])
            with m.If(nxt >= W):
                m.d.sync += [rem.eq(nxt - W), quo.eq(Cat(1, quo[:-1]))]
            with m.Else():
                m.d.sync += [rem.eq(nxt), quo.eq(Cat(0, quo[:-1]))]
            m.d.sync += step.eq(step - 1)
            with m.If(step == 0):
                m.d.sync += checking.eq(0)
        # The checks of the settings alone are one register (the settings are static from
        # restart, and the verdict is read no earlier than the cycle after it); the 2-D
        # division's result is compared with P - offset, registered likewise. (With the
        # add and the compares in front of ``error``, the loader's decision on it did not
        # fit a cycle in the top.)
        static_bad = Signal()
        room = Signal(len(self.offset) + 1)   # P - offset (2-D: grid rows left in the table)
        m.d.sync += [static_bad.eq(built_bad | shift_bad | one_bad
                                   | two_d & ((W == 0) | (W > P) | (self.offset > P))),
                     room.eq(P - self.offset)]
        two_bad = two_d & ((rem != 0) | (quo > room))
        m.d.comb += self.error.eq(static_bad | two_bad)
        return checking

    def _address(self, m, rd, advance, take):
        """The position counters of the word being taken and the ROM address of its codes:
        1-D (offset + row, word // 2); 2-D (grid row or column, channel group). Returns
        (whether the word is encoded, which half of the ROM word 1-D uses).

        The addresses are registers stepped with the counters (``pos * d/8`` kept as a base
        beside each position): computed from the counters, an adder and a multiplexer lay
        between them and the block RAM's address pins, and that did not fit a cycle."""
        d4, d8, pb = self.d // 4, self.d // 8, max(1, self.max_position.bit_length())
        W = self.grid_width
        word = Signal(range(d4))          # word within the row: channels 4 word .. + 3
        row = Signal(range(self.max_len + 1))   # rows of this sequence so far
        col = Signal(pb)                  # 2-D: column within the grid row (< W <= P)
        grow = Signal(pb + 1)             # 2-D: grid row (<= P once the checks pass)
        aw = (self.max_len + (1 << 16)) * d8 + d4   # no address below wraps
        a1, b1 = Signal(range(aw), name="a1"), Signal(range(aw), name="b1")  # 1-D
        a2, bg, bc = (Signal(range(aw), name=n) for n in ("a2", "bg", "bc"))  # 2-D
        w_last = Signal(16)               # W - 1, registered: the compare has no carry chain
        with m.If(self.restart):
            base = self.offset * d8
            m.d.sync += [word.eq(0), row.eq(0), col.eq(0), grow.eq(self.offset),
                         w_last.eq(W - 1),
                         a1.eq(base), b1.eq(base), a2.eq(base), bg.eq(base), bc.eq(0)]
        with m.Elif(take):
            with m.If(word == d4 - 1):
                m.d.sync += word.eq(0)
                # The row count stops at seq_len: the rows after it (a second sequence of any
                # length) pass unchanged however many they are.
                with m.If(row < self.seq_len):
                    m.d.sync += [row.eq(row + 1), b1.eq(b1 + d8), a1.eq(b1 + d8)]
                with m.Else():
                    m.d.sync += a1.eq(b1)
                with m.If(col == w_last):
                    m.d.sync += [col.eq(0), grow.eq(grow + 1), bc.eq(0), bg.eq(bg + d8),
                                 a2.eq(bg + d8)]
                with m.Else():
                    m.d.sync += [col.eq(col + 1), bc.eq(bc + d8), a2.eq(bg)]
            with m.Else():
                m.d.sync += [word.eq(word + 1), a1.eq(a1 + word[0]),
                             a2.eq(Mux(word == d4 // 2 - 1, bc, a2 + 1))]
        m.d.comb += [rd.addr.eq(Mux(self.mode == PeMode.TWO_D, a2, a1)),
                     rd.en.eq(advance)]
        encoding = ~self.error & (self.mode != PeMode.OFF) & (row < self.seq_len)
        return encoding, word[0]

    def _pipeline(self, m, rd, code_shape, advance, take, encoding, odd):
        """s1 (ROM read issued, the word registered), s_rom (the ROM word registered: the
        block's output register), s2 (codes), the products, then the shift, the rounding and
        the add, and the saturation into the output register."""
        s1 = Signal(data.StructLayout({"valid": 1, "data": 32, "last": 1, "enc": 1,
                                       "two_d": 1, "odd": 1}))
        with m.If(advance):
            m.d.sync += [s1.valid.eq(take), s1.data.eq(self.i_stream.payload.data),
                         s1.last.eq(self.i_stream.payload.last), s1.enc.eq(encoding),
                         s1.two_d.eq(self.mode == PeMode.TWO_D), s1.odd.eq(odd)]
        # The four codes of the word: 1-D the low or high half of the eight; 2-D channels
        # 0, 1, 4, 5 of them.
        # The ROM word is registered before the select: a block RAM's data arrives late
        # (5.8 ns after the clock without its output register), and the flow moves this
        # register into the block.
        rom_word = Signal.like(rd.data, name="rom_word")
        s_rom = Signal.like(s1, name="s_rom")
        with m.If(advance):
            m.d.sync += [rom_word.eq(rd.data), s_rom.eq(s1)]
        codes = [Signal(code_shape, name=f"code{k}") for k in range(4)]
        sel = [Mux(s_rom.two_d, rom_word[(0, 1, 4, 5)[k]],
                   Mux(s_rom.odd, rom_word[4 + k], rom_word[k])) for k in range(4)]
        s2 = Signal.like(s1)
        with m.If(advance):
            m.d.sync += [s2.eq(s_rom), *[codes[k].eq(sel[k]) for k in range(4)]]
        mults = []
        for k in range(4):
            mul = RegisteredMultiplier(code_shape, unsigned(16), fabric_reg=True)
            m.submodules[f"mult{k}"] = mul
            m.d.comb += [mul.en.eq(advance), mul.a.eq(codes[k]), mul.b.eq(self.pe_mult)]
            mults.append(mul.p)
        side = [s2]
        for i in range(RegisteredMultiplier.latency_for(True)):
            nxt = Signal.like(s1, name=f"s{3 + i}")
            with m.If(advance):
                m.d.sync += nxt.eq(side[-1])
            side.append(nxt)
        # Then three stages: the shift by pe_shift - 1 (a barrel shifter of the product), the
        # rounding and the add, the saturation into the output register (all in one cycle
        # they ran at about 47 MHz).
        sm1 = Signal(6)
        m.d.sync += sm1.eq(self.pe_shift - 1)
        shifted_side, sum_side = Signal.like(s1, name="s_shift"), Signal.like(s1, name="s_sum")
        with m.If(advance):
            m.d.sync += [shifted_side.eq(side[-1]), sum_side.eq(shifted_side)]
        out = []
        for k in range(4):
            half = Signal(signed(len(mults[k])), name=f"half{k}", reset_less=True)
            v = Signal(signed(len(mults[k]) + 2), name=f"sum{k}", reset_less=True)
            x = shifted_side.data[8 * k:8 * k + 8].as_signed()
            with m.If(advance):
                m.d.sync += [half.eq(mults[k] >> sm1),
                             v.eq(x + Mux(shifted_side.enc, (half + 1) >> 1, 0))]
            out.append(Mux(v > 127, 127, Mux(v < -128, -128, v))[:8])
        last = sum_side
        o = self.o_stream
        with m.If(advance):
            m.d.sync += [o.valid.eq(last.valid), o.payload.data.eq(Cat(*out)),
                         o.payload.last.eq(last.last)]
