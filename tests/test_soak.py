"""The soak testbench (sim/soak_tb.py) itself: a short soak on the tiny top in both
simulators finds nothing, and replaying one event reproduces its record. ``make soak`` runs
the long version (10^5 values per configuration and simulator)."""

from __future__ import annotations

import json

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
