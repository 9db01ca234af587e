"""Run attention layers on the generated hardware from NumPy: one call for every simulator.

::

    from sim.host import Sequence, run_layer
    results = run_layer(cfg, layer, [Sequence(x), Sequence(x2, causal=True)],
                        sim="verilator", idle=0.3, backpressure=0.4, seed=1)
    results[0].out, results[0].cycles, results[0].busy_cycles, results[0].stall_cycles

``sim`` chooses the engine:

- ``"verilator"``: the generated ``attention_top`` in the fast C++ harness (:mod:`sim.fast`):
  every register, weight and word goes through AXI4-Lite and the AXI4-Streams, with random
  idle cycles on ``s_axis`` and backpressure on ``m_axis`` from ``seed``. Data cross in bulk
  (a script and a word file in, a record file and the output words back).
- ``"fast-icarus"``: the same harness as a Verilog testbench in Icarus
  (``sim/harness/attention_top_tb.v``): the same script, stall pattern and records, no Python
  per cycle.
- ``"icarus"``: the same Verilog in Icarus through cocotb (:mod:`sim.host_tb`, which runs
  :class:`sim.driver.AttentionDriver`); the job and the results cross as ``.npz`` files.
- ``"golden"``: :func:`golden.attention_int` for the outputs and the cycle model
  (:func:`hw.perf.layer.top_latency`) for CYCLES and
  STALL_CYCLES of a run without stalls; the model has no BUSY_CYCLES, so it is ``None``.

With ``overlapped=True`` each sequence is started as soon as STATUS.START_READY allows, while
the previous ones compute and stream out (the double buffers), and ``end_cycle`` gives the
cycle of each sequence's last output word.

Errors: a run the hardware refuses or aborts (STATUS.ERROR) raises :class:`RunError` naming
the ERROR_CAUSE bits; a design that stops answering raises :class:`sim.fast.HarnessTimeout`
(the harnesses) after ``timeout`` cycles in one wait, never hangs.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import golden as g
from hw.bus.regmap import (ERROR_CAUSES, PE_MODE_VALUES, build_regmap, pack_window,
                           param_values)

__all__ = ["Sequence", "HostResult", "RunError", "run_layer", "ctrl_word", "SIMS"]

SIMS = ("verilator", "fast-icarus", "icarus", "golden")


@dataclass(frozen=True)
class Sequence:
    """One run: int8 ``x`` (seq_len, d_model); ``kv`` (kv_rows, d_model) for cross-attention;
    ``causal``; ``key_len``: keys kept (key padding: keys ``key_len..`` are masked), ``None``
    for all; ``pos_enc`` the positional encoding added to ``x`` on chip (``"off"``, ``"1d"``,
    ``"2d"``: CTRL.PE_MODE) with ``pe_offset`` (PE_OFFSET: the first position, in 2-D the
    first grid row) and ``grid_width`` (PE_GRID_W, 2-D)."""

    x: np.ndarray
    kv: np.ndarray | None = None
    causal: bool = False
    key_len: int | None = None
    pos_enc: str = "off"
    pe_offset: int = 0
    grid_width: int | None = None

    def golden(self, cfg: g.AttentionConfig, layer) -> np.ndarray:
        """The golden model's output of this run."""
        return g.attention_int(cfg, layer, self.x, self.kv, causal=self.causal,
                               key_len=self.key_len, pos_enc=self.pos_enc,
                               pe_offset=self.pe_offset, grid_width=self.grid_width)


@dataclass
class HostResult:
    out: np.ndarray             # (seq_len, d_model) int64 of int8 values
    cycles: int                 # CYCLES: START to the last output word
    busy_cycles: int | None     # BUSY_CYCLES: cycles the arrays took operands
    stall_cycles: int           # STALL_CYCLES: cycles P.V waited for probabilities
    status: int                 # STATUS after the run (None from the golden model)
    end_cycle: int | None = None  # simulation cycle of the last output word


class RunError(RuntimeError):
    """The hardware raised STATUS.ERROR for a run that was expected to succeed."""

    def __init__(self, sequence: int, status: int, cause: int):
        self.sequence, self.status, self.cause = sequence, status, cause
        names = [n for i, (n, _) in enumerate(ERROR_CAUSES) if cause >> i & 1]
        super().__init__(f"sequence {sequence}: STATUS.ERROR (STATUS {status:#x}), "
                         f"ERROR_CAUSE {', '.join(names) or '0'}")


def _check(cfg: g.AttentionConfig, layer, sequences) -> list[Sequence]:
    layer.check(cfg)
    if layer.scoring == "additive" and not cfg.additive:
        raise ValueError(f"the layer is quantized for additive scoring, but {cfg.name} builds "
                         f"no additive scorer (additive_lanes = 0)")
    if layer.per_channel and not cfg.channel_scales:
        raise ValueError(f"the layer has per-channel weight scales, but {cfg.name} builds no "
                         f"scale table ([features] channel_scales = false)")
    seqs = []
    for i, s in enumerate(sequences):
        if not isinstance(s, Sequence):
            raise TypeError(f"sequence {i} is a {type(s).__name__}, not a sim.host.Sequence")
        try:
            x, kv, _ = g.attention.check_run_args(cfg, s.x, s.kv, s.causal, s.key_len)
            if s.pos_enc not in PE_MODE_VALUES:
                raise ValueError(f"pos_enc = {s.pos_enc!r} is not one of "
                                 f"{', '.join(PE_MODE_VALUES)}")
            if s.pos_enc != "off" and s.pos_enc not in cfg.pos_enc:
                raise ValueError(f"pos_enc = {s.pos_enc!r}: the configuration builds "
                                 f"{', '.join(cfg.pos_enc) or 'no encoder'}")
        except ValueError as exc:
            raise ValueError(f"sequence {i}: {exc}") from None
        seqs.append(Sequence(x, None if s.kv is None else kv, bool(s.causal), s.key_len,
                             s.pos_enc, int(s.pe_offset), s.grid_width))
    if not seqs:
        raise ValueError("no sequences to run")
    return seqs


def run_layer(cfg: g.AttentionConfig, layer: g.QuantizedLayer, sequences, *,
              sim: str = "verilator", overlapped: bool = False, idle: float = 0.0,
              backpressure: float = 0.0, seed: int = 0, timeout: int = 5_000_000,
              verilog: Path | None = None, stats: dict | None = None,
              harness_opt: str | None = None) -> list[HostResult]:
    """Load ``layer`` and run ``sequences`` (a list of :class:`Sequence`) on ``sim``; one
    :class:`HostResult` per sequence, in order. ``verilog``: an ``attention_top`` generated
    for ``cfg`` (default: generated once through :func:`sim.runner.verilog_for`).
    ``stats`` (Verilator), if given, receives ``sim_cycles`` (every simulated cycle: reset,
    weight load, runs) and ``sim_seconds`` (the harness's wall time, without its build).
    ``harness_opt`` (Verilator): the harness's C++ level, default :data:`sim.fast.OPT_LEVEL`
    (``-O0`` builds in about 60 % of the time and runs several times slower: the choice for
    many small designs with short runs, as in the tests)."""
    if sim not in SIMS:
        raise ValueError(f"sim = {sim!r} is not one of {', '.join(SIMS)}")
    seqs = _check(cfg, layer, sequences)
    if sim == "golden":
        return _run_golden(cfg, layer, seqs)
    if verilog is None:
        from hw.attention_top import AttentionTop
        from sim.runner import verilog_for
        verilog = verilog_for(AttentionTop, cfg, "attention_top").verilog
    if sim in ("verilator", "fast-icarus"):
        return _run_harness(cfg, layer, seqs, Path(verilog), overlapped=overlapped,
                            idle=idle, backpressure=backpressure, seed=seed, timeout=timeout,
                            stats=stats, opt=harness_opt,
                            simulator="icarus" if sim == "fast-icarus" else "verilator")
    return _run_icarus(cfg, layer, seqs, Path(verilog), overlapped=overlapped, idle=idle,
                       backpressure=backpressure, seed=seed, timeout=timeout)


# ---------------------------------------------------------------------------- golden

def _run_golden(cfg, layer, seqs) -> list[HostResult]:
    from hw.perf.layer import layer_timing, top_latency
    results = []
    for s in seqs:
        out = s.golden(cfg, layer)
        kv = None if s.kv is None else len(s.kv)
        mode = dict(causal=s.causal, key_len=s.key_len, pos_enc=s.pos_enc,
                    additive=layer.scoring == "additive")
        t = layer_timing(cfg, len(s.x), kv, **mode)
        results.append(HostResult(out, top_latency(cfg, len(s.x), kv, **mode), None,
                                  t.softmax_stall, None))
    return results


# ---------------------------------------------------------------------------- Verilator

def ctrl_word(rmap, *, causal: bool = False, cross: bool = False, pos_enc: str = "off",
              additive: bool = False, channel_scales: bool = False, irq: bool = False) -> int:
    """The CTRL value that starts a run: START, the mode bits and ``IRQ_EN`` if ``irq``
    (``additive``: the loaded layer's scoring; ``channel_scales``: its weight scales are
    per channel)."""
    bit = lambda name: 1 << rmap["CTRL"].field(name).lsb     # noqa: E731
    return (bit("START") | (bit("IRQ_EN") if irq else 0) | (bit("CAUSAL") if causal else 0)
            | (bit("CROSS") if cross else 0) | (bit("ADDITIVE") if additive else 0)
            | (bit("CHANNEL_SCALES") if channel_scales else 0)
            | PE_MODE_VALUES[pos_enc] << rmap["CTRL"].field("PE_MODE").lsb)


# Little-endian element types of the two activation widths the hardware packs.
_ELEMENT = {8: ("<u1", "<i1"), 16: ("<u2", "<i2")}


def pack_rows(rows, bits: int = 8) -> np.ndarray:
    """Rows of ``bits``-bit activations (8 or 16; n rows, width a multiple of 32 / bits) ->
    uint32 words: element ``E a + k`` (``E = 32 / bits``) in bits ``[bits (k + 1) - 1 :
    bits k]`` of word ``a``."""
    unsigned, _ = _ELEMENT[bits]
    b = (np.asarray(rows, dtype=np.int64) & ((1 << bits) - 1)).astype(unsigned)
    return np.ascontiguousarray(b).view("<u4").reshape(-1).astype(np.uint32)


def unpack_words(words, width: int, bits: int = 8) -> np.ndarray:
    """uint32 words -> rows of ``width`` signed ``bits``-bit values (int64)."""
    _, signed_ = _ELEMENT[bits]
    b = np.ascontiguousarray(np.asarray(words, dtype="<u4")).view(signed_).astype(np.int64)
    return b.reshape(-1, width)


class _Program:
    """Builds the harness script of one layer load and its runs."""

    def __init__(self, cfg, script):
        self.cfg, self.s = cfg, script
        self.rmap = build_regmap(cfg)
        self.additive = False       # the loaded layer's scoring
        self.channel = False        # ... and whether its weight scales are per channel

    def addr(self, reg):
        return self.rmap[reg].offset

    def bit(self, reg, fld):
        return 1 << self.rmap[reg].field(fld).lsb

    def load(self, layer):
        self.additive = layer.scoring == "additive"
        self.channel = layer.per_channel
        off, n = self.s.put(pack_window(self.rmap, layer))
        self.s.add("wblock", self.rmap.window_base, off, n)
        for name, value in param_values(self.rmap, layer).items():
            self.s.add("write", self.addr(name), value)
        self.s.add("write", self.addr("WEIGHTS_COMMIT"), 1)

    def clear_status(self):
        self.s.add("write", self.addr("ERROR_CAUSE"), (1 << len(ERROR_CAUSES)) - 1)
        self.s.add("write", self.addr("STATUS"),
                   self.bit("STATUS", "DONE") | self.bit("STATUS", "ERROR"))

    def start(self, seq: Sequence, tag: int, irq: bool):
        cross = seq.kv is not None
        self.s.add("write", self.addr("SEQ_LEN"), len(seq.x))
        self.s.add("write", self.addr("KV_LEN"), len(seq.kv) if cross else 0)
        self.s.add("write", self.addr("KEY_LEN"), seq.key_len or 0)
        if "PE_OFFSET" in self.rmap:
            self.s.add("write", self.addr("PE_OFFSET"), seq.pe_offset)
            self.s.add("write", self.addr("PE_GRID_W"), seq.grid_width or 0)
        self.s.add("write", self.addr("CTRL"), ctrl_word(
            self.rmap, causal=seq.causal, cross=cross, pos_enc=seq.pos_enc,
            additive=self.additive, channel_scales=self.channel, irq=irq))
        self.expect_ok(tag)
        self.s.add("send", *self.s.put(pack_rows(seq.x, self.cfg.act_bits)))
        if cross:
            self.s.add("send", *self.s.put(pack_rows(seq.kv, self.cfg.act_bits)))

    def expect_ok(self, tag: int):
        """Stop with an "X" record tagged ``tag`` (the sequence) if STATUS.ERROR is set."""
        self.s.add("expect_ok", self.addr("STATUS"), self.bit("STATUS", "ERROR"),
                   self.addr("ERROR_CAUSE"), tag)


def _run_harness(cfg, layer, seqs, verilog, *, overlapped, idle, backpressure, seed,
                 timeout, stats=None, opt=None, simulator="verilator") -> list[HostResult]:
    from sim.fast import Script, run_script
    script = Script()
    script.settings(seed=seed, idle=idle, backpressure=backpressure, limit=timeout)
    prog = _Program(cfg, script)
    script.add("reset", 4)
    prog.load(layer)
    script.add("autoread", prog.addr("CYCLES"), prog.addr("BUSY_CYCLES"),
               prog.addr("STALL_CYCLES"))
    prog.clear_status()
    for i, seq in enumerate(seqs):
        if overlapped:
            script.add("wait_bits", prog.addr("STATUS"), prog.bit("STATUS", "START_READY"))
            prog.start(seq, i, irq=False)
        else:
            prog.start(seq, i, irq=True)
            script.add("wait_irq")          # DONE or ERROR
            prog.expect_ok(i)
            script.add("wait_out", i + 1)
            prog.clear_status()
    script.add("wait_out", len(seqs))
    script.add("read", prog.addr("STATUS"))
    prog.expect_ok(len(seqs) - 1)
    run = run_script(verilog, script, opt=opt, simulator=simulator)
    if stats is not None:
        stats.update(sim_cycles=run.cycles, sim_seconds=run.seconds)
    bad = [r for r in run.records if r[0] == "X"]
    if bad:
        raise RunError(*bad[0][1:])
    return _collect(cfg, seqs, run)


def _collect(cfg, seqs, run) -> list[HostResult]:
    ends = [r for r in run.records if r[0] == "E"]
    counts = {r[1]: r[2:] for r in run.records if r[0] == "Q"}
    status = [r for r in run.records if r[0] == "R"][-1][1]
    results, first = [], 0
    for i, seq in enumerate(seqs):
        words, cycle = ends[i][1], ends[i][2]
        out = unpack_words(run.out_words[first:words], cfg.d_model, cfg.act_bits)
        first = words
        cyc, busy, stall = counts[i + 1]
        results.append(HostResult(out, cyc, busy, stall, status, cycle))
    return results


# ---------------------------------------------------------------------------- Icarus

def _run_icarus(cfg, layer, seqs, verilog, *, overlapped, idle, backpressure, seed,
                timeout) -> list[HostResult]:
    from sim.runner import run_cocotb
    with tempfile.TemporaryDirectory(prefix="host-icarus-") as tmp:
        job = Path(tmp) / "job.pkl"
        result = Path(tmp) / "result.pkl"
        with open(job, "wb") as fh:
            pickle.dump(dict(cfg=cfg, layer=layer, seqs=seqs, overlapped=overlapped,
                             idle=idle, backpressure=backpressure, seed=seed,
                             timeout=timeout), fh)
        run_cocotb(sources=[verilog], toplevel="attention_top", test_module="sim.host_tb",
                   simulator="icarus", run_name=f"host-{os.getpid()}-{Path(tmp).name}",
                   extra_env={"HOST_JOB": str(job), "HOST_RESULT": str(result)})
        with open(result, "rb") as fh:
            res = pickle.load(fh)
    if "error" in res:
        raise RunError(*res["error"])
    return res["results"]
