"""The soak testbench (sim/soak_tb.py) itself: a short soak on the tiny top in both
simulators finds nothing, and replaying one event reproduces its record. ``make soak`` runs
the long version (10^5 values per configuration and simulator)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from golden import load_config
from hw.gen.verilog import REPO_ROOT
from sim.soak import clean, run_soak

TINY = REPO_ROOT / "configs" / "tiny.toml"
OUT = REPO_ROOT / "build" / "test-soak"


@pytest.mark.cocotb
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_short_soak_is_clean_and_replayable(simulator):
    cfg = load_config(TINY)
    out = OUT / simulator
    s = run_soak(cfg, TINY, simulator, values=600, seed=11, out=out)
    assert clean(s), s
    assert s["values"] >= 600 and s["runs"] > 0
    events = [json.loads(line) for line in
              (out / f"{cfg.name}-{simulator}" / "events.jsonl").read_text().splitlines()]
    assert len(events) == s["events"] and all(e["ok"] for e in events)
    # Replaying an event alone gives the same outcome and the same simulated work.
    pick = next((e for e in events if e["kind"] != "run"), events[-1])
    r = run_soak(cfg, TINY, simulator, values=1, seed=11, out=out, replay=pick["event"])
    again = json.loads((out / f"{cfg.name}-{simulator}" / f"replay-{pick['event']}" /
                        "events.jsonl").read_text())
    drop = ("sim_cycles",)
    assert {k: v for k, v in again.items() if k not in drop} == \
        {k: v for k, v in pick.items() if k not in drop}
    assert r["events"] == 1


@pytest.mark.cocotb
def test_fast_soak_is_clean_replayable_and_not_vacuous(monkeypatch):
    """The harness soak (sim/soak_fast.py) on the tiny top: every event kind occurs and
    passes, a replay gives the same record, and output words shifted by one are caught."""
    from sim import soak_fast
    cfg = load_config(TINY)
    out = OUT / "fast"
    s = soak_fast.run_fast_soak(cfg, 3000, seed=11, out=out, opt="-O0")
    assert clean(s), s
    assert s["values"] >= 3000 and all(s["kinds"].values()), s["kinds"]
    events = [json.loads(line) for line in
              (out / f"{cfg.name}-fast" / "events.jsonl").read_text().splitlines()]
    assert len(events) == s["events"] and all(e["ok"] for e in events)
    pick = next(e for e in events if e["kind"] == "reset")
    soak_fast.run_fast_soak(cfg, 1, seed=11, out=out, replay=pick["event"], opt="-O0")
    again = json.loads((out / f"{cfg.name}-fast" / f"replay-{pick['event']}" /
                        "events.jsonl").read_text())
    assert again == pick
    real = soak_fast.unpack_words
    monkeypatch.setattr(soak_fast, "unpack_words",
                        lambda words, width, bits=8: real(np.roll(words, 1), width, bits))
    bad = soak_fast.run_fast_soak(cfg, 200, seed=11, out=OUT / "fast-broken", opt="-O0")
    assert bad["mismatches"] > 0 and bad["failed_events"] > 0
