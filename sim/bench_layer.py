"""Cycle benchmark of the whole layer on the simulated ``attention_top`` (Verilator).

``python -m sim.bench_layer --config configs/default.toml --engines 1 2 --seq 16 32 64 128``
builds the top once per engine count, runs one sequence per length through the real AXI
interfaces, checks each output against the golden model, and prints and writes
(``--out``, default build/bench/layer.json) per run: cycles (the CYCLES register, start to
done), array-busy cycles (BUSY_CYCLES), ideal cycles (layer MACs / PEs), utilization
(ideal / cycles), and the speed-up of more engines over one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from golden.config import ConfigError, load_config
from hw.attention_top import AttentionTop
from hw.verilog import write_verilog
from sim.runner import BUILD_ROOT, run_cocotb


def bench(cfg, lengths, simulator="verilator") -> dict:
    folder = BUILD_ROOT / "verilog" / f"bench-{cfg.name}-e{cfg.engines}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(cfg.to_toml())
    verilog = write_verilog(AttentionTop(cfg), "attention_top", folder / "attention_top.v")
    out = folder / "result.json"
    # The model is built as for the tests (C++ -O0): with -O1, g++ spent over 12 minutes on
    # one generated file of the tiny top, and the runs are bound by cocotb's Python anyway.
    run_cocotb(sources=[verilog], toplevel="attention_top", test_module="sim.bench_layer_tb",
               simulator=simulator, run_name=f"bench-{cfg.name}-e{cfg.engines}",
               extra_env={"ATTN_CONFIG": str(folder / "config.toml"),
                          "BENCH_SEQ": ",".join(map(str, lengths)), "BENCH_OUT": str(out)})
    data = json.loads(out.read_text())
    for r in data["runs"]:
        ideal = cfg.layer_macs(r["seq_len"], r["seq_len"]) / cfg.total_pes
        r["ideal_cycles"] = round(ideal)
        r["utilization"] = round(ideal / r["cycles"], 4)
    data["engines"] = cfg.engines
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.bench_layer", description=__doc__)
    ap.add_argument("--config", default="configs/default.toml")
    ap.add_argument("--engines", type=int, nargs="*", help="engine counts (default: config's)")
    ap.add_argument("--seq", type=int, nargs="+", default=None)
    ap.add_argument("--simulator", default="verilator", choices=("verilator", "icarus"))
    ap.add_argument("--out", default="build/bench/layer.json")
    args = ap.parse_args(argv)
    try:
        base = load_config(args.config)
        engines = sorted(set(args.engines or [base.engines]))
        cfgs = [base.replace(engines=e) for e in engines]
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lengths = args.seq or sorted({16, 32, 64, base.max_seq_len} & set(range(1, base.max_seq_len + 1)))
    bad = [n for n in lengths if not 1 <= n <= base.max_seq_len]
    if bad:
        print(f"error: --seq {bad} out of range: allowed 1..{base.max_seq_len}", file=sys.stderr)
        return 2
    results = [bench(cfg, lengths, args.simulator) for cfg in cfgs]
    one = {r["seq_len"]: r["cycles"] for r in results[0]["runs"]}
    print(f"{base.name}: {base.array_rows}x{base.array_cols} PEs per engine")
    print(f"{'engines':>7} {'seq':>5} {'cycles':>9} {'busy':>9} {'ideal':>9} {'util':>6} {'speed-up':>8}")
    for res in results:
        for r in res["runs"]:
            r["speedup_vs_first"] = round(one[r["seq_len"]] / r["cycles"], 3)
            print(f"{res['engines']:>7} {r['seq_len']:>5} {r['cycles']:>9} {r['busy_cycles']:>9} "
                  f"{r['ideal_cycles']:>9} {r['utilization']:>6.1%} {r['speedup_vs_first']:>8.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": base.name, "results": results}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
