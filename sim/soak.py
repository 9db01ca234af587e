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

import random

import golden as g
from golden.config import AttentionConfig

__all__ = ["run_soak", "SoakError", "EPOCH", "KINDS", "STALL_PATTERNS", "hang_bound",
           "draw_run", "bad_setting_cases"]

# The events, shared by the cocotb testbench (sim/soak_tb.py) and the harness soak
# (sim/soak_fast.py): a new random layer every EPOCH events; kinds and their shares.
EPOCH = 16
KINDS = (("run", 0.70), ("bad_setting", 0.12), ("busy_misuse", 0.05), ("bus_misuse", 0.05),
         ("reset", 0.08))
# (input idle, output backpressure, bus pause) probabilities (the harness has no bus pauses)
STALL_PATTERNS = ((0.0, 0.0, 0.0), (0.3, 0.4, 0.3), (0.6, 0.2, 0.0), (0.0, 0.7, 0.5))


def hang_bound(cfg, seq: int, kv: int | None, stall: float) -> int:
    """Cycles within which BUSY must fall: twice the cycle model's latency, stretched by the
    worst stall probability, plus the bus traffic of a run."""
    from hw.perf.layer import layer_timing
    lat = layer_timing(cfg, seq, kv).latency
    return int(2 * lat / (1.0 - stall)) + 2000


def draw_run(cfg: AttentionConfig, layer, rng: random.Random, nrng, *,
             cross_ok: bool = True) -> dict:
    """A random valid run: mode (causal, cross, key padding) and lengths from 1 to the
    maximum, inputs drawn like the calibration data."""
    cross = cross_ok and cfg.cross_attention and rng.random() < 0.3
    S, KV = cfg.max_seq_len, cfg.max_kv_len
    seq = rng.randint(1, S if cross else min(S, KV))
    kv_rows = rng.randint(1, KV) if cross else None
    keys = kv_rows if cross else seq
    key_len = rng.randint(1, keys) if rng.random() < 0.3 else None
    causal = cfg.causal_mask and rng.random() < 0.4
    s = layer.scales
    x = g.quantize_tensor(nrng.normal(0.0, 1.0, (seq, cfg.d_model)), s["x"], cfg.act_bits)
    kv = (g.quantize_tensor(nrng.normal(0.0, 1.0, (kv_rows, cfg.d_model)), s["kv"],
                            cfg.act_bits) if cross else None)
    return dict(x=x, kv=kv, causal=causal, key_len=key_len)


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


def bad_setting_cases(cfg: AttentionConfig, x, words: list) -> list[tuple[str, dict | None]]:
    """The invalid settings a ``bad_setting`` event draws from, for a self-attention input
    ``x`` packed into ``words``: (the ERROR_CAUSE it must raise, what to change: register
    values, the words sent, a second sequence; ``None``: a shift register of 0 or 63)."""
    S, KV = cfg.max_seq_len, cfg.max_kv_len
    cases = [("BAD_SEQ_LEN", dict(seq_len=0)), ("BAD_SEQ_LEN", dict(seq_len=S + 1)),
             ("BAD_KEY_LEN", dict(key_len=len(x) + 1)),
             ("STREAM_LONG", dict(words=list(words) + [0]))]
    if len(words) > 1:
        cases.append(("STREAM_SHORT", dict(words=list(words)[:-1])))
    if cfg.cross_attention:
        cases += [("BAD_KV_LEN", dict(kv=x, kv_len=0)), ("BAD_KV_LEN", dict(kv=x, kv_len=KV + 1))]
    else:
        cases.append(("BAD_CROSS", dict(kv=x)))
    if not cfg.causal_mask:
        cases.append(("BAD_CAUSAL", dict(causal=True)))
    cases.append(("BAD_SHIFT", None))
    return cases
