"""cocotb tests of the generated MatmulEngine Verilog against the golden model.

Environment (strings): MATMUL_CONFIG (TOML path), MATMUL_ROWS, MATMUL_COLS, MATMUL_LANES
(requantizer lanes, 0: all columns), MATMUL_SEED,
MATMUL_IDLE (idle probability of every input stream), MATMUL_BACKPRESSURE (probability of
``result.ready`` low).
"""

from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, ReadOnly

from golden import load_config
from hw.gen.verilog import REPO_ROOT
from hw.blocks.matmul import MatmulEngine
from hw.perf.matmul import matmul_cycles
from sim.bus import (StreamSink, StreamSource, clock_and_reset, pack_array, pack_fields,
                     run_streams, unpack_array)
from tests.matmul_vectors import expected_rows, extreme_case, operand_beats, random_case

CFG = load_config(os.environ.get("MATMUL_CONFIG", REPO_ROOT / "configs" / "tiny.toml")).replace(
    array_rows=int(os.environ.get("MATMUL_ROWS", "4")),
    array_cols=int(os.environ.get("MATMUL_COLS", "4")),
    requant_lanes=int(os.environ.get("MATMUL_LANES", "0")))
SEED = int(os.environ.get("MATMUL_SEED", "1"))
IDLE = float(os.environ.get("MATMUL_IDLE", "0"))
BACKPRESSURE = float(os.environ.get("MATMUL_BACKPRESSURE", "0"))
ENGINE = MatmulEngine(CFG)      # layouts and limits only; the DUT is its Verilog


def _fields(layout):
    return [(name, field.offset, field.width) for name, field in layout]


CMD_FIELDS = _fields(ENGINE.cmd_layout)
RESULT = {name: (field.offset, field.width) for name, field in ENGINE.result_layout}


class MatmulTB:
    def __init__(self, dut, idle: float, backpressure: float, seed: int):
        self.dut = dut
        self.srcs = {name: StreamSource(dut, name, idle=idle, seed=seed + i)
                     for i, name in enumerate(("cmd", "a", "b", "bias"))}
        self.sink = StreamSink(dut, "result", backpressure=backpressure, seed=seed + 9)
        self.errors: list[int] = []
        self.expected: list[tuple] = []

    async def reset(self):
        await clock_and_reset(self.dut)

    def command(self, case, command=None):
        a, b, bias = operand_beats(CFG, case)
        self.srcs["cmd"].put([pack_fields(CMD_FIELDS, command or case.command())])
        self.srcs["a"].put(pack_array(x, ENGINE.a_width) for x in a)
        self.srcs["b"].put(pack_array(x, ENGINE.b_width) for x in b)
        self.srcs["bias"].put(pack_array(x, CFG.bias_bits) for x in bias)
        if command is None:
            self.expected += expected_rows(CFG, case)

    def bad_command(self, command):
        self.srcs["cmd"].put([pack_fields(CMD_FIELDS, command)])

    async def run(self, max_cycles=40000):
        start = len(self.sink.items)
        want = len(self.expected)

        def watch(cycle):
            if self.dut.error.value:
                self.errors.append(cycle)

        await run_streams(self.dut.clk, [*self.srcs.values(), self.sink], max_cycles=max_cycles,
                          watch=watch,
                          until=lambda: len(self.sink.items) - start >= want
                          and all(s.idle_now for s in self.srcs.values()))
        # Nothing may follow the last expected beat.
        for _ in range(3 * (CFG.array_rows + CFG.array_cols) + 10):
            await FallingEdge(self.dut.clk)
            self.dut.result__ready.value = 1
            await ReadOnly()
            if self.dut.result__valid.value:
                raise AssertionError("result beat beyond the expected ones")
        return self.sink.items[start:]

    def decode(self, items):
        out = []
        for _, word in items:
            field = {n: (word >> o) & ((1 << w) - 1) for n, (o, w) in RESULT.items()}
            data = unpack_array(field["data"], CFG.acc_bits, CFG.array_cols)
            out.append((field["row"], field["col"], field["last"], tuple(data)))
        return out


def _mixed_cases(rng):
    R, C = CFG.array_rows, CFG.array_cols
    mm, mn, mk = ENGINE.max_m, ENGINE.max_n, ENGINE.max_k
    shapes = [(mm, mn, mk), (1, 1, 1), (R + 1, C + 1, 1), (mm, mn, 1), (R, C, mk),
              (mm - 1, mn - 1, 3)]
    shapes += [tuple(int(rng.integers(1, x + 1)) for x in (mm, mn, mk)) for _ in range(6)]
    cases = []
    for i, (m, n, k) in enumerate(shapes):
        cases.append(random_case(CFG, rng, m, n, k, bias=bool(i % 2), requant=bool(i % 3 == 1)))
    cases.append(extreme_case(CFG, mm, mn, mk, bias=False, requant=False))
    cases.append(extreme_case(CFG, mm, mn, mk, bias=True, requant=False))
    cases.append(extreme_case(CFG, mm, mn, mk, bias=True, requant=True))
    return cases


@cocotb.test()
async def test_back_to_back_commands(dut):
    """Random and extreme products, raw and requantized, with rejected commands in between."""
    rng = np.random.default_rng(SEED)
    tb = MatmulTB(dut, IDLE, BACKPRESSURE, SEED)
    await tb.reset()
    cases = _mixed_cases(rng)
    bad = 0
    for i, case in enumerate(cases):
        tb.command(case)
        if i % 5 == 2:    # out-of-range m, then k: rejected, nothing consumed
            bad_cmd = dict(case.command(), **({"m": ENGINE.max_m + 1} if bad % 2 == 0
                                              else {"k": 0}))
            tb.bad_command(bad_cmd)
            bad += 1
    got = tb.decode(await tb.run())
    assert len(got) == len(tb.expected), (len(got), len(tb.expected))
    for i, (g, e) in enumerate(zip(got, tb.expected)):
        assert g == e, f"beat {i}: got {g}, expected {e}"
    assert len(tb.errors) == bad, (tb.errors, bad)


@cocotb.test(skip=IDLE > 0 or BACKPRESSURE > 0)
async def test_cycle_model(dut):
    """Without stalls, every single command takes exactly hw.perf.matmul.matmul_cycles cycles."""
    rng = np.random.default_rng(SEED + 1)
    tb = MatmulTB(dut, 0.0, 0.0, SEED)
    await tb.reset()
    R, C = CFG.array_rows, CFG.array_cols
    for m, n, k in [(ENGINE.max_m, ENGINE.max_n, ENGINE.max_k), (R, C, 4 * max(R, C)),
                    (R + 1, 2 * C - 1, 1), (1, 1, 2)]:
        tb.expected = []
        tb.command(random_case(CFG, rng, m, n, k, bias=True, requant=True))
        first = len(tb.srcs["a"].accepted)
        items = await tb.run()
        assert tb.decode(items) == tb.expected
        cycles = items[-1][0] - tb.srcs["a"].accepted[first] + 1
        assert cycles == matmul_cycles(CFG, m, n, k), (m, n, k, cycles)
