"""Amaranth-simulator tests of AttentionCore: whole layers against the golden model."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

import golden as g
from hw.core.attention_core import AttentionCore, ERROR_CAUSES
from hw.perf.layer import layer_timing
from hw.bus.regmap import PE_MODE_VALUES, build_regmap, pack_window
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from sim.bus import pack_rows, unpack_words
from sim.collisions import CollisionScramble
from sim.layers import make_case, pos_enc_specs
from hw.gen.verilog import REPO_ROOT

TINY = g.load_config(REPO_ROOT / "configs" / "tiny.toml")


def run_core(cfg, layer, runs, *, idle=0.0, backpressure=0.0, seed=0, max_cycles=200_000,
             collisions=None):
    """Simulate ``runs`` (list of dicts: x, kv, causal, key_len, and optional 'words' to send
    instead of the packed input, with 'lasts', the indices of words with ``last``) on one core
    after loading ``layer``; returns a list of (output words, error_cause or None, counters:
    the CYCLES/BUSY/STALL outputs of a run).

    The input goes through a :class:`sim.amaranth_streams.StreamProducer` (random idle cycles)
    and the output into a :class:`~sim.amaranth_streams.StreamConsumer` (random
    backpressure). A run's words are queued before its START, so with ``idle`` 0 the first
    word is taken in the loader's first cycle, as the cycle model assumes.

    Every ``no_rw_check`` buffer returns scrambled data on a read that collides with a write
    (:class:`sim.collisions.CollisionScramble`), so the exact comparisons also check that no
    such read is used. ``collisions``, if a dict, receives the count of colliding reads per
    buffer."""
    core = AttentionCore(cfg)
    window = pack_window(build_regmap(cfg), layer)
    source = StreamProducer(core.x_in, idle=idle, seed=seed, forever=True)
    sink = StreamConsumer(core.y_out, None, backpressure=backpressure, seed=seed + 1,
                          convert=lambda beat: beat.data)
    results = []

    async def control(ctx):
        for addr, word in enumerate(window):
            ctx.set(core.window.en, 1)
            ctx.set(core.window.addr, addr)
            ctx.set(core.window.data, word)
            ctx.set(core.window.strb, 0xF)
            await ctx.tick()
        ctx.set(core.window.en, 0)
        settings = core.start.payload
        ctx.set(settings.exp_mult, layer.exp_mult)
        ctx.set(settings.exp_shift, layer.exp_shift)
        for run in runs:
            for n in ("q", "k", "v", "pv", "o"):
                rq = getattr(layer, f"rq_{n}")
                bad = run.get("bad_shift", False) and n == "v"
                # (a per-channel projection: the first channel's, as the drivers write)
                ctx.set(settings[f"rq_{n}_mult"], int(np.atleast_1d(rq.mult)[0]))
                ctx.set(settings[f"rq_{n}_shift"], 0 if bad else int(np.atleast_1d(rq.shift)[0]))
            x, kv = run["x"], run.get("kv")
            words = run.get("words")
            if words is None:
                words = pack_rows(x, cfg.act_bits) + (pack_rows(kv, cfg.act_bits)
                                                      if kv is not None else [])
            lasts = run.get("lasts")
            if lasts is None:
                lasts = {len(x) * cfg.act_row_words - 1, len(words) - 1}
            source.put({"data": w, "last": int(i in lasts)} for i, w in enumerate(words))
            ctx.set(settings.seq_len, len(x))
            ctx.set(settings.kv_len, len(kv) if kv is not None else 0)
            ctx.set(settings.key_len, run.get("key_len") or 0)
            ctx.set(settings.causal, int(run.get("causal", False)))
            ctx.set(settings.cross, int(kv is not None))
            ctx.set(settings.pe_mode, PE_MODE_VALUES[run.get("pos_enc", "off")])
            ctx.set(settings.additive, int(run.get("additive", layer.scoring == "additive")))
            ctx.set(settings.channel_scales, int(run.get("channel_scales", layer.per_channel)))
            if cfg.additive:
                ctx.set(settings.tanh_mult, layer.tanh_mult)
                ctx.set(settings.tanh_shift, layer.tanh_shift)
            if cfg.pos_enc:
                ctx.set(settings.pe_offset, run.get("pe_offset", 0))
                ctx.set(settings.pe_grid_w, run.get("grid_width") or 0)
                ctx.set(settings.pe_mult, layer.pe_mult)
                ctx.set(settings.pe_shift, run.get("pe_shift", layer.pe_shift))
            ctx.set(core.start.valid, 1)
            await ctx.tick()
            ctx.set(core.start.valid, 0)
            first = len(sink.items)
            err = None
            for _ in range(max_cycles):
                _, _, done, error, cause = await ctx.tick().sample(
                    core.done, core.error, core.error_cause)
                if error:
                    err = cause
                if done or err is not None:
                    break
            else:
                raise AssertionError(f"no DONE or ERROR within {max_cycles} cycles")
            counters = None
            if err is None:
                await ctx.tick()            # the counters are published with done
                counters = {"cycles": ctx.get(core.cycles), "busy": ctx.get(core.busy_cycles),
                            "stall": ctx.get(core.stall_cycles)}
            else:
                # What a stream that ran long leaves behind is drained by the core.
                while source.pending:
                    await ctx.tick()
                for _ in range(3):
                    await ctx.tick()
            results.append((sink.items[first:], err, counters))

    platform = CollisionScramble()

    async def control_and_count(ctx):
        await control(ctx)
        if collisions is not None:
            for memory, counter in platform.counters:
                collisions[memory] = ctx.get(counter)

    simulate(Fragment.get(core, platform), control_and_count, background=[source, sink])
    return results


def check_outputs(cfg, layer, run, words):
    want = g.attention_int(cfg, layer, run["x"], run.get("kv"), causal=run.get("causal", False),
                           key_len=run.get("key_len"), pos_enc=run.get("pos_enc", "off"),
                           pe_offset=run.get("pe_offset", 0), grid_width=run.get("grid_width"))
    got = np.array(unpack_words(words, cfg.d_model, cfg.act_bits))
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


def check_layer_runs(cfg, layer, runs, *, stalls=False, seed=0):
    """Runs ``runs`` of ``layer`` on one core (with random stalls if ``stalls``): every run
    succeeds with golden's output; without stalls CYCLES is the model's."""
    idle, bp = (0.3, 0.4) if stalls else (0.0, 0.0)
    results = run_core(cfg, layer, runs, idle=idle, backpressure=bp, seed=seed)
    for run, (words, err, counters) in zip(runs, results):
        assert err is None, run
        check_outputs(cfg, layer, run, words)
        if not stalls:
            check_cycle_model(cfg, run, counters)


def check_cycle_model(cfg, run, counters):
    """The layer cycle model is exact with an always-valid source and always-ready sink."""
    kv = run.get("kv")
    lt = layer_timing(cfg, len(run["x"]), None if kv is None else len(kv),
                      pos_enc=run.get("pos_enc", "off"), additive=run.get("additive", False))
    assert (counters["cycles"], counters["stall"]) == (lt.latency, lt.softmax_stall)


@pytest.mark.parametrize("rows,cols,lanes,requant_lanes",
                         [(2, 4, 2, 0), (3, 6, 2, 0), (3, 4, 2, 2)])
def test_cycle_model_exact(rows, cols, lanes, requant_lanes):
    """CYCLES and STALL_CYCLES equal hw.perf.layer's figures, softmax stalls included (and
    with fewer requantizer lanes than columns)."""
    cfg = TINY.replace(array_rows=rows, array_cols=cols, softmax_lanes=lanes,
                       requant_lanes=requant_lanes)
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
    words = pack_rows(good["x"], cfg.act_bits)
    short = dict(good, words=words[:n - 2], lasts={n - 3})
    long_ = dict(good, words=words + words[:3], lasts={n + 2})
    results = run_core(cfg, layer, [short, good, long_, runs[1]])
    assert results[0][1] == 1 << ERROR_CAUSES["STREAM_SHORT"]
    assert results[1][1] is None
    check_outputs(cfg, layer, good, results[1][0])
    assert results[2][1] == 1 << ERROR_CAUSES["STREAM_LONG"]
    assert results[3][1] is None
    check_outputs(cfg, layer, runs[1], results[3][0])


@pytest.mark.parametrize("scoring", ["dot", "additive"])
def test_engine_fault_abandons_run(scoring):
    """A command the engines reject (here: a V shift of 0, which the registers would have
    refused at START) ends the run with ENGINE_FAULT instead of a hang; the next run is right
    (with additive scores too: the flushed scorer refills its tables)."""
    cfg = TINY.replace(additive_lanes=4) if scoring == "additive" else TINY
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


@pytest.mark.parametrize("stalls", [False, True])
def test_positional_encoding(stalls):
    """Every encoding the configuration builds, alone and with causal, padding and cross runs
    (sim.layers.pos_enc_specs), then settings the encoder refuses: each a BAD_POSENC before
    any word is taken, the next run right. Without stalls CYCLES is the model's."""
    cfg = TINY.replace(pos_enc=["1d", "2d"], max_position=12)
    specs = pos_enc_specs(cfg) + [dict(seq=6, pos_enc="off")]
    layer, runs = make_case(cfg, seed=21, specs=specs + [dict(seq=6)])
    bad = [dict(runs[0], pos_enc="2d", grid_width=3, x=runs[0]["x"][:8]),   # 3 does not divide 8
           dict(runs[0], pos_enc="2d", grid_width=0),
           dict(runs[0], pos_enc="1d", pe_offset=12 - 7),                    # positions 5..12
           dict(runs[0], pos_enc="2d", grid_width=2, pe_offset=9),           # grid rows 9..12
           dict(runs[0], pos_enc="1d", pe_shift=0)]
    idle, bp = (0.3, 0.4) if stalls else (0.0, 0.0)
    results = run_core(cfg, layer, runs[:-1] + bad + runs[-1:], idle=idle, backpressure=bp,
                       seed=4)
    for run, (words, err, counters) in zip(runs[:-1], results):
        assert err is None, run
        check_outputs(cfg, layer, run, words)
        if not stalls:
            check_cycle_model(cfg, run, counters)
    for run, (words, err, counters) in zip(bad, results[len(runs) - 1:]):
        assert err == 1 << ERROR_CAUSES["BAD_POSENC"] and not words, run
    words, err, _ = results[-1]
    assert err is None
    check_outputs(cfg, layer, runs[-1], words)


@pytest.mark.parametrize("lanes,stalls,channel", [(3, False, False), (16, True, True)])
def test_additive_scoring(lanes, stalls, channel):
    """Additive scores (the layer quantized for them) in every mode, with the 1-D encoding
    too (and with ``channel``, per-channel weight scales: the window holds WA and the scale
    table); a dot-product layer on the same hardware; without stalls CYCLES is the model's."""
    cfg = TINY.replace(additive_lanes=lanes, pos_enc=["1d"], channel_scales=channel)
    specs = [dict(seq=8), dict(seq=1), dict(seq=5, causal=True), dict(seq=7, key_len=3),
             dict(seq=6, kv=8, key_len=5), dict(seq=8, pos_enc="1d", causal=True)]
    layer, runs = make_case(cfg, seed=31, specs=specs, scoring="additive")
    for run in runs:
        run["additive"] = True
    check_layer_runs(cfg, layer, runs, stalls=stalls, seed=5)
    dot, dot_runs = make_case(cfg, seed=32, specs=specs[:3], scoring="dot")
    check_layer_runs(cfg, dot, dot_runs)


@pytest.mark.parametrize("engines,stalls", [(1, False), (2, True)])
def test_channel_scales(engines, stalls):
    """Per-channel weight scales from the scale table (CTRL.CHANNEL_SCALES) in every mode; a
    per-tensor layer on the same hardware; without stalls CYCLES is the model's (the scales
    come with the bias beats: no cycle more)."""
    cfg = TINY.replace(channel_scales=True, engines=engines)
    specs = [dict(seq=8), dict(seq=1), dict(seq=5, causal=True), dict(seq=7, key_len=3),
             dict(seq=6, kv=8, key_len=5)]
    layer, runs = make_case(cfg, seed=41, specs=specs)
    assert layer.per_channel
    # the channels' scales differ, so a per-tensor run would not match
    assert len(set(np.asarray(layer.rq_q.mult).tolist())) > 1
    check_layer_runs(cfg, layer, runs, stalls=stalls, seed=7)
    tensor, tensor_runs = make_case(cfg, seed=42, specs=specs[:3], weight_scales="tensor")
    check_layer_runs(cfg, tensor, tensor_runs)


@pytest.mark.parametrize("engines,stalls", [(1, False), (2, False), (2, True)])
def test_16bit_activations(engines, stalls):
    """act_bits 16: X, Q, K, V, attention and output as int16 (two per bus word), 8-bit
    weights, the 40-bit accumulators the configuration asks for; every mode, per-channel and
    per-tensor scales; without stalls CYCLES is the model's (half the words per row on the
    bus: twice the load and stream cycles of int8)."""
    cfg = TINY.replace(act_bits=16, acc_bits=40, channel_scales=True, engines=engines)
    specs = [dict(seq=8), dict(seq=1), dict(seq=5, causal=True), dict(seq=7, key_len=3),
             dict(seq=6, kv=8, key_len=5)]
    layer, runs = make_case(cfg, seed=43, specs=specs)
    # the codes use the 16-bit range (an 8-bit path would truncate them)
    assert max(np.abs(r["x"]).max() for r in runs) > 1 << 12
    want = g.attention_int(cfg, layer, runs[0]["x"])
    assert np.abs(want).max() > 1 << 10
    check_layer_runs(cfg, layer, runs, stalls=stalls, seed=9)
    if not stalls:
        tensor, tensor_runs = make_case(cfg, seed=44, specs=specs[:3], weight_scales="tensor")
        check_layer_runs(cfg, tensor, tensor_runs)


# 16-bit probabilities: a 256-interval exp table (its steps fit one 18-bit multiplier
# operand, and the interpolation keeps the softmax within 0.55 LSB) and a 24-bit reciprocal.
PROB16 = dict(prob_bits=16, recip_bits=24, exp_table_size=256, exp_frac_bits=18)


@pytest.mark.parametrize("act_bits,stalls", [(8, False), (16, False), (16, True)])
def test_16bit_probabilities(act_bits, stalls):
    """prob_bits 16 (UQ0.16 P, a 17-bit P operand: still one multiplier per PE) with int8
    and int16 activations, every mode; CYCLES is the model's without stalls."""
    cfg = TINY.replace(act_bits=act_bits, acc_bits=32 if act_bits == 8 else 40, engines=2,
                       **PROB16)
    specs = [dict(seq=8), dict(seq=1), dict(seq=5, causal=True), dict(seq=7, key_len=3),
             dict(seq=6, kv=8, key_len=5)]
    layer, runs = make_case(cfg, seed=45 + act_bits, specs=specs)
    trace = g.attention_int(cfg, layer, runs[0]["x"], trace=True)
    assert (trace.probs % 256 != 0).any()       # the low 8 bits of P matter
    check_layer_runs(cfg, layer, runs, stalls=stalls, seed=11)
