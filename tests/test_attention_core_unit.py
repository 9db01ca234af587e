"""Amaranth-simulator tests of AttentionCore: whole layers against the golden model."""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

import golden as g
from hw.core.attention_core import AttentionCore, ERROR_CAUSES
from hw.perf.layer import layer_timing
from hw.bus.regmap import build_regmap, pack_window
from sim.axis import pack_rows, unpack_words
from sim.collisions import CollisionScramble
from sim.layers import make_case
from hw.gen.verilog import REPO_ROOT

TINY = g.load_config(REPO_ROOT / "configs" / "tiny.toml")


def run_core(cfg, layer, runs, *, idle=0.0, backpressure=0.0, seed=0, max_cycles=200_000,
             collisions=None):
    """Simulate ``runs`` (list of dicts: x, kv, causal, key_len, and optional 'words' to send
    instead of the packed input) on one core after loading ``layer``; returns a list of
    (output words, error_cause or None, counters: the CYCLES/BUSY/STALL outputs of a run).

    Every ``no_rw_check`` buffer returns scrambled data on a read that collides with a write
    (:class:`sim.collisions.CollisionScramble`), so the exact comparisons also check that no
    such read is used. ``collisions``, if a dict, receives the count of colliding reads per
    buffer."""
    core = AttentionCore(cfg)
    rmap = build_regmap(cfg)
    window = pack_window(rmap, layer)
    rng = random.Random(seed)
    results = []

    async def tb(ctx):
        for addr, word in enumerate(window):
            ctx.set(core.window.en, 1)
            ctx.set(core.window.addr, addr)
            ctx.set(core.window.data, word)
            ctx.set(core.window.strb, 0xF)
            await ctx.tick()
        ctx.set(core.window.en, 0)
        settings = core.start.payload
        def set_params(bad_shift=False):
            for n in ("q", "k", "v", "pv", "o"):
                rq = getattr(layer, f"rq_{n}")
                ctx.set(settings[f"rq_{n}_mult"], rq.mult)
                ctx.set(settings[f"rq_{n}_shift"], 0 if bad_shift and n == "v" else rq.shift)
        set_params()
        ctx.set(settings.exp_mult, layer.exp_mult)
        ctx.set(settings.exp_shift, layer.exp_shift)
        for run in runs:
            set_params(run.get("bad_shift", False))
            x, kv = run["x"], run.get("kv")
            ctx.set(settings.seq_len, len(x))
            ctx.set(settings.kv_len, len(kv) if kv is not None else 0)
            ctx.set(settings.key_len, run.get("key_len") or 0)
            ctx.set(settings.causal, int(run.get("causal", False)))
            ctx.set(settings.cross, int(kv is not None))
            ctx.set(core.start.valid, 1)
            await ctx.tick()
            ctx.set(core.start.valid, 0)
            words = run.get("words")
            if words is None:
                words = pack_rows(x) + (pack_rows(kv) if kv is not None else [])
            lasts = run.get("lasts")
            if lasts is None:
                n_x = len(x) * cfg.d_model // 4
                lasts = {n_x - 1, len(words) - 1}
            out, err, cycles = [], None, 0
            i = 0
            while cycles < max_cycles:
                if i < len(words) and rng.random() >= idle:
                    ctx.set(core.x_in.valid, 1)
                    ctx.set(core.x_in.payload.data, words[i])
                    ctx.set(core.x_in.payload.last, int(i in lasts))
                else:
                    ctx.set(core.x_in.valid, 0)
                ready = rng.random() >= backpressure
                ctx.set(core.y_out.ready, int(ready))
                await ctx.delay(1e-9)
                took = ctx.get(core.x_in.valid) and ctx.get(core.x_in.ready)
                if ready and ctx.get(core.y_out.valid):
                    out.append(ctx.get(core.y_out.payload.data))
                if ctx.get(core.error):
                    err = ctx.get(core.error_cause)
                done = ctx.get(core.done)
                await ctx.tick()
                cycles += 1
                if took:
                    i += 1
                if done or err is not None:
                    break
            ctx.set(core.x_in.valid, 0)
            if err is not None:
                # What a stream that ran long leaves behind is drained by the core.
                while i < len(words):
                    ctx.set(core.x_in.valid, 1)
                    ctx.set(core.x_in.payload.data, words[i])
                    ctx.set(core.x_in.payload.last, int(i in lasts))
                    await ctx.delay(1e-9)
                    took = ctx.get(core.x_in.ready)
                    await ctx.tick()
                    if not took:
                        break
                    i += 1
                ctx.set(core.x_in.valid, 0)
                for _ in range(3):
                    await ctx.tick()
            counters = None
            if err is None:
                await ctx.tick()            # the counters are published with done
                counters = {"cycles": ctx.get(core.cycles), "busy": ctx.get(core.busy_cycles),
                            "stall": ctx.get(core.stall_cycles)}
            results.append((out, err, counters))

    platform = CollisionScramble()
    sim = Simulator(Fragment.get(core, platform))
    sim.add_clock(1e-8)

    async def tb_and_count(ctx):
        await tb(ctx)
        if collisions is not None:
            for memory, counter in platform.counters:
                collisions[memory] = ctx.get(counter)

    sim.add_testbench(tb_and_count)
    sim.run()
    return results


def check_outputs(cfg, layer, run, words):
    want = g.attention_int(cfg, layer, run["x"], run.get("kv"), causal=run.get("causal", False),
                           kv_len=run.get("key_len"))
    got = np.array(unpack_words(words, cfg.d_model))
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("engines", [1, 2])
def test_layer_matches_golden(engines):
    cfg = TINY.replace(engines=engines)
    layer, runs = make_case(cfg, seed=engines, specs=[
        dict(seq=cfg.max_seq_len), dict(seq=1), dict(seq=5, causal=True),
        dict(seq=7, key_len=3),
    ])
    collisions = {}
    results = run_core(cfg, layer, runs, collisions=collisions)
    for run, (words, err, counters) in zip(runs, results):
        assert err is None
        check_outputs(cfg, layer, run, words)
        check_cycle_model(cfg, run, counters)
    # Reads did meet writes to their address (idle ports, whose data is unused); the
    # scrambled data reached no output.
    assert len(collisions) > 0 and sum(collisions.values()) > 0


def check_cycle_model(cfg, run, counters):
    """The layer cycle model is exact with an always-valid source and always-ready sink."""
    kv = run.get("kv")
    lt = layer_timing(cfg, len(run["x"]), None if kv is None else len(kv))
    assert (counters["cycles"], counters["stall"]) == (lt.latency, lt.softmax_stall)


@pytest.mark.parametrize("rows,cols,lanes", [(2, 4, 2), (3, 6, 2)])
def test_cycle_model_exact(rows, cols, lanes):
    """CYCLES and STALL_CYCLES equal hw.perf.layer's figures, softmax stalls included."""
    cfg = TINY.replace(array_rows=rows, array_cols=cols, softmax_lanes=lanes)
    layer, runs = make_case(cfg, seed=rows, specs=[dict(seq=8), dict(seq=3, kv=7),
                                                   dict(seq=5, causal=True)])
    for run, (words, err, counters) in zip(runs, run_core(cfg, layer, runs)):
        assert err is None
        check_outputs(cfg, layer, run, words)
        check_cycle_model(cfg, run, counters)
        assert counters["busy"] > 0


def test_cross_attention_and_stalls():
    cfg = TINY.replace(array_rows=2, array_cols=4, softmax_lanes=2)
    layer, runs = make_case(cfg, seed=7, specs=[
        dict(seq=3, kv=8), dict(seq=8, kv=5, causal=True, key_len=4), dict(seq=6),
    ])
    results = run_core(cfg, layer, runs, idle=0.3, backpressure=0.4, seed=3)
    for run, (words, err, _) in zip(runs, results):
        assert err is None
        check_outputs(cfg, layer, run, words)


def test_stream_errors_then_recovery():
    cfg = TINY
    layer, runs = make_case(cfg, seed=11, specs=[dict(seq=4), dict(seq=4)])
    good = runs[0]
    n = 4 * cfg.d_model // 4
    words = pack_rows(good["x"])
    short = dict(good, words=words[:n - 2], lasts={n - 3})
    long_ = dict(good, words=words + words[:3], lasts={n + 2})
    results = run_core(cfg, layer, [short, good, long_, runs[1]])
    assert results[0][1] == 1 << ERROR_CAUSES["STREAM_SHORT"]
    assert results[1][1] is None
    check_outputs(cfg, layer, good, results[1][0])
    assert results[2][1] == 1 << ERROR_CAUSES["STREAM_LONG"]
    assert results[3][1] is None
    check_outputs(cfg, layer, runs[1], results[3][0])


def test_engine_fault_abandons_run():
    """A command the engines reject (here: a V shift of 0, which the registers would have
    refused at START) ends the run with ENGINE_FAULT instead of a hang; the next run is right."""
    cfg = TINY
    layer, runs = make_case(cfg, seed=5, specs=[dict(seq=6), dict(seq=6, causal=True)])
    results = run_core(cfg, layer, [dict(runs[0], bad_shift=True), runs[1]])
    assert results[0][1] == 1 << ERROR_CAUSES["ENGINE_FAULT"]
    assert results[1][1] is None
    check_outputs(cfg, layer, runs[1], results[1][0])


@pytest.mark.parametrize("cols,lanes", [(6, 2), (5, 1)], ids=["2-byte-reads", "1-byte-reads"])
def test_output_read_widths(cols, lanes):
    """Output words assembled from 2-byte and 1-byte buffer reads (4 adjacent columns do not
    always share a buffer word when array_cols is not a multiple of 4), under backpressure."""
    cfg = TINY.replace(array_rows=3, array_cols=cols, softmax_lanes=lanes)
    layer, runs = make_case(cfg, seed=cols, specs=[dict(seq=8), dict(seq=5, causal=True)])
    results = run_core(cfg, layer, runs, idle=0.2, backpressure=0.5, seed=cols)
    for run, (words, err, _) in zip(runs, results):
        assert err is None
        check_outputs(cfg, layer, run, words)


@pytest.mark.parametrize("width,divisor", [(7, 6), (5, 8), (4, 3), (11, 6), (3, 1)])
def test_divmod_const(width, divisor):
    """Quotient and remainder by a constant for every value: slices for powers of two, a
    table up to 10 bits, Yosys's divider beyond."""
    from amaranth import Module, Signal
    from hw.core.arith import divmod_const
    m = Module()
    value = Signal(width)
    q, r = divmod_const(value, divisor)
    qs, rs = Signal(width + 1), Signal(width + 1)
    m.d.comb += [qs.eq(q), rs.eq(r)]
    sim = Simulator(m)

    async def tb(ctx):
        for v in range(1 << width):
            ctx.set(value, v)
            assert (ctx.get(qs), ctx.get(rs)) == divmod(v, divisor), v

    sim.add_testbench(tb)
    sim.run()
