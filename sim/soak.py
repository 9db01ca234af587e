"""Soak run (``python -m hw soak``, ``make soak``): random events on the generated
``attention_top`` in Icarus or Verilator until a number of output values were compared with
the golden model; the events are :mod:`sim.soak_tb`'s.

Writes, per configuration and simulator, ``<out>/<config>-<simulator>/``: ``events.jsonl``
(one line per event: kind, its settings and outcome, replayable by its index) and
``summary.json`` (events by kind, runs, values checked, mismatches, protocol violations,
hangs, failed events, simulated cycles, wall time, seed). ``--replay N`` runs event N alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from golden.config import AttentionConfig

__all__ = ["run_soak", "SoakError"]


class SoakError(RuntimeError):
    """The soak could not run (build or simulator failure), as opposed to finding faults."""


def run_soak(cfg: AttentionConfig, config_path: Path, simulator: str, values: int, seed: int,
             out: Path, replay: int | None = None, max_events: int = 100_000) -> dict:
    """Run the soak testbench; returns its summary (with ``config``, ``simulator``, ``seed``,
    ``wall_s`` of the whole run including the build)."""
    from hw.attention_top import AttentionTop
    from sim.runner import run_cocotb, verilog_for

    folder = out / f"{cfg.name}-{simulator}" / (f"replay-{replay}" if replay is not None
                                                   else "")
    folder.mkdir(parents=True, exist_ok=True)
    log, summary = folder / "events.jsonl", folder / "summary.json"
    for f in (log, summary):
        f.unlink(missing_ok=True)
    job = folder / "job.json"
    job.write_text(json.dumps(dict(config=str(Path(config_path).resolve()), seed=seed,
                                   values=values, replay=replay, max_events=max_events,
                                   log=str(log.resolve()), summary=str(summary.resolve()))))
    t0 = time.monotonic()
    top = verilog_for(AttentionTop, cfg, "attention_top")
    try:
        run_cocotb(sources=[top.verilog], toplevel="attention_top", test_module="sim.soak_tb",
                   simulator=simulator, run_name=f"soak-{cfg.name}-{seed}",
                   extra_env={"SOAK_JOB": str(job.resolve())})
    except (AssertionError, SystemExit) as e:
        raise SoakError(f"the soak testbench failed ({e}); see build/sim/runs/{simulator}/"
                        f"soak-{cfg.name}-{seed}/sim.log") from None
    if not summary.exists():
        raise SoakError(f"no summary written; see build/sim/runs/{simulator}/"
                        f"soak-{cfg.name}-{seed}/sim.log")
    result = json.loads(summary.read_text())
    result = {"config": cfg.name, "simulator": simulator, "seed": seed,
              "replay": replay, **result, "wall_s_total": round(time.monotonic() - t0, 1)}
    summary.write_text(json.dumps(result, indent=2) + "\n")
    return result


def clean(summary: dict) -> bool:
    return not (summary["mismatches"] or summary["violations"] or summary["hangs"]
                or summary["failed_events"])
