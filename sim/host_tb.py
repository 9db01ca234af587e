"""cocotb side of :func:`sim.host.run_layer` for simulators without the C++ harness (Icarus).

Reads the job (``HOST_JOB``, a pickle written by :mod:`sim.host`), runs it through
:class:`sim.driver.AttentionDriver` and writes the results (``HOST_RESULT``).
"""

from __future__ import annotations

import os
import pickle

import cocotb

from sim.driver import AttentionDriver


@cocotb.test()
async def host_job(dut):
    from sim.host import HostResult

    with open(os.environ["HOST_JOB"], "rb") as fh:
        job = pickle.load(fh)
    cfg = job["cfg"]
    drv = AttentionDriver(dut, cfg, idle=job["idle"], backpressure=job["backpressure"],
                          seed=job["seed"])
    await drv.start()
    await drv.load_layer(job["layer"])
    runs = [dict(x=s.x, kv=s.kv, causal=s.causal, key_len=s.key_len, pos_enc=s.pos_enc,
                 pe_offset=s.pe_offset, grid_width=s.grid_width) for s in job["seqs"]]
    results, error = [], None
    if job["overlapped"]:
        for r in await drv.run_overlapped(runs, timeout=job["timeout"]):
            results.append(HostResult(r.out, r.cycles, r.busy_cycles, r.stall_cycles, r.status,
                                      r.end_cycle))
    else:
        for i, run in enumerate(runs):
            r = await drv.run(run["x"], run["kv"], causal=run["causal"],
                              key_len=run["key_len"], pos_enc=run["pos_enc"],
                              pe_offset=run["pe_offset"], grid_width=run["grid_width"],
                              timeout=job["timeout"])
            if r.out is None:
                error = (i, r.status, r.error_cause)
                break
            results.append(HostResult(r.out, r.cycles, r.busy_cycles, r.stall_cycles,
                                      r.status, drv.cycle()))
    with open(os.environ["HOST_RESULT"], "wb") as fh:
        pickle.dump({"results": results} if error is None else {"error": error}, fh)
