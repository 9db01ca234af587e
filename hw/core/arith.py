"""Address arithmetic shared by the core's blocks: constant division without a divider, bit-field
addresses for power-of-two layouts, and small width helpers."""

from __future__ import annotations

from amaranth import *

__all__ = ["cdiv", "addr_bits", "divmod_const", "mixed_radix", "or_all", "kept_copy"]


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` of non-negative integers."""
    return -(-a // b)


def addr_bits(depth: int) -> int:
    """Address width of a buffer of ``depth`` words (at least 1)."""
    return max(1, (depth - 1).bit_length())


# Values up to this many bits are divided by a constant through a table (a LUT multiplexer);
# wider ones fall back to Yosys's divider.
_DIVMOD_TABLE_BITS = 10


def divmod_const(value, divisor: int):
    """``(value // divisor, value % divisor)`` of an unsigned value by a constant, without a
    divider circuit: bit slices for a power of two, else a constant table for values of up to
    ``_DIVMOD_TABLE_BITS`` bits. Yosys builds ``//`` by any other constant as a restoring
    divider, a chain of subtractors as long as the value is wide, which limited the clock of
    the whole top."""
    value = Value.cast(value)
    if divisor < 1:
        raise ValueError(f"divisor {divisor} must be >= 1")
    if divisor & (divisor - 1) == 0:
        s = divisor.bit_length() - 1
        return value[s:] if s < len(value) else C(0, 1), value[:s] if s else C(0, 1)
    if len(value) > _DIVMOD_TABLE_BITS:
        return value // divisor, value % divisor
    n = 1 << len(value)
    q = Array(C(v // divisor, range((n - 1) // divisor + 1)) for v in range(n))
    r = Array(C(v % divisor, range(divisor)) for v in range(n))
    return q[value], r[value]


def mixed_radix(*digits):
    """``((d0 * r1 + d1) * r2 + d2) ...`` for ``digits = [d0, (d1, r1), (d2, r2), ...]``,
    where every ``d_i < r_i`` (the callers' buffer layouts guarantee it). With every radix a
    power of two this is a concatenation of bit fields: no adder, no carry chain (the fetch
    and result-writer addresses were adder chains of 7-9 cells on the routed top's failing
    list); otherwise it is the arithmetic itself."""
    head, rest = Value.cast(digits[0]), digits[1:]
    if all(r & (r - 1) == 0 for _, r in rest):
        fields = []
        for d, r in reversed(rest):
            bits = r.bit_length() - 1
            d = Value.cast(d).as_unsigned()
            if bits:
                fields.append(Cat(d, C(0, max(0, bits - len(d))))[:bits])
        return Cat(*fields, head)
    value = head
    for d, r in rest:
        value = value * r + d
    return value


def or_all(values):
    """The OR of a non-empty list of values."""
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out


def element_of(m: Module, word, idx, count: int, width: int = 8):
    """Element ``idx`` (a Signal) of a word of ``count`` elements of ``width`` bits, as a case
    table on ``idx`` (0 for an index past the last element)."""
    sel = Signal(width)
    with m.Switch(idx):
        for i in range(min(count, 1 << len(idx))):
            with m.Case(i):
                m.d.comb += sel.eq(word[i * width:(i + 1) * width])
    return sel


def kept_copy(m: Module, name: str, value, en) -> Signal:
    """A register of ``value``, loaded when ``en``, marked ``keep``: one of several equal copies
    that each drive part of a large fanout, placed by their loads. Synthesis would merge equal
    registers into one; the flow (``hw.flow.yowasp.KEEP_COPIES``) and vendor tools that honour
    ``keep`` on a register leave them apart."""
    reg = Signal.like(value, name=name, reset_less=True, attrs={"keep": 1})
    with m.If(en):
        m.d.sync += reg.eq(value)
    return reg
