"""Integer building blocks shared by the golden model: rounding shifts, requantization, matmul.

Every rounding here is an integer add-then-shift on int64 (round half up, i.e. toward +inf on
ties, because ``>>`` on a negative number floors). No float touches a value on the datapath.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Requant", "ChannelRequant", "is_per_channel", "round_shift", "requantize",
           "saturate", "matmul_acc", "as_int64"]


def as_int64(a) -> np.ndarray:
    return np.asarray(a).astype(np.int64)


def round_shift(x, shift):
    """``round(x / 2**shift)`` with ties toward +inf, for any integer ``shift``.

    ``shift`` may be an array; a shift <= 0 is an exact left shift. Shifts above 63 are
    refused: the rounding bias 2**(shift-1) must fit int64 (the hardware's invalid-setting
    checks compute with shift 63).
    """
    x = as_int64(x)
    shift = np.asarray(shift, dtype=np.int64)
    if shift.size and shift.max() > 63:
        raise ValueError(f"round_shift by {int(shift.max())} is out of range: allowed <= 63")
    if shift.ndim == 0:
        s = int(shift)
        if s <= 0:
            return x << -s
        return (x + (1 << (s - 1))) >> s
    right = np.maximum(shift, 0)
    bias = np.where(right > 0, np.left_shift(1, np.maximum(right - 1, 0)), 0)
    return np.where(shift > 0, (x + bias) >> right, x << np.maximum(-shift, 0))


def saturate(x, bits: int, signed: bool = True) -> np.ndarray:
    """Clamp to the range of a ``bits``-wide two's complement (or unsigned) integer."""
    if signed:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    else:
        lo, hi = 0, (1 << bits) - 1
    return np.clip(as_int64(x), lo, hi)


@dataclass(frozen=True)
class Requant:
    """Requantization ``y = sat((acc * mult + 2**(shift-1)) >> shift)``.

    Represents the real multiplier ``mult * 2**-shift``. ``mult`` is an unsigned integer of at
    most ``requant_mult_bits`` bits, ``shift`` is 1..62.
    """

    mult: int
    shift: int

    def __post_init__(self):
        if not isinstance(self.mult, int) or self.mult < 0:
            raise ValueError(f"Requant.mult must be a non-negative integer, not {self.mult!r}")
        if not isinstance(self.shift, int) or not 1 <= self.shift <= 62:
            raise ValueError(f"Requant.shift = {self.shift!r} is out of range: allowed 1..62")

    @property
    def real(self) -> float:
        return self.mult * 2.0 ** -self.shift

    @classmethod
    def from_real(cls, m: float, mult_bits: int, *, what: str = "multiplier") -> "Requant":
        """Closest ``mult * 2**-shift`` to ``m`` with ``mult`` in [2**(mult_bits-1), 2**mult_bits).

        Raises ``ValueError`` when ``m`` is too large (shift would be < 1) or not positive.
        Values too small for shift <= 62 become the smallest representable nonzero scale.
        """
        if not (m > 0 and np.isfinite(m)):
            raise ValueError(f"{what} = {m!r} must be a positive finite number")
        mant, exp = np.frexp(m)            # m = mant * 2**exp, mant in [0.5, 1)
        mult = int(np.floor(mant * 2.0 ** mult_bits + 0.5))
        shift = mult_bits - int(exp)
        if mult == 1 << mult_bits:
            mult >>= 1
            shift -= 1
        if shift < 1:
            raise ValueError(
                f"{what} = {m:.6g} is too large to requantize: allowed < "
                f"{2.0 ** (mult_bits - 1):.6g} with requant_mult_bits = {mult_bits}")
        if shift > 62:
            # Round once at shift 62 (halving the rounded mult repeatedly double-rounds).
            mult = max(1, int(np.floor(m * 2.0 ** 62 + 0.5)))
            shift = 62
        return cls(mult, shift)

    def to_dict(self) -> dict:
        return {"mult": self.mult, "shift": self.shift}


@dataclass(frozen=True, eq=False)
class ChannelRequant:
    """One :class:`Requant` per output channel (the last axis of the accumulator): per-channel
    weight scales give every output column its own real multiplier."""

    mult: np.ndarray     # int64, one per channel
    shift: np.ndarray    # int64, one per channel, 1..62

    def __post_init__(self):
        m, sh = np.asarray(self.mult), np.asarray(self.shift)
        if m.ndim != 1 or sh.shape != m.shape or m.dtype.kind not in "iu" \
                or sh.dtype.kind not in "iu":
            raise ValueError(f"ChannelRequant needs equal-length integer vectors, not mult "
                             f"{m.dtype} {m.shape} and shift {sh.dtype} {sh.shape}")
        if m.size and m.min() < 0:
            raise ValueError(f"ChannelRequant.mult[{int(np.argmin(m))}] = {int(m.min())} must "
                             f"be non-negative")
        bad = np.flatnonzero((sh < 1) | (sh > 62))
        if bad.size:
            raise ValueError(f"ChannelRequant.shift[{bad[0]}] = {int(sh[bad[0]])} is out of "
                             f"range: allowed 1..62")

    @classmethod
    def of(cls, rqs) -> "ChannelRequant":
        return cls(np.array([r.mult for r in rqs], dtype=np.int64),
                   np.array([r.shift for r in rqs], dtype=np.int64))

    @classmethod
    def from_real(cls, m, mult_bits: int, *, what: str = "multiplier") -> "ChannelRequant":
        return cls.of([Requant.from_real(float(x), mult_bits, what=f"{what}[{i}]")
                       for i, x in enumerate(np.asarray(m, dtype=np.float64))])

    @property
    def real(self) -> np.ndarray:
        return self.mult * 2.0 ** -self.shift.astype(np.float64)

    def to_dict(self) -> dict:
        return {"mult": self.mult.tolist(), "shift": self.shift.tolist()}


def is_per_channel(rq) -> bool:
    return isinstance(rq, ChannelRequant)


def requantize(acc, rq, bits: int = 8) -> np.ndarray:
    """Scale an accumulator by ``rq`` (a :class:`Requant`, or a :class:`ChannelRequant` along
    the last axis) with round-half-up and saturate to signed ``bits``."""
    return saturate(round_shift(as_int64(acc) * rq.mult, rq.shift), bits)


def matmul_acc(a, b, bias=None, acc_bits: int | None = None) -> np.ndarray:
    """Exact integer ``a @ b (+ bias)`` in int64.

    With ``acc_bits``, checks the hardware accumulator cannot have wrapped: raises
    ``OverflowError`` naming the largest magnitude otherwise.
    """
    acc = as_int64(a) @ as_int64(b)
    if bias is not None:
        acc = acc + as_int64(bias)
    if acc_bits is not None and acc.size:
        peak = int(np.abs(acc).max())
        if peak > (1 << (acc_bits - 1)) - 1:
            raise OverflowError(
                f"accumulator magnitude {peak} does not fit acc_bits = {acc_bits}")
    return acc
