"""cocotb tests of the generated SoftmaxUnit Verilog against the golden softmax.

Environment (strings): SOFTMAX_CONFIG (TOML path), SOFTMAX_LANES and SOFTMAX_MAX_KV
(optional overrides of softmax_lanes and max_seq_len = max_kv_len), SOFTMAX_SEED,
SOFTMAX_ROWS (random rows per run), SOFTMAX_IDLE (idle probability on ``scores``),
SOFTMAX_BACKPRESSURE (probability of ``probs.ready`` low).

A run is a sequence of segments with fixed run-time settings (realistic and extreme
exp_mult/exp_shift, every mask mode, invalid settings); settings change only while the unit is
empty. Every output beat is compared with golden by exact equality; without stalls the cycle of
every output beat is also compared with :func:`hw.perf.softmax.softmax_schedule`.
"""

from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, RisingEdge

from golden import load_config
from hw.gen.verilog import REPO_ROOT
from hw.perf.softmax import softmax_schedule
from hw.blocks.softmax import prob_beat_layout, score_beat_layout
from sim.bus import (StreamSink, StreamSource, clock_and_reset, pack_array, run_streams,
                     unpack_array)
from tests.softmax_cases import (Settings, edge_rows, expected_row, extreme_settings,
                                 random_rows, realistic_settings, settings_valid)

CFG = load_config(os.environ.get("SOFTMAX_CONFIG", REPO_ROOT / "configs" / "tiny.toml"))
if "SOFTMAX_LANES" in os.environ:
    _kv = int(os.environ.get("SOFTMAX_MAX_KV", CFG.max_kv_len))
    CFG = CFG.replace(softmax_lanes=int(os.environ["SOFTMAX_LANES"]), max_seq_len=_kv,
                      max_kv_len=_kv)
SEED = int(os.environ.get("SOFTMAX_SEED", "1"))
ROWS = int(os.environ.get("SOFTMAX_ROWS", "400"))
IDLE = float(os.environ.get("SOFTMAX_IDLE", "0"))
BACKPRESSURE = float(os.environ.get("SOFTMAX_BACKPRESSURE", "0"))

LANES = CFG.softmax_lanes
IN = {name: (f.offset, f.width) for name, f in score_beat_layout(CFG)}
OUT = {name: (f.offset, f.width) for name, f in prob_beat_layout(CFG)}


def pack_beat(scores, row: int, last: bool) -> int:
    return (pack_array(scores, CFG.score_bits) | (row << IN["row"][0])
            | (int(last) << IN["last"][0]))


def unpack_out(word: int):
    data = unpack_array(word, CFG.prob_bits, LANES, signed=False)
    row = (word >> OUT["row"][0]) & ((1 << OUT["row"][1]) - 1)
    return data, row, (word >> OUT["last"][0]) & 1


class SoftmaxTB:
    def __init__(self, dut):
        self.dut = dut
        self.src = StreamSource(dut, "scores", idle=IDLE, seed=SEED)
        self.sink = StreamSink(dut, "probs", backpressure=BACKPRESSURE, seed=SEED + 1)
        self.rows_checked = 0

    async def reset(self):
        await clock_and_reset(self.dut)

    async def segment(self, st: Settings, rows, check_timing: bool = False):
        """Run ``rows`` with settings ``st`` and compare every output with golden."""
        await FallingEdge(self.dut.clk)
        self.dut.exp_mult.value = st.exp_mult
        self.dut.exp_shift.value = st.exp_shift
        self.dut.causal.value = int(st.causal)
        self.dut.kv_len.value = st.kv_len
        await RisingEdge(self.dut.clk)
        assert int(self.dut.error.value) == int(not settings_valid(CFG, st)), st

        beats, expected = [], []
        for i, s in rows:
            n = len(s) // LANES
            beats += [pack_beat(s[b * LANES:(b + 1) * LANES], i, b == n - 1) for b in range(n)]
            expected.append(expected_row(CFG, st, i, s))
        self.src.accepted.clear()
        self.sink.items.clear()
        self.src.put(beats)
        total = len(beats)
        await run_streams(self.dut.clk, [self.src, self.sink],
                          until=lambda: len(self.sink.items) == total,
                          max_cycles=40 * total + 1000)

        k = 0
        for (i, s), want in zip(rows, expected):
            n = len(s) // LANES
            got, meta = [], []
            for _, word in self.sink.items[k:k + n]:
                data, row, last = unpack_out(word)
                got += data
                meta.append((row, last))
            assert meta == [(i, 0)] * (n - 1) + [(i, 1)], (i, meta)
            if not np.array_equal(np.array(got), want):
                raise AssertionError(f"row {i} scores {s.tolist()} {st}: got {got}, "
                                     f"golden {want.tolist()}")
            k += n
        self.rows_checked += len(rows)

        if check_timing:
            start = self.src.accepted[0]
            assert self.src.accepted == list(range(start, start + total)), "input throttled"
            model = [c + start for r in softmax_schedule(CFG, [len(s) // LANES for _, s in rows])
                     for c in r]
            measured = [c for c, _ in self.sink.items]
            assert measured == model, f"cycles differ from the model: {measured[:8]} vs {model[:8]}"
            self.dut._log.info("timing: %d beats, %d cycles first input to last output, "
                               "model exact", total, measured[-1] - start + 1)


@cocotb.test()
async def softmax_random_and_edge_rows(dut):
    tb = SoftmaxTB(dut)
    await tb.reset()
    rng = np.random.default_rng(SEED)
    full = CFG.max_kv_len
    lo = -(1 << (CFG.score_bits - 1))
    no_stall = IDLE == 0 and BACKPRESSURE == 0

    # Realistic spreads, no mask beyond the row length; timing checked when nothing stalls.
    for spread in (40, 2000, None):
        rows = random_rows(CFG, rng, ROWS // 4, spread=spread)
        span = 2 * spread if spread else -2 * lo
        st = realistic_settings(CFG, rng, causal=False, kv_len=full, score_spread=span)
        await tb.segment(st, rows, check_timing=no_stall)
    # Causal, with kv_len of every size.
    for kv in sorted({1, 2, full // 2 or 1, full - 1 or 1, full}):
        rows = random_rows(CFG, rng, max(8, ROWS // 20), spread=500)
        st = realistic_settings(CFG, rng, causal=True, kv_len=kv, score_spread=1000)
        await tb.segment(st, rows)
    # Edge rows under realistic and extreme scales, causal on and off.
    edges = edge_rows(CFG, rng)
    for causal in (False, True):
        st = realistic_settings(CFG, rng, causal=causal, kv_len=full, score_spread=-2 * lo)
        await tb.segment(st, edges)
        for st in extreme_settings(CFG, causal, full):
            await tb.segment(st, edges[: 4 * 8] + random_rows(CFG, rng, 8))
    # Invalid settings: error flag, all-zero rows, and the unit recovers afterwards.
    for st in (Settings(30000, 0, False, full), Settings(30000, 63, True, full),
               Settings(30000, 12, False, 0), Settings(30000, 12, False, full + 1)):
        await tb.segment(st, random_rows(CFG, rng, 8, spread=100))
    await tb.segment(Settings(30000, 12, True, full), random_rows(CFG, rng, 16, spread=100))
    dut._log.info("rows checked: %d", tb.rows_checked)
