"""cocotb module of ``python -m hw bench --what layer`` (sim/bench/layer.py): timed layer runs
on the simulated top.

Environment: ATTN_CONFIG (TOML), BENCH_SEQ (comma-separated lengths), BENCH_OUT (JSON path),
BENCH_OVERLAP (sequences per back-to-back burst, default 3; 0 skips the bursts).
Per length: one sequence on an idle engine (CYCLES, BUSY_CYCLES, STALL_CYCLES), then a burst
of equal sequences through the double buffers, whose output-to-output spacing is the
steady-state interval. Every output is checked against the golden model, so a benchmark never
reports the cycles of a wrong answer.
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
OVERLAP = int(os.environ.get("BENCH_OVERLAP", "3"))


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
        want = g.attention_int(CFG, layer, run["x"])
        t0 = time.monotonic()
        res = await drv.run(run["x"])
        wall = time.monotonic() - t0
        assert res.out is not None and np.array_equal(res.out, want), f"seq {n}: wrong output"
        entry = {"seq_len": n, "cycles": res.cycles, "busy_cycles": res.busy_cycles,
                 "softmax_stall_cycles": res.stall_cycles, "wall_s": round(wall, 3),
                 "sim_cycles_per_s": round(res.cycles / wall) if wall else None}
        if OVERLAP >= 2:
            burst = await drv.run_overlapped([dict(x=run["x"])] * OVERLAP)
            for r in burst:
                assert np.array_equal(r.out, want), f"seq {n}: wrong output in a burst"
            ends = [r.end_cycle for r in burst]
            entry["interval_cycles"] = round((ends[-1] - ends[0]) / (len(ends) - 1))
        results.append(entry)
        dut._log.info(f"seq {n}: {entry}")
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump({"config": CFG.name, "weight_load_wall_s": round(load_s, 2),
                   "runs": results}, fh, indent=2)
