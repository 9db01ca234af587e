"""Amaranth-simulator tests of the additive scorer (hw/blocks/additive.py): exact against
golden.additive.additive_scores, under idle and backpressure, and its cycle model."""

from __future__ import annotations

import numpy as np
import pytest

from golden.additive import additive_scores
from hw.blocks.additive import AdditiveScorer
from hw.perf.additive import fill_cycles, scorer_cycles
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from tests.matmul_vectors import MatmulCase, operand_beats


class _Shape:
    """The two fields operand_beats reads of a configuration."""

    def __init__(self, rows, cols):
        self.array_rows, self.array_cols = rows, cols


def expected(q, k, w, mult, shift, R, C):
    """Result beats (row, col, last, data) in the scorer's order."""
    s = additive_scores(q, k, w, mult, shift)
    m, n = s.shape
    tm, tn = -(-m // R), -(-n // C)
    full = np.zeros((tm * R, tn * C), dtype=np.int64)
    full[:m, :n] = s
    rows = [(i * R + r, j * C, 0, tuple(full[i * R + r, j * C:(j + 1) * C].tolist()))
            for i in range(tm) for j in range(tn) for r in range(min(R, m - i * R))]
    rows[-1] = rows[-1][:2] + (1,) + rows[-1][3:]
    return rows


def run(R, C, lanes, products, *, groups=2, idle=0.0, bp=0.0, seed=0, mult=20000, shift=12,
        max_k=16, mult_bits=16):
    """Fill the table, write each group's w, then run ``products`` (list of (q, k, lh));
    returns (result beats, cycles from the first command to each product's last beat,
    cycle of the fill's end)."""
    dut = AdditiveScorer(R, C, lanes, max_m=16, max_n=16, max_k=max_k, groups=groups,
                         mult_bits=mult_bits)
    rng = np.random.default_rng(seed)
    ws = rng.integers(-128, 128, size=(groups, max_k))
    a_all, b_all, want = [], [], []
    for q, k, lh in products:
        a, b, _ = operand_beats(_Shape(R, C), MatmulCase(q, k.T, None, None))
        a_all += a
        b_all += b
        want += expected(q, k, ws[lh, :q.shape[1]], mult, shift, R, C)
    pa = StreamProducer(dut.a, [list(x) for x in a_all], idle=idle, seed=seed + 1)
    pb = StreamProducer(dut.b, [list(x) for x in b_all], idle=idle, seed=seed + 2)
    sink = StreamConsumer(dut.result, len(want), backpressure=bp, seed=seed + 3,
                          convert=lambda v: (v.row, v.col, v.last, tuple(v.data)))
    marks = {}

    async def control(ctx):
        # words of four elements, the upper half written first and on its own (byte enables)
        for lh in range(groups):
            for a in range(max_k // 4):
                word = sum((int(ws[lh, 4 * a + j]) & 0xFF) << (8 * j) for j in range(4))
                for en in (0b1100, 0b0011):
                    ctx.set(dut.w_write.en, en)
                    ctx.set(dut.w_write.addr, lh * max_k // 4 + a)
                    ctx.set(dut.w_write.data, word if en == 0b1100 else word & 0xFFFF)
                    await ctx.tick()
        ctx.set(dut.w_write.en, 0)
        ctx.set(dut.tanh_mult, mult)
        ctx.set(dut.tanh_shift, shift)
        ctx.set(dut.fill, 1)
        await ctx.tick()
        ctx.set(dut.fill, 0)
        n = 1
        while ctx.get(dut.filling):
            await ctx.tick()
            n += 1
        marks["fill"] = n
        for q, k, lh in products:
            ctx.set(dut.cmd.payload, {"m": q.shape[0], "n": k.shape[0], "k": q.shape[1],
                                      "lh": lh})
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)

    simulate(dut, control, pa.testbench, pb.testbench, sink.testbench)
    assert sink.items == want
    marks["first_beat"] = pa.accepted[0]
    return sink, marks


CASES = [  # R, C, lanes, (m, n, k) of each product
    (4, 4, 4, [(8, 8, 8), (3, 5, 2)]),
    (2, 4, 3, [(5, 7, 6), (1, 1, 1)]),        # lanes not dividing R*C, edges of every tile
    (6, 8, 8, [(7, 9, 16)]),
    (4, 4, 16, [(4, 4, 1), (8, 4, 3)]),       # one cycle per beat: the bank's stall
]


@pytest.mark.parametrize("R,C,lanes,shapes", CASES)
@pytest.mark.parametrize("stalls", [False, True])
def test_scores_exact(R, C, lanes, shapes, stalls):
    rng = np.random.default_rng(R * 100 + C * 10 + lanes)
    products = [(rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (n, k)), i % 2)
                for i, (m, n, k) in enumerate(shapes)]
    run(R, C, lanes, products, idle=0.3 if stalls else 0.0, bp=0.4 if stalls else 0.0,
        seed=lanes)


def test_extremes_and_settings():
    """All-max and all-min operands (|z| up to 256, the table's ends), a steep and a flat
    tanh argument."""
    for mult, shift in ((65535, 10), (1, 62), (40000, 1)):
        q = np.full((4, 6), -128)
        k = np.concatenate([np.full((2, 6), -128), np.full((2, 6), 127)])
        run(4, 4, 4, [(q, k, 0), (-q - 1, k, 1)], mult=mult, shift=shift)


@pytest.mark.parametrize("mult_bits,mult,shift", [(3, 7, 1), (3, 5, 3), (24, 0xFFFFFF, 8),
                                                   (30, (1 << 30) - 1, 1)])
def test_multiplier_widths(mult_bits, mult, shift):
    """TANH_MULT widths whose argument is narrower than the tanh unit takes (sign-extended)
    or wider (saturated): still the golden model's scores."""
    q = np.array([[-128, -3, 0, 5], [127, 64, -64, 1]])
    k = np.array([[-128, 3, 0, -5], [127, -1, 2, 3], [0, 0, 0, 0]])
    run(2, 2, 2, [(q, k, 0)], mult=mult, shift=shift, max_k=4, mult_bits=mult_bits)


@pytest.mark.parametrize("R,C,lanes,shapes", CASES)
def test_cycle_model(R, C, lanes, shapes):
    """Without stalls every result beat comes at the model's cycle, and the fill takes the
    model's cycles."""
    rng = np.random.default_rng(3)
    products = [(rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (n, k)), 0)
                for m, n, k in shapes]
    sink, marks = run(R, C, lanes, products)
    assert marks["fill"] == fill_cycles()
    want = [marks["first_beat"] + t for t in scorer_cycles(R, C, lanes, shapes)]
    assert sink.cycles == want


def test_rejects_bad_parameters():
    with pytest.raises(ValueError, match="lanes = 17 is out of range: allowed 1..16"):
        AdditiveScorer(4, 4, 17, max_m=8, max_n=8, max_k=8)
    with pytest.raises(ValueError, match="acc_bits = 16 cannot hold"):
        AdditiveScorer(4, 4, 4, max_m=8, max_n=8, max_k=64, acc_bits=16)
    with pytest.raises(ValueError, match="max_k = 6 must be a multiple of 4"):
        AdditiveScorer(4, 4, 4, max_m=8, max_n=8, max_k=6)
