"""Soak run on the fast harnesses (``python -m hw soak --sim fast``: the Verilator C++
harness; ``--sim fast-icarus``: the same scripts on the Icarus Verilog harness): the soak's
events as harness scripts, for configurations too large for the cocotb path
(``configs/bert-base.toml``: one weight load is about three million cycles, an hour or more
through cocotb in Verilator).

The events are those of :mod:`sim.soak_tb` with the same randomness per ``(seed, index)``
and the same layer per epoch, written as script commands (:mod:`sim.fast`) instead of cocotb
coroutines, and checked afterwards from the harness's records:

``run``          a valid run, random mode and lengths, input idle and output backpressure
                 (the harness has no AXI4-Lite pauses); every output value against golden.
``bad_setting``  one invalid setting (lengths, cross/causal not built, a shift of 0 or 63,
                 TLAST early or late): its ERROR_CAUSE, BUSY low afterwards.
``busy_misuse``  START and a window write while the input loads: START_WHILE_BUSY and
                 WRITE_WHILE_BUSY, the run exact, WEIGHTS_VALID kept.
``bus_misuse``   an unmapped address (SLVERR both ways), a read-only register written
                 (unchanged); then a valid run.
``reset``        a reset a random number of cycles into a run (while it loads, computes or
                 streams): BUSY and WEIGHTS_VALID low after it; parameters again, a valid run.

One script per epoch (a layer load and its events); a ``mark`` record separates the events.
There is no protocol monitor on this path (``violations`` is ``None`` in the summary): the
cocotb soak checks the AXI rules on the smaller configurations, whose bus logic is the same
generator's.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np

import golden as g
from golden.config import AttentionConfig
from hw.bus.regmap import ERROR_CAUSES
from sim.host import _Program, pack_rows, unpack_words
from sim.layers import make_layer
from sim.soak import (EPOCH, KINDS, STALL_PATTERNS, bad_setting_cases, draw_run,
                      hang_bound)

__all__ = ["run_fast_soak"]

STALLS = tuple(p[:2] for p in STALL_PATTERNS)     # the harness has no AXI4-Lite pauses


def _names(bits: int) -> list[str]:
    return [name for i, (name, _) in enumerate(ERROR_CAUSES) if bits >> i & 1]


class _Epoch:
    """The script of one epoch; every event appends its commands after a ``mark`` and notes
    what its records must show (checked by :func:`_check`)."""

    def __init__(self, cfg, layer, prog: _Program, script):
        self.cfg, self.layer, self.p, self.s = cfg, layer, prog, script

    def cmd(self, *parts):
        self.s.add(*parts)

    def stalls(self, rng) -> tuple[float, float]:
        idle, bp = rng.choice(STALLS)
        self.cmd("idle", repr(idle))
        self.cmd("backpressure", repr(bp))
        return idle, bp

    def quiet(self):
        self.cmd("idle", "0.0")
        self.cmd("backpressure", "0.0")

    def program(self, run, *, ctrl_extra: int = 0):
        """SEQ_LEN, KV_LEN, KEY_LEN, then CTRL with START and IRQ_EN (irq: DONE or ERROR)."""
        p = self.p
        cross = run["kv"] is not None
        self.cmd("write", p.addr("SEQ_LEN"), run.get("seq_len", len(run["x"])))
        self.cmd("write", p.addr("KV_LEN"), run.get("kv_len", len(run["kv"]) if cross else 0))
        self.cmd("write", p.addr("KEY_LEN"), run.get("key_len") or 0)
        self.cmd("write", p.addr("CTRL"), p.bit("CTRL", "START") | p.bit("CTRL", "IRQ_EN")
                 | (p.bit("CTRL", "CAUSAL") if run["causal"] else 0)
                 | (p.bit("CTRL", "CROSS") if cross else 0)
                 | (p.bit("CTRL", "ADDITIVE") if p.additive else 0)
                 | (p.bit("CTRL", "CHANNEL_SCALES") if p.channel else 0) | ctrl_extra)

    def send(self, words):
        self.cmd("send", *self.s.put(words))

    def finish_run(self, run, ev: dict):
        """Wait for the run's end (irq: DONE once the last output word is taken, or ERROR),
        read ERROR_CAUSE, clear the status. The output packet is the group's last "E"."""
        self.cmd("wait_irq")
        self.cmd("read", self.p.addr("ERROR_CAUSE"))
        self.p.clear_status()
        ev["run"] = run

    def valid_run(self, run, ev: dict):
        self.program(run)
        self.send(pack_rows(run["x"], self.cfg.act_bits))
        if run["kv"] is not None:
            self.send(pack_rows(run["kv"], self.cfg.act_bits))
        self.finish_run(run, ev)

    def parameters(self):
        """The run parameters and the commit again (the weights stay in block RAM)."""
        from hw.bus.regmap import param_values
        for name, value in param_values(self.p.rmap, self.layer).items():
            self.cmd("write", self.p.addr(name), value)
        self.cmd("write", self.p.addr("WEIGHTS_COMMIT"), 1)

    # ---------------------------------------------------------------- events

    def ev_run(self, rng, nrng, ev):
        ev["stalls"] = self.stalls(rng)
        self.valid_run(draw_run(self.cfg, self.layer, rng, nrng), ev)
        self.quiet()

    def ev_bad_setting(self, rng, nrng, ev):
        cfg, p = self.cfg, self.p
        run = draw_run(cfg, self.layer, rng, nrng, cross_ok=False)
        x = run["x"]
        cases = bad_setting_cases(cfg, x, pack_rows(x, cfg.act_bits))
        cause, kw = rng.choice(cases)
        ev["stalls"] = self.stalls(rng)
        ev["cause"] = cause
        if kw is None:      # a shift register out of 1..62 (also clears WEIGHTS_VALID)
            shifts = [f.port.upper() for _, f in p.rmap.fields_with_port()
                      if f.port.endswith("_shift")]
            self.cmd("write", p.addr(rng.choice(shifts)), rng.choice([0, 63]))
            self.program(run)
            ev["want"] = ["NO_WEIGHTS", "BAD_SHIFT"]
        else:
            self.program({**run, **{k: v for k, v in kw.items() if k != "words"}})
            ev["want"] = [cause]
            if cause.startswith("STREAM"):
                self.send(kw["words"])
        self.cmd("wait_irq")
        self.cmd("wait_sent")
        self.cmd("cycles", 64)
        self.cmd("read", p.addr("ERROR_CAUSE"))
        self.cmd("read", p.addr("STATUS"))
        self.cmd("drop")
        self.quiet()
        p.clear_status()
        if kw is None:
            self.parameters()

    def ev_busy_misuse(self, rng, nrng, ev):
        p = self.p
        run = draw_run(self.cfg, self.layer, rng, nrng, cross_ok=False)
        ev["stalls"] = self.stalls(rng)
        self.program(run)
        # The input buffer holds this sequence until its input has arrived: START is refused
        # (START_READY low) and the window write dropped (BUSY).
        self.cmd("write", p.addr("CTRL"), p.bit("CTRL", "START"))
        self.cmd("write", p.rmap.window_base, rng.getrandbits(32))
        self.cmd("read", p.addr("ERROR_CAUSE"))
        p.clear_status()                  # the refused START raised ERROR (and irq)
        self.cmd("write", p.addr("CTRL"), p.bit("CTRL", "IRQ_EN"))
        self.send(pack_rows(run["x"], self.cfg.act_bits))
        self.cmd("wait_irq")
        self.cmd("read", p.addr("STATUS"))
        p.clear_status()
        self.quiet()
        ev["run"] = run

    def ev_bus_misuse(self, rng, nrng, ev):
        p = self.p
        ev["stalls"] = self.stalls(rng)
        used = {r.offset for r in p.rmap}
        ev["addr"] = addr = rng.choice([a for a in range(0, p.rmap.window_base, 4)
                                        if a not in used])
        self.cmd("write", addr, rng.getrandbits(32))
        self.cmd("read", addr)
        self.cmd("read", p.addr("CYCLES"))
        self.cmd("write", p.addr("CYCLES"), rng.getrandbits(32))
        self.cmd("read", p.addr("CYCLES"))
        self.quiet()
        self.valid_run(draw_run(self.cfg, self.layer, rng, nrng), ev)

    def ev_reset(self, rng, nrng, ev):
        from hw.perf.layer import layer_timing
        p = self.p
        run = draw_run(self.cfg, self.layer, rng, nrng, cross_ok=False)
        ev["stalls"] = self.stalls(rng)
        lat = layer_timing(self.cfg, len(run["x"]),
                           additive=self.layer.scoring == "additive").latency
        # Cycles after START: while the input arrives, the arrays compute or the output leaves.
        ev["after"] = rng.randint(1, int(lat * 1.1))
        self.program(run)
        self.send(pack_rows(run["x"], self.cfg.act_bits))
        self.cmd("cycles", ev["after"])
        self.cmd("reset", 4)
        self.cmd("drop")
        self.cmd("read", p.addr("STATUS"))
        self.quiet()
        self.parameters()
        p.clear_status()
        self.valid_run(draw_run(self.cfg, self.layer, rng, nrng), ev)


def _groups(records) -> list[list[tuple]]:
    """The records of each event: the lists that follow each "C" mark."""
    groups = []
    for r in records:
        if r[0] == "C":
            groups.append([])
        elif groups:
            groups[-1].append(r)
    return groups


def _check(cfg, layer, prog, ev, recs, out_words, before: int, stats) -> dict:
    """Whether event ``ev`` went as it must, from its records (``before``: the words received
    before them); counts values and faults."""
    reads = [r for r in recs if r[0] == "R"]
    writes = [r for r in recs if r[0] == "W"]
    status_bit = prog.bit
    ok = True
    kind = ev["kind"]
    if kind == "bad_setting":
        cause, status = reads[-2][1], reads[-1][1]
        ev["errors"] = _names(cause)
        ev["busy_after"] = bool(status & status_bit("STATUS", "BUSY"))
        return dict(ok=set(ev["errors"]) == set(ev["want"]) and not ev["busy_after"])
    if kind == "busy_misuse":
        ev["errors"] = _names(reads[0][1])
        status = reads[-1][1]
        ev["weights_valid"] = bool(status & status_bit("STATUS", "WEIGHTS_VALID"))
        ok = (ev["errors"] == ["START_WHILE_BUSY", "WRITE_WHILE_BUSY"]
              and ev["weights_valid"] and not status & status_bit("STATUS", "ERROR"))
    if kind == "bus_misuse":
        w_resp, r_resp = writes[0][1], reads[0][2]
        cycles_before, cycles_after, ro = reads[1][1], reads[2][1], writes[1][1]
        ev.update(write_resp=w_resp, read_resp=r_resp)
        ok = w_resp == 2 and r_resp == 2 and ro == 0 and cycles_before == cycles_after
    if kind == "reset":
        status = reads[0][1]
        ev["idle_after_reset"] = not status & (status_bit("STATUS", "BUSY")
                                               | status_bit("STATUS", "WEIGHTS_VALID"))
        ok = ev["idle_after_reset"]
    run = ev.pop("run")
    ev.update(seq=len(run["x"]), kv=None if run["kv"] is None else len(run["kv"]),
              causal=run["causal"], key_len=run["key_len"])
    want = g.attention_int(cfg, layer, run["x"], run["kv"], causal=run["causal"],
                           key_len=run["key_len"])
    ends = [r for r in recs if r[0] == "E"]
    n = want.size // cfg.act_per_word
    # The run's packet is the event's last. Before it come only the words of a run a reset
    # cut short (the reset event); every other event's packet is all the words it received.
    first = ends[-2][1] if len(ends) > 1 else before
    got = ends[-1][1] - first if ends else 0
    ev["words"] = got
    if not ends or got < n or (kind != "reset" and got != n) \
            or (kind != "busy_misuse" and reads[-1][1]):
        bad = want.size
        if reads and kind != "busy_misuse":
            ev["errors"] = _names(reads[-1][1])
    else:
        end = ends[-1][1]
        out = unpack_words(out_words[end - n:end], cfg.d_model, cfg.act_bits)
        bad = int(np.count_nonzero(out != want))
    stats["runs"] += 1
    stats["values"] += want.size
    stats["mismatches"] += bad
    stats["mismatched_runs"] += bool(bad)
    ev["mismatches"] = bad
    return dict(ok=ok and not bad)


def run_fast_soak(cfg: AttentionConfig, values: int, seed: int, out: Path,
                  replay: int | None = None, max_events: int = 100_000,
                  verilog: Path | None = None, opt: str | None = None,
                  simulator: str = "verilator") -> dict:
    """The soak on a fast harness (``simulator``: ``"verilator"``, the C++ one, or
    ``"icarus"``, the Verilog one) until ``values`` output values were compared; writes
    ``events.jsonl`` and ``summary.json`` into ``out / <config>-fast`` (``-fast-icarus``)
    and returns the summary. ``opt``: the C++ level (default :data:`sim.fast.OPT_LEVEL`)."""
    from hw.attention_top import AttentionTop
    from sim.fast import (HarnessTimeout, Script, build_harness, build_icarus_harness,
                          run_script)
    from sim.runner import verilog_for

    name = "fast" if simulator == "verilator" else f"fast-{simulator}"
    folder = out / f"{cfg.name}-{name}" / (f"replay-{replay}" if replay is not None else "")
    folder.mkdir(parents=True, exist_ok=True)
    log_path, summary_path = folder / "events.jsonl", folder / "summary.json"
    t0 = time.monotonic()
    if verilog is None:
        verilog = verilog_for(AttentionTop, cfg, "attention_top").verilog
    t_build = time.monotonic()
    if simulator == "verilator":
        build_harness(Path(verilog), opt=opt)
    else:
        build_icarus_harness(Path(verilog))
    build_s = time.monotonic() - t_build
    stats = dict(events=0, runs=0, values=0, mismatches=0, mismatched_runs=0, hangs=0,
                 failed_events=0, kinds={k: 0 for k, _ in KINDS}, violations=None,
                 sim_cycles=0, sim_s=0.0)
    log = open(log_path, "w")
    bound = hang_bound(cfg, cfg.max_seq_len, None, 0.7)
    index = replay if replay is not None else 0
    while (replay is not None and stats["events"] == 0) or (
            replay is None and stats["values"] < values and index < max_events):
        epoch = index // EPOCH
        _, layer, _ = make_layer(cfg, seed=seed * 1000 + epoch)
        script = Script()
        script.settings(seed=seed * 1000 + epoch, idle=0.0, backpressure=0.0, limit=bound)
        prog = _Program(cfg, script)
        ep = _Epoch(cfg, layer, prog, script)
        script.add("reset", 4)
        prog.load(layer)
        prog.clear_status()
        # The epoch's events, up to its end or until the runs planned reach the target.
        events, planned = [], stats["values"]
        last = index + 1 if replay is not None else (epoch + 1) * EPOCH
        for i in range(index, last):
            rng, nrng = random.Random(f"{seed}:{i}"), np.random.default_rng([seed, i])
            kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
            ev = dict(event=i, kind=kind, epoch=epoch)
            script.add("mark")
            getattr(ep, f"ev_{kind}")(rng, nrng, ev)
            events.append(ev)
            if "run" in ev:
                planned += len(ev["run"]["x"]) * cfg.d_model
            if replay is None and planned >= values:
                break
        index = events[-1]["event"] + 1
        try:
            res = run_script(Path(verilog), script, opt=opt, simulator=simulator)
        except HarnessTimeout as e:
            stats["hangs"] += 1
            stats["failed_events"] += len(events)
            stats["events"] += len(events)
            for ev in events:
                ev.pop("run", None)
                ev.update(ok=False, hang=str(e))
                log.write(json.dumps(ev, default=str) + "\n")
            continue
        stats["sim_cycles"] += res.cycles
        stats["sim_s"] += res.seconds
        groups = _groups(res.records)
        if len(groups) < len(events):
            raise RuntimeError(f"the harness stopped early in epoch {epoch}: "
                               f"{len(groups)} of {len(events)} events have records")
        # The layer load: every window write and register write answered OKAY.
        load = res.records[:next(i for i, r in enumerate(res.records) if r[0] == "C")]
        if any(r[0] == "B" and r[1] for r in load) or any(r[0] == "W" and r[1] for r in load):
            raise RuntimeError(f"the layer load of epoch {epoch} was refused: "
                               f"{[r for r in load if r[0] in 'BW' and r[1]][:3]}")
        before = 0
        for ev, recs in zip(events, groups):
            ev.update(_check(cfg, layer, prog, ev, recs, res.out_words, before, stats))
            ends = [r[1] for r in recs if r[0] == "E"]
            before = ends[-1] if ends else before
            stats["events"] += 1
            stats["kinds"][ev["kind"]] += 1
            stats["failed_events"] += not ev["ok"]
            log.write(json.dumps(ev, default=str) + "\n")
        log.flush()
    log.close()
    stats.update(build_s=round(build_s, 1), sim_s=round(stats["sim_s"], 1),
                 wall_s=round(time.monotonic() - t0, 1))
    summary = {"config": cfg.name, "simulator": f"{name} ({simulator.capitalize()} harness)",
               "seed": seed,
               "replay": replay, **stats, "wall_s_total": stats["wall_s"]}
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary
