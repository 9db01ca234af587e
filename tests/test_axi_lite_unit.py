"""Amaranth-simulator tests of ``hw/bus/axi_lite.py`` (AxiLiteRegs) against the register-map spec.

A small AXI4-Lite master drives the bus with five timing patterns (everything at once, AW
before W, W before AW, simultaneous with slow BREADY, and random valid/ready delays); it also
checks the slave's AXI rules (no B before both AW and W, VALID held until READY, stable
payloads). ``SpecModel`` (tests/axil_spec.py) is an independent plain-Python reading of the
register spec; a random sequence test compares every read, response and output port with it.
"""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from golden import load_config
from hw.bus.axi_lite import AxiLiteRegs, AxiLiteSignature
from hw.bus.regmap import build_regmap
from hw.gen.verilog import REPO_ROOT

TINY = load_config(REPO_ROOT / "configs" / "tiny.toml")
from tests.axil_spec import (BAD_CAUSAL, BAD_POSENC, BAD_SCORING, BAD_CROSS, BAD_KEY_LEN, BAD_KV_LEN, BAD_SEQ_LEN,
                             BAD_SHIFT, BUSY, BUSY_CYCLES, CAUSAL, CAUSE, COMMIT, CONFIG0,
                             CONFIG1, CONFIG2, CROSS, CTRL, CYCLES, DONE, ENGINE_FAULT, ERROR,
                             ID, IRQ_EN, KEY_LEN, KV_LEN, NO_WEIGHTS, OKAY, PARAMS, SEQ_LEN,
                             SLVERR, START, START_WHILE_BUSY, STATUS, STREAM_LONG,
                             STREAM_SHORT, START_READY, VERSION, WEIGHTS_VALID, WRITE_WHILE_BUSY,
                             SpecModel)

TIMINGS = ("fast", "aw_first", "w_first", "simultaneous", "random")
N_CAUSES = 15
SHIFTS = [off for off, name in PARAMS.items() if name.endswith("shift")]   # reset to 0

class AxilMaster:
    """AXI4-Lite master for Amaranth testbenches, one transaction at a time."""

    def __init__(self, bus, timing: str = "fast", seed: int = 0):
        if timing not in TIMINGS:
            raise ValueError(f"timing {timing!r} is not one of {TIMINGS}")
        self.bus, self.timing, self.rng = bus, timing, random.Random(seed)

    def _delays(self):
        r = self.rng.randint
        return {"fast": (0, 0, 0), "aw_first": (0, r(1, 3), 0), "w_first": (r(1, 3), 0, 0),
                "simultaneous": (0, 0, r(1, 4)),
                "random": (r(0, 3), r(0, 3), r(0, 4))}[self.timing]

    async def write(self, ctx, addr: int, data: int, strb: int = 0xF) -> int:
        bus, rng = self.bus, self.rng
        aw_at, w_at, b_at = self._delays()
        aw_done = w_done = False
        resp = None
        cycle = 0
        while resp is None:
            aw_on = not aw_done and cycle >= aw_at
            w_on = not w_done and cycle >= w_at
            b_on = cycle >= b_at
            # Payloads are garbage while VALID is low: the slave must not capture them.
            ctx.set(bus.awvalid, aw_on)
            ctx.set(bus.awaddr, addr if aw_on else rng.getrandbits(len(bus.awaddr)))
            ctx.set(bus.wvalid, w_on)
            ctx.set(bus.wdata, data if w_on else rng.getrandbits(32))
            ctx.set(bus.wstrb, strb if w_on else rng.getrandbits(4))
            ctx.set(bus.bready, b_on)
            aw_hs = aw_on and ctx.get(bus.awready)
            w_hs = w_on and ctx.get(bus.wready)
            if ctx.get(bus.bvalid):
                assert aw_done and w_done, "BVALID before both AW and W handshakes"
                if b_on:
                    resp = ctx.get(bus.bresp)
            await ctx.tick()
            aw_done |= aw_hs
            w_done |= w_hs
            cycle += 1
            assert cycle < 50, f"write to {addr:#x} never completed"
        for s in (bus.awvalid, bus.wvalid, bus.bready):
            ctx.set(s, 0)
        return resp

    async def read(self, ctx, addr: int) -> tuple[int, int]:
        bus, rng = self.bus, self.rng
        ar_at, _, r_at = self._delays()
        ar_done = False
        seen = None
        cycle = 0
        while True:
            ar_on = not ar_done and cycle >= ar_at
            r_on = cycle >= r_at
            ctx.set(bus.arvalid, ar_on)
            ctx.set(bus.araddr, addr if ar_on else rng.getrandbits(len(bus.araddr)))
            ctx.set(bus.rready, r_on)
            ar_hs = ar_on and ctx.get(bus.arready)
            if ctx.get(bus.rvalid):
                assert ar_done, "RVALID before the AR handshake"
                now = (ctx.get(bus.rdata), ctx.get(bus.rresp))
                assert seen in (None, now), "RDATA/RRESP changed while RVALID waited"
                seen = now
                if r_on:
                    await ctx.tick()
                    break
            elif seen is not None:
                raise AssertionError("RVALID dropped before RREADY")
            await ctx.tick()
            ar_done |= ar_hs
            cycle += 1
            assert cycle < 50, f"read of {addr:#x} never completed"
        ctx.set(bus.arvalid, 0)
        ctx.set(bus.rready, 0)
        return seen


def run(cfg, body, *, timing="fast", seed=0, monitor=True, engine=None):
    """Simulate ``body(ctx, dut, master, events)``; ``events`` collects start strobes and
    window writes as ``("start", cycle)`` / ``("wwin", cycle, word, data, strb)``.
    ``engine(ctx, dut)``, if given, runs alongside as a background process."""
    dut = AxiLiteRegs(cfg)
    master = AxilMaster(dut.s_axi, timing, seed)
    events = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.start.ready, 1)     # an idle engine: its input buffer is free
        await body(ctx, dut, master, events)
        await ctx.tick().repeat(2)      # let the monitor see the last write's strobes

    async def watch(ctx):
        cycle = 0
        async for _, _, start, en, addr, data, strb in ctx.tick().sample(
                dut.start.valid, dut.window.en, dut.window.addr, dut.window.data, dut.window.strb):
            if start:
                events.append(("start", cycle))
            if en:
                events.append(("wwin", cycle, addr, data, strb))
            cycle += 1

    sim.add_testbench(bench)
    if monitor:
        sim.add_testbench(watch, background=True)
    if engine is not None:
        async def engine_process(ctx):
            await engine(ctx, dut)
        sim.add_process(engine_process)
    sim.run()
    return events


async def load_weights(ctx, dut, m, shift=8):
    """Make START legal: write valid (1..62) shift registers, which reset to 0, then commit
    weights (lengths are at their reset maxima)."""
    for off in SHIFTS:
        assert await m.write(ctx, off, shift) == OKAY
    assert await m.write(ctx, COMMIT, 1) == OKAY


async def expect_start_fails(ctx, dut, m, ctrl, cause):
    """START | ``ctrl`` is refused with exactly ``cause``; W1C of it clears ERROR again."""
    assert await m.write(ctx, CTRL, START | ctrl) == OKAY
    assert await m.read(ctx, CAUSE) == (cause, OKAY)
    assert (await m.read(ctx, STATUS))[0] & ERROR
    assert await m.write(ctx, CAUSE, cause) == OKAY       # W1C: clears exactly it
    assert (await m.read(ctx, STATUS))[0] & ERROR == 0


async def pulse(ctx, sig, value=1):
    ctx.set(sig, value)
    await ctx.tick()
    ctx.set(sig, 0)


# ------------------------------------------------------------------------------------ tests

def test_signature_and_arguments():
    sig = AxiLiteSignature(17)
    assert sig == AxiLiteSignature(17) and sig != AxiLiteSignature(18)
    assert set(sig.members) == {"awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid",
                                "wready", "bresp", "bvalid", "bready", "araddr", "arvalid",
                                "arready", "rdata", "rresp", "rvalid", "rready"}
    with pytest.raises(TypeError, match="addr_width must be an integer in 3..64, not 2"):
        AxiLiteSignature(2)
    with pytest.raises(TypeError, match="data_width must be 32 or 64, not 16"):
        AxiLiteSignature(16, 16)
    with pytest.raises(TypeError, match="needs an AttentionConfig"):
        AxiLiteRegs("configs/tiny.toml")
    dut = AxiLiteRegs(TINY)
    Fragment.get(dut, None)             # elaborates
    assert len(dut.s_axi.awaddr) == build_regmap(TINY).addr_width == 17
    assert len(dut.window.addr) == 9     # 320 window words
    assert len(dut.error_cause) == N_CAUSES


@pytest.mark.parametrize("cfg_name", ["tiny", "default"])
def test_reset_values(cfg_name):
    cfg = load_config(REPO_ROOT / "configs" / f"{cfg_name}.toml")
    rmap = build_regmap(cfg)

    async def body(ctx, dut, m, events):
        for reg in rmap:
            want = reg.reset | (START_READY if reg.name == "STATUS" else 0)   # engine input
            assert await m.read(ctx, reg.offset) == (want, OKAY), reg.name
        assert await m.read(ctx, ID) == (0x4154544E, OKAY)
        assert await m.read(ctx, VERSION) == (0x00010500, OKAY)
        assert await m.read(ctx, SEQ_LEN) == (cfg.max_seq_len, OKAY)
        assert await m.read(ctx, KV_LEN) == (cfg.max_kv_len, OKAY)
        assert await m.read(ctx, KEY_LEN) == (0, OKAY)
        assert await m.read(ctx, STATUS) == (START_READY, OKAY)
        assert await m.read(ctx, CONFIG0) == (
            cfg.d_model | cfg.heads << 16 | cfg.engines << 24, OKAY)
        assert await m.read(ctx, CONFIG1) == (cfg.max_seq_len | cfg.max_kv_len << 16, OKAY)
        assert await m.read(ctx, CONFIG2) == (
            cfg.array_rows | cfg.array_cols << 8 | 1 << 16 | 1 << 17, OKAY)
        ports = SpecModel(cfg, rmap).ports()
        for name, want in ports.items():
            assert ctx.get(getattr(dut, name)) == want, name
        assert ctx.get(dut.start.valid) == 0 and ctx.get(dut.window.en) == 0

    assert run(cfg, body) == []


@pytest.mark.parametrize("timing", TIMINGS)
def test_access_modes(timing):
    """All-ones and all-zeros written to every register, read back per its access mode."""
    rmap = build_regmap(TINY)

    async def body(ctx, dut, m, events):
        model = SpecModel(TINY, rmap)
        for pattern in (0xFFFFFFFF, 0x0, 0xA5A5A5A5 & ~START):
            for reg in rmap:
                assert await m.write(ctx, reg.offset, pattern) == model.write(
                    reg.offset, pattern, 0xF), reg.name
            for reg in rmap:
                assert await m.read(ctx, reg.offset) == model.read(reg.offset), reg.name
            for name, want in model.ports().items():
                assert ctx.get(getattr(dut, name)) == want, name
        # CTRL.START reads 0, the mode bits stick; RO registers ignored the writes.
        assert (await m.read(ctx, CTRL))[0] == (0xA5 & 0xFE)
        assert (await m.read(ctx, ID))[0] == 0x4154544E
        assert (await m.read(ctx, SEQ_LEN))[0] == 0xA5A4
        assert (await m.read(ctx, 0x040))[0] == 0xA5A4 & ((1 << TINY.requant_mult_bits) - 1)
        assert (await m.read(ctx, 0x044))[0] == 0x24       # 6-bit shift
        assert model.starts == [] and [e for e in events if e[0] == "start"] == []

    run(TINY, body, timing=timing, seed=TIMINGS.index(timing))


@pytest.mark.parametrize("timing", TIMINGS)
def test_start_and_latency(timing):
    async def body(ctx, dut, m, events):
        await load_weights(ctx, dut, m)
        assert await m.write(ctx, SEQ_LEN, 5) == OKAY
        assert await m.write(ctx, KEY_LEN, 5) == OKAY
        assert await m.write(ctx, CTRL, START | CAUSAL) == OKAY
        assert ctx.get(dut.causal) == 1 and ctx.get(dut.cross) == 0
        assert ctx.get(dut.seq_len) == 5 and ctx.get(dut.key_len) == 5
        assert (await m.read(ctx, CTRL))[0] == CAUSAL           # START reads 0
        assert (await m.read(ctx, STATUS))[0] == WEIGHTS_VALID | START_READY  # no error
        # Cross mode: KEY_LEN is judged against KV_LEN.
        assert await m.write(ctx, KV_LEN, 3) == OKAY
        assert await m.write(ctx, KEY_LEN, 3) == OKAY
        assert await m.write(ctx, CTRL, START | CROSS) == OKAY
        assert ctx.get(dut.cross) == 1
        assert (await m.read(ctx, CAUSE))[0] == 0

    events = run(TINY, body, timing=timing, seed=7)
    assert [e[0] for e in events] == ["start", "start"]


def test_cycle_latencies():
    """Write effects and bvalid 2 cycles after the handshake, rvalid 2 cycles after AR."""
    async def body(ctx, dut, m, events):
        bus = dut.s_axi
        await load_weights(ctx, dut, m)
        ctx.set(bus.awaddr, CTRL)
        ctx.set(bus.wdata, START)
        ctx.set(bus.wstrb, 0xF)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        ctx.set(bus.bready, 1)
        assert ctx.get(bus.awready) and ctx.get(bus.wready)
        await ctx.tick()                                    # cycle n: handshakes
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        assert not ctx.get(bus.awready) and not ctx.get(bus.bvalid) and not ctx.get(dut.start.valid)
        await ctx.tick()                                    # n + 1: executes
        assert ctx.get(bus.bvalid) and ctx.get(dut.start.valid) and ctx.get(bus.bresp) == OKAY
        assert ctx.get(bus.awready)                         # the next write may enter
        await ctx.tick()
        assert not ctx.get(bus.bvalid) and not ctx.get(dut.start.valid)
        ctx.set(bus.bready, 0)
        ctx.set(bus.araddr, SEQ_LEN)
        ctx.set(bus.arvalid, 1)
        ctx.set(bus.rready, 1)
        assert ctx.get(bus.arready)
        await ctx.tick()                                    # AR handshake
        ctx.set(bus.arvalid, 0)
        assert not ctx.get(bus.rvalid) and not ctx.get(bus.arready)
        await ctx.tick()
        assert ctx.get(bus.rvalid) and ctx.get(bus.rdata) == TINY.max_seq_len
        assert not ctx.get(bus.arready)                     # one read in flight
        await ctx.tick()                                    # R handshake
        assert not ctx.get(bus.rvalid) and ctx.get(bus.arready)
        # done_set in cycle n: STATUS.DONE and irq in cycle n + 1.
        assert await m.write(ctx, CTRL, IRQ_EN) == OKAY
        ctx.set(dut.done_set, 1)
        assert not ctx.get(dut.irq)
        await ctx.tick()
        ctx.set(dut.done_set, 0)
        assert ctx.get(dut.irq)

    assert [e[0] for e in run(TINY, body)] == ["start"]


def test_writes_right_after_start_are_guarded():
    """The core's busy is a register, high from the second cycle after ``start``: the first
    write after START, issued at once, is still refused (WRITE_WHILE_BUSY); once busy falls,
    writes are taken again. (That write executes three cycles after START's at the
    earliest, when busy is already high; the block's own guard for the two cycles after
    ``start`` is a second line that no bus timing reaches.)"""
    async def engine(ctx, dut):
        # busy as the core drives it: a register, two cycles after start, for 40 cycles.
        left = 0
        async for _, _, start in ctx.tick().sample(dut.start.valid):
            if start:
                left = 41
            ctx.set(dut.busy, 0 < left <= 40)
            left = max(0, left - 1)

    async def body(ctx, dut, m, events):
        await load_weights(ctx, dut, m, shift=8)
        assert await m.write(ctx, CTRL, START) == OKAY
        assert await m.write(ctx, SHIFTS[0], 5) == OKAY          # at once: dropped
        assert await m.read(ctx, SHIFTS[0]) == (8, OKAY)
        assert await m.read(ctx, CAUSE) == (WRITE_WHILE_BUSY, OKAY)
        assert await m.write(ctx, CAUSE, WRITE_WHILE_BUSY) == OKAY
        await ctx.tick().repeat(40)
        assert await m.write(ctx, SHIFTS[0], 5) == OKAY          # busy low again: taken
        assert await m.read(ctx, SHIFTS[0]) == (5, OKAY)
        assert await m.read(ctx, CAUSE) == (0, OKAY)

    assert [e[0] for e in run(TINY, body, engine=engine)] == ["start"]


def test_status_w1c_and_irq():
    async def body(ctx, dut, m, events):
        await pulse(ctx, dut.done_set)
        assert (await m.read(ctx, STATUS))[0] == DONE | START_READY
        assert ctx.get(dut.irq) == 0                          # IRQ_EN is 0
        assert await m.write(ctx, CTRL, IRQ_EN) == OKAY
        assert ctx.get(dut.irq) == 1
        assert await m.write(ctx, STATUS, 0) == OKAY          # writing 0 keeps DONE
        assert await m.write(ctx, STATUS, DONE, strb=0xE) == OKAY   # byte 0 not strobed
        assert (await m.read(ctx, STATUS))[0] == DONE | START_READY
        assert await m.write(ctx, STATUS, DONE | BUSY | WEIGHTS_VALID) == OKAY
        assert (await m.read(ctx, STATUS))[0] == START_READY and ctx.get(dut.irq) == 0
        await pulse(ctx, dut.error_set)                       # a set without cause bits
        assert (await m.read(ctx, STATUS))[0] == START_READY
        ctx.set(dut.error_cause, STREAM_SHORT)
        await pulse(ctx, dut.error_set)
        assert (await m.read(ctx, STATUS))[0] == ERROR | START_READY  and ctx.get(dut.irq) == 1
        assert await m.write(ctx, CTRL, 0) == OKAY
        assert ctx.get(dut.irq) == 0
        assert await m.write(ctx, CTRL, IRQ_EN) == OKAY
        assert await m.write(ctx, STATUS, ERROR) == OKAY      # clears all causes
        assert await m.read(ctx, CAUSE) == (0, OKAY) and ctx.get(dut.irq) == 0
        ctx.set(dut.busy, 1)
        ctx.set(dut.cycles, 0x12345678)
        ctx.set(dut.busy_cycles, 0x9ABCDEF0)
        assert (await m.read(ctx, STATUS))[0] == BUSY | START_READY
        assert await m.read(ctx, CYCLES) == (0x12345678, OKAY)
        assert await m.read(ctx, BUSY_CYCLES) == (0x9ABCDEF0, OKAY)
        assert await m.write(ctx, CYCLES, 0) == OKAY          # RO: ignored
        assert await m.read(ctx, CYCLES) == (0x12345678, OKAY)

    run(TINY, body, timing="random", seed=3)


def test_set_wins_over_clear():
    """done_set/error_set in the very cycle a W1C write executes are not lost."""
    async def w1c_with_event(ctx, dut, addr, data, event, cause=0):
        bus = dut.s_axi
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, 0xF)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        ctx.set(bus.bready, 1)
        await ctx.tick()
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        ctx.set(event, 1)                  # the write executes in this cycle
        ctx.set(dut.error_cause, cause)
        await ctx.tick()
        ctx.set(event, 0)
        assert ctx.get(bus.bvalid)
        await ctx.tick()

    async def body(ctx, dut, m, events):
        await pulse(ctx, dut.done_set)
        await w1c_with_event(ctx, dut, STATUS, DONE, dut.done_set)
        assert (await m.read(ctx, STATUS))[0] == DONE | START_READY
        ctx.set(dut.error_cause, STREAM_LONG)
        await pulse(ctx, dut.error_set)
        await w1c_with_event(ctx, dut, CAUSE, STREAM_LONG, dut.error_set, STREAM_LONG)
        assert (await m.read(ctx, CAUSE))[0] == STREAM_LONG
        await w1c_with_event(ctx, dut, STATUS, ERROR, dut.error_set, STREAM_SHORT)
        assert (await m.read(ctx, CAUSE))[0] == STREAM_SHORT
        assert await m.write(ctx, CAUSE, STREAM_SHORT) == OKAY
        ctx.set(dut.error_cause, ENGINE_FAULT)
        await pulse(ctx, dut.error_set)
        await w1c_with_event(ctx, dut, CAUSE, ENGINE_FAULT, dut.error_set, ENGINE_FAULT)
        assert (await m.read(ctx, CAUSE))[0] == ENGINE_FAULT
        await w1c_with_event(ctx, dut, STATUS, ERROR, dut.error_set, ENGINE_FAULT)
        assert (await m.read(ctx, CAUSE))[0] == ENGINE_FAULT
        assert await m.write(ctx, CAUSE, ENGINE_FAULT) == OKAY
        assert (await m.read(ctx, STATUS))[0] == DONE | START_READY

    run(TINY, body)


def test_tiled_pv_shift_limit():
    """On the key/value-tiled path RQ_PV_SHIFT is valid up to 54 (the normalising pass
    shifts by it plus 8 guard bits): 55 is refused with BAD_SHIFT, 54 starts."""
    cfg = TINY.replace(kv_tile=4, q_tile=4)
    pv = SHIFTS[3]

    async def body(ctx, dut, m, events):
        await load_weights(ctx, dut, m)
        assert await m.write(ctx, pv, 55) == OKAY
        assert await m.write(ctx, COMMIT, 1) == OKAY
        await expect_start_fails(ctx, dut, m, 0, BAD_SHIFT)
        assert not events
        assert await m.write(ctx, pv, 54) == OKAY
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert await m.write(ctx, CTRL, START) == OKAY
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        assert [e[0] for e in events] == ["start"]

    run(cfg, body)


@pytest.mark.parametrize("timing", ["fast", "random"])
def test_bad_shift(timing):
    """START is refused with BAD_SHIFT while any shift register is outside 1..62."""
    names = [PARAMS[off] for off in SHIFTS]
    assert names == ["rq_q_shift", "rq_k_shift", "rq_v_shift", "rq_pv_shift", "rq_o_shift",
                     "exp_shift"]

    async def body(ctx, dut, m, events):
        # Weights committed, lengths valid, but every shift at its reset value 0.
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert all(ctx.get(getattr(dut, name)) == 0 for name in names)
        await expect_start_fails(ctx, dut, m, 0, BAD_SHIFT)
        await load_weights(ctx, dut, m)
        for i, off in enumerate(SHIFTS):
            for bad in (0, 63, 64):                 # 64 is 0 in the 6-bit field
                assert await m.write(ctx, off, bad) == OKAY
                assert await m.write(ctx, COMMIT, 1) == OKAY
                assert await m.read(ctx, off) == (bad & 63, OKAY)
                assert ctx.get(getattr(dut, names[i])) == bad & 63
                await expect_start_fails(ctx, dut, m, 0, BAD_SHIFT)
                await expect_start_fails(ctx, dut, m, CAUSAL | CROSS, BAD_SHIFT)
                assert (await m.read(ctx, STATUS))[0] == WEIGHTS_VALID | START_READY  # still committed
            good = (1, 62)[i % 2]                   # leave the edges of the range behind
            assert await m.write(ctx, off, good) == OKAY
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert [ctx.get(getattr(dut, name)) for name in names] == [1, 62, 1, 62, 1, 62]
        # Together with other causes.
        assert await m.write(ctx, SEQ_LEN, 0) == OKAY
        assert await m.write(ctx, SHIFTS[-1], 0) == OKAY                # clears the commit
        await expect_start_fails(ctx, dut, m, 0, BAD_SEQ_LEN | NO_WEIGHTS | BAD_SHIFT)
        assert await m.write(ctx, SEQ_LEN, 3) == OKAY
        assert await m.write(ctx, SHIFTS[-1], 62) == OKAY
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert not events                                               # no START so far
        # Every shift within 1..62: START goes through.
        assert await m.write(ctx, CTRL, START) == OKAY
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        assert len(events) == 1
        # A shift write during the run is dropped (WRITE_WHILE_BUSY); START while the
        # input buffer is taken is refused.
        ctx.set(dut.busy, 1)
        ctx.set(dut.start.ready, 0)
        assert await m.write(ctx, SHIFTS[0], 0) == OKAY
        assert await m.read(ctx, SHIFTS[0]) == (1, OKAY)
        assert await m.read(ctx, CAUSE) == (WRITE_WHILE_BUSY, OKAY)
        assert await m.write(ctx, CAUSE, WRITE_WHILE_BUSY) == OKAY
        await expect_start_fails(ctx, dut, m, 0, START_WHILE_BUSY)
        ctx.set(dut.start.ready, 1)     # still busy, but the next sequence may start
        assert await m.write(ctx, CTRL, START) == OKAY
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        ctx.set(dut.busy, 0)
        assert await m.write(ctx, CTRL, START) == OKAY
        assert await m.read(ctx, CAUSE) == (0, OKAY)

    events = run(TINY, body, timing=timing, seed=13)
    assert [e[0] for e in events] == ["start", "start", "start"]


@pytest.mark.parametrize("timing", ["fast", "random"])
def test_every_error_cause(timing):
    no_cross = TINY.replace(cross_attention=False, name="nocross")
    no_causal = TINY.replace(causal_mask=False, name="nocausal")

    async def body(ctx, dut, m, events):
        n = TINY.max_seq_len
        await expect_start_fails(ctx, dut, m, 0, NO_WEIGHTS | BAD_SHIFT)     # shifts reset to 0
        await load_weights(ctx, dut, m)
        for bad in (0, n + 1, 0xFFFF):
            assert await m.write(ctx, SEQ_LEN, bad) == OKAY
            await expect_start_fails(ctx, dut, m, 0, BAD_SEQ_LEN)
        assert await m.write(ctx, SEQ_LEN, 4) == OKAY
        assert await m.write(ctx, KEY_LEN, 5) == OKAY
        await expect_start_fails(ctx, dut, m, 0, BAD_KEY_LEN)
        for bad in (0, TINY.max_kv_len + 1):
            assert await m.write(ctx, KV_LEN, bad) == OKAY
            await expect_start_fails(ctx, dut, m, CROSS, BAD_KV_LEN)
        assert await m.write(ctx, KV_LEN, 2) == OKAY
        await expect_start_fails(ctx, dut, m, CROSS, BAD_KEY_LEN)    # key 5 > kv 2
        assert await m.write(ctx, KV_LEN, 6) == OKAY
        assert await m.write(ctx, CTRL, START | CROSS) == OKAY       # key 5 <= kv 6: fine
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        # Several causes at once, and KV_LEN ignored outside CROSS mode.
        assert await m.write(ctx, SEQ_LEN, 0) == OKAY
        assert await m.write(ctx, KV_LEN, 0) == OKAY
        assert await m.write(ctx, 0x040, 1) == OKAY                   # clears WEIGHTS_VALID
        await expect_start_fails(ctx, dut, m, 0, BAD_SEQ_LEN | NO_WEIGHTS)
        await expect_start_fails(ctx, dut, m, CROSS, BAD_SEQ_LEN | BAD_KV_LEN | NO_WEIGHTS)
        # Engine-reported causes.
        ctx.set(dut.error_cause, STREAM_SHORT | STREAM_LONG)
        await pulse(ctx, dut.error_set)
        assert await m.read(ctx, CAUSE) == (STREAM_SHORT | STREAM_LONG, OKAY)
        assert await m.write(ctx, CAUSE, STREAM_SHORT) == OKAY
        assert await m.read(ctx, CAUSE) == (STREAM_LONG, OKAY)
        assert (await m.read(ctx, STATUS))[0] & ERROR
        assert await m.write(ctx, CAUSE, 0xFFFFFFFF) == OKAY
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        ctx.set(dut.error_cause, ENGINE_FAULT)              # a matrix engine refused a command
        await pulse(ctx, dut.error_set)
        assert await m.read(ctx, CAUSE) == (ENGINE_FAULT, OKAY)
        assert (await m.read(ctx, STATUS))[0] & ERROR
        assert await m.write(ctx, CAUSE, ~ENGINE_FAULT & 0xFFFFFFFF) == OKAY   # other bits
        assert await m.read(ctx, CAUSE) == (ENGINE_FAULT, OKAY)
        assert await m.write(ctx, CAUSE, ENGINE_FAULT) == OKAY
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        assert (await m.read(ctx, STATUS))[0] & ERROR == 0
        # Busy: START dropped while the input buffer is taken; parameter and window writes
        # dropped; lengths and mode bits (sampled by START) written.
        assert await m.write(ctx, SEQ_LEN, 3) == OKAY
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert await m.write(ctx, CTRL, 0) == OKAY
        ctx.set(dut.busy, 1)
        ctx.set(dut.start.ready, 0)
        await expect_start_fails(ctx, dut, m, 0, START_WHILE_BUSY)
        for addr in (0x040, 0x06C, 0x10000, 0x10000 + 4 * 319):
            assert await m.write(ctx, addr, 1) == OKAY
            assert await m.read(ctx, CAUSE) == (WRITE_WHILE_BUSY, OKAY), hex(addr)
            assert await m.write(ctx, STATUS, ERROR) == OKAY
        assert await m.read(ctx, 0x040) == (1, OKAY)
        assert (await m.read(ctx, STATUS))[0] == BUSY | WEIGHTS_VALID
        for addr, v in ((SEQ_LEN, 5), (KV_LEN, 4), (KEY_LEN, 2)):
            assert await m.write(ctx, addr, v) == OKAY
            assert await m.read(ctx, addr) == (v, OKAY)
        assert await m.write(ctx, CTRL, IRQ_EN | CAUSAL | CROSS) == OKAY
        assert await m.read(ctx, CTRL) == (IRQ_EN | CAUSAL | CROSS, OKAY)
        assert await m.read(ctx, CAUSE) == (0, OKAY)
        assert ctx.get(dut.seq_len) == 5 and ctx.get(dut.causal) == 1
        ctx.set(dut.busy, 0)
        ctx.set(dut.start.ready, 1)
        assert await m.write(ctx, CTRL, CAUSAL) == OKAY
        assert await m.read(ctx, CTRL) == (CAUSAL, OKAY)

    events = run(TINY, body, timing=timing, seed=11)
    assert [e[0] for e in events] == ["start"]      # only the CROSS run with key 5 <= 6

    async def unsupported(ctx, dut, m, events):
        await load_weights(ctx, dut, m)
        if not dut.cfg.cross_attention:
            await expect_start_fails(ctx, dut, m, CROSS, BAD_CROSS)
        else:
            await expect_start_fails(ctx, dut, m, CAUSAL, BAD_CAUSAL)
            await expect_start_fails(ctx, dut, m, CAUSAL | CROSS, BAD_CAUSAL)
        # No positional encoder in either: both encodings are refused at START.
        await expect_start_fails(ctx, dut, m, 1 << 4, BAD_POSENC)
        await expect_start_fails(ctx, dut, m, 2 << 4, BAD_POSENC)
        # No additive scorer: CTRL.ADDITIVE is refused at START.
        await expect_start_fails(ctx, dut, m, 1 << 6, BAD_SCORING)
        assert await m.write(ctx, CTRL, START) == OKAY

    for cfg in (no_cross, no_causal):
        events = run(cfg, unsupported, timing=timing)
        assert [e[0] for e in events] == ["start"], cfg.name


@pytest.mark.parametrize("timing", ["fast", "random"])
def test_wstrb(timing):
    async def body(ctx, dut, m, events):
        assert await m.write(ctx, SEQ_LEN, 0xFFFF_FF03, strb=0x1) == OKAY
        assert await m.read(ctx, SEQ_LEN) == (0x03, OKAY)           # reset 8 -> byte 0 = 3
        assert await m.write(ctx, SEQ_LEN, 0x0000_0200, strb=0x2) == OKAY
        assert await m.read(ctx, SEQ_LEN) == (0x0203, OKAY)
        assert await m.write(ctx, SEQ_LEN, 0x1234_5678, strb=0xC) == OKAY   # beyond the field
        assert await m.read(ctx, SEQ_LEN) == (0x0203, OKAY)
        assert await m.write(ctx, SEQ_LEN, 0x1234_5678, strb=0x0) == OKAY
        assert await m.read(ctx, SEQ_LEN) == (0x0203, OKAY)
        assert await m.write(ctx, 0x040, 0xBEEF, strb=0x2) == OKAY
        assert await m.read(ctx, 0x040) == (0xBE00, OKAY)
        assert ctx.get(dut.rq_q_mult) == 0xBE00
        # START and COMMIT need byte 0 strobed.
        assert await m.write(ctx, COMMIT, 1, strb=0xE) == OKAY
        assert (await m.read(ctx, STATUS))[0] == START_READY
        assert await m.write(ctx, COMMIT, 1, strb=0x1) == OKAY
        assert (await m.read(ctx, STATUS))[0] == WEIGHTS_VALID | START_READY
        assert await m.write(ctx, SEQ_LEN, 4) == OKAY
        assert await m.write(ctx, CTRL, START | IRQ_EN, strb=0xE) == OKAY
        assert await m.read(ctx, CTRL) == (0, OKAY)
        # ERROR_CAUSE bits 8..11 sit in byte 1.
        ctx.set(dut.error_cause, BAD_CROSS | BAD_CAUSAL | BAD_SHIFT | ENGINE_FAULT | BAD_SEQ_LEN)
        await pulse(ctx, dut.error_set)
        assert await m.write(ctx, CAUSE, 0xFFFF, strb=0x1) == OKAY
        assert await m.read(ctx, CAUSE) == (BAD_CROSS | BAD_CAUSAL | BAD_SHIFT | ENGINE_FAULT,
                                            OKAY)
        assert await m.write(ctx, CAUSE, BAD_CAUSAL, strb=0x2) == OKAY
        assert await m.read(ctx, CAUSE) == (BAD_CROSS | BAD_SHIFT | ENGINE_FAULT, OKAY)
        assert await m.write(ctx, CAUSE, BAD_SHIFT | ENGINE_FAULT, strb=0xD) == OKAY
        assert await m.read(ctx, CAUSE) == (BAD_CROSS | BAD_SHIFT | ENGINE_FAULT, OKAY)
        assert await m.write(ctx, CAUSE, BAD_SHIFT | ENGINE_FAULT, strb=0x2) == OKAY
        assert await m.read(ctx, CAUSE) == (BAD_CROSS, OKAY)
        # Window strobes pass through.
        assert await m.write(ctx, 0x10008, 0xCAFEF00D, strb=0x5) == OKAY

    events = run(TINY, body, timing=timing, seed=5)
    assert [e[2:] for e in events if e[0] == "wwin"] == [(2, 0xCAFEF00D, 0x5)]
    assert [e for e in events if e[0] == "start"] == []


@pytest.mark.parametrize("timing", ["fast", "random"])
def test_slverr_and_window(timing):
    rmap = build_regmap(TINY)
    base, size = rmap.window_base, rmap.window_size

    async def body(ctx, dut, m, events):
        for addr in (0x03C, 0x070, 0x07C, 0x084, 0x0FC, 0x100, 0x1000, base - 4):
            assert await m.read(ctx, addr) == (0, SLVERR), hex(addr)
            assert await m.write(ctx, addr, 0xFFFFFFFF) == SLVERR, hex(addr)
        for addr in (base, base + 4, base + size - 4, base + size, 2 * base - 4):
            assert await m.read(ctx, addr) == (0, SLVERR), hex(addr)
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert await m.write(ctx, base + size, 1) == SLVERR                 # past the end
        assert await m.write(ctx, 2 * base - 4, 1) == SLVERR
        assert (await m.read(ctx, STATUS))[0] == WEIGHTS_VALID | START_READY  # unaffected
        assert await m.read(ctx, COMMIT) == (0, OKAY)                       # WO reads 0
        assert await m.read(ctx, CTRL | 3) == (0, OKAY)                     # addr[1:0] ignored
        assert await m.write(ctx, base, 0x11223344) == OKAY
        assert (await m.read(ctx, STATUS))[0] == START_READY  # window write clears the commit
        assert await m.write(ctx, base + size - 4 + 2, 0x55667788, strb=0x3) == OKAY
        assert await m.write(ctx, COMMIT, 1) == OKAY
        assert await m.write(ctx, SEQ_LEN, 3) == OKAY       # lengths keep WEIGHTS_VALID
        assert await m.write(ctx, CTRL, CAUSAL) == OKAY
        assert await m.write(ctx, COMMIT, 0) == OKAY        # writing 0 changes nothing
        assert (await m.read(ctx, STATUS))[0] == WEIGHTS_VALID | START_READY
        for off in PARAMS:                                  # every parameter clears it
            assert await m.write(ctx, off, 2) == OKAY
            assert ctx.get(dut.weights_valid) == 0, hex(off)
            assert await m.write(ctx, COMMIT, 1) == OKAY
            assert ctx.get(dut.weights_valid) == 1
        assert await m.read(ctx, CAUSE) == (0, OKAY)

    events = run(TINY, body, timing=timing, seed=9)
    assert [e[2:] for e in events if e[0] == "wwin"] == [
        (0, 0x11223344, 0xF), (size // 4 - 1, 0x55667788, 0x3)]


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("cfg", [TINY, TINY.replace(cross_attention=False, causal_mask=False,
                                                   name="plain"),
                                 TINY.replace(pos_enc=["1d", "2d"], name="posenc"),
                                 TINY.replace(pos_enc=["1d"], additive_lanes=2,
                                              name="additive"),
                                 TINY.replace(channel_scales=True, name="channel")],
                         ids=lambda c: c.name)
def test_random_against_spec(cfg, timing):
    """Random reads, writes, engine events and busy periods, checked against SpecModel."""
    rmap = build_regmap(cfg)
    base, words = rmap.window_base, rmap.window_words
    rng = random.Random(f"{cfg.name}-{timing}")
    regs = [r.offset for r in rmap]
    # CTRL's random bits: PE_MODE (bits 4-5) only where an encoder is built (elsewhere it
    # is refused, BAD_POSENC, tested on its own); the other configurations' random
    # sequences stay the ones their checks were tuned on.
    ctrl_bits = 7 if cfg.additive else 6 if cfg.pos_enc else 4

    def ctrl_random():
        """CTRL's random mode bits (with a scale table also CHANNEL_SCALES, bit 7)."""
        bits = rng.getrandbits(ctrl_bits)
        return bits | (rng.getrandbits(1) << 7 if cfg.channel_scales else 0)
    scale_words = SpecModel(cfg, rmap).scale_words
    odd = [0x03C, 0x078, 0x094, 0x0FC, 0x200, base - 4, base + 4 * words, 2 * base - 4]

    def address():
        k = rng.random()
        if k < 0.7:
            a = rng.choice(regs)
        elif k < 0.92:
            a = base + 4 * rng.randrange(words)
        else:
            a = rng.choice(odd)
        return a | (rng.randrange(4) if rng.random() < 0.1 else 0)

    def data_for(a):
        a &= ~3
        if a in (SEQ_LEN, KV_LEN, KEY_LEN):
            return rng.choice([0, 1, rng.randint(1, 9), 0xFFFF, rng.getrandbits(32)])
        if a in SHIFTS:     # the edges of 1..62 and random (mostly valid) 6-bit values
            return rng.choice([0, 1, 62, 63, rng.randint(1, 62), rng.getrandbits(32)])
        if a == CTRL:
            return ctrl_random() | (START if rng.random() < 0.5 else 0)
        if a == COMMIT:
            return rng.choice([1, 1, 0, rng.getrandbits(32)])
        if a >= base and (a - base) // 4 in scale_words:    # mostly valid scale words
            shift = rng.choice([0, 1, 62, 63, rng.randint(1, 62), rng.randint(1, 62)])
            mult = rng.getrandbits(cfg.requant_mult_bits + (rng.random() < 0.2))
            return mult | shift << 24 | (rng.random() < 0.1) << 31
        return rng.getrandbits(32)

    async def body(ctx, dut, m, events):
        model = SpecModel(cfg, rmap)
        # (more steps with a scale table: its words are a sixth of TINY's window)
        for _ in range(600 if cfg.channel_scales else 220):
            k = rng.random()
            if k < 0.08:    # a start attempt with committed weights, likely-valid lengths/shifts
                shifts = [(off, rng.randint(1, 62) if rng.random() < 0.9 else
                           rng.choice([0, 63])) for off in SHIFTS]
                for a, d in ((SEQ_LEN, rng.randint(1, cfg.max_seq_len)),
                             (KV_LEN, rng.randint(1, cfg.max_kv_len)),
                             (KEY_LEN, rng.randint(0, 4)), *shifts, (COMMIT, 1),
                             (CTRL, START | ctrl_random())):
                    assert await m.write(ctx, a, d) == model.write(a, d, 0xF), hex(a)
            elif k < 0.45:
                a, d = address(), None
                d = data_for(a)
                s = 0xF if rng.random() < 0.7 else rng.randrange(16)
                assert await m.write(ctx, a, d, s) == model.write(a, d, s), hex(a)
            elif k < 0.85:
                a = address()
                assert await m.read(ctx, a) == model.read(a), hex(a)
            elif k < 0.92:
                model.busy = int(rng.random() < 0.4)
                model.cycles, model.busy_cycles = rng.getrandbits(32), rng.getrandbits(32)
                # Derived, not drawn: the random sequence stays the one the checks were tuned on.
                model.stall_cycles = model.cycles ^ model.busy_cycles
                model.start_ready = int(not model.busy or model.cycles & 1)
                ctx.set(dut.busy, model.busy)
                ctx.set(dut.start.ready, model.start_ready)
                ctx.set(dut.cycles, model.cycles)
                ctx.set(dut.busy_cycles, model.busy_cycles)
                ctx.set(dut.stall_cycles, model.stall_cycles)
            elif k < 0.96:
                await pulse(ctx, dut.done_set)
                model.done = 1
            else:
                cause = rng.getrandbits(N_CAUSES)
                ctx.set(dut.error_cause, cause)
                await pulse(ctx, dut.error_set)
                model.engine_error(cause)
            for name, want in model.ports().items():
                assert ctx.get(getattr(dut, name)) == want, name
        body.model = model

    events = run(cfg, body, timing=timing)
    model = body.model
    assert len([e for e in events if e[0] == "start"]) == len(model.starts)
    assert [e[2:] for e in events if e[0] == "wwin"] == model.wwin
    assert model.wwin and (model.starts or cfg.name == "plain"), \
        (len(model.starts), len(model.wwin))
    assert any(bad & BAD_SHIFT for bad in model.refused), model.refused
    if cfg.channel_scales:      # scale words written, and refused
        assert any(w in scale_words for w, _, _ in model.wwin)
        assert model.scale_refusals > 0
