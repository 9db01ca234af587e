"""Matrix-engine cycle benchmark: ``hw.perf.matmul`` model against the Amaranth simulation.

Run as ``python -m hw bench --what matmul [--config configs/tiny.toml]``. For each shape one command
runs with no stalls; the measured count is inclusive from the first accepted operand beat to
the last accepted result beat, the same definition as ``hw.perf.matmul.matmul_cycles``.
"""

from __future__ import annotations


import numpy as np
from amaranth.sim import Simulator

from hw.blocks.matmul import MatmulEngine
from tests.matmul_vectors import expected_rows, operand_beats, random_case

__all__ = ["measure_cycles"]


def measure_cycles(cfg, m: int, n: int, k: int, seed: int = 0) -> int:
    """Simulate one requantized command with bias; checks the result against golden."""
    case = random_case(cfg, np.random.default_rng(seed), m, n, k, bias=True, requant=True)
    a, b, bias = operand_beats(cfg, case)
    expected = expected_rows(cfg, case)
    dut = MatmulEngine(cfg)
    queues = {"cmd": [case.command()], "a": a, "b": b, "bias": bias}
    got, marks = [], {}

    async def tb(ctx):
        pos = dict.fromkeys(queues, 0)
        ctx.set(dut.result.ready, 1)
        cycle = 0
        while len(got) < len(expected):
            for name, q in queues.items():
                port = getattr(dut, name)
                ctx.set(port.valid, pos[name] < len(q))
                if pos[name] < len(q):
                    ctx.set(port.payload, q[pos[name]])
            for name, q in queues.items():
                port = getattr(dut, name)
                if pos[name] < len(q) and ctx.get(port.ready):
                    pos[name] += 1
                    if name == "a":
                        marks.setdefault("first", cycle)
            if ctx.get(dut.result.valid):
                p = ctx.get(dut.result.payload)
                got.append((p.row, p.col, p.last, tuple(int(v) for v in p.data)))
                marks["last"] = cycle
            await ctx.tick()
            cycle += 1
            if cycle > 100 * len(a) + 1000:
                raise RuntimeError(f"engine stalled on m={m} n={n} k={k}")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    if got != expected:
        raise AssertionError(f"results differ from golden for m={m} n={n} k={k}")
    return marks["last"] - marks["first"] + 1
