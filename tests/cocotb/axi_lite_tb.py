"""cocotb tests of the generated AxiLiteRegs Verilog, driven by ``sim.bus.AxiLiteMaster``
(cocotbext-axi) and watched by ``sim.axi_monitor.AxiMonitor``.

Environment (strings): AXIL_CONFIG (TOML path), AXIL_SEED, AXIL_DELAY (probability of idle
cycles before each VALID and of READY low on the response channels).

- ``registers_against_spec``: reset values from the register map, then a random sequence of
  reads, writes (random contiguous strobes, unmapped and window addresses), busy periods and engine
  events, every response, read value and output port compared with ``tests/axil_spec.py``.
- ``weights_and_run``: a whole layer loaded through the window (checked word for word against
  ``hw.bus.regmap.pack_window``; only the ends of each region above 2048 words), parameters,
  commit, a run with a small engine model (busy,
  done_set, cycle counters, irq), then START while busy and an engine STREAM_SHORT error,
  a run the engine abandons with ENGINE_FAULT, and START refused with BAD_SHIFT for 0 and 63
  in each shift register (they reset to 0), then a valid run once all are back in 1..62.
"""

from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from golden import QuantizedLayer, Requant, load_config
from hw.gen.verilog import REPO_ROOT
from hw.bus.regmap import ERROR_CAUSES, build_regmap, pack_window, param_values
from sim.axi_monitor import AxiMonitor
from sim.bus import AxiLiteMaster
from tests.axil_spec import (BAD_SHIFT, BUSY, CAUSAL, CAUSE, COMMIT, CROSS, CTRL, CYCLES,
                             BUSY_CYCLES, DONE, ENGINE_FAULT, ERROR, IRQ_EN, KEY_LEN, KV_LEN,
                             OKAY, PARAMS, SEQ_LEN, SLVERR, START, START_WHILE_BUSY, STATUS,
                             START_READY, STREAM_SHORT, WEIGHTS_VALID, SpecModel)

CFG = load_config(os.environ.get("AXIL_CONFIG", str(REPO_ROOT / "configs" / "tiny.toml")))
SEED = int(os.environ.get("AXIL_SEED", "1"))
DELAY = float(os.environ.get("AXIL_DELAY", "0"))
RMAP = build_regmap(CFG)
N_CAUSES = 15
SHIFTS = [off for off, name in PARAMS.items() if name.endswith("shift")]   # valid: 1..62


class AxiLiteTB:
    def __init__(self, dut):
        self.dut = dut
        self.master = AxiLiteMaster(dut, dut.clk, "s_axi", reset=dut.rst, delay=DELAY,
                                    seed=SEED)
        self.monitor = AxiMonitor(dut, axil="s_axi_", streams=(), out_stream=None)
        self.starts: list[int] = []
        self.wwin: list[tuple[int, int, int]] = []
        self.cycle = 0
        for name in ("busy", "done_set", "error_set", "error_cause", "cycles", "busy_cycles",
                     "stall_cycles"):
            getattr(dut, name).value = 0
        dut.start__ready.value = 1

    async def reset(self):
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 2)
        self.dut.rst.value = 0
        cocotb.start_soon(self._monitor())
        await RisingEdge(self.dut.clk)

    async def _monitor(self):
        """Record start strobes and window writes (sampled before each rising edge)."""
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            await ReadOnly()
            self.cycle += 1
            if dut.start__valid.value:
                self.starts.append(self.cycle)
            if dut.window__en.value:
                self.wwin.append((int(dut.window__addr.value), int(dut.window__data.value),
                                  int(dut.window__strb.value)))

    async def drive(self, **values):
        """Set engine inputs after a falling edge (stable for the next rising edge)."""
        await FallingEdge(self.dut.clk)
        for name, v in values.items():
            getattr(self.dut, name).value = v

    async def pulse(self, name, **values):
        await self.drive(**{name: 1}, **values)
        await self.drive(**{name: 0})

    def ports(self):
        d = self.dut
        # "cross" is a SystemVerilog keyword: Amaranth escapes the port name.
        cross = getattr(d, "cross", None)
        if cross is None:
            cross = getattr(d, "\\cross ")
        out = {name: int(getattr(d, name).value) for name in (
            "seq_len", "kv_len", "key_len", "causal", "weights_valid", "irq",
            "rq_q_mult", "rq_q_shift", "rq_k_mult", "rq_k_shift", "rq_v_mult", "rq_v_shift",
            "rq_pv_mult", "rq_pv_shift", "rq_o_mult", "rq_o_shift", "exp_mult", "exp_shift",
            "pe_mode", "additive", "channel_scales")
            + (("pe_offset", "pe_grid_w", "pe_mult", "pe_shift") if CFG.pos_enc else ())
            + (("tanh_mult", "tanh_shift") if CFG.additive else ())}
        out["cross"] = int(cross.value)
        return out


@cocotb.test()
async def registers_against_spec(dut):
    tb = AxiLiteTB(dut)
    await tb.reset()
    m = tb.master
    assert len(ERROR_CAUSES) == N_CAUSES and len(dut.error_cause.value) == N_CAUSES
    for reg in RMAP:
        want = reg.reset | (START_READY if reg.name == "STATUS" else 0)   # engine input
        assert await m.read(reg.offset) == (want, OKAY), reg.name

    model = SpecModel(CFG, RMAP)
    rng = random.Random(SEED)
    base, words = RMAP.window_base, RMAP.window_words
    regs = [r.offset for r in RMAP]
    odd = [0x03C, 0x07C, 0x094, 0x0FC, 0x400, base - 4, base + 4 * words, 2 * base - 4]

    def address():
        k = rng.random()
        a = rng.choice(regs) if k < 0.7 else \
            base + 4 * rng.randrange(words) if k < 0.9 else rng.choice(odd)
        return a | (rng.randrange(4) if rng.random() < 0.1 else 0)

    def data_for(a):
        a &= ~3
        if a in (SEQ_LEN, KV_LEN, KEY_LEN):
            return rng.choice([0, 1, rng.randint(1, CFG.max_seq_len), 0xFFFF,
                               rng.getrandbits(32)])
        if a == CTRL:
            return rng.getrandbits(4)
        if a in SHIFTS:     # the edges of 1..62 and random (mostly valid) 6-bit values
            return rng.choice([0, 1, 62, 63, rng.randint(1, 62), rng.getrandbits(32)])
        return rng.getrandbits(32)

    for _ in range(250):
        k = rng.random()
        if k < 0.08:    # a start attempt: committed weights, likely-valid lengths and shifts
            shifts = [(off, rng.randint(1, 62) if rng.random() < 0.97 else rng.choice([0, 63]))
                      for off in SHIFTS]
            for a, d in ((SEQ_LEN, rng.randint(1, CFG.max_seq_len)),
                         (KV_LEN, rng.randint(1, CFG.max_kv_len)),
                         (KEY_LEN, rng.randint(0, 2)), *shifts, (COMMIT, 1),
                         (CTRL, START | rng.getrandbits(4))):
                assert await m.write(a, d) == model.write(a, d, 0xF), hex(a)
        elif k < 0.45:
            a = address()
            # cocotbext-axi writes one contiguous run of bytes (any strobes: the unit test).
            lo = rng.randrange(4)
            hi = rng.randrange(lo, 4)
            d, s = data_for(a), rng.choice([0xF, 0xF, (2 << hi) - (1 << lo)])
            assert await m.write(a, d, s) == model.write(a, d, s), hex(a)
        elif k < 0.85:
            a = address()
            assert await m.read(a) == model.read(a), hex(a)
        elif k < 0.92:
            model.busy = int(rng.random() < 0.4)
            model.cycles, model.busy_cycles = rng.getrandbits(32), rng.getrandbits(32)
            # Derived, not drawn: the random sequence stays the one the checks were tuned on.
            model.stall_cycles = model.cycles ^ model.busy_cycles
            model.start_ready = int(not model.busy or model.cycles & 1)
            await tb.drive(busy=model.busy, start__ready=model.start_ready, cycles=model.cycles,
                           busy_cycles=model.busy_cycles, stall_cycles=model.stall_cycles)
        elif k < 0.96:
            await tb.pulse("done_set")
            model.done = 1
        else:
            cause = rng.getrandbits(N_CAUSES)
            await tb.pulse("error_set", error_cause=cause)
            model.engine_error(cause)
        await ReadOnly()
        assert tb.ports() == model.ports()
    await ClockCycles(dut.clk, 3)
    assert len(tb.starts) == len(model.starts) > 0, (len(tb.starts), len(model.starts))
    # Bytes outside the strobes are don't-care (cocotbext-axi drives them 0).
    def strobed(writes):
        return [(w, d & sum(0xFF << 8 * i for i in range(4) if s >> i & 1), s)
                for w, d, s in writes]
    assert strobed(tb.wwin) == strobed(model.wwin) and model.wwin
    assert any(bad & BAD_SHIFT for bad in model.refused), model.refused
    dut._log.info("%d starts, %d refused, %d window writes, final causes %#x",
                  len(model.starts), len(model.refused), len(model.wwin), model.causes)


def random_layer(rng: np.random.Generator) -> QuantizedLayer:
    d = CFG.d_model
    w = {n: rng.integers(-128, 128, (d, d)) for n in QuantizedLayer.WEIGHTS}
    lim = CFG.projection_bias_limit
    b = {n: rng.integers(-lim, lim + 1, d) for n in QuantizedLayer.BIASES}
    rq = {n: Requant(int(rng.integers(1 << 15, 1 << 16)), int(rng.integers(1, 63)))
          for n in QuantizedLayer.REQUANTS}
    return QuantizedLayer(**w, **b, **rq, exp_mult=int(rng.integers(1, 1 << CFG.exp_mult_bits)),
                          exp_shift=int(rng.integers(1, 63)))


async def engine_run(tb, run_cycles: int, busy_cycles: int, fault: bool = False):
    """A stand-in engine: busy from the cycle after start for ``run_cycles``, then done (or,
    with ``fault``, the run abandoned with ERROR_CAUSE.ENGINE_FAULT and no done)."""
    n = len(tb.starts)
    while len(tb.starts) == n:
        await RisingEdge(tb.dut.clk)
    await tb.drive(busy=1, start__ready=0)
    await ClockCycles(tb.dut.clk, run_cycles)
    if fault:
        await tb.drive(busy=0, start__ready=1, error_set=1, error_cause=ENGINE_FAULT,
                       cycles=run_cycles + 1,
                       busy_cycles=busy_cycles)
        await tb.drive(error_set=0, error_cause=0)
    else:
        await tb.drive(busy=0, start__ready=1, done_set=1, cycles=run_cycles + 1,
                       busy_cycles=busy_cycles)
        await tb.drive(done_set=0)


@cocotb.test()
async def weights_and_run(dut):
    tb = AxiLiteTB(dut)
    await tb.reset()
    m = tb.master
    # Committed weights and valid lengths, but the shift registers at their reset value 0.
    assert await m.write(COMMIT, 1) == OKAY
    assert await m.write(CTRL, START) == OKAY
    assert await m.read(CAUSE) == (BAD_SHIFT, OKAY)
    assert await m.write(CAUSE, BAD_SHIFT) == OKAY
    assert await m.read(STATUS) == (WEIGHTS_VALID | START_READY, OKAY)
    layer = random_layer(np.random.default_rng(SEED))
    image = pack_window(RMAP, layer)
    if len(image) <= 2048:
        words = list(range(len(image)))
    else:   # large windows: the ends of every region (the address decode is what matters)
        words = sorted({w for g in RMAP.regions for w in
                        [*range(g.word_offset, g.word_offset + 4),
                         *range(g.word_offset + g.words - 4, g.word_offset + g.words)]})
    if len(words) == len(image):
        assert set(await m.write_block(RMAP.window_base, image)) == {OKAY}
    else:
        for w in words:
            assert await m.write(RMAP.window_base + 4 * w, image[w]) == OKAY
    for name, value in param_values(RMAP, layer).items():
        assert await m.write(RMAP[name].offset, value) == OKAY
    await ClockCycles(dut.clk, 3)
    assert tb.wwin == [(w, image[w], 0xF) for w in words]
    assert tb.ports()["rq_pv_mult"] == layer.rq_pv.mult
    assert tb.ports()["exp_shift"] == layer.exp_shift
    assert (await m.read(STATUS))[0] == START_READY                  # not committed yet
    assert await m.read(RMAP.window_base) == (0, SLVERR)
    assert await m.write(COMMIT, 1) == OKAY

    seq = max(1, CFG.max_seq_len - 1)
    for a, v in ((SEQ_LEN, seq), (KV_LEN, CFG.max_kv_len), (KEY_LEN, seq)):
        assert await m.write(a, v) == OKAY
    engine = cocotb.start_soon(engine_run(tb, 40, 25))
    assert await m.write(CTRL, START | CAUSAL | CROSS | IRQ_EN) == OKAY
    polls = 0
    while not (await m.read(STATUS))[0] & DONE:
        polls += 1
        assert polls < 100, "run never finished"
    await engine
    assert len(tb.starts) == 1
    assert dut.irq.value == 1
    assert await m.read(CYCLES) == (41, OKAY)
    assert await m.read(BUSY_CYCLES) == (25, OKAY)
    ports = tb.ports()
    assert (ports["seq_len"], ports["key_len"], ports["causal"], ports["cross"]) == \
        (seq, seq, 1, 1)

    # A second run: START while busy is refused; the engine then reports a short stream.
    assert await m.write(STATUS, DONE) == OKAY
    assert dut.irq.value == 0
    engine = cocotb.start_soon(engine_run(tb, 30, 10))
    assert await m.write(CTRL, START | IRQ_EN) == OKAY
    while not (await m.read(STATUS))[0] & BUSY:
        pass
    assert await m.write(CTRL, START | IRQ_EN) == OKAY
    assert await m.read(CAUSE) == (START_WHILE_BUSY, OKAY)
    await tb.pulse("error_set", error_cause=STREAM_SHORT)
    await engine
    status, _ = await m.read(STATUS)
    assert status == DONE | ERROR | WEIGHTS_VALID | START_READY, hex(status)
    assert await m.read(CAUSE) == (START_WHILE_BUSY | STREAM_SHORT, OKAY)
    assert await m.write(STATUS, DONE | ERROR) == OKAY
    assert await m.read(STATUS) == (WEIGHTS_VALID | START_READY, OKAY)
    assert len(tb.starts) == 2

    # A third run: a matrix engine rejects a command and the engine abandons the run.
    engine = cocotb.start_soon(engine_run(tb, 20, 5, fault=True))
    assert await m.write(CTRL, START | IRQ_EN) == OKAY
    await engine
    assert await m.read(STATUS) == (ERROR | WEIGHTS_VALID | START_READY, OKAY)
    assert await m.read(CAUSE) == (ENGINE_FAULT, OKAY)
    assert dut.irq.value == 1
    assert await m.write(CAUSE, ENGINE_FAULT) == OKAY
    assert await m.read(STATUS) == (WEIGHTS_VALID | START_READY, OKAY)
    assert dut.irq.value == 0
    assert len(tb.starts) == 3

    # BAD_SHIFT: 0 and 63 in each shift register, one at a time (with the weights committed).
    values = param_values(RMAP, layer)
    shift_regs = [r for r in RMAP if r.name.endswith("_SHIFT")]
    assert [r.offset for r in shift_regs] == SHIFTS
    for reg in shift_regs:
        for bad in (0, 63):
            assert await m.write(reg.offset, bad) == OKAY
            assert await m.write(COMMIT, 1) == OKAY
            assert await m.write(CTRL, START | IRQ_EN) == OKAY
            assert await m.read(CAUSE) == (BAD_SHIFT, OKAY), (reg.name, bad)
            assert await m.write(CAUSE, BAD_SHIFT) == OKAY
            assert await m.read(STATUS) == (WEIGHTS_VALID | START_READY, OKAY)
        assert await m.write(reg.offset, values[reg.name]) == OKAY
    await ClockCycles(dut.clk, 3)
    assert len(tb.starts) == 3
    assert await m.write(COMMIT, 1) == OKAY
    # Every shift back in 1..62: START goes through.
    engine = cocotb.start_soon(engine_run(tb, 10, 4))
    assert await m.write(CTRL, START | IRQ_EN) == OKAY
    polls = 0
    while not (await m.read(STATUS))[0] & DONE:
        polls += 1
        assert polls < 100, "run never finished"
    await engine
    assert await m.read(CAUSE) == (0, OKAY)
    assert await m.read(STATUS) == (DONE | WEIGHTS_VALID | START_READY, OKAY)
    assert len(tb.starts) == 4
