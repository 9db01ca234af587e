"""The project's command line: python -m hw COMMAND (installed as attention-accel).

Commands (``python -m hw COMMAND --help`` gives each one's options):

- ``generate``      Verilog and collateral of ``attention_top`` (``make verilog``)
- ``lint``          ``verilator --lint-only -Wall`` of every generated block (``make lint``)
- ``config``        validate a configuration and print it resolved, with derived widths
- ``regmap``        the register map as JSON, C header and Markdown
- ``vectors``       golden test vectors (``.npz``, ``$readmemh`` hex files, manifest)
- ``accuracy``      golden model against float64 over the shipped configs (``make accuracy``)
- ``bench``         cycle benchmarks, model against simulation (``make bench``)
- ``perf``          the cycle models alone (layer or softmax unit)
- ``run``           a float layer (``.npz``) on an input, quantized and run on the generated
  Verilog (Verilator harness or Icarus) or the golden model, against float64
- ``synth``         the whole top through Yosys and nextpnr (``make synth``; options of
  :mod:`hw.flow.synth`)
- ``synth-blocks``  ECP5 synthesis of the matrix engine and the softmax unit (``make synth-blocks``)
- ``sta``           static timing of a routed SDF (options of :mod:`hw.flow.sta`)
- ``formal``        SymbiYosys proofs of the bus interfaces (``make formal``; :mod:`sim.formal`)
- ``soak``          random layers, stalls, resets and bad settings against golden (``make soak``;
  :mod:`sim.soak`)

Every command takes ``--config FILE`` where it builds something for a configuration (default
``configs/default.toml`` of this repository). An invalid or unreadable configuration, a
missing file, an unknown option or an option value out of range prints one line
``error: ...`` naming the problem (and for a value its allowed range) on stderr and exits with
status 2, before anything is written. A failed check (lint warnings, a benchmark that
disagrees with its model) exits with 1.

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

Outputs are written to a temporary folder first and moved into place only when all of them
succeeded.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from golden.config import ConfigError, load_config

__all__ = ["main", "UsageError", "DEFAULT_CONFIG"]

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "default.toml"
TOP = "attention_top"
DEFAULT_CLOCK_MHZ = 100.0


class UsageError(Exception):
    """A command-line mistake: the message names the option, the value and what is allowed."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting, so every
    mistake goes through :func:`main`'s one error path (and ``main(argv)`` returns 2 to a
    caller instead of raising SystemExit)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def _need(name: str, value, lo=None, hi=None) -> None:
    """An option value out of its range is a usage error naming the range."""
    if value is None:
        return
    values = value if isinstance(value, list) else [value]
    for v in values:
        if v != v:      # NaN compares false with everything
            raise UsageError(f"{name} nan is not a number")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            allowed = (f"{lo}..{hi}" if lo is not None and hi is not None
                       else f">= {lo}" if lo is not None else f"<= {hi}")
            raise UsageError(f"{name} {v:g} is out of range: allowed {allowed}")


def _config(args):
    return load_config(args.config)


# ---------------------------------------------------------------------------- generate, lint

def _generate(cfg, out: Path, clock_mhz: float = DEFAULT_CLOCK_MHZ) -> list[Path]:
    from hw.attention_top import AttentionTop
    from hw.bus.regmap import regmap_c_header, regmap_json
    from hw.gen.collateral import fusesoc_core_text, sdc_text, xdc_text
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
    _need("--clock-mhz", args.clock_mhz, 0.001, 2000)
    cfg = _config(args)
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
    from hw.gen.lint import lint_blocks
    from hw.gen.verilog import LINT_WAIVERS

    cfg = _config(args)
    out = Path(args.out)
    top_v = _generate(cfg, out)[0] if "attention_top" in args.block else None
    bad = 0
    for res in lint_blocks(cfg, out, blocks=args.block, top_verilog=top_v):
        bad += bool(res.issues)
        print(f"lint {res.top}: {len(res.issues)} warning(s) or error(s); report: {res.report}")
        for line in res.issues[:20]:
            print("  " + line)
    print(f"waivers: {', '.join(LINT_WAIVERS)} (reasons in hw/gen/verilog.py)")
    return 1 if bad else 0


def cmd_config(args) -> int:
    cfg = _config(args)
    print(cfg.to_toml() if args.toml else cfg.to_json())
    return 0


def cmd_regmap(args) -> int:
    from hw.bus.regmap import regmap_c_header, regmap_json, regmap_markdown
    cfg = _config(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = {"regmap.json": regmap_json(cfg), "attention_regs.h": regmap_c_header(cfg),
             "register_map.md": regmap_markdown(cfg)}
    for name, text in files.items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


# ---------------------------------------------------------------------------- golden model

def cmd_vectors(args) -> int:
    from golden.vectors import export_vectors, random_run
    cfg = _config(args)
    _need("--seq-len", args.seq_len, 1, cfg.max_seq_len)
    _need("--key-len", args.key_len, 1, cfg.max_kv_len)
    if args.cross and not cfg.cross_attention:
        raise UsageError(f"--cross: {cfg.name} has cross_attention = false")
    layer, x, kv = random_run(cfg, args.seed, seq_len=args.seq_len, cross=args.cross)
    man = export_vectors(cfg, layer, x, kv, args.causal, args.key_len, out_dir=Path(args.out))
    print(f"wrote {len(man['tensors'])} tensors for {cfg.name} (seq_len {man['seq_len']}, "
          f"key_len {man['key_len']}, causal {man['causal']}) to {args.out}")
    return 0


def cmd_accuracy(args) -> int:
    from golden.accuracy import run
    _need("--rows", args.rows, 1)
    if args.rtl and args.no_model:
        raise UsageError("--rtl runs the real model's layer: it cannot go with --no-model")
    out = Path(args.out)
    from golden.real_model import ModelMissing
    try:
        rep = run(out, args.rows, args.seed, real_model=not args.no_model)
    except ModelMissing as e:
        raise UsageError(str(e)) from None
    if args.rtl:
        _accuracy_rtl(rep, out, args.rtl)
    ov = rep["softmax"]["overall"]
    print(f"softmax: {ov['rows']} rows, {ov['outputs']} outputs: max err "
          f"{ov['softmax_max_err_lsb']:.3f} LSB, correctly rounded "
          f"{ov['softmax_correctly_rounded_pct']:.3f} %, saturated max err "
          f"{ov['softmax_saturated_max_err_lsb']:.3f} LSB, row sum "
          f"{ov['row_sum_min']}..{ov['row_sum_max']}")
    for name, r in rep["layer"].items():
        print(f"layer {name}: cosine min {r['layer_cosine_min']:.4f}, max abs err "
              f"{r['layer_max_abs_err']:.4f}, rel err {r['layer_rel_err']:.4f}")
    for L, per_tile in rep["tiled"]["attention"].items():
        worst = min(r["within_1_lsb_pct"] for t, r in per_tile.items()
                    if t not in ("rows", "seconds"))
        print(f"tiled attention L {L}: {worst:.3f} % within 1 LSB (worst tile), whole-row "
              f"path {per_tile['rows']['within_1_lsb_pct']:.3f} %")
    for name, r in rep["tiled"]["layer"].items():
        print(f"tiled layer {name} (kv_tile {r['kv_tile']}): cosine min "
              f"{r['tiled']['layer_cosine_min']:.4f}, whole-row path "
              f"{r['rows']['layer_cosine_min']:.4f}")
    ae = rep["additive_and_encodings"]
    tu = ae["tanh_unit"]
    print(f"tanh unit ({tu['format']}), {tu['codes']} codes: max err {tu['max_err_lsb']:.3f} "
          f"LSB, correctly rounded {tu['correctly_rounded_pct']:.2f} %")
    for name, modes in ae["layer"].items():
        print(f"layer {name} by mode: " + ", ".join(
            f"{m} {r['cosine_min']:.4f}" for m, r in modes.items()))
    for n, per in rep.get("real_model", {}).get("layers", {}).items():
        print(f"all-MiniLM-L6-v2 layer {n}: " + ", ".join(
            f"{est}: worst {r['cosine_min']:.4f} mean {r['cosine_mean']:.4f}"
            for est, r in per.items()))
    for miss in rep["misses"]:
        print(f"MISSED: {miss}")
    print(f"wrote {out / 'accuracy.json'} and {out / 'softmax_error.png'}")
    return 1 if rep["misses"] else 0


def _accuracy_rtl(rep: dict, out: Path, sim: str) -> None:
    """The real model's layer 0 on the generated top (``sim.real_layer``): added to the report
    (``real_model.rtl``) and to its misses when a word differs from golden."""
    import json
    from sim.real_layer import real_layer_rtl
    r = real_layer_rtl(0, sim=sim)
    rep["real_model"]["rtl"] = r
    if r["mismatches"]:
        rep["misses"].append(f"all-MiniLM-L6-v2 layer 0 on {sim}: {r['mismatches']} of "
                             f"{r['values']} output values differ from golden")
    (out / "accuracy.json").write_text(json.dumps(rep, indent=2) + "\n")
    print(f"all-MiniLM-L6-v2 layer 0 on the generated top ({r['config']}, {sim}): "
          f"{r['sentences']} sentences, {r['values']} values, {r['mismatches']} differ from "
          f"golden; row cosine against float64 worst {r['cosine_min']:.4f} mean "
          f"{r['cosine_mean']:.4f} ({r['wall_s']:.0f} s)")


# ---------------------------------------------------------------------------- cycles

def _bench_matmul(cfg) -> int:
    from hw.perf.matmul import ideal_cycles, matmul_cycles
    from sim.bench.matmul import measure_cycles
    R, C = cfg.array_rows, cfg.array_cols
    mm = max(cfg.max_seq_len, cfg.max_kv_len)
    mn = mk = max(cfg.d_model, cfg.max_kv_len)
    shapes = [(R, C, 4 * max(R, C)), (mm, mn, mk), (mm, cfg.max_kv_len, cfg.head_dim),
              (mm, cfg.head_dim, cfg.max_kv_len), (R + 1, C + 1, 1), (mm - 1, mn - 1, 3)]
    print(f"matrix engine, {cfg.name}: {R}x{C} array, cycles first operand to last result")
    print(f"{'m':>5} {'n':>5} {'k':>5} {'model':>8} {'measured':>9} {'ideal':>8} {'ratio':>6}")
    bad = 0
    for m, n, k in shapes:
        model = matmul_cycles(cfg, m, n, k)
        measured = measure_cycles(cfg, m, n, k)
        ideal = ideal_cycles(cfg, m, n, k)
        bad += model != measured
        print(f"{m:5} {n:5} {k:5} {model:8} {measured:9} {ideal:8} {model / ideal:6.3f}"
              + ("" if model == measured else "  MISMATCH"), flush=True)
    return bad


def _bench_softmax(cfg, rows: int, lanes_list: list[int]) -> int:
    from hw.blocks.softmax import SoftmaxGeometry
    from hw.perf.softmax import softmax_cycles
    from sim.bench.softmax import measure_cycles
    print(f"softmax unit, {cfg.name}: {rows} rows back to back, cycles first input to last "
          f"output")
    print(f"{'lanes':>5} {'keys':>5} {'beats':>5} {'model':>7} {'measured':>8} "
          f"{'keys/cycle':>10} {'cycles/row':>10} {'row latency':>11}")
    bad = 0
    for lanes in lanes_list:
        if cfg.array_cols % lanes or lanes > cfg.max_kv_len:
            print(f"{lanes:>5} skipped: softmax_lanes must divide array_cols = "
                  f"{cfg.array_cols} and be at most max_kv_len = {cfg.max_kv_len}")
            continue
        c = cfg.replace(softmax_lanes=lanes)
        geo = SoftmaxGeometry(c)
        keys = {1, 2, 8, c.max_kv_len // 4 or 1, c.max_kv_len} & set(range(1, c.max_kv_len + 1))
        for n in sorted(keys):
            model = softmax_cycles(c, rows, n)
            got = measure_cycles(c, rows, n)
            beats = -(-n // lanes)
            bad += model != got
            print(f"{lanes:>5} {n:>5} {beats:>5} {model:>7} {got:>8} {rows * n / got:>10.3f} "
                  f"{model - softmax_cycles(c, rows - 1, n):>10} "
                  f"{2 * beats + geo.latency_fixed:>11}"
                  + ("" if model == got else "  MISMATCH"), flush=True)
    return bad


def _bench_out(args, kind: str) -> Path:
    """The report's path: ``--out``, or one file per kind of report under build/bench (so the
    scoring and harness reports do not overwrite make bench's bench.json)."""
    return Path(args.out) if args.out else Path("build/bench") / f"{kind}.json"


def _bench_layer(cfg, args) -> int:
    from sim.bench.layer import report_layer
    top = min(cfg.max_seq_len, cfg.max_kv_len)      # self-attention: queries are the keys
    _need("--seq", args.seq, 1, top)
    _need("--scaling", args.scaling, 1, cfg.heads)
    others = [cfg.replace(engines=e) for e in sorted(set(args.scaling) - {cfg.engines})]
    lengths = args.seq or sorted({16, 32, 64, top} & set(range(1, top + 1)))
    if args.what == "scoring":
        from sim.bench.layer import report_scoring
        if not cfg.additive:
            raise UsageError(f"--what scoring: {cfg.name} builds no additive scorer "
                             f"([scoring] additive_lanes = 0)")
        report_scoring(cfg, lengths, _bench_out(args, "scoring"))
        return 0
    if args.harness:
        from sim.bench.layer import report_layer_harness
        report_layer_harness(cfg, lengths, _bench_out(args, "harness"))
        return 0
    report_layer(cfg, lengths, others, args.simulator, _bench_out(args, "bench"))
    return 0


def cmd_bench(args) -> int:
    cfg = _config(args)
    _need("--rows", args.rows, 2)
    _need("--lanes", args.lanes, 1, 16)
    what = ("matmul", "softmax", "layer") if args.what == "all" else (args.what,)
    if "scoring" in what:
        return _bench_layer(cfg, args)
    if "layer" in what:        # check the layer's options before hours of simulation
        _need("--seq", args.seq, 1, min(cfg.max_seq_len, cfg.max_kv_len))
        _need("--scaling", args.scaling, 1, cfg.heads)
    bad = 0
    if "matmul" in what:
        bad += _bench_matmul(cfg)
    if "softmax" in what:
        bad += _bench_softmax(cfg, args.rows, args.lanes)
    if "layer" in what:
        bad += _bench_layer(cfg, args)
    return 1 if bad else 0


def cmd_perf(args) -> int:
    cfg = _config(args)
    if args.what == "layer":
        from hw.perf.layer import layer_timing
        _need("--seq", args.seq, 1, cfg.max_seq_len)
        lengths = args.seq or sorted({16, 32, 64, cfg.max_seq_len}
                                     & set(range(1, cfg.max_seq_len + 1)))
        print(f"{'seq':>5} {'load':>7} {'compute':>9} {'stall':>6} {'stream':>7} "
              f"{'latency':>9} {'interval':>9} {'ideal':>9} {'util':>6}"
              + (f" {'causal':>9} {'speed-up':>8}" if cfg.tiled else ""))
        if args.additive and not cfg.additive:
            raise UsageError(f"--additive: {cfg.name} builds no additive scorer ([scoring] "
                             f"additive_lanes = 0)")
        for n in lengths:
            lt = layer_timing(cfg, n, additive=args.additive)
            line = (f"{n:>5} {lt.load:>7} {lt.compute:>9} {lt.softmax_stall:>6} {lt.stream:>7} "
                    f"{lt.latency:>9} {lt.interval:>9} {lt.ideal:>9.0f} {lt.utilization:>6.1%}")
            if cfg.tiled:
                # The tiled path skips key tiles above the diagonal in causal mode.
                causal = layer_timing(cfg, n, causal=True).latency
                line += f" {causal:>9} {lt.latency / causal:>7.2f}x"
            print(line)
    elif args.what == "memory":
        from hw.perf.memory import ECP5_DEVICES, buffer_ram, max_length
        bufs = buffer_ram(cfg)
        print(f"block RAM (DP16KD) per buffer, {cfg.name} (estimate; make synth reports the "
              f"netlist's count)")
        print(f"{'buffer':>7} {'copies':>6} {'words':>6} {'bits':>5} {'DP16KD':>7}")
        for b in bufs:
            print(f"{b.name:>7} {b.copies:>6} {b.depth:>6} {b.width:>5} {b.blocks:>7}"
                  + ("  (LUT RAM)" if b.name in ("b", "r") and cfg.bias_in_lut_ram else ""))
        total = sum(b.blocks for b in bufs)
        fits = ", ".join(f"{d} {'fits' if total <= n else 'no'} ({n})"
                         for d, (n, _) in ECP5_DEVICES.items())
        print(f"{'total':>7} {'':>6} {'':>6} {'':>5} {total:>7}   {fits}")
        longest = ", ".join(f"{d} {max_length(cfg, n) or '-'}"
                            for d, (n, _) in ECP5_DEVICES.items())
        print(f"longest max_seq_len (= max_kv_len) whose buffers fit: {longest}")
    else:
        from hw.perf.softmax import softmax_cycles
        _need("--rows", args.rows, 1)
        for n in sorted({1, 2, 8, cfg.max_kv_len // 2 or 1, cfg.max_kv_len}):
            c = softmax_cycles(cfg, args.rows, n)
            print(f"N = {n:5d}: {c:7d} cycles, {args.rows * n / c:.3f} scores/cycle")
    return 0


# ---------------------------------------------------------------------------- FPGA flow

def cmd_synth_blocks(args) -> int:
    cfg = _config(args)
    sizes = []
    for size in args.sizes or [f"{cfg.array_rows}x{cfg.array_cols}"]:
        try:
            rows, cols = (int(x) for x in size.split("x"))
        except ValueError:
            raise UsageError(f"--sizes {size!r}: expected ROWSxCOLS, e.g. 6x8") from None
        _need("--sizes rows", rows, 2, 16)
        _need("--sizes columns", cols, 2, 16)
        sizes.append((rows, cols))
    what = ("matmul", "softmax") if args.what == "all" else (args.what,)
    if "matmul" in what:
        from hw.flow.synth_matmul import report_matmul
        report_matmul(cfg, sizes, route=not args.no_pnr, seed=args.seed,
                      generic_dsp=args.generic_dsp)
    if "softmax" in what:
        from hw.flow.synth_softmax import report_softmax
        report_softmax(cfg, route=not args.no_pnr, seed=args.seed, generic_dsp=args.generic_dsp)
    if "tanh" in what:
        from hw.blocks.tanh import TanhUnit
        from hw.flow.synth_matmul import synth_ecp5
        _need("--lanes", args.lanes, 1, 64)
        cells = synth_ecp5(TanhUnit(args.lanes), f"tanh_{args.lanes}")
        print(f"tanh unit, {args.lanes} lane(s): synth_ecp5: "
              + ", ".join(f"{c} {n}" for c, n in sorted(cells.items()))
              + " (synthesis only: a pipeline of registered stages)")
    if "additive" in what:
        from hw.flow.synth_softmax import AdditiveSynthShim, report_unit
        R, C = cfg.array_rows, cfg.array_cols
        _need("--lanes", args.lanes, 1, R * C)
        if cfg.head_dim % 4:
            raise UsageError(f"additive: head_dim = {cfg.head_dim} is not a multiple of 4")
        print(f"additive scorer, {R}x{C} tile, {args.lanes} lane(s), in a registered shim")
        report_unit(AdditiveSynthShim(cfg, args.lanes), f"additive_{cfg.name}_{args.lanes}",
                    route=not args.no_pnr, seed=args.seed)
    if "posenc" in what:
        from hw.flow.synth_softmax import PosencSynthShim, report_unit
        if cfg.d_model % 8:
            raise UsageError(f"posenc: d_model = {cfg.d_model} is not a multiple of 8")
        print(f"positional encoder, d {cfg.d_model}, {cfg.positions} positions, "
              f"in a registered shim")
        report_unit(PosencSynthShim(cfg), f"posenc_{cfg.name}", route=not args.no_pnr,
                    seed=args.seed)
    tiled = [w for w in what if w in ("tile-softmax", "tile-accumulator")]
    if tiled:
        from golden.online_softmax import tiled_format
        from hw.flow.synth_softmax import report_softmax
        _need("--kv-tile", args.kv_tile, 1, cfg.max_kv_len)
        _need("--rows", args.rows, 1, cfg.max_seq_len)
        try:
            tiled_format(cfg, args.kv_tile)
        except ValueError as exc:
            raise UsageError(f"--kv-tile: {exc}") from None
        if "tile-accumulator" in tiled and cfg.head_dim % cfg.array_cols:
            raise UsageError(f"tile-accumulator: head_dim = {cfg.head_dim} is not a multiple "
                             f"of array_cols = {cfg.array_cols}")
        for w in tiled:
            report_softmax(cfg, route=not args.no_pnr, seed=args.seed,
                           generic_dsp=args.generic_dsp, kv_tile=args.kv_tile, rows=args.rows,
                           block="softmax" if w == "tile-softmax" else "accumulator")
    return 0


def _passthrough(module: str):
    """A command whose options belong to ``module.main(argv)`` (its own parser and errors)."""
    def run(args) -> int:
        import importlib
        try:
            return importlib.import_module(module).main(args.rest)
        except SystemExit as e:          # its argparse: usage error (2) or --help (0)
            return e.code if isinstance(e.code, int) else 2
    return run


# ---------------------------------------------------------------------------- parser

# ---------------------------------------------------------------------------- run

def cmd_formal(args) -> int:
    from sim.formal import FormalError, checks, run_checks
    cfg = _config(args)
    selected = checks(quick=args.quick)
    if args.only:
        names = {c.name for c in selected}
        unknown = sorted(set(args.only) - names)
        if unknown:
            raise UsageError(f"--only {' '.join(unknown)}: no such check; allowed: "
                             f"{', '.join(sorted(names))}")
        selected = [c for c in selected if c.name in args.only]
    try:
        summary = run_checks(cfg, Path(args.out), selected)
    except FormalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    bad = [c["name"] for c in summary["checks"] if not c["ok"]]
    total = sum(c["seconds"] for c in summary["checks"])
    print(f"formal: {len(summary['checks']) - len(bad)} of {len(summary['checks'])} checks as "
          f"expected in {total:.0f} s; {Path(args.out) / 'formal.json'}")
    if bad:
        print(f"error: not as expected: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def cmd_soak(args) -> int:
    from sim.soak import SoakError, clean, run_soak
    cfg = _config(args)
    _need("--values", args.values, 1)
    _need("--replay", args.replay, 0)
    bad = []
    for simulator in args.sim:
        try:
            if simulator in ("fast", "fast-icarus"):
                from sim.soak_fast import run_fast_soak
                s = run_fast_soak(cfg, args.values, args.seed, Path(args.out),
                                  replay=args.replay,
                                  simulator="icarus" if simulator == "fast-icarus"
                                  else "verilator")
            else:
                s = run_soak(cfg, args.config, simulator, args.values, args.seed,
                             Path(args.out), replay=args.replay)
        except SoakError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        violations = "no protocol monitor" if s["violations"] is None else \
            f"{s['violations']} protocol violations"
        print(f"soak {cfg.name} {simulator} (seed {args.seed}): {s['events']} events, "
              f"{s['runs']} runs, {s['values']:,} values checked, {s['mismatches']} "
              f"mismatches, {violations}, {s['hangs']} hangs, "
              f"{s['failed_events']} failed events, {s['sim_cycles']:,} cycles in "
              f"{s['wall_s_total']:.0f} s")
        if not clean(s):
            bad.append(simulator)
    if bad:
        print(f"error: the soak found faults in {', '.join(bad)}: see {args.out}",
              file=sys.stderr)
        return 1
    return 0


def cmd_run(args) -> int:
    from sim.float_run import LayerFileError, run_float
    from sim.host import RunError
    from sim.fast import HarnessError

    _need("--idle", args.idle, 0, 0.99)
    _need("--backpressure", args.backpressure, 0, 0.99)
    _need("--percentile", args.percentile, 50, 100)
    _need("--layer-index", args.layer_index, 0)
    _need("--pe-offset", args.pe_offset, 0, 65535)
    _need("--grid-width", args.grid_width, 1, 65535)
    cfg = _config(args)
    out = Path(args.out)
    if out.suffix != ".npz":
        raise UsageError(f"--out {out}: the output file must end in .npz")
    if args.sim != "golden":
        print(f"run: {args.sim} on the generated Verilog of {cfg.name} (the first run of a "
              f"design builds its model)", file=sys.stderr)
    t0 = time.monotonic()
    try:
        rep = run_float(cfg, Path(args.layer), Path(args.input), causal=args.causal,
                        sim=args.sim, seed=args.seed, idle=args.idle,
                        backpressure=args.backpressure,
                        calib_path=Path(args.calib) if args.calib else None,
                        layer_index=args.layer_index, percentile=args.percentile,
                        layer_prefix=args.layer_prefix, pos_enc=args.pos_enc,
                        scoring=args.scoring, weight_scales=args.weight_scales,
                        pe_offset=args.pe_offset, grid_width=args.grid_width)
    except LayerFileError as e:
        raise UsageError(str(e)) from None
    except (RunError, HarnessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np_save(tmp, y=rep.y, y_int=rep.y_int, y_ref=rep.y_ref, cycles=rep.cycles,
            busy_cycles=rep.busy_cycles, stall_cycles=rep.stall_cycles, row_cosine=rep.cosines)
    tmp.replace(out)
    print(f"{len(rep.y)} rows on {args.sim}: {rep.cycles} cycles; row cosine against float64: "
          f"worst {rep.cosines.min():.5f}, mean {rep.cosines.mean():.5f} "
          f"({time.monotonic() - t0:.1f} s) -> {out}")
    return 0


def np_save(path, **arrays):
    import numpy as np
    np.savez(path, **arrays)


# The subcommands: name, function, help, whether it takes --config, and its other options.
def _commands():
    return [
        ("generate", cmd_generate, "write Verilog, file list, register map, config, "
         "constraint templates and FuseSoC core", True, _args_generate),
        ("lint", cmd_lint, "verilator --lint-only -Wall of every generated block "
         "(attention_top, matmul_engine, softmax_unit)", True, _args_lint),
        ("config", cmd_config, "validate a configuration and print it resolved", True,
         _args_config),
        ("regmap", cmd_regmap, "write the register map: regmap.json, attention_regs.h, "
         "register_map.md", True, _args_regmap),
        ("vectors", cmd_vectors, "export golden test vectors (.npz, .hex, manifest)", True,
         _args_vectors),
        ("accuracy", cmd_accuracy, "golden integer model against float64 on every shipped "
         "configuration", False, _args_accuracy),
        ("bench", cmd_bench, "cycle benchmarks against their models: matrix engine, softmax "
         "unit (Amaranth simulator), whole layer (Verilator)", True, _args_bench),
        ("perf", cmd_perf, "cycle models without simulation", True, _args_perf),
        ("run", cmd_run, "quantize a float layer on its input, run it on the hardware (or the "
         "golden model) and compare with float64", True, _args_run),
        ("synth-blocks", cmd_synth_blocks, "ECP5 synthesis (and nextpnr) of the matrix engine, "
         "the softmax unit and the other blocks on their own", True, _args_synth_blocks),
        ("formal", cmd_formal, "SymbiYosys: AXI4-Lite register block (BMC, k-induction, "
         "covers, response bound), m_axis of the whole top (k-induction), and a mutant per "
         "group that must fail", True, _args_formal),
        ("soak", cmd_soak, "random layers, modes, lengths, stalls, resets and bad settings on "
         "the generated top, every output value against golden", True, _args_soak),
    ]


def _args_generate(p) -> None:
    p.add_argument("--out", default="build/verilog")
    p.add_argument("--clock-mhz", type=float, default=DEFAULT_CLOCK_MHZ,
                   help="clock of the SDC/XDC constraint templates, MHz (default 100)")


def _args_lint(p) -> None:
    p.add_argument("--out", default="build/lint")
    p.add_argument("--block", nargs="+", choices=("attention_top", "matmul_engine",
                                                  "softmax_unit"),
                   default=["attention_top", "matmul_engine", "softmax_unit"],
                   help="blocks to lint (default all)")


def _args_config(p) -> None:
    p.add_argument("--toml", action="store_true", help="print TOML instead of JSON")


def _args_regmap(p) -> None:
    p.add_argument("--out", default="build/regmap")


def _args_vectors(p) -> None:
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/vectors")
    p.add_argument("--seq-len", type=int, default=None, help="query rows (default max_seq_len)")
    p.add_argument("--causal", action="store_true", help="apply the causal mask")
    p.add_argument("--key-len", type=int, default=None, help="valid keys (key padding)")
    p.add_argument("--cross", action="store_true",
                   help="cross-attention with max_kv_len random key/value rows")


def _args_accuracy(p) -> None:
    p.add_argument("--out", default="build/accuracy")
    p.add_argument("--rows", type=int, default=400,
                   help="rows per (config, multiplier, row kind) case (default 400)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-model", action="store_true",
                   help="skip the real model (all-MiniLM-L6-v2; needs requirements-model.txt)")
    p.add_argument("--rtl", default=None, choices=("verilator", "fast-icarus"),
                   help="also run the real model's layer 0 (int8, per-channel weight scales) "
                   "on the generated top of its size through this harness, every output word "
                   "against golden (Verilator: about 15 minutes with the builds)")


def _args_bench(p) -> None:
    p.add_argument("--what", default="all",
                   choices=("matmul", "softmax", "layer", "scoring", "all"),
                   help="scoring: dot-product against additive layers through the Verilator "
                   "harness (a configuration with [scoring] additive_lanes)")
    p.add_argument("--rows", type=int, default=16, help="softmax: rows back to back (16)")
    p.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 4],
                   help="softmax: lane counts (1 2 4)")
    p.add_argument("--seq", type=int, nargs="+", default=None,
                   help="layer: sequence lengths (default 16 32 64 and the longest)")
    p.add_argument("--scaling", type=int, nargs="*", default=[1],
                   help="layer: other engine counts to compare at the longest length (1)")
    p.add_argument("--simulator", default="verilator", choices=("verilator", "icarus"))
    p.add_argument("--harness", action="store_true",
                   help="layer: through the Verilator C++ harness only (long sequences: "
                        "causal runs too on the tiled path; no engine scaling)")
    p.add_argument("--out", default=None,
                   help="layer: report JSON (build/bench/bench.json; with --harness "
                        "build/bench/harness.json, with --what scoring build/bench/scoring.json)")


def _args_perf(p) -> None:
    p.add_argument("--what", default="layer", choices=("layer", "softmax", "memory"),
                   help="layer: cycle model per length; softmax: the unit's; memory: block "
                        "RAM per buffer")
    p.add_argument("--seq", type=int, nargs="+", default=None, help="layer: sequence lengths")
    p.add_argument("--additive", action="store_true",
                   help="layer: runs with additive scores (CTRL.ADDITIVE)")
    p.add_argument("--rows", type=int, default=64, help="softmax: rows back to back (64)")


def _args_run(p) -> None:
    p.add_argument("--layer", required=True, help=".npz or .safetensors with the float "
                   "weights: plain Wq..Wo, bq..bo (torch (out, in) layout), "
                   "torch.nn.MultiheadAttention's in_proj_weight/out_proj.*, or Hugging Face "
                   "BERT's ...attention.self.query.weight ...")
    p.add_argument("--layer-index", type=int, default=None,
                   help="which layer of a checkpoint holding several (the N of layer.N.)")
    p.add_argument("--layer-prefix", default=None,
                   help="which layer by its whole prefix (e.g. decoder.layers.0.self_attn.), "
                   "where the index is ambiguous")
    p.add_argument("--input", required=True, help=".npz with x (L x d_model), optionally kv "
                   "(cross-attention) and key_padding_mask (True = padding)")
    p.add_argument("--causal", action="store_true", help="causal mask")
    p.add_argument("--pos-enc", default="off", choices=("off", "1d", "2d"),
                   help="positional encoding added to x on chip (CTRL.PE_MODE; a "
                   "configuration with [posenc] pos_enc); the calibration and the float "
                   "reference add it too")
    p.add_argument("--scoring", default="dot", choices=("dot", "additive"),
                   help="additive: Bahdanau scores w_h . tanh(q + k) (CTRL.ADDITIVE; a "
                   "configuration with [scoring] additive_lanes; the layer file holds wa "
                   "(heads, head_dim))")
    p.add_argument("--weight-scales", default="tensor", choices=("tensor", "channel"),
                   help="channel: one requantization multiplier and shift per output channel "
                   "of each projection (CTRL.CHANNEL_SCALES; a configuration with [features] "
                   "channel_scales)")
    p.add_argument("--pe-offset", type=int, default=0,
                   help="PE_OFFSET: the first row's position (2-D: its grid row)")
    p.add_argument("--grid-width", type=int, default=None,
                   help="PE_GRID_W: the 2-D grid's width (must divide the rows)")
    p.add_argument("--sim", default="verilator",
                   choices=("verilator", "fast-icarus", "icarus", "golden"))
    p.add_argument("--seed", type=int, default=0, help="seed of the stall pattern")
    p.add_argument("--idle", type=float, default=0.0,
                   help="probability of an idle input-stream cycle (0)")
    p.add_argument("--backpressure", type=float, default=0.0,
                   help="probability of output-stream backpressure in a cycle (0)")
    p.add_argument("--calib", default=None, help=".npz with calibration sequences x0, x1, "
                   "... of any lengths (and kv0, kv1, ...), or x (and kv); default: calibrate "
                   "on the input")
    p.add_argument("--percentile", type=float, default=None,
                   help="activation ranges from this percentile of the calibration "
                   "magnitudes (50..100) instead of their maximum")
    p.add_argument("--out", required=True, help="result .npz: y, y_int, y_ref, cycles, ...")


def _args_synth_blocks(p) -> None:
    p.add_argument("--what", default="all",
                   choices=("matmul", "softmax", "tile-softmax", "tile-accumulator", "tanh",
                            "additive", "posenc", "all"),
                   help="all: matmul and softmax; tile-softmax, tile-accumulator: the "
                   "key/value-tiled path's softmax unit and output accumulator; tanh: the "
                   "additive scoring's tanh unit (synthesis only); additive: the additive scorer "
                   "of the configuration's array; posenc: the positional-encoding adder")
    p.add_argument("--lanes", type=int, default=1, help="tanh, additive: lanes (1)")
    p.add_argument("--kv-tile", type=int, default=64,
                   help="tile-*: keys per tile (64)")
    p.add_argument("--rows", type=int, default=64,
                   help="tile-*: query rows per tile (64)")
    p.add_argument("--sizes", nargs="+", default=None,
                   help="matmul: array sizes RxC (default: the configuration's)")
    p.add_argument("--no-pnr", action="store_true", help="synthesis only")
    p.add_argument("--seed", type=int, default=1, help="nextpnr placer seed")
    p.add_argument("--generic-dsp", action="store_true",
                   help="elaborate without the ECP5 marker: behavioural multipliers")


def _args_formal(p) -> None:
    p.add_argument("--quick", action="store_true",
                   help="the short set that make test runs")
    p.add_argument("--only", nargs="+", default=None, metavar="CHECK",
                   help="run only these checks (names as in formal.json)")
    p.add_argument("--out", default="build/formal")


def _args_soak(p) -> None:
    p.add_argument("--sim", nargs="+", default=["icarus", "verilator"],
                   choices=("icarus", "verilator", "fast", "fast-icarus"),
                   help="icarus, verilator: cocotb with the AXI monitor; fast, fast-icarus: "
                   "the same events on the Verilator C++ harness or the Icarus Verilog "
                   "harness, no monitor (large configurations)")
    p.add_argument("--values", type=int, default=100_000,
                   help="output values to compare per simulator (100000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--replay", type=int, default=None, metavar="EVENT",
                   help="run only this event (its index in events.jsonl)")
    p.add_argument("--out", default="build/soak")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m hw", description=__doc__.split("\n\n")[0],
                 formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="python -m hw COMMAND --help shows a command's options.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND",
                            parser_class=_Parser)
    for name, func, help, config, add_args in _commands():
        p = sub.add_parser(name, help=help, description=help)
        if config:
            p.add_argument("--config", default=DEFAULT_CONFIG, type=Path,
                           help="configuration TOML (default configs/default.toml)")
        p.set_defaults(func=func)
        add_args(p)
    for name, module, help in (
            ("synth", "hw.flow.synth", "the whole top through Yosys and nextpnr "
             "(python -m hw synth --help lists its options)"),
            ("sta", "hw.flow.sta", "paths of a routed SDF that miss the clock "
             "(python -m hw sta --help lists its options)")):
        p = sub.add_parser(name, help=help, add_help=False, prefix_chars="\0")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_passthrough(module))
    return ap




def main(argv=None) -> int:
    try:
        args = _parser().parse_args(argv)
        return args.func(args)
    except (ConfigError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:        # a missing input or an unwritable output
        where = f" {e.filename}" if e.filename else ""
        print(f"error: {e.strerror or e}:{where}", file=sys.stderr)
        return 2
