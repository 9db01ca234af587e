"""Amaranth-simulator tests of the softmax unit and its exp and divider sub-blocks.

Every result is compared with the golden model (golden/softmax.py) by exact equality.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.hdl import Fragment, signed

from golden import load_config
from golden.fixed import round_shift
from golden.softmax import exp2_neg, softmax_exp
from hw.gen.verilog import REPO_ROOT
from hw.blocks.divider import ReciprocalDivider
from hw.blocks.exp2 import Exp2Table, Exp2Unit, ExpScale
from hw.perf.softmax import softmax_cycles, softmax_schedule
from hw.blocks.softmax import SoftmaxGeometry, SoftmaxUnit
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from sim.collisions import CollisionScramble
from tests.softmax_cases import (Settings, edge_rows, expected_row, extreme_settings,
                                 random_rows, realistic_settings)

TINY = load_config(REPO_ROOT / "configs" / "tiny.toml")
WIDE = TINY.replace(softmax_lanes=2, max_seq_len=32, max_kv_len=32)
DEFAULT = load_config(REPO_ROOT / "configs" / "default.toml")


def _run(dut, *testbenches):
    # The rings are no_rw_check: colliding reads return scrambled data, so the exact
    # comparisons also check that no such read is used (sim.collisions).
    simulate(Fragment.get(dut, CollisionScramble()), *testbenches)


# ---------------------------------------------------------------------- exp2


@pytest.mark.parametrize("cfg", [TINY, DEFAULT], ids=["tiny", "default"])
def test_exp2_matches_golden(cfg):
    rng = np.random.default_rng(1)
    top = (1 << cfg.score_diff_bits) - 1
    diffs = np.concatenate([np.arange(0, 300), [top, top - 1, 1 << (cfg.score_bits - 1)],
                            rng.integers(0, top + 1, 300),
                            rng.integers(0, 1 << 12, 300)]).astype(np.int64)
    big = (1 << cfg.exp_mult_bits) - 1
    settings = [(big, 1), (big, 62), (1, 1), (0, 7), (40000, 20), (23170, 14), (1234, 9),
                (big, cfg.exp_frac_bits + 6)]
    dut = Exp2Unit(cfg)
    got = {}

    async def tb(ctx):
        lat = dut.latency
        for mult, shift in settings:
            ctx.set(dut.exp_mult, mult)
            ctx.set(dut.exp_shift, shift)
            out = []
            for k in range(len(diffs) + lat):
                if k < len(diffs):
                    ctx.set(dut.diff, int(diffs[k]))
                await ctx.tick()
                if k + 1 >= lat:
                    out.append(ctx.get(dut.exp))
            got[(mult, shift)] = np.array(out[:len(diffs)])

    _run(dut, tb)
    for mult, shift in settings:
        want = softmax_exp(diffs, cfg, mult, shift)
        np.testing.assert_array_equal(got[(mult, shift)], want, err_msg=f"{mult=} {shift=}")
    # The zero difference is exactly 1.0 (UQ1.W), the largest value.
    assert got[(big, 1)][0] == 1 << cfg.exp_bits


def _pipeline(dut, lat, inputs, set_input, output):
    """Feed ``inputs`` one per cycle into a pipeline without flow control of latency ``lat``;
    returns the outputs, one per input."""
    out = []

    async def tb(ctx):
        for k in range(len(inputs) + lat):
            if k < len(inputs):
                set_input(ctx, inputs[k])
            await ctx.tick()
            if k + 1 >= lat:
                out.append(ctx.get(output))

    _run(dut, tb)
    return np.array(out[:len(inputs)])


@pytest.mark.parametrize("frac_bits", [16, 8])
def test_exp2_table_every_code(frac_bits):
    """The table half on its own at another output width (the tiled softmax's UQ1.16): every
    (n, f) code against golden ``exp2_neg``."""
    cfg = DEFAULT
    F = cfg.exp_frac_bits
    n_max = frac_bits + 2
    codes = [(n, f) for n in range(n_max + 1) for f in range(1 << F)]
    dut = Exp2Table(cfg, frac_bits)

    def put(ctx, code):
        ctx.set(dut.n, code[0])
        ctx.set(dut.f, code[1])

    got = _pipeline(dut, Exp2Table.LATENCY, codes, put, dut.exp)
    u = np.array([(n << F) | f for n, f in codes], dtype=np.int64)
    np.testing.assert_array_equal(got, exp2_neg(u, cfg, frac_bits))
    assert got[0] == 1 << frac_bits


def test_exp_scale_signed_scores():
    """The scaling half on signed scores (the tiled softmax): arithmetic shift, ties up."""
    cfg = DEFAULT
    rng = np.random.default_rng(3)
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    xs = np.concatenate([[lo, hi, 0, -1, 1, -2, 2], rng.integers(lo, hi + 1, 300),
                         rng.integers(-4096, 4096, 300)]).astype(np.int64)
    big = (1 << cfg.exp_mult_bits) - 1
    dut = ExpScale(cfg, signed(cfg.score_bits))
    for mult, shift in [(big, 1), (big, 62), (23170, 14), (1, 1), (1234, 9)]:
        def put(ctx, x, mult=mult, shift=shift):
            ctx.set(dut.x, int(x))
            ctx.set(dut.exp_mult, mult)
            ctx.set(dut.exp_shift, shift)

        got = _pipeline(dut, ExpScale.LATENCY, xs, put, dut.scaled)
        np.testing.assert_array_equal((got + 1) >> 1, round_shift(xs * mult, shift),
                                      err_msg=f"{mult=} {shift=}")


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_exp2_rejects_bad_config():
    with pytest.raises(TypeError, match="AttentionConfig"):
        Exp2Unit({"prob_bits": 8})
    with pytest.raises(ValueError, match="frac_bits = 31 is out of range: allowed 1..30"):
        Exp2Table(DEFAULT, 31)


# ---------------------------------------------------------------------- divider


@pytest.mark.parametrize("cfg", [TINY, DEFAULT], ids=["tiny", "default"])
def test_divider_reciprocal(cfg):
    S, R = cfg.sum_bits, cfg.recip_bits
    rng = random.Random(2)
    sums = [1, 2, 3, (1 << S) - 1, 1 << (S - 1), (1 << cfg.exp_bits),
            (1 << cfg.exp_bits) + 1] + [rng.randrange(1, 1 << S) for _ in range(400)] \
        + [rng.randrange(1 << cfg.exp_bits, cfg.max_kv_len << cfg.exp_bits) for _ in range(400)]
    dut = ReciprocalDivider(S, R, tag_width=8)
    got = []

    async def tb(ctx):
        for k in range(len(sums) + dut.latency):
            if k < len(sums):
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i_sum, sums[k])
                ctx.set(dut.i_tag, k & 0xFF)
            else:
                ctx.set(dut.i_valid, 0)
            await ctx.tick()
            if ctx.get(dut.o_valid):
                got.append((ctx.get(dut.o_recip), ctx.get(dut.o_lead), ctx.get(dut.o_tag)))

    _run(dut, tb)
    assert len(got) == len(sums)
    for k, (s, (q, lead, tag)) in enumerate(zip(sums, got)):
        p = s.bit_length() - 1
        assert (q, lead, tag) == ((1 << (p + R)) // s, p, k & 0xFF), f"sum = {s}"
        assert (1 << (R - 1)) <= q <= (1 << R)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_divider_zero_sum_and_bad_arguments():
    dut = ReciprocalDivider(10, 8)
    seen = []

    async def tb(ctx):
        ctx.set(dut.i_valid, 1)
        ctx.set(dut.i_sum, 0)
        for _ in range(dut.latency):
            await ctx.tick()
            ctx.set(dut.i_valid, 0)
        seen.append((ctx.get(dut.o_valid), ctx.get(dut.o_recip), ctx.get(dut.o_lead)))

    _run(dut, tb)
    assert seen == [(1, (1 << 9) - 1, 0)]
    with pytest.raises(ValueError, match="recip_bits = 0 is out of range"):
        ReciprocalDivider(10, 0)
    with pytest.raises(TypeError, match="sum_bits must be an integer"):
        ReciprocalDivider(10.0, 8)


# ---------------------------------------------------------------------- whole unit


def simulate_unit(cfg, st: Settings, rows, *, idle=0.0, backpressure=0.0, seed=0,
                  extra_beats=None):
    """Drive ``rows`` through a SoftmaxUnit; returns (output beats, input accept cycles,
    output cycles, cycles where scores.ready was low while a beat was offered)."""
    dut = SoftmaxUnit(cfg)
    lanes = cfg.softmax_lanes
    layout = dut.scores.payload.shape()
    beats = []
    for i, s in rows:
        n = len(s) // lanes
        for b in range(n):
            beats.append(layout.const({"data": [int(v) for v in s[b * lanes:(b + 1) * lanes]],
                                       "row": i, "last": int(b == n - 1)}))
    if extra_beats is not None:
        beats = extra_beats(layout)
    producer = StreamProducer(dut.scores, beats, idle=idle, seed=seed)
    consumer = StreamConsumer(
        dut.probs, len(beats), backpressure=backpressure, seed=seed + 1,
        max_cycles=50 * len(beats) + 500,
        convert=lambda p: ([int(v) for v in p.data], int(p.row), int(p.last)))

    async def settings(ctx):
        ctx.set(dut.exp_mult, st.exp_mult)
        ctx.set(dut.exp_shift, st.exp_shift)
        ctx.set(dut.causal, int(st.causal))
        ctx.set(dut.kv_len, st.kv_len)

    _run(dut, settings, producer, consumer)
    return consumer.items, producer.accepted, consumer.cycles, producer.refused


def check_rows(cfg, st, rows, out):
    lanes = cfg.softmax_lanes
    k = 0
    for i, s in rows:
        want = expected_row(cfg, st, i, s)
        n = len(s) // lanes
        got = np.concatenate([np.array(out[k + b][0]) for b in range(n)])
        np.testing.assert_array_equal(got, want, err_msg=f"row {i}, scores {s.tolist()}, {st}")
        assert [o[1] for o in out[k:k + n]] == [i] * n
        assert [o[2] for o in out[k:k + n]] == [0] * (n - 1) + [1]
        k += n
    assert k == len(out)


@pytest.mark.parametrize("cfg", [TINY, WIDE], ids=["tiny", "lanes2"])
@pytest.mark.parametrize("idle,backpressure", [(0.0, 0.0), (0.3, 0.4)])
def test_unit_random_rows(cfg, idle, backpressure):
    rng = np.random.default_rng(3)
    rows = random_rows(cfg, rng, 24, spread=300) + random_rows(cfg, rng, 12) \
        + edge_rows(cfg, rng)
    st = realistic_settings(cfg, rng, causal=True, kv_len=cfg.max_kv_len - 1, score_spread=600)
    out, _, _, _ = simulate_unit(cfg, st, rows, idle=idle, backpressure=backpressure)
    check_rows(cfg, st, rows, out)


@pytest.mark.parametrize("cfg", [TINY, WIDE], ids=["tiny", "lanes2"])
def test_unit_mask_modes_and_extremes(cfg):
    rng = np.random.default_rng(4)
    rows = random_rows(cfg, rng, 10, spread=50) + edge_rows(cfg, rng)[:8]
    cases = [Settings(30000, 12, False, cfg.max_kv_len), Settings(30000, 12, True, 1),
             Settings(30000, 12, True, 3)] + extreme_settings(cfg, True, cfg.max_kv_len)[:2]
    for st in cases:
        out, _, _, _ = simulate_unit(cfg, st, rows, idle=0.2, backpressure=0.2, seed=5)
        check_rows(cfg, st, rows, out)


@pytest.mark.parametrize("bad", [dict(kv_len=0), dict(kv_len=9), dict(exp_shift=0),
                                 dict(exp_shift=63)])
def test_unit_invalid_settings_give_zero_rows(bad):
    cfg = TINY
    rng = np.random.default_rng(6)
    rows = random_rows(cfg, rng, 6, spread=100)
    fields = dict(exp_mult=30000, exp_shift=12, causal=False, kv_len=cfg.max_kv_len)
    fields.update(bad)
    st = Settings(**fields)
    out, _, _, _ = simulate_unit(cfg, st, rows, backpressure=0.3)
    check_rows(cfg, st, rows, out)
    assert all(v == 0 for o in out for v in o[0])


def test_unit_error_flag_and_causal_without_support():
    cfg = TINY.replace(causal_mask=False)
    dut = SoftmaxUnit(cfg)
    flags = []

    async def tb(ctx):
        for shift, kv, causal in [(12, 8, 0), (0, 8, 0), (63, 8, 0), (12, 0, 0), (12, 9, 0),
                                  (12, 8, 1), (62, 1, 0)]:
            ctx.set(dut.exp_shift, shift)
            ctx.set(dut.kv_len, kv)
            ctx.set(dut.causal, causal)
            await ctx.delay(1e-9)
            flags.append(ctx.get(dut.error))

    _run(dut, tb)
    assert flags == [0, 1, 1, 1, 1, 1, 0]
    # And the rows still complete, with zeros.
    st = Settings(30000, 12, True, 8)
    rows = random_rows(cfg, np.random.default_rng(7), 5, spread=100)
    out, _, _, _ = simulate_unit(cfg, st, rows)
    assert len(out) == sum(len(s) for _, s in rows) and all(o[0] == [0] for o in out)


def test_unit_overlong_row_does_not_hang():
    cfg = TINY
    st = Settings(30000, 12, False, 8)
    scores = np.arange(20) * 37 - 300
    beats_sent = []

    def beats(layout):
        seq = []
        for b, v in enumerate(scores):   # one 20-beat row (max is 8), then a normal row
            seq.append(layout.const({"data": [int(v)], "row": 3, "last": int(b == 19)}))
        for b in range(3):
            seq.append(layout.const({"data": [b * 100], "row": 4, "last": int(b == 2)}))
        beats_sent.extend(seq)
        return seq

    out, _, _, _ = simulate_unit(cfg, st, [], extra_beats=beats, backpressure=0.2)
    assert len(out) == 23
    assert [o[2] for o in out] == [0] * 19 + [1, 0, 0, 1]
    np.testing.assert_array_equal([o[0][0] for o in out[:8]],
                                  expected_row(cfg, st, 3, scores[:8]))
    assert all(o[0] == [0] for o in out[8:20])
    np.testing.assert_array_equal([o[0][0] for o in out[20:]],
                                  expected_row(cfg, st, 4, np.array([0, 100, 200])))


@pytest.mark.parametrize("cfg", [TINY, WIDE], ids=["tiny", "lanes2"])
def test_unit_cycles_match_model(cfg):
    rng = np.random.default_rng(8)
    lengths = [cfg.max_kv_len, 1, 1, 1, cfg.max_kv_len, 3, cfg.max_kv_len, 2, 1,
               cfg.max_kv_len, cfg.max_kv_len] + list(rng.integers(1, cfg.max_kv_len + 1, 12))
    rows = [(0, rng.integers(-500, 500, -(-int(n) // cfg.softmax_lanes) * cfg.softmax_lanes))
            for n in lengths]
    st = Settings(30000, 12, False, cfg.max_kv_len)
    out, accepted, emitted, refused = simulate_unit(cfg, st, rows)
    check_rows(cfg, st, rows, out)
    assert refused == [], "input throttled although the output was always ready"
    assert accepted == list(range(len(accepted)))
    beats = [len(s) // cfg.softmax_lanes for _, s in rows]
    want = [c for row in softmax_schedule(cfg, beats) for c in row]
    assert emitted == want
    # The per-row figure: uniform rows run at one row per `beats` cycles.
    for n in (1, cfg.max_kv_len):
        b = -(-n // cfg.softmax_lanes)
        assert softmax_cycles(cfg, 10, n) - softmax_cycles(cfg, 9, n) == b
    assert softmax_cycles(cfg, 1, 1) == SoftmaxGeometry(cfg).latency_fixed + 2 + 1


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_unit_rejects_bad_config():
    with pytest.raises(TypeError, match="AttentionConfig"):
        SoftmaxUnit("configs/tiny.toml")


@pytest.mark.parametrize("cfg", [TINY, WIDE, DEFAULT], ids=["tiny", "lanes2", "default"])
def test_verilog_lint_clean(cfg):
    from hw.gen.lint import lint_softmax
    issues, report = lint_softmax(cfg, name=f"test_{cfg.name}_{cfg.softmax_lanes}")
    assert issues == [], f"verilator -Wall beyond the waivers (report {report}): {issues[:5]}"
