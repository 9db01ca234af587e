"""``make synth``'s report and its nextpnr supervision, without running nextpnr.

- ``report.json["source"]`` is the provenance of the sources (git commit, dirty tree),
  not the origin of a resource figure;
- nextpnr's log is parsed as it streams (stage, packed utilisation, placement estimate,
  router progress), a run past the time limit is stopped and reported as not routed.

A stand-in for nextpnr (a Python script printing log lines like nextpnr 0.11's) keeps
these tests at a few seconds; the real flow is measured by ``make synth``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from hw.flow.synth import (DEVICES, REPO_ROOT, NextpnrLog, build_report, format_summary,
                       provenance, run_nextpnr)

# What nextpnr-ecp5 0.11 prints, abridged: packing, placement, router2's first iterations.
LOG = """\
Info: Packing IOs..
Info: Device utilisation:
Info: \t          TRELLIS_IO:     191/    365    52%
Info: \t          MULT18X18D:     144/    156    92%
Info: \t              DP16KD:     174/    208    83%
Info: \t          TRELLIS_FF:   30316/  83640    36%
Info: \t        TRELLIS_COMB:   37139/  83640    44%
Info: \t        TRELLIS_RAMW:     446/  10455     4%

Info: Placed 191 cells based on constraints.
Info: Creating initial analytic placement for 42787 cells, random placement wirelen = 5090727.
Info:     at iteration #3, type ALL: wirelen solved = 172659, spread = 583782, legal = 693620
Info: Running simulated annealing placer for refinement.
Info:   at iteration #1: temp = 0.000000, timing cost = 3000, wirelen = 690000
Warning: Max frequency for clock '$glbnet$clk': 65.40 MHz (FAIL at 100.00 MHz)
Info: Routing globals...
Info: Running router2...
Info: Running main router loop...
Info:     iter=1 wires=400000 overused=25000 overuse=30000 archfail=NA
Info:     iter=2 wires=390000 overused=12000 overuse=13000 archfail=NA
"""

ROUTER1 = """\
Info: Routing..
Info: Setting up routing queue.
Info: Routing 175586 arcs.
Info:            |   (re-)routed arcs  |   delta    | remaining|       time spent     |
Info:    IterCnt |  w/ripup   wo/ripup |  w/r  wo/r |      arcs| batch(sec) total(sec)|
Info:       1000 |        0        1000 |    0  1000 |    174586|       0.52       0.52|
Info:   90000000 |  5000000   85000000 | 1000     0 |     90965|      30.00    1740.00|
"""


def test_log_parser_follows_stages_and_figures():
    state = NextpnrLog()
    stages = [state.feed(line, t) for t, line in enumerate(LOG.splitlines())]
    assert [s for s in stages if s] == ["packing", "placement", "placement refinement",
                                        "routing"]
    assert state.utilization["TRELLIS_COMB"] == {"used": 37139, "available": 83640}
    assert state.utilization["DP16KD"] == {"used": 174, "available": 208}
    assert state.placed_fmax == {"$glbnet$clk": 65.4} and state.routed_fmax == {}
    assert state.router2 == {"iteration": 2, "wires": 390000, "overused_wires": 12000,
                             "overuse": 13000}
    assert "12,000 overused wires" in state.routing_progress()
    times = state.stage_times(100.0)
    assert set(times) == {"pack_s", "place_s", "route_s"} and times["route_s"] > 0
    assert abs(sum(times.values()) - 100.0) < 0.5

    early = NextpnrLog()            # router2's first iteration takes minutes, silently
    for line in LOG.split("Info:     iter=1")[0].splitlines():
        early.feed(line)
    assert early.progress() == "routing (router2, first iteration)"
    assert early.router2 is None and early.routing_progress() is None

    r1 = NextpnrLog()
    for line in ROUTER1.splitlines():
        r1.feed(line)
    assert r1.stage == "routing"
    assert r1.router1["arcs_total"] == 175586 and r1.router1["arcs_queued"] == 90965
    assert r1.routing_progress() == "router1: 90,965 of 175,586 arcs still queued"
    for line in ("Info: Routing complete.",
                 "Info: Max frequency for clock '$glbnet$clk': 101.50 MHz (PASS at 100.00 MHz)"):
        r1.feed(line)
    assert r1.stage == "routed" and r1.routed_fmax == {"$glbnet$clk": 101.5}


def _fake_nextpnr(tmp_path, finish: bool) -> list[str]:
    tail = ("print('Info: Routing complete.', file=sys.stderr)\n"
            "print(\"Info: Max frequency for clock '$glbnet$clk': 101.50 MHz (PASS at 100.00 "
            "MHz)\", file=sys.stderr)\n" if finish else "time.sleep(120)\n")
    script = tmp_path / "fake_nextpnr.py"
    script.write_text(textwrap.dedent(f"""\
        import sys, time
        for line in {LOG!r}.splitlines():
            print(line, file=sys.stderr, flush=True)
        """) + tail)
    return [sys.executable, str(script)]


def test_nextpnr_is_stopped_at_the_time_limit_with_its_figures(tmp_path):
    notes = []
    t0 = time.monotonic()
    code, state, elapsed = run_nextpnr(_fake_nextpnr(tmp_path, False), tmp_path,
                                       time_limit_s=3, log=notes.append, every_s=1)
    assert code is None and 2.9 < elapsed < 30 and time.monotonic() - t0 < 30
    assert state.stage == "routing" and state.router2["overused_wires"] == 12000
    # Stage changes and progress were reported while it ran, the log copied line by line.
    assert any("nextpnr: routing (placement done; estimated Fmax 65.4 MHz)" in n for n in notes)
    assert any("router2 iteration 2: 12,000 overused wires" in n for n in notes)
    assert "iter=2 wires=390000" in (tmp_path / "nextpnr.log").read_text()
    # The stand-in is gone (it would sleep two minutes).
    out = subprocess.run(["pgrep", "-f", str(tmp_path / "fake_nextpnr.py")],
                         capture_output=True, text=True)
    assert out.stdout.strip() == ""

    code, state, _ = run_nextpnr(_fake_nextpnr(tmp_path, True), tmp_path, time_limit_s=60,
                                 log=notes.append)
    assert code == 0 and state.stage == "routed" and state.routed_fmax["$glbnet$clk"] == 101.5


def test_sigterm_stops_nextpnr_with_its_supervisor(tmp_path):
    # A supervisor process as ``hw synth`` runs it; SIGTERM to it must take nextpnr along.
    fake = _fake_nextpnr(tmp_path, False)
    sup = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import sys
        from pathlib import Path
        from hw.flow.synth import run_nextpnr, stop_on_sigterm
        try:
            with stop_on_sigterm():
                run_nextpnr({fake!r}, Path({str(tmp_path)!r}), log=print)
        except KeyboardInterrupt:
            sys.exit(130)
        """)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    log = tmp_path / "nextpnr.log"
    for _ in range(300):            # until nextpnr is routing (its log is copied as it runs)
        if log.exists() and "iter=2" in log.read_text():
            break
        time.sleep(0.1)
    sup.terminate()
    assert sup.wait(timeout=30) == 130
    out = subprocess.run(["pgrep", "-f", str(tmp_path / "fake_nextpnr.py")],
                         capture_output=True, text=True)
    assert out.stdout.strip() == ""


def _report(**changes):
    device = DEVICES["ecp5"]["85k"]
    used = {"luts": 36000, "ffs": 30000, "dsps": 144, "brams": 174, "ios": 191}
    args = dict(target="ecp5", device=device, config="default",
                config_file="configs/default.toml",
                wrapper={"io": "full", "slices": 2, "pins": 191},
                cells={"LUT4": 30000}, used=used, fits=True, problems=[], freq_mhz=100.0,
                pnr_status="skipped (--no-pnr)", pnr_result=None, pnr_state=None,
                stopped=None, seed=4, router="router2", pnr_minutes=32.0, global_buffers=[],
                sdf_summary=None, source={"commit": "ab" * 20, "dirty": False,
                                          "uncommitted_hw_changes": []},
                tools={}, times={"total_s": 1.0}, work_dir="build/synth/ecp5")
    args.update(changes)
    return build_report(**args)


def test_report_source_is_the_provenance_not_a_resource_origin():
    """It used to be ``"synthesis"``: the resource table's loop variable overwrote it."""
    report = _report()
    assert report["source"] == {"commit": "ab" * 20, "dirty": False,
                                "uncommitted_hw_changes": []}
    assert report["resources"]["luts"]["source"] == "synthesis"
    assert report["route_complete"] is None


def test_report_of_a_stopped_route(tmp_path):
    state = NextpnrLog()
    for line in LOG.splitlines():
        state.feed(line)
    stopped = {"time_limit_min": 32.0, "stage": state.stage,
               "progress": state.routing_progress(), **state.best_so_far()}
    report = _report(pnr_status="stopped at the time limit (32 min) in routing",
                     pnr_state=state, stopped=stopped)
    assert report["route_complete"] is False and report["fmax_mhz"] is None
    assert report["place_and_route"]["complete"] is False
    assert report["place_and_route"]["placed_fmax_mhz"] == 65.4
    assert report["place_and_route"]["stopped"]["router2"]["overused_wires"] == 12000
    # The packed figures replace the synthesis estimates.
    assert report["luts"] == 37139 and report["brams"] == 174
    assert report["resources"]["luts"]["source"].startswith("place and route (packed")
    text = format_summary(report)
    assert "ROUTE NOT COMPLETE: stopped in routing after 32 min" in text
    assert "estimated Fmax after placement 65.4 MHz" in text


def test_provenance_records_commit_and_dirty_tree(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "a.py").write_text("x = 1\n")
    (tmp_path / "README").write_text("r\n")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()
    assert provenance(tmp_path) == {"commit": head, "dirty": False,
                                    "uncommitted_hw_changes": []}
    (tmp_path / "README").write_text("changed\n")
    assert provenance(tmp_path) == {"commit": head, "dirty": True,
                                    "uncommitted_hw_changes": []}
    (tmp_path / "hw" / "a.py").write_text("x = 2\n")
    (tmp_path / "hw" / "new.py").write_text("y = 1\n")
    got = provenance(tmp_path)
    assert got["dirty"] is True
    assert sorted(got["uncommitted_hw_changes"]) == ["hw/a.py", "hw/new.py"]
    assert provenance(tmp_path / "hw")["commit"] is None      # not the top of a checkout


@pytest.mark.parametrize("args,message", [(["--pnr-minutes", "-1"], "--pnr-minutes")])
def test_bad_time_limit_exits_2(args, message):
    proc = subprocess.run([sys.executable, "-m", "hw", "synth", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2 and message in proc.stderr
