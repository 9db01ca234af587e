"""cocotb tests of the generated attention_top: whole layers, modes, stalls and every error.

Parameters (environment): ATTN_CONFIG (TOML path), ATTN_SEED, ATTN_IDLE, ATTN_BACKPRESSURE.
Every output word is compared with golden.attention_int.
"""

from __future__ import annotations

import os

import numpy as np
import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

import golden as g
from sim.bus import pack_rows, unpack_words
from sim.driver import AttentionDriver, cause_names
from sim.layers import make_case, mode_specs

CFG = g.load_config(os.environ["ATTN_CONFIG"])
SEED = int(os.environ.get("ATTN_SEED", "1"))
IDLE = float(os.environ.get("ATTN_IDLE", "0"))
BACKPRESSURE = float(os.environ.get("ATTN_BACKPRESSURE", "0"))


def driver(dut, seed_offset=0):
    # The stall runs also randomise the AXI4-Lite handshakes.
    return AttentionDriver(dut, CFG, idle=IDLE, backpressure=BACKPRESSURE, bus_delay=IDLE,
                           seed=SEED + seed_offset)


def mode_kw(run):
    """A run's mode arguments (for drv.run and golden.attention_int)."""
    return dict(causal=run["causal"], key_len=run["key_len"], pos_enc=run["pos_enc"],
                pe_offset=run["pe_offset"], grid_width=run["grid_width"])


def expect(run):
    return g.attention_int(CFG, LAYER, run["x"], run.get("kv"), **mode_kw(run))


def check(res, run, what):
    assert res.out is not None, f"{what}: run failed: status {res.status:#x}, {res.errors}"
    want = expect(run)
    if not np.array_equal(res.out, want):
        bad = np.argwhere(res.out != want)
        raise AssertionError(f"{what}: {len(bad)} of {want.size} outputs differ at "
                             f"{[tuple(b) for b in bad[:12].tolist()]}: got "
                             f"{[int(res.out[tuple(b)]) for b in bad[:12]]}, want "
                             f"{[int(want[tuple(b)]) for b in bad[:12]]}")


S, KV = CFG.max_seq_len, CFG.max_kv_len
SS = min(S, KV)          # self-attention: the queries are also the keys
SPECS = mode_specs(CFG)
LAYER, RUNS = make_case(CFG, SEED, SPECS)


def describe(run):
    kv = f", kv {len(run['kv'])}" if run.get("kv") is not None else ""
    pe = f", {run['pos_enc']} encoding" if run["pos_enc"] != "off" else ""
    return (f"seq {len(run['x'])}{kv}, causal {run['causal']}, key_len {run['key_len']}{pe}")


# The whole sweep of modes and lengths runs in Verilator through the fast path
# (tests/test_fast_layers.py); here a layer per mode: full, causal with padding, cross.
# With a positional encoder, also the last run of each encoding.
SOME_RUNS = [RUNS[0], RUNS[3]] + RUNS[5:6] + [
    [r for r in RUNS if r["pos_enc"] == mode][-1] for mode in CFG.pos_enc]


@cocotb.test()
async def layers_back_to_back(dut):
    """A layer per mode, back to back on one load of resident weights."""
    drv = driver(dut)
    await drv.start()
    await drv.load_layer(LAYER)
    for run in SOME_RUNS:
        res = await drv.run(run["x"], run.get("kv"), **mode_kw(run))
        check(res, run, describe(run))
        assert res.busy_cycles > 0 and res.cycles > res.busy_cycles
        dut._log.info(f"{describe(run)}: {res.cycles} cycles, {res.busy_cycles} busy")


@cocotb.test()
async def sequences_overlapped(dut):
    """Sequences through the double buffers: each starts while the previous one computes."""
    drv = driver(dut, 30)
    await drv.start()
    await drv.load_layer(LAYER)
    runs = SOME_RUNS + RUNS[1:2]
    results = await drv.run_overlapped(
        [dict(x=r["x"], kv=r.get("kv"), **mode_kw(r)) for r in runs])
    for res, run in zip(results, runs):
        check(res, run, f"overlapped {describe(run)}")
        assert res.busy_cycles > 0 and res.cycles > res.busy_cycles
    # Two equal sequences: the second ends sooner after the first than one sequence takes.
    run = RUNS[0]
    same = dict(x=run["x"], **mode_kw(run))
    first, second = await drv.run_overlapped([same, same])
    check(first, run, "first of a pair")
    check(second, run, "second of a pair")
    interval = second.end_cycle - first.end_cycle
    assert interval < first.cycles, (interval, first.cycles)
    dut._log.info(f"{describe(run)}: latency {first.cycles} cycles, interval {interval}")


@cocotb.test()
async def errors_recover(dut):
    """Each bad setting raises its ERROR_CAUSE, leaves the engine idle and weights intact;
    bus misuse answers SLVERR or is ignored; every next valid run is exact."""
    drv = driver(dut, 10)
    await drv.start()
    run = RUNS[0]
    words = pack_rows(run["x"], CFG.act_bits)
    n_x = len(words)

    # Start before any weights (and with the shift registers at their reset value 0).
    res = await drv.run(run["x"])
    assert set(res.errors) == {"NO_WEIGHTS", "BAD_SHIFT"}, res.errors
    await drv.load_layer(LAYER)
    cases = [
        ("BAD_SEQ_LEN", dict(seq_len=0)),
        ("BAD_SEQ_LEN", dict(seq_len=S + 1)),
        ("BAD_KEY_LEN", dict(key_len=SS + 1)),
        # tlast two words early.
        ("STREAM_SHORT", dict(words=words[:n_x - 2])),
        # One row and a word too many, tlast only on the final word.
        ("STREAM_LONG", dict(words=words + words[:CFG.act_row_words] + [0])),
    ]
    if SS < S:
        cases.append(("BAD_SEQ_LEN", dict(seq_len=SS + 1)))
    # Positional encodings: a mode not built is refused at START; the encoder refuses its
    # settings after START, before it takes a word (the words sent stay on the bus and are
    # cleared by the driver).
    P = CFG.positions
    for mode in ("1d", "2d"):
        if mode not in CFG.pos_enc:
            cases.append(("BAD_POSENC", dict(pos_enc=mode, grid_width=1)))
    if "1d" in CFG.pos_enc:
        cases.append(("BAD_POSENC", dict(pos_enc="1d", pe_offset=P - len(run["x"]) + 1)))
    if "2d" in CFG.pos_enc:
        cases += [("BAD_POSENC", dict(pos_enc="2d", grid_width=0)),
                  ("BAD_POSENC", dict(pos_enc="2d", grid_width=len(run["x"]) + 1))]
        if len(run["x"]) > 2:
            # a width that does not divide the rows
            w = next(w for w in range(2, len(run["x"]) + 1) if len(run["x"]) % w)
            cases.append(("BAD_POSENC", dict(pos_enc="2d", grid_width=w)))
    if CFG.cross_attention:
        cases.append(("BAD_KV_LEN", dict(kv=run["x"], kv_len=KV + 1)))
        cases.append(("BAD_KV_LEN", dict(kv=run["x"], kv_len=0)))
    else:
        cases.append(("BAD_CROSS", dict(kv=run["x"])))
    for cause, kw in cases:
        kv = kw.pop("kv", None)
        res = await drv.run(run["x"], kv, **kw)
        assert res.errors == [cause], f"{cause}: got {res.errors}"
        assert res.out is None
        assert not (await drv.read("STATUS")) & drv.bit("STATUS", "BUSY")
        good = await drv.run(run["x"], **mode_kw(run))
        check(good, run, f"valid run after {cause}")

    # A shift register out of 1..62: BAD_SHIFT; writing it also clears WEIGHTS_VALID.
    await drv.write("RQ_PV_SHIFT", 63)
    res = await drv.run(run["x"])
    assert set(res.errors) == {"BAD_SHIFT", "NO_WEIGHTS"}, res.errors
    await drv.load_layer(LAYER, weights=False)
    good = await drv.run(run["x"], **mode_kw(run))
    check(good, run, "valid run after BAD_SHIFT")

    # Bus misuse: an unmapped address answers SLVERR to a write and a read, a write to a
    # read-only register is ignored (OKAY); nothing else changes.
    used = {r.offset for r in drv.rmap}
    hole = next(a for a in range(0, drv.rmap.window_base, 4) if a not in used)
    assert await drv.bus.write(hole, 0xFFFFFFFF) == 2
    assert (await drv.bus.read(hole))[1] == 2
    cycles = await drv.read("CYCLES")
    assert await drv.write("CYCLES", cycles ^ 0xFFFF) == 0
    assert await drv.read("CYCLES") == cycles
    assert await drv.read("ERROR_CAUSE") == 0
    good = await drv.run(run["x"], **mode_kw(run))
    check(good, run, "valid run after bus misuse")

    # START while busy, and a weight write while busy: both refused, the run unharmed.
    await drv.clear_status()
    await drv.write("SEQ_LEN", len(run["x"]))
    await drv.write("KEY_LEN", 0)
    await drv.write("CTRL", drv.start_bits())
    assert (await drv.read("STATUS")) & drv.bit("STATUS", "BUSY")
    await drv.write("CTRL", drv.start_bits())
    await drv.bus.write(drv.rmap.window_base, 0x7F7F7F7F)
    cause = await drv.read("ERROR_CAUSE")
    assert cause_names(cause) == ["START_WHILE_BUSY", "WRITE_WHILE_BUSY"], cause_names(cause)
    drv.monitor.expect_packet(len(run["x"]) * CFG.act_row_words)
    recv = cocotb.start_soon(drv.sink.receive())
    await drv.source.send(pack_rows(run["x"], CFG.act_bits))
    words = await recv
    assert words is not None
    got = np.array(unpack_words(words, CFG.d_model, CFG.act_bits))
    want = g.attention_int(CFG, LAYER, run["x"])
    assert np.array_equal(got, want), "run disturbed by START/write while busy"
    assert (await drv.read("STATUS")) & drv.bit("STATUS", "WEIGHTS_VALID")
    good = await drv.run(run["x"], **mode_kw(run))
    check(good, run, "valid run after busy errors")


@cocotb.test()
async def reset_in_each_phase(dut):
    """A reset while a run loads its input, computes, or streams its output: the engine is
    idle after it, WEIGHTS_VALID low; the weights (block RAM) survive, so rewriting the
    parameters (registers, reset to 0) and committing is enough for exact runs again."""
    drv = driver(dut, 20)
    await drv.start()
    await drv.load_layer(LAYER)
    run = RUNS[0]
    words = pack_rows(run["x"], CFG.act_bits)
    beats = drv.monitor.beats
    for phase in ("load", "compute", "stream"):
        await drv.clear_status()
        await drv.write("SEQ_LEN", len(run["x"]))
        await drv.write("KEY_LEN", 0)
        await drv.write("CTRL", drv.start_bits())
        in0, out0 = beats["s_axis"], beats["m_axis"]
        if phase == "load":
            send = cocotb.start_soon(drv.source.send(words))
            while beats["s_axis"] - in0 < len(words) // 2:
                await RisingEdge(dut.clk)
            send.cancel()
        else:
            await drv.source.send(words)
            if phase == "compute":
                await ClockCycles(dut.clk, 50)         # in the projections
            else:
                while beats["m_axis"] == out0:
                    await RisingEdge(dut.clk)
        assert (await drv.read("STATUS")) & drv.bit("STATUS", "BUSY"), phase
        await drv.reset()
        drv.source.clear()
        drv.sink.clear()
        status = await drv.read("STATUS")
        assert not status & drv.bit("STATUS", "BUSY"), phase
        assert not status & drv.bit("STATUS", "WEIGHTS_VALID"), phase
        # The parameters are registers and reset to 0: START without them is refused.
        assert await drv.write("WEIGHTS_COMMIT", 1) == 0
        res = await drv.run(run["x"])
        # (an additive layer's TANH_SHIFT is one of them)
        assert res.errors == ["BAD_SHIFT"] + (["BAD_SCORING"] if LAYER.scoring == "additive"
                                              else []), (phase, res.errors)
        await drv.load_layer(LAYER, weights=False)
        for r in RUNS[:2]:
            res = await drv.run(r["x"], r.get("kv"), **mode_kw(r))
            check(res, r, f"after a reset in {phase}: {describe(r)}")
