"""Matrix-engine cycle benchmark: ``hw.perf.matmul`` model against the Amaranth simulation.

Run as ``python -m sim.bench.matmul [--config configs/tiny.toml]``. For each shape one command
runs with no stalls; the measured count is inclusive from the first accepted operand beat to
the last accepted result beat, the same definition as ``hw.perf.matmul.matmul_cycles``.
"""

from __future__ import annotations

import argparse

import numpy as np
from amaranth.sim import Simulator

from golden import load_config
from hw.blocks.matmul import MatmulEngine
from hw.perf.matmul import ideal_cycles, matmul_cycles
from tests.matmul_vectors import expected_rows, operand_beats, random_case

__all__ = ["measure_cycles", "main"]


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.toml")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    R, C = cfg.array_rows, cfg.array_cols
    mm = max(cfg.max_seq_len, cfg.max_kv_len)
    mn = mk = max(cfg.d_model, cfg.max_kv_len)
    shapes = [(R, C, 4 * max(R, C)), (mm, mn, mk), (mm, cfg.max_kv_len, cfg.head_dim),
              (mm, cfg.head_dim, cfg.max_kv_len), (R + 1, C + 1, 1), (mm - 1, mn - 1, 3)]
    print(f"config {cfg.name}: {R}x{C} array")
    print(f"{'m':>5} {'n':>5} {'k':>5} {'model':>8} {'measured':>9} {'ideal':>8} {'ratio':>6}")
    for m, n, k in shapes:
        model = matmul_cycles(cfg, m, n, k)
        measured = measure_cycles(cfg, m, n, k)
        ideal = ideal_cycles(cfg, m, n, k)
        flag = "" if model == measured else "  MISMATCH"
        print(f"{m:5} {n:5} {k:5} {model:8} {measured:9} {ideal:8} {model / ideal:6.3f}{flag}")


if __name__ == "__main__":
    main()
