"""Amaranth-simulator unit tests of the PE, the systolic array and the matrix engine."""

from __future__ import annotations

import numpy as np
import pytest

from golden import Requant, load_config
from golden.config import AttentionConfig
from hw.gen.verilog import REPO_ROOT
from hw.blocks.matmul import MatmulEngine
from hw.blocks.pe import ProcessingElement
from hw.perf.matmul import ideal_cycles, matmul_cycles
from hw.blocks.systolic import SystolicArray
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from tests.matmul_vectors import (MatmulCase, expected_rows, extreme_case, operand_beats,
                                  random_case)

TINY = load_config(REPO_ROOT / "configs" / "tiny.toml")


# ------------------------------------------------------------------------------ PE

def test_pe_accumulates_flags_and_stalls():
    """Random operands, flags and enables against a step model of the PE's registers."""
    rng = np.random.default_rng(1)
    pe = ProcessingElement(9, 8, 32)
    steps = 400
    a = rng.integers(-256, 256, steps)
    b = rng.integers(-128, 128, steps)
    first = rng.random(steps) < 0.2
    last = rng.random(steps) < 0.2
    en = rng.random(steps) < 0.7
    mismatches = []

    async def tb(ctx):
        # model registers: flags delayed once (first_out/last_out), twice and three times
        # (with the product), the multiplier's operand and product registers, the fabric
        # product register, accumulator, result
        f_d = l_d = f_dd = l_dd = f_3 = l_3 = False
        a_r = b_r = prod = prod2 = acc = result = 0
        for i in range(steps):
            ctx.set(pe.en, bool(en[i]))
            ctx.set(pe.a_in, int(a[i]))
            ctx.set(pe.b_in, int(b[i]))
            ctx.set(pe.first_in, bool(first[i]))
            ctx.set(pe.last_in, bool(last[i]))
            await ctx.tick()
            if en[i]:
                total = (0 if f_3 else acc) + prod2
                if l_3:
                    result = total
                acc = total
                prod2 = prod
                prod = a_r * b_r
                a_r, b_r = int(a[i]), int(b[i])
                f_3, l_3 = f_dd, l_dd
                f_dd, l_dd = f_d, l_d
                f_d, l_d = bool(first[i]), bool(last[i])
                if (ctx.get(pe.a_out), ctx.get(pe.b_out)) != (a[i], b[i]):
                    mismatches.append((i, "operands"))
            if ctx.get(pe.result) != result:
                mismatches.append((i, ctx.get(pe.result), result))

    simulate(pe, tb)
    assert mismatches == []
    assert last.sum() > 20   # the run retired many sums


# A constructor that raises leaves an object Amaranth reports as never elaborated.
_unused_ok = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@_unused_ok
def test_pe_rejects_bad_widths():
    with pytest.raises(ValueError, match="a_width = 19"):
        ProcessingElement(19, 8, 32)
    with pytest.raises(ValueError, match="acc_width = 10 is out of range: allowed integers 16"):
        ProcessingElement(9, 8, 10)


# ------------------------------------------------------------------------------ array

@pytest.mark.parametrize("rows,cols", [(2, 2), (3, 2), (4, 4), (2, 5)])
def test_array_tiles_pipelined(rows, cols):
    """Back-to-back tiles (some with K below the minimum spacing) with random stalls."""
    rng = np.random.default_rng(rows * 10 + cols)
    arr = SystolicArray(rows, cols, 9, 8, 32)
    S = arr.min_tile_steps
    ks = [1, S, 2 * S + 1, 3, S + 2]
    tiles = [(rng.integers(-256, 256, (rows, k)), rng.integers(-128, 128, (k, cols)))
             for k in ks]
    # Step schedule: beats of a tile, with bubbles before a last beat that comes too early.
    schedule = []
    since = S
    for a, b in tiles:
        k = a.shape[1]
        for kk in range(k):
            if kk == k - 1:
                while since < S:
                    schedule.append(None)
                    since += 1
                since = 0
            schedule.append((a[:, kk], b[kk], kk == 0, kk == k - 1))
            since += 1
    last_steps = [i for i, s in enumerate(schedule) if s is not None and s[3]]
    schedule += [None] * (arr.latency + rows + 2)
    got = []

    async def tb(ctx):
        step = 0
        i = 0
        while i < len(schedule):
            on = rng.random() < 0.75
            ctx.set(arr.en, on)
            beat = schedule[i]
            ctx.set(arr.valid, beat is not None)
            garbage = rng.integers(-100, 100, rows + cols).tolist()   # a bubble's operands
            ctx.set(arr.a, [int(x) for x in beat[0]] if beat else garbage[:rows])
            ctx.set(arr.b, [int(x) for x in beat[1]] if beat else garbage[rows:])
            ctx.set(arr.first, bool(beat and beat[2]))
            ctx.set(arr.last, bool(beat and beat[3]))
            if on and ctx.get(arr.row_valid):
                got.append((step, ctx.get(arr.row_index),
                            [int(v) for v in ctx.get(arr.row_data)]))
            await ctx.tick()
            if on:
                step += 1
                i += 1

    simulate(arr, tb)
    expected = []
    for t, (a, b) in enumerate(tiles):
        prod = a @ b
        for r in range(rows):
            expected.append((last_steps[t] + arr.latency + r, r, prod[r].tolist()))
    assert got == expected


@_unused_ok
def test_array_rejects_bad_size():
    with pytest.raises(ValueError, match="rows = 17 is out of range: allowed integers 2..16"):
        SystolicArray(17, 4, 9, 8, 32)
    with pytest.raises(ValueError, match="cols = 1 is out of range"):
        SystolicArray(4, 1, 9, 8, 32)


# ------------------------------------------------------------------------------ engine

class EngineBench:
    """Drives cmd/a/b/bias with random idle cycles and result with random backpressure
    (sim.amaranth_streams), counting the cycles of ``error`` high."""

    PORTS = ("cmd", "a", "b", "bias")

    def __init__(self, dut: MatmulEngine, idle: float, backpressure: float, seed: int):
        self.dut = dut
        self.producers = {name: StreamProducer(getattr(dut, name), idle=idle, seed=seed + i)
                          for i, name in enumerate(self.PORTS)}
        self.backpressure, self.seed = backpressure, seed
        self.errors = 0

    def add(self, case: MatmulCase, command: dict | None = None):
        a, b, bias = operand_beats(self.dut.cfg, case)
        self.producers["cmd"].put([command or case.command()])
        self.producers["a"].put(a)
        self.producers["b"].put(b)
        self.producers["bias"].put(bias)

    def run(self, expected_beats: int, max_cycles: int = 20000):
        """Collect ``expected_beats`` result beats, then 30 more cycles (anything arriving
        then is an error the caller's comparison sees); returns the beats."""
        dut = self.dut
        self.consumer = StreamConsumer(
            dut.result, expected_beats, backpressure=self.backpressure, seed=self.seed + 9,
            linger=30, max_cycles=max_cycles,
            convert=lambda p: (p.row, p.col, p.last, tuple(int(v) for v in p.data)))

        async def count_errors(ctx):
            async for _, _, error in ctx.tick().sample(dut.error):
                self.errors += error

        simulate(dut, self.consumer, background=[*self.producers.values(), count_errors])
        self.leftover = {name: p.pending for name, p in self.producers.items()}
        return self.consumer.items

    @property
    def first_operand(self) -> int:
        return self.producers["a"].accepted[0]

    @property
    def last_result(self) -> int:
        return self.consumer.cycles[-1]


def _cases(cfg, rng, count):
    max_m = max(cfg.max_seq_len, cfg.max_kv_len)
    max_nk = max(cfg.d_model, cfg.max_kv_len)
    out = []
    for i in range(count):
        m = int(rng.integers(1, max_m + 1))
        n = int(rng.integers(1, max_nk + 1))
        k = 1 if i % 4 == 0 else int(rng.integers(1, max_nk + 1))
        out.append(random_case(cfg, rng, m, n, k, bias=bool(rng.integers(2)),
                               requant=bool(rng.integers(2))))
    return out


@pytest.mark.parametrize("rows,cols,lanes,idle,bp", [
    (4, 4, 0, 0.0, 0.0), (4, 4, 0, 0.3, 0.4), (2, 3, 0, 0.2, 0.5), (3, 2, 0, 0.0, 0.0),
    # fewer requantizer lanes than columns: rows wait in the row store
    (4, 4, 2, 0.0, 0.0), (4, 4, 1, 0.3, 0.4), (3, 4, 2, 0.2, 0.5), (5, 4, 1, 0.0, 0.0)])
def test_engine_random_commands(rows, cols, lanes, idle, bp):
    cfg = TINY.replace(array_rows=rows, array_cols=cols, requant_lanes=lanes)
    rng = np.random.default_rng(rows * 100 + cols * 10 + lanes + int(bp * 10))
    cases = _cases(cfg, rng, 6)
    cases.append(extreme_case(cfg, 8, 16, 16, bias=True, requant=False))
    cases.append(extreme_case(cfg, 5, 7, 16, bias=True, requant=True))
    check_commands(cfg, cases, idle, bp, seed=7)


def check_commands(cfg, cases, idle, bp, seed):
    """``cases`` back to back on one engine under ``idle``/``bp``: golden's rows, no error,
    every operand taken."""
    bench = EngineBench(MatmulEngine(cfg), idle, bp, seed=seed)
    expected = []
    for case in cases:
        bench.add(case)
        expected += expected_rows(cfg, case)
    got = bench.run(len(expected))
    assert got == expected
    assert bench.errors == 0
    assert all(v == 0 for v in bench.leftover.values()), bench.leftover


@pytest.mark.parametrize("rows,cols,lanes,idle,bp", [
    (4, 4, 0, 0.0, 0.0), (4, 4, 0, 0.3, 0.4), (2, 3, 0, 0.2, 0.5), (4, 4, 2, 0.3, 0.4),
    (3, 4, 1, 0.0, 0.0)])
def test_engine_channel_scales(rows, cols, lanes, idle, bp):
    """Built with ``channel_scales``: per-column multipliers and shifts from the bias beat,
    mixed with per-tensor and raw products, exact against golden's ChannelRequant."""
    cfg = TINY.replace(array_rows=rows, array_cols=cols, channel_scales=True,
                       requant_lanes=lanes)
    rng = np.random.default_rng(rows * 10 + cols + int(bp * 10))
    cases = []
    for i in range(8):
        m, n = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        k = 1 if i == 3 else int(rng.integers(1, 17))
        kind = i % 3        # per-channel, per-tensor, raw
        cases.append(random_case(cfg, rng, m, n, k, bias=kind < 2 or bool(rng.integers(2)),
                                 requant=kind < 2, channel=kind == 0, probs=False))
    check_commands(cfg, cases, idle, bp, seed=11)


@pytest.mark.parametrize("idle,bp", [(0.0, 0.0), (0.3, 0.4)])
def test_engine_wide_a_operands(idle, bp):
    """18-bit A operands (the tiled path's E, UQ1.16, times V): raw sums of up to 64 keys,
    and one requantized product, exact."""
    cfg = TINY.replace(max_seq_len=32, max_kv_len=64)
    rng = np.random.default_rng(31)
    bench = EngineBench(MatmulEngine(cfg, a_width=18), idle, bp, seed=3)
    expected = []
    for m, n, k, rq in ((6, 8, 64, False), (5, 3, 17, False), (8, 8, 64, True)):
        case = random_case(cfg, rng, m, n, k, bias=False, requant=False, probs=False)
        case.a = rng.integers(0, (1 << 16) + 1, size=(m, k))
        case.a[0, 0] = 1 << 16                          # the largest E, 1.0
        if rq:
            peak = int(np.abs(case.a @ case.b).max())
            case.requant = Requant(40000, (peak * 40000).bit_length() - 7)
        bench.add(case)
        expected += expected_rows(cfg, case)
    got = bench.run(len(expected))
    assert got == expected
    assert bench.errors == 0


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_engine_a_width_range():
    with pytest.raises(ValueError, match="a_width = 19 is out of range: allowed 9..18"):
        MatmulEngine(TINY, a_width=19)
    with pytest.raises(ValueError, match="a_width = 8 is out of range: allowed 9..18"):
        MatmulEngine(TINY, a_width=8)


@pytest.mark.parametrize("rows,cols,lanes,m,n,k", [
    (4, 4, 0, 8, 16, 16), (4, 4, 0, 5, 7, 3), (2, 3, 0, 8, 6, 16), (4, 4, 0, 3, 2, 1),
    (4, 4, 2, 8, 16, 16), (4, 4, 2, 5, 7, 3), (4, 4, 1, 7, 9, 16), (3, 4, 1, 3, 2, 1)])
def test_engine_cycles_match_model(rows, cols, lanes, m, n, k):
    cfg = TINY.replace(array_rows=rows, array_cols=cols, requant_lanes=lanes)
    case = random_case(cfg, np.random.default_rng(3), m, n, k, bias=True, requant=True)
    bench = EngineBench(MatmulEngine(cfg), 0.0, 0.0, seed=1)
    bench.add(case)
    assert bench.run(len(expected_rows(cfg, case))) == expected_rows(cfg, case)
    assert bench.last_result - bench.first_operand + 1 == matmul_cycles(cfg, m, n, k)


@_unused_ok
def test_model_constants_match_hardware():
    """hw.perf.matmul's latency constants are the ones the hardware classes are built with."""
    from hw.perf.matmul import ARRAY_LATENCY_EXTRA, POST_LATENCY
    for rows, cols in [(2, 3), (4, 4), (3, 8)]:
        assert SystolicArray(rows, cols, 9, 8, 32).latency == cols + ARRAY_LATENCY_EXTRA
        cfg = TINY.replace(array_rows=rows, array_cols=cols)
        assert MatmulEngine(cfg).POST_LATENCY == POST_LATENCY


def test_model_within_ten_percent_of_ideal():
    for rows, cols in [(2, 2), (4, 4), (2, 3), (8, 8), (16, 16), (4, 16)]:
        cfg = AttentionConfig(d_model=256, heads=4, head_dim=64, max_seq_len=256,
                              max_kv_len=256, array_rows=rows, array_cols=cols)
        for mult in (1, 2, 4):
            m, n, k = rows * mult, cols * mult, 4 * max(rows, cols) * mult
            assert matmul_cycles(cfg, m, n, k) <= 1.1 * ideal_cycles(cfg, m, n, k)


def test_engine_rejects_out_of_range_commands():
    """Bad commands pulse error, take no operands and do not disturb the next command."""
    cfg = TINY
    eng = MatmulEngine(cfg, max_m=8, max_n=16, max_k=16)
    rng = np.random.default_rng(5)
    good = random_case(cfg, rng, 6, 5, 4, bias=True, requant=True)
    bench = EngineBench(eng, 0.2, 0.3, seed=2)
    bad = [dict(good.command(), m=0), dict(good.command(), n=17), dict(good.command(), k=0),
           dict(good.command(), k=17), dict(good.command(), m=9), dict(good.command(), shift=0),
           dict(good.command(), shift=63)]
    bench.producers["cmd"].put(bad)
    bench.add(good)
    expected = expected_rows(cfg, good)
    assert bench.run(len(expected)) == expected
    assert bench.errors == len(bad)
    assert all(v == 0 for v in bench.leftover.values())


@_unused_ok
def test_engine_constructor_errors():
    with pytest.raises(ValueError, match="max_k = 0 is out of range: allowed integers 1..65536"):
        MatmulEngine(TINY, max_k=0)
    with pytest.raises(ValueError, match="max_m = 70000"):
        MatmulEngine(TINY, max_m=70000)
    with pytest.raises(TypeError, match="cfg must be an AttentionConfig"):
        MatmulEngine({"array_rows": 4})
    eng = MatmulEngine(TINY)
    assert (eng.max_m, eng.max_n, eng.max_k) == (8, 16, 16)
    assert eng.a_width == 9 and eng.b_width == 8


def test_engine_rejects_channel_without_bias_or_requant():
    """Per-column scales come with the bias beat of a requantized product: a ``channel``
    command without either is rejected, and the next command runs."""
    cfg = TINY.replace(channel_scales=True)
    rng = np.random.default_rng(8)
    good = random_case(cfg, rng, 6, 5, 4, bias=True, requant=True, channel=True)
    bench = EngineBench(MatmulEngine(cfg), 0.2, 0.3, seed=4)
    bench.producers["cmd"].put([dict(good.command(), bias_en=0),
                                dict(good.command(), requant_en=0)])
    bench.add(good)
    expected = expected_rows(cfg, good)
    assert bench.run(len(expected)) == expected
    assert bench.errors == 2
    assert all(v == 0 for v in bench.leftover.values())


def _shift_probe_case(cfg, rng, shift, mult, n):
    """One product (k = 1) whose sums times ``mult`` land on the requantizer's edges at
    ``shift``: the rounding and saturation thresholds, zero, and values whose set bits reach
    every byte of the product."""
    a_bits = cfg.act_bits
    half = 1 << (a_bits - 1)
    unit = 1 << (shift - 1)
    targets = [(2 * half - 1) * unit, (2 * half + 1) * unit, -(2 * half + 1) * unit,
               -(2 * half - 1) * unit, -(2 * half + 3) * unit, 0, unit, -unit]
    targets += [int(rng.integers(-(1 << 62), 1 << 62)) >> int(rng.integers(0, 62))
                for _ in range(n - len(targets))]
    limit = (1 << (cfg.bias_bits - 1)) - 4
    bias = np.array([max(-limit, min(limit, t // mult)) for t in targets[:n]], dtype=np.int64)
    m = cfg.array_rows
    a = rng.integers(-1, 2, size=(m, 1))
    b = rng.integers(-2, 3, size=(1, n))
    return MatmulCase(a=a, b=b, bias=bias, requant=Requant(mult, shift))


@pytest.mark.parametrize("act_bits,acc_bits", [(8, 32), (16, 40)])
def test_engine_requantizes_every_shift(act_bits, acc_bits):
    """Every shift 1..62 with the smallest, the largest and a random multiplier, on sums at
    the rounding and saturation edges and spread over the product's bytes: exact against
    golden (the rounding shift keeps only the bits the result needs, plus flags)."""
    cfg = TINY.replace(act_bits=act_bits, acc_bits=acc_bits)
    rng = np.random.default_rng(act_bits)
    mults = (1, (1 << cfg.requant_mult_bits) - 1, int(rng.integers(2, 1 << 16)))
    cases = [_shift_probe_case(cfg, rng, shift, mults[shift % 3], 16)
             for shift in range(1, 63)]
    check_commands(cfg, cases, 0.1, 0.2, seed=act_bits)
