"""cocotb module of ``python -m sim.bench_layer``: timed layer runs on the simulated top.

Environment: ATTN_CONFIG (TOML), BENCH_SEQ (comma-separated lengths), BENCH_OUT (JSON path).
Every output is also checked against the golden model, so a benchmark never reports the
cycles of a wrong answer.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import cocotb

import golden as g
from sim.driver import AttentionDriver
from sim.layers import make_case

CFG = g.load_config(os.environ["ATTN_CONFIG"])
LENGTHS = [int(v) for v in os.environ["BENCH_SEQ"].split(",")]


@cocotb.test()
async def bench(dut):
    layer, runs = make_case(CFG, 1, [dict(seq=n) for n in LENGTHS])
    drv = AttentionDriver(dut, CFG)
    await drv.start()
    t0 = time.monotonic()
    await drv.load_layer(layer)
    load_s = time.monotonic() - t0
    results = []
    for n, run in zip(LENGTHS, runs):
        t0 = time.monotonic()
        res = await drv.run(run["x"])
        wall = time.monotonic() - t0
        want = g.attention_int(CFG, layer, run["x"])
        assert res.out is not None and np.array_equal(res.out, want), f"seq {n}: wrong output"
        results.append({"seq_len": n, "cycles": res.cycles, "busy_cycles": res.busy_cycles,
                        "wall_s": round(wall, 3),
                        "sim_cycles_per_s": round(res.cycles / wall) if wall else None})
        dut._log.info(f"seq {n}: {res.cycles} cycles, {res.busy_cycles} busy")
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump({"config": CFG.name, "weight_load_wall_s": round(load_s, 2),
                   "runs": results}, fh, indent=2)
