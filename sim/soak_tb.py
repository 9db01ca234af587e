"""cocotb side of the soak run (:mod:`sim.soak`, ``make soak``).

Runs random events on ``attention_top`` through :class:`sim.driver.AttentionDriver` until
``SOAK_VALUES`` output values were compared with :func:`golden.attention_int`:

``run``          a valid layer run: random mode (causal, cross, key padding), lengths from 1 to
                 the maximum, a random stall pattern (idle input, output backpressure, bus
                 pauses); every output value compared.
``bad_setting``  one invalid setting (lengths, cross/causal not built, a shift outside 1..62,
                 TLAST early or late): its ERROR_CAUSE, the engine idle afterwards.
``busy_misuse``  START and a window write during a run: START_WHILE_BUSY and
                 WRITE_WHILE_BUSY, the run itself still exact.
``bus_misuse``   reads and writes of unmapped addresses (SLVERR), a write to a read-only
                 register (ignored).
``reset``        a reset while the run loads, computes or streams out: BUSY and WEIGHTS_VALID
                 low after it; the parameters are written again (the weights survive).

Every event after a failing one starts from a clean engine (reset, parameters again), so one
fault does not hide the rest. An event's randomness comes from ``(seed, event index)`` and its
layer from ``(seed, epoch)`` (a new layer every ``EPOCH`` events), so ``SOAK_REPLAY=N`` runs
event N alone, as in the full run. A run whose BUSY does not fall within
:func:`hang_bound` cycles counts as a hang. The AXI monitor counts protocol violations without
stopping the run.

Environment: ``SOAK_JOB`` (JSON: config path, seed, values, replay, log and summary paths).
"""

from __future__ import annotations

import json
import os
import random
import time

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, Timer

import golden as g
from hw.perf.layer import layer_timing
from sim.bus import pack_rows, unpack_words
from sim.driver import AttentionDriver, cause_names
from sim.layers import make_layer
from sim.soak import (EPOCH, KINDS, STALL_PATTERNS, bad_setting_cases, draw_run,
                      hang_bound)

class Soak:
    def __init__(self, dut, cfg, job):
        self.dut, self.cfg, self.job = dut, cfg, job
        self.seed = job["seed"]
        self.drv = AttentionDriver(dut, cfg, seed=self.seed, strict_monitor=False)
        self.layer = None
        self.epoch = None
        self.stats = dict(events=0, runs=0, values=0, mismatches=0, mismatched_runs=0,
                          hangs=0, failed_events=0, kinds={k: 0 for k, _ in KINDS})
        self.log = open(job["log"], "a")

    # ------------------------------------------------------------------ helpers

    def rng(self, index: int) -> tuple[random.Random, np.random.Generator]:
        return random.Random(f"{self.seed}:{index}"), np.random.default_rng([self.seed, index])

    async def use_epoch(self, index: int):
        epoch = index // EPOCH
        if epoch != self.epoch:
            _, self.layer, _ = make_layer(self.cfg, seed=self.seed * 1000 + epoch)
            await self.drv.load_layer(self.layer)
            self.epoch = epoch

    async def recover(self):
        """A clean engine: reset, parameters and commit (the weights stay in block RAM)."""
        await self.drv.reset()
        self.drv.sink.clear()
        await self.drv.load_layer(self.layer, weights=False)

    def draw_run(self, rng, nrng) -> dict:
        return draw_run(self.cfg, self.layer, rng, nrng)

    def stalls(self, rng) -> tuple[float, float, float]:
        pattern = rng.choice(STALL_PATTERNS)
        self.drv.set_stalls(*pattern, seed=rng.getrandbits(16))
        return pattern

    def check_values(self, run, out) -> int:
        want = g.attention_int(self.cfg, self.layer, run["x"], run["kv"], causal=run["causal"],
                               key_len=run["key_len"])
        bad = int(np.count_nonzero(out != want)) if out is not None else want.size
        self.stats["runs"] += 1
        self.stats["values"] += want.size
        self.stats["mismatches"] += bad
        self.stats["mismatched_runs"] += bool(bad)
        return bad

    async def valid_run(self, run, stall) -> dict:
        bound = hang_bound(self.cfg, len(run["x"]), None if run["kv"] is None
                           else len(run["kv"]), max(stall))
        res = await self.drv.run(run["x"], run["kv"], causal=run["causal"],
                                 key_len=run["key_len"], timeout=bound)
        if res.out is None:
            hang = bool(res.status & self.drv.bit("STATUS", "BUSY"))
            self.stats["hangs"] += hang
            self.check_values(run, None)
            return dict(ok=False, hang=hang, errors=res.errors)
        bad = self.check_values(run, res.out)
        return dict(ok=not bad, mismatches=bad, cycles=res.cycles)

    # ------------------------------------------------------------------ events

    async def ev_run(self, rng, nrng) -> dict:
        run = self.draw_run(rng, nrng)
        stall = self.stalls(rng)
        return {**await self.valid_run(run, stall), **describe(run), "stalls": stall}

    async def ev_bad_setting(self, rng, nrng) -> dict:
        cfg, drv = self.cfg, self.drv
        run = self.self_run(rng, nrng)
        x = run["x"]
        cases = bad_setting_cases(cfg, x, pack_rows(x, cfg.act_bits))
        cause, kw = rng.choice(cases)
        self.stalls(rng)
        if kw is None:      # a shift register out of 1..62 (also clears WEIGHTS_VALID)
            reg = rng.choice([f.port.upper() for _, f in drv.rmap.fields_with_port()
                              if f.port.endswith("_shift")])
            await drv.write(reg, rng.choice([0, 63]))
            res = await drv.run(x)
            want = {"BAD_SHIFT", "NO_WEIGHTS"}
            await drv.load_layer(self.layer, weights=False)
        else:
            kw = dict(kw)
            kv = kw.pop("kv", None)
            res = await drv.run(x, kv, **kw)
            want = {cause}
        busy = (await drv.read("STATUS")) & drv.bit("STATUS", "BUSY")
        ok = set(res.errors) == want and res.out is None and not busy
        return dict(ok=ok, cause=cause, errors=res.errors, busy_after=bool(busy))

    def self_run(self, rng, nrng) -> dict:
        """A random run in self-attention mode (no cross)."""
        run = self.draw_run(rng, nrng)
        keys = min(self.cfg.max_seq_len, self.cfg.max_kv_len)
        x = run["x"][:keys]
        key_len = None if run["key_len"] is None else min(run["key_len"], len(x))
        return dict(x=x, kv=None, causal=run["causal"], key_len=key_len)

    async def start_self(self, run):
        """Program and START ``run`` (self-attention) without sending its input."""
        drv = self.drv
        await drv.clear_status()
        await drv.write("SEQ_LEN", len(run["x"]))
        await drv.write("KV_LEN", 0)
        await drv.write("KEY_LEN", run["key_len"] or 0)
        await drv.write("CTRL", drv.start_bits()
                        | (drv.bit("CTRL", "CAUSAL") if run["causal"] else 0))

    async def ev_busy_misuse(self, rng, nrng) -> dict:
        drv, run = self.drv, self.self_run(rng, nrng)
        stall = self.stalls(rng)
        await self.start_self(run)
        # The input buffer holds this sequence until its input has arrived: START is refused
        # (START_READY low), and the window write is dropped (BUSY).
        await drv.write("CTRL", drv.start_bits())
        await drv.bus.write(drv.rmap.window_base, rng.getrandbits(32))
        names = cause_names(await drv.read("ERROR_CAUSE"))
        drv.monitor.expect_packet(len(run["x"]) * drv.out_words)
        bound = hang_bound(self.cfg, len(run["x"]), None, max(stall))
        recv = cocotb.start_soon(drv.sink.receive(timeout=bound))
        await drv.source.send(pack_rows(run["x"], self.cfg.act_bits))
        got = await recv
        if got is None:
            self.stats["hangs"] += 1
            drv.monitor.forget_packets()
        out = None if got is None else np.array(unpack_words(got, self.cfg.d_model, self.cfg.act_bits))
        bad = self.check_values(run, out)
        weights = bool((await drv.read("STATUS")) & drv.bit("STATUS", "WEIGHTS_VALID"))
        ok = (not bad and weights and names == ["START_WHILE_BUSY", "WRITE_WHILE_BUSY"])
        return dict(ok=ok, mismatches=bad, errors=names, weights_valid=weights, **describe(run),
                    stalls=stall)

    async def ev_bus_misuse(self, rng, nrng) -> dict:
        drv = self.drv
        self.stalls(rng)
        used = {r.offset for r in drv.rmap}
        free = [a for a in range(0, drv.rmap.window_base, 4) if a not in used]
        addr = rng.choice(free)
        w = await drv.bus.write(addr, rng.getrandbits(32))
        _, r = await drv.bus.read(addr)
        before = await drv.read("CYCLES")
        ro = await drv.write("CYCLES", rng.getrandbits(32))
        after = await drv.read("CYCLES")
        ok = w == 2 and r == 2 and ro == 0 and before == after
        # The engine still runs exactly afterwards.
        run = self.draw_run(rng, nrng)
        res = await self.valid_run(run, (0.0, 0.0, 0.0))
        return {**res, "ok": ok and res["ok"], "addr": addr, "write_resp": w, "read_resp": r}

    async def ev_reset(self, rng, nrng) -> dict:
        drv, run = self.drv, self.self_run(rng, nrng)
        phase = rng.choice(["load", "compute", "stream"])
        self.stalls(rng)
        await self.start_self(run)
        words = pack_rows(run["x"], self.cfg.act_bits)
        beats = drv.monitor.beats
        out0 = beats["m_axis"]
        send = cocotb.start_soon(drv.source.send(words))
        lat = layer_timing(self.cfg, len(run["x"]),
                           additive=self.layer.scoring == "additive").latency
        if phase == "load":
            target = beats["s_axis"] + max(1, len(words) // 2)
            while beats["s_axis"] < target and not send.done():
                await RisingEdge(self.dut.clk)
        elif phase == "compute":
            await send
            await ClockCycles(self.dut.clk, rng.randint(1, max(1, lat // 2)))
        else:
            await send
            for _ in range(4 * lat + 1000):
                if beats["m_axis"] > out0:
                    break
                await RisingEdge(self.dut.clk)
        if not send.done():
            send.cancel()
        await drv.reset()
        drv.source.clear()
        drv.sink.clear()
        status = await drv.read("STATUS")
        idle = not status & (drv.bit("STATUS", "BUSY") | drv.bit("STATUS", "WEIGHTS_VALID"))
        await drv.load_layer(self.layer, weights=False)
        res = await self.valid_run(self.draw_run(rng, nrng), (0.0, 0.0, 0.0))
        return {**res, "ok": res["ok"] and idle, "phase": phase, "idle_after_reset": idle}

    async def event(self, index: int) -> dict:
        rng, nrng = self.rng(index)
        await self.use_epoch(index)
        kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
        start = self.drv.cycle()
        try:
            rec = await getattr(self, f"ev_{kind}")(rng, nrng)
        finally:
            self.drv.set_stalls(0.0, 0.0, 0.0, 0)
        rec.update(event=index, kind=kind, epoch=index // EPOCH,
                   sim_cycles=self.drv.cycle() - start)
        self.stats["events"] += 1
        self.stats["kinds"][kind] += 1
        if not rec["ok"]:
            self.stats["failed_events"] += 1
            await self.recover()
        self.log.write(json.dumps(rec, default=_json) + "\n")
        self.log.flush()
        return rec


def describe(run) -> dict:
    return dict(seq=len(run["x"]), kv=None if run["kv"] is None else len(run["kv"]),
                causal=run["causal"], key_len=run["key_len"])


def _json(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    return str(v)


@cocotb.test()
async def soak(dut):
    with open(os.environ["SOAK_JOB"]) as fh:
        job = json.load(fh)
    cfg = g.load_config(job["config"])
    t0 = time.monotonic()
    s = Soak(dut, cfg, job)
    await s.drv.start()
    if job.get("replay") is not None:
        await s.event(job["replay"])
    else:
        index = 0
        while s.stats["values"] < job["values"] and index < job["max_events"]:
            await s.event(index)
            index += 1
    await Timer(1, "ns")
    s.stats.update(violations=len(s.drv.monitor.violations),
                   first_violations=s.drv.monitor.violations[:5],
                   sim_cycles=s.drv.cycle(), wall_s=round(time.monotonic() - t0, 1))
    s.log.close()
    with open(job["summary"], "w") as fh:
        json.dump(s.stats, fh, indent=2)
