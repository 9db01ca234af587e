"""Packing of activation rows into 32-bit stream words, for both activation widths."""

from __future__ import annotations

import numpy as np
import pytest

from sim import bus, host


def test_int8_layout():
    words = host.pack_rows([[1, -2, 3, -128, 127, 0, -1, 5]], 8)
    assert words.tolist() == [0x80_03_FE_01, 0x05_FF_00_7F]


def test_int16_layout():
    """Element 2a+k in bits [16k+15:16k] of word a."""
    words = host.pack_rows([[0x1234, -2, -32768, 32767]], 16)
    assert words.tolist() == [0xFFFE_1234, 0x7FFF_8000]


@pytest.mark.parametrize("bits", [8, 16])
def test_round_trip_and_list_versions(bits):
    rng = np.random.default_rng(bits)
    lo, hi = -(1 << (bits - 1)), 1 << (bits - 1)
    rows = rng.integers(lo, hi, size=(5, 12))
    words = host.pack_rows(rows, bits)
    assert len(words) == rows.size * bits // 32
    np.testing.assert_array_equal(host.unpack_words(words, 12, bits), rows)
    assert bus.pack_rows(rows, bits) == words.tolist()
    assert bus.unpack_words(words.tolist(), 12, bits) == rows.tolist()
