"""Cycle benchmark of the whole layer on the simulated ``attention_top`` (Verilator).

``python -m hw bench --what layer --config configs/default.toml [--seq 16 32 64] [--scaling 1]``
builds the top, runs each sequence length through the real AXI interfaces (every output
checked against the golden model) and writes ``build/bench/bench.json``::

    {"config": ..., "engines": ..., "fmax_mhz": ... or null, "runs": [ {per length} ],
     "scaling": [ {engines, seq_len, cycles, speedup} ]}

Per run: ``seq_len``; ``cycles`` (CYCLES: START to done of one sequence on an idle engine);
``model_cycles`` (:func:`hw.perf.layer.layer_timing`'s prediction) and ``model_error``;
``ideal_cycles`` (layer MACs / PEs); ``utilization`` (ideal / cycles); ``interval_cycles``
(steady-state cycles per sequence when sequences follow each other through the double
buffers), ``model_interval`` and ``utilization_overlapped`` (ideal / interval);
``busy_cycles``; ``softmax_stall_cycles`` (STALL_CYCLES); ``sim_cycles_per_s``; and, when
``build/synth/ecp5/report.json`` exists for the same configuration, ``gops`` and
``gops_overlapped`` at its Fmax (2 operations per MAC). Also writes ``bench.png`` (utilization
and cycles against sequence length) and prints a table.

``simulation_speed``: the same layers run again through the Verilator C++ harness
(:func:`fast_path`, outputs and CYCLES checked): its simulated cycles per second against the
cocotb driver's in the same benchmark run, and the harness's build time (cold, and the cached
lookup).
"""

from __future__ import annotations

import json
from pathlib import Path

from hw.attention_top import AttentionTop
from hw.perf.layer import layer_timing
from sim.runner import BUILD_ROOT, run_cocotb, verilog_for

REPO_ROOT = Path(__file__).resolve().parents[2]


def simulate(cfg, lengths, simulator="verilator", overlap=3) -> list[dict]:
    # The tests' cache: a configuration the tests simulate is not generated or built again.
    top = verilog_for(AttentionTop, cfg, "attention_top")
    run_name = f"bench-{cfg.name}-e{cfg.engines}"
    out = BUILD_ROOT / "bench" / f"{run_name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # The model is built as for the tests (C++ -O0): with -O1, g++ spent over 12 minutes on
    # one generated file of the tiny top, and the runs are bound by cocotb's Python anyway.
    run_cocotb(sources=[top.verilog], toplevel="attention_top", test_module="sim.bench.layer_tb",
               simulator=simulator, run_name=run_name,
               extra_env={"ATTN_CONFIG": str(top.config),
                          "BENCH_SEQ": ",".join(map(str, lengths)), "BENCH_OUT": str(out),
                          "BENCH_OVERLAP": str(overlap)})
    return json.loads(out.read_text())["runs"]


def fast_path(cfg, lengths, cocotb_runs) -> dict:
    """The same layers (same seed, same lengths) through the Verilator C++ harness
    (:mod:`sim.host`): outputs checked against golden, CYCLES within a few cycles of the cocotb
    runs' (``fast_cycles`` in each run), and simulation speed against the cocotb driver's of
    this same benchmark run."""
    import time

    import numpy as np

    import golden as g
    from sim.fast import build_harness
    from sim.host import Sequence, run_layer
    from sim.layers import make_case

    top = verilog_for(AttentionTop, cfg, "attention_top")
    t0 = time.monotonic()
    binary = build_harness(top.verilog)
    build_call_s = time.monotonic() - t0
    cold_s = float((binary.parent / "build_seconds").read_text())
    layer, runs = make_case(cfg, 1, [dict(seq=n) for n in lengths])   # as sim/bench/layer_tb
    stats = {}
    results = run_layer(cfg, layer, [Sequence(r["x"]) for r in runs], stats=stats)
    for n, run, res, ref in zip(lengths, runs, results, cocotb_runs):
        want = g.attention_int(cfg, layer, run["x"])
        if not np.array_equal(res.out, want):
            raise AssertionError(f"fast path, seq {n}: wrong output")
        # The two drivers start the input stream a few cycles apart after START.
        ref["fast_cycles"] = res.cycles
        if abs(res.cycles - ref["cycles"]) > 8:
            raise AssertionError(f"fast path, seq {n}: CYCLES {res.cycles}, the cocotb run "
                                 f"read {ref['cycles']}")
    fast = stats["sim_cycles"] / stats["sim_seconds"]
    cocotb = (sum(r["cycles"] for r in cocotb_runs)
              / sum(r["wall_s"] for r in cocotb_runs))
    return {"harness_build_s": round(cold_s, 1),
            "harness_build_cached_s": round(build_call_s, 2),
            "fast_sim_cycles": stats["sim_cycles"],
            "fast_wall_s": round(stats["sim_seconds"], 3),
            "fast_cycles_per_s": round(fast), "cocotb_cycles_per_s": round(cocotb),
            "speedup": round(fast / cocotb, 1)}


def synth_fmax(cfg, report=REPO_ROOT / "build" / "synth" / "ecp5" / "report.json"):
    """Fmax (MHz) of ``make synth`` for this configuration, or None."""
    try:
        rep = json.loads(Path(report).read_text())
    except (OSError, ValueError):
        return None
    if rep.get("config") != cfg.name or not rep.get("fmax_mhz"):
        return None
    return float(rep["fmax_mhz"])


def annotate(cfg, runs, fmax):
    for r in runs:
        n = r["seq_len"]
        lt = layer_timing(cfg, n)
        r["model_cycles"] = lt.latency
        r["model_error"] = round((lt.latency - r["cycles"]) / r["cycles"], 5)
        r["model_softmax_stall_cycles"] = lt.softmax_stall
        r["ideal_cycles"] = round(lt.ideal)
        r["utilization"] = round(lt.ideal / r["cycles"], 4)
        if "interval_cycles" in r:
            r["model_interval"] = lt.interval
            r["utilization_overlapped"] = round(lt.ideal / r["interval_cycles"], 4)
        if fmax:
            ops = 2 * lt.macs
            r["gops"] = round(ops * fmax * 1e6 / r["cycles"] / 1e9, 3)
            if "interval_cycles" in r:
                r["gops_overlapped"] = round(ops * fmax * 1e6 / r["interval_cycles"] / 1e9, 3)
    return runs


def plot(cfg, runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = [r["seq_len"] for r in runs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(n, [100 * r["utilization"] for r in runs], "o-", label="single sequence")
    if all("utilization_overlapped" in r for r in runs):
        ax1.plot(n, [100 * r["utilization_overlapped"] for r in runs], "s-",
                 label="back to back (double buffers)")
    ax1.axhline(80, color="grey", ls="--", lw=0.8)
    ax1.set(xlabel="sequence length", ylabel="MAC utilization (%)", ylim=(0, 100),
            title=f"{cfg.name}: {cfg.engines} x {cfg.array_rows}x{cfg.array_cols} PEs")
    ax1.legend(loc="lower right")
    ax2.plot(n, [r["cycles"] for r in runs], "o-", label="simulated")
    ax2.plot(n, [r["model_cycles"] for r in runs], "x--", label="model")
    ax2.plot(n, [r["ideal_cycles"] for r in runs], ":", label="ideal (MACs / PEs)")
    ax2.set(xlabel="sequence length", ylabel="cycles", title="cycles per sequence")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report_layer(cfg, lengths, others, simulator: str, out: Path) -> None:
    """Simulate ``lengths`` (and the longest on each configuration of ``others``, for the
    engine scaling), print the table, write ``out`` (JSON) and its plot beside it."""
    fmax = synth_fmax(cfg)
    runs = annotate(cfg, simulate(cfg, lengths, simulator), fmax)
    speed = fast_path(cfg, lengths, runs)
    longest = max(lengths)
    scaling = [{"engines": cfg.engines, "seq_len": longest,
                "cycles": next(r["cycles"] for r in runs if r["seq_len"] == longest)}]
    for other in others:
        r = simulate(other, [longest], simulator, overlap=0)[0]
        scaling.append({"engines": other.engines, "seq_len": longest, "cycles": r["cycles"],
                        "model_cycles": layer_timing(other, longest).latency})
    base = max(s["cycles"] for s in scaling)
    for s in scaling:
        s["speedup"] = round(base / s["cycles"], 3)

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": cfg.name, "engines": cfg.engines,
                               "pes": cfg.total_pes, "fmax_mhz": fmax, "runs": runs,
                               "scaling": scaling, "simulation_speed": speed}, indent=2))
    plot(cfg, runs, out.with_suffix(".png"))

    print(f"{cfg.name}: {cfg.engines} engines x {cfg.array_rows}x{cfg.array_cols} PEs"
          + (f", Fmax {fmax:.1f} MHz (build/synth/ecp5)" if fmax else ", no synthesis report"))
    head = (f"{'seq':>5} {'cycles':>8} {'model':>8} {'err':>6} {'ideal':>8} {'util':>6} "
            f"{'interval':>8} {'util b2b':>8} {'stall':>6} {'sim c/s':>8}")
    if fmax:
        head += f" {'GOPS':>6} {'GOPS b2b':>8}"
    print(head)
    for r in runs:
        line = (f"{r['seq_len']:>5} {r['cycles']:>8} {r['model_cycles']:>8} "
                f"{r['model_error']:>6.2%} {r['ideal_cycles']:>8} {r['utilization']:>6.1%} "
                f"{r.get('interval_cycles', 0):>8} {r.get('utilization_overlapped', 0):>8.1%} "
                f"{r['softmax_stall_cycles']:>6} {r['sim_cycles_per_s'] or 0:>8}")
        if fmax:
            line += f" {r['gops']:>6.2f} {r.get('gops_overlapped', 0):>8.2f}"
        print(line)
    for s in scaling:
        print(f"{s['engines']} engine(s), seq {s['seq_len']}: {s['cycles']} cycles, "
              f"speed-up {s['speedup']:.2f}")
    print(f"simulation speed, same layers: Verilator harness {speed['fast_cycles_per_s']:,} "
          f"cycles/s, cocotb driver ({simulator}) {speed['cocotb_cycles_per_s']:,} cycles/s: "
          f"{speed['speedup']}x; harness build {speed['harness_build_s']} s "
          f"(cached: {speed['harness_build_cached_s']} s)")
    print(f"wrote {out} and {out.with_suffix('.png')}")



def report_layer_harness(cfg, lengths, out: Path) -> None:
    """The layer benchmark through the Verilator C++ harness alone (``--harness``: for long
    sequences, which the cocotb driver would take hours over): per length one sequence on an
    idle engine (CYCLES less the top's constant ``TOP_CYCLES`` against the model), the same
    in causal mode on the tiled path, and four sequences back to back (the interval between
    the last two outputs); every output checked against the golden model."""
    import numpy as np

    import golden as g
    from hw.perf.layer import TOP_CYCLES, top_latency
    from sim.host import Sequence, run_layer
    from sim.layers import make_case

    runs = []
    for n in lengths:
        modes = [False, True] if cfg.tiled and cfg.causal_mask else [False]
        layer, cases = make_case(cfg, n, [dict(seq=n, causal=c) for c in modes])
        seqs = [Sequence(r["x"], causal=r["causal"]) for r in cases]
        stats = {}
        results = run_layer(cfg, layer, seqs, stats=stats)
        b2b = run_layer(cfg, layer, [seqs[0]] * 4, overlapped=True)
        for s, res in zip(seqs, results + b2b):
            want = g.attention_int(cfg, layer, s.x, causal=s.causal)
            if not np.array_equal(res.out, want):
                raise AssertionError(f"seq {n} (causal {s.causal}): wrong output")
        lt = layer_timing(cfg, n)
        r = {"seq_len": n, "cycles": results[0].cycles - TOP_CYCLES,
             "model_cycles": top_latency(cfg, n) - TOP_CYCLES, "ideal_cycles": round(lt.ideal),
             "utilization": round(lt.ideal / (results[0].cycles - TOP_CYCLES), 4),
             "softmax_stall_cycles": results[0].stall_cycles,
             "model_softmax_stall_cycles": lt.softmax_stall,
             "interval_cycles": b2b[-1].end_cycle - b2b[-2].end_cycle,
             "model_interval": lt.interval,
             "sim_cycles_per_s": round(stats["sim_cycles"] / stats["sim_seconds"])}
        r["utilization_overlapped"] = round(lt.ideal / r["interval_cycles"], 4)
        if len(results) > 1:
            r["causal_cycles"] = results[1].cycles - TOP_CYCLES
            r["model_causal_cycles"] = top_latency(cfg, n, causal=True) - TOP_CYCLES
            r["causal_speedup"] = round(r["cycles"] / r["causal_cycles"], 3)
        runs.append(r)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": cfg.name, "engines": cfg.engines, "pes": cfg.total_pes,
                               "simulator": "verilator harness", "runs": runs}, indent=2))
    print(f"{cfg.name}: {cfg.engines} engines x {cfg.array_rows}x{cfg.array_cols} PEs, "
          f"Verilator harness (cycles: CYCLES - {TOP_CYCLES})")
    print(f"{'seq':>5} {'cycles':>8} {'model':>8} {'ideal':>8} {'util':>6} {'interval':>8} "
          f"{'util b2b':>8} {'stall':>6} {'causal':>8} {'model':>8} {'speed-up':>8}")
    for r in runs:
        print(f"{r['seq_len']:>5} {r['cycles']:>8} {r['model_cycles']:>8} "
              f"{r['ideal_cycles']:>8} {r['utilization']:>6.1%} {r['interval_cycles']:>8} "
              f"{r['utilization_overlapped']:>8.1%} {r['softmax_stall_cycles']:>6} "
              f"{r.get('causal_cycles', 0):>8} {r.get('model_causal_cycles', 0):>8} "
              f"{r.get('causal_speedup', 0):>8.2f}")
    print(f"wrote {out}")


def report_scoring(cfg, lengths, out: Path) -> None:
    """Dot-product against additive scores on one configuration with an additive scorer,
    through the Verilator C++ harness: per length one sequence of each on an idle engine
    (CYCLES less the top's constant ``TOP_CYCLES``) against the cycle model, every output
    checked against the golden model."""
    import numpy as np

    import golden as g
    from hw.perf.layer import TOP_CYCLES, top_latency
    from sim.host import Sequence, run_layer
    from sim.layers import make_case

    if not cfg.additive:
        raise ValueError(f"{cfg.name} builds no additive scorer ([scoring] additive_lanes)")
    runs = []
    for n in lengths:
        r = {"seq_len": n}
        for scoring in ("dot", "additive"):
            layer, cases = make_case(cfg, n, [dict(seq=n)], scoring=scoring)
            res = run_layer(cfg, layer, [Sequence(cases[0]["x"])])[0]
            if not np.array_equal(res.out, g.attention_int(cfg, layer, cases[0]["x"])):
                raise AssertionError(f"seq {n}, {scoring} scores: wrong output")
            additive = scoring == "additive"
            r[f"{scoring}_cycles"] = res.cycles - TOP_CYCLES
            r[f"{scoring}_model"] = top_latency(cfg, n, additive=additive) - TOP_CYCLES
            jobs = dict(layer_timing(cfg, n, additive=additive).jobs)
            r[f"{scoring}_scores_job"] = jobs["scores0"]
        r["ratio"] = round(r["additive_cycles"] / r["dot_cycles"], 3)
        runs.append(r)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": cfg.name, "additive_lanes": cfg.additive_lanes,
                               "simulator": "verilator harness", "runs": runs}, indent=2))
    print(f"{cfg.name}: {cfg.engines} engines x {cfg.array_rows}x{cfg.array_cols} PEs, additive "
          f"scorer of {cfg.additive_lanes} lanes, Verilator harness (CYCLES - {TOP_CYCLES})")
    print(f"{'seq':>5} {'dot':>8} {'model':>8} {'additive':>9} {'model':>8} {'ratio':>6} "
          f"{'scores job: dot':>16} {'additive':>9}")
    for r in runs:
        print(f"{r['seq_len']:>5} {r['dot_cycles']:>8} {r['dot_model']:>8} "
              f"{r['additive_cycles']:>9} {r['additive_model']:>8} {r['ratio']:>6.2f} "
              f"{r['dot_scores_job']:>16} {r['additive_scores_job']:>9}")
    print(f"wrote {out}")
