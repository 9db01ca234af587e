"""Command-line generator: ``python -m hw {generate,lint,config} --config configs/x.toml``.

``generate`` writes, into ``--out`` (default build/verilog):

- ``attention_top.v``     the accelerator (Verilog-2005 as emitted by Yosys, Icarus-safe);
- ``attention_top.f``     a file list for simulators and synthesis tools;
- ``regmap.json``         the AXI4-Lite register map;
- ``attention_regs.h``    the same as a C header;
- ``config.json``         the resolved configuration, with derived widths;
- ``config.toml``         the configuration as loaded (re-loadable);
- ``attention_top.sdc``   clock-constraint template, SDC (``--clock-mhz``, default 100);
- ``attention_top.xdc``   the same for Vivado (XDC);
- ``attention_top.core``  a FuseSoC CAPI2 core of these files (targets default, lint, sim,
  synth, vivado): ``fusesoc --cores-root build/verilog run --target=lint
  attention-accel:ip:attention_top``.

An invalid configuration prints one line naming the field, the value and the allowed range and
exits with status 2; nothing is written. Outputs are written to a temporary folder first and
moved into place only when all of them succeeded.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from golden.config import ConfigError, load_config

TOP = "attention_top"
DEFAULT_CLOCK_MHZ = 100.0


def _generate(cfg, out: Path, clock_mhz: float = DEFAULT_CLOCK_MHZ) -> list[Path]:
    from hw.attention_top import AttentionTop
    from hw.gen.collateral import fusesoc_core_text, sdc_text, xdc_text
    from hw.bus.regmap import regmap_c_header, regmap_json
    from hw.gen.verilog import to_verilog

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=out.parent))
    try:
        top = AttentionTop(cfg)
        files = {
            f"{TOP}.v": to_verilog(top, TOP),
            f"{TOP}.f": f"{TOP}.v\n",
            "regmap.json": regmap_json(cfg),
            "attention_regs.h": regmap_c_header(cfg),
            "config.json": cfg.to_json() + "\n",
            "config.toml": cfg.to_toml(),
            f"{TOP}.sdc": sdc_text(cfg, top, clock_mhz),
            f"{TOP}.xdc": xdc_text(cfg, top, clock_mhz),
            f"{TOP}.core": fusesoc_core_text(cfg, f"{TOP}.v", f"{TOP}.sdc", f"{TOP}.xdc"),
        }
        for name, text in files.items():
            (tmp / name).write_text(text)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in files:
            (tmp / name).replace(out / name)
            written.append(out / name)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cmd_generate(args) -> int:
    if not 0 < args.clock_mhz <= 2000:
        print(f"error: --clock-mhz must be in (0, 2000], not {args.clock_mhz:g}",
              file=sys.stderr)
        return 2
    cfg = load_config(args.config)
    t0 = time.monotonic()
    written = _generate(cfg, Path(args.out), args.clock_mhz)
    dt = time.monotonic() - t0
    print(f"{cfg.name}: d_model {cfg.d_model}, {cfg.heads} heads x {cfg.head_dim}, "
          f"seq <= {cfg.max_seq_len}, kv <= {cfg.max_kv_len}, {cfg.engines} engine(s) of "
          f"{cfg.array_rows}x{cfg.array_cols} PEs ({dt:.1f} s)")
    for p in written:
        print(f"  wrote {p} ({p.stat().st_size} bytes)")
    return 0


def cmd_lint(args) -> int:
    """Run ``verilator --lint-only -Wall`` on the generated top; write the full report."""
    from sim.runner import verilator_bin_dir
    from hw.gen.verilog import LINT_WAIVERS

    cfg = load_config(args.config)
    out = Path(args.out)
    written = _generate(cfg, out)
    vfile = written[0]
    cmd = [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", "--no-timing",
           *[f"-Wno-{w}" for w in LINT_WAIVERS], "--top-module", TOP, str(vfile)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    report = out / "lint.txt"
    report.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
    warnings = [l for l in (proc.stdout + proc.stderr).splitlines() if l.startswith("%Warning")]
    errors = [l for l in (proc.stdout + proc.stderr).splitlines() if l.startswith("%Error")]
    print(f"lint: {len(warnings)} warning(s), {len(errors)} error(s) beyond the documented "
          f"waivers ({', '.join(LINT_WAIVERS)}); report: {report}")
    return 1 if warnings or errors or proc.returncode else 0


def cmd_config(args) -> int:
    cfg = load_config(args.config)
    print(cfg.to_json())
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hw", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("generate", help="write Verilog, file list, register map, config, "
                       "constraint templates and FuseSoC core")
    p.add_argument("--config", default="configs/default.toml")
    p.add_argument("--out", default="build/verilog")
    p.add_argument("--clock-mhz", type=float, default=DEFAULT_CLOCK_MHZ,
                   help="clock of the SDC/XDC constraint templates, MHz (default 100)")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("lint", help="verilator --lint-only -Wall on the generated top")
    p.add_argument("--config", default="configs/default.toml")
    p.add_argument("--out", default="build/lint")
    p.set_defaults(func=cmd_lint)
    p = sub.add_parser("config", help="validate a configuration and print it resolved")
    p.add_argument("--config", default="configs/default.toml")
    p.set_defaults(func=cmd_config)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
