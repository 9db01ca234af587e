"""Integer primitives: rounding shifts, saturation, requantization, exact matmul."""

import numpy as np
import pytest

from golden.fixed import Requant, matmul_acc, requantize, round_shift, saturate


def test_round_shift_ties_go_up_also_for_negatives():
    x = np.array([-7, -6, -5, -3, -2, -1, 1, 2, 3, 5, 6, 7])
    # x / 2: ties at odd x go toward +inf (-2.5 -> -2, 2.5 -> 3, -0.5 -> 0)
    np.testing.assert_array_equal(round_shift(x, 1), [-3, -3, -2, -1, -1, 0, 1, 1, 2, 3, 3, 4])
    np.testing.assert_array_equal(round_shift([-12, -4, 4, 12], 3), [-1, 0, 1, 2])


def test_round_shift_matches_exact_rational_rounding():
    rng = np.random.default_rng(3)
    x = rng.integers(-2**40, 2**40, 5000)
    s = rng.integers(1, 20, 5000)
    want = [(int(a) + (1 << (int(b) - 1))) // (1 << int(b)) for a, b in zip(x, s)]
    np.testing.assert_array_equal(round_shift(x, s), want)
    # Half up differs from NumPy's half-to-even on ties: -2.5 -> -2, 0.5 -> 1.
    assert round_shift(-5, 1) == -2 and np.round(-2.5) == -2.0
    assert round_shift(1, 1) == 1 and np.round(0.5) == 0.0


def test_round_shift_non_positive_is_left_shift():
    np.testing.assert_array_equal(round_shift([3, -3], 0), [3, -3])
    np.testing.assert_array_equal(round_shift([3, -3], -2), [12, -12])
    np.testing.assert_array_equal(round_shift([3, 3, 3], [-1, 0, 1]), [6, 3, 2])


def test_saturate_signed_and_unsigned():
    np.testing.assert_array_equal(saturate([-300, -128, 0, 127, 300], 8), [-128, -128, 0, 127, 127])
    np.testing.assert_array_equal(saturate([-5, 0, 255, 256], 8, signed=False), [0, 0, 255, 255])


def test_requantize_rounds_half_up_then_saturates():
    rq = Requant(mult=1, shift=2)                # x / 4
    np.testing.assert_array_equal(requantize([-6, -2, 2, 6, 1000, -1000], rq, 8),
                                  [-1, 0, 1, 2, 127, -128])


@pytest.mark.parametrize("m", [1e-9, 3.7e-5, 0.0123, 0.5, 0.999, 1.0, 1.5, 100.0, 16000.0])
def test_requant_from_real_relative_accuracy(m):
    bits = 16
    rq = Requant.from_real(m, bits)
    assert 2 ** (bits - 1) <= rq.mult < 2 ** bits
    assert abs(rq.real - m) <= m * 2.0 ** -bits      # half an LSB of a >= 2^(bits-1) mantissa


def test_requant_from_real_errors():
    with pytest.raises(ValueError, match="must be a positive finite"):
        Requant.from_real(0.0, 16)
    with pytest.raises(ValueError, match="must be a positive finite"):
        Requant.from_real(float("nan"), 16)
    with pytest.raises(ValueError, match=r"rq_o = 40000 is too large"):
        Requant.from_real(40000.0, 16, what="rq_o")
    with pytest.raises(ValueError, match="shift"):
        Requant(mult=3, shift=0)
    with pytest.raises(ValueError, match="mult"):
        Requant(mult=-1, shift=4)


def test_requant_from_real_tiny_values_clamp_to_shift_62():
    rq = Requant.from_real(1e-17, 16)            # 46.1 * 2^-62: fewer mantissa bits
    assert rq.shift == 62 and rq.mult == 46
    assert abs(rq.real - 1e-17) <= 0.5 * 2.0 ** -62
    # Below 2^-62 the documented result is the smallest nonzero scale, never zero.
    assert Requant.from_real(1e-25, 16) == Requant(mult=1, shift=62)


def test_matmul_acc_exact_and_overflow_check():
    a = np.full((2, 64), -128)
    b = np.full((64, 3), -128)
    np.testing.assert_array_equal(matmul_acc(a, b, np.array([1, 2, 3]), 32),
                                  np.full((2, 3), 64 * 16384) + [1, 2, 3])
    with pytest.raises(OverflowError, match="acc_bits = 20"):
        matmul_acc(a, b, None, 20)
