"""Softmax unit cycle benchmark: the model of hw/perf/softmax.py against simulation.

Run as ``python -m hw bench --what softmax [--config configs/default.toml] [--rows 16]``. For every
lane count and row length it streams ``--rows`` rows back to back through the unit in the
Amaranth simulator (scores always valid, probs always ready), measures the cycles from the first
input beat to the last output beat (inclusive), and prints them beside
:func:`hw.perf.softmax.softmax_cycles`, with the model's steady-state cycles per row and the
latency from a row's first input beat to its first output beat. Exits with status 1 if any
measured figure differs from the model.
"""

from __future__ import annotations


import numpy as np
from amaranth.sim import Simulator

from hw.blocks.softmax import SoftmaxUnit

__all__ = ["measure_cycles"]


def measure_cycles(cfg, n_rows: int, row_len: int, seed: int = 0) -> int:
    """Simulated cycles, first input beat to last output beat inclusive."""
    dut = SoftmaxUnit(cfg)
    lanes = cfg.softmax_lanes
    beats = -(-row_len // lanes)
    layout = dut.scores.payload.shape()
    rng = np.random.default_rng(seed)
    stream = [layout.const({"data": [int(v) for v in rng.integers(-999, 999, lanes)],
                            "row": r % cfg.max_seq_len, "last": int(b == beats - 1)})
              for r in range(n_rows) for b in range(beats)]
    first, last = [], []

    async def producer(ctx):
        ctx.set(dut.exp_mult, 30000)
        ctx.set(dut.exp_shift, 12)
        ctx.set(dut.kv_len, cfg.max_kv_len)
        cycle = 0
        for beat in stream:
            ctx.set(dut.scores.valid, 1)
            ctx.set(dut.scores.payload, beat)
            while True:
                _, _, ready = await ctx.tick().sample(dut.scores.ready)
                cycle += 1
                if ready:
                    break
            if not first:
                first.append(cycle - 1)
        ctx.set(dut.scores.valid, 0)

    async def consumer(ctx):
        ctx.set(dut.probs.ready, 1)
        seen, cycle = 0, 0
        while seen < len(stream):
            _, _, valid = await ctx.tick().sample(dut.probs.valid)
            if valid:
                seen += 1
                last.append(cycle)
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return last[-1] - first[0] + 1
