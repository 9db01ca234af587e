"""Amaranth-simulator tests of the tiled path's output accumulator
(hw/blocks/tile_accumulator.py): every output value equals golden ``tile_output`` of the
accumulators ``attend_tiled`` builds, by exact equality."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment

from golden import load_config
from golden.fixed import Requant, round_shift
from golden.online_softmax import (RowState, row_reciprocal, score_log2, softmax_tile,
                                   tile_output, tiled_format)
from hw.blocks.tile_accumulator import TileAccumulator
from hw.gen.verilog import REPO_ROOT
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from sim.collisions import CollisionScramble

TINY = load_config(REPO_ROOT / "configs" / "tiny.toml").replace(max_seq_len=32, max_kv_len=32)
DEFAULT = load_config(REPO_ROOT / "configs" / "default.toml")


def query_tile(cfg, fmt, rng, rows, kv_rows, dv, *, causal=False, kv_len=None, q0=0):
    """Golden infos, E.V result tiles and outputs of one query tile of random data."""
    kv_len = kv_rows if kv_len is None else kv_len
    spread = int(rng.integers(100, 3000))
    scores = rng.integers(-spread, spread + 1, (rows, kv_rows))
    scores += (np.arange(kv_rows) * spread // max(1, kv_rows // 2))[None, :]
    v = rng.integers(-128, 128, (kv_rows, dv))
    mult = int(rng.integers(8000, 60000))
    y = score_log2(scores, mult, 10 + int(rng.integers(0, 4)))
    j = np.arange(kv_rows)[None, :]
    valid = np.broadcast_to(j < kv_len, (rows, kv_rows)).copy()
    if causal:
        valid &= j <= np.arange(q0, q0 + rows)[:, None]
    state = RowState.empty(rows)
    acc = np.zeros((rows, dv), dtype=np.int64)
    starts = list(range(0, kv_rows, fmt.kv_tile))
    tiles = []
    for t, k0 in enumerate(starts):
        cols = slice(k0, min(k0 + fmt.kv_tile, kv_rows))
        e, rise, state = softmax_tile(cfg, fmt, y[:, cols], valid[:, cols], state)
        ev = e @ v[cols]
        acc = round_shift(acc, rise[:, None]) + ev
        final = t == len(starts) - 1
        recip, lead = row_reciprocal(state.row_sum, cfg.recip_bits)
        infos = [{"slot": r, "rise": int(rise[r]), "started": int(state.started[r]),
                  "first": int(t == 0), "final": int(final), "last": int(r == rows - 1),
                  "recip": int(recip[r]) if final else 0, "lead": int(lead[r]) if final else 0}
                 for r in range(rows)]
        tiles.append((infos, ev))
    return tiles, acc, state


def run(cfg, fmt, rows, cols, dv, lanes, qtiles, rq, *, idle=0.0, backpressure=0.0, seed=0,
        shuffle=True, keep=False, banks=2):
    dut = TileAccumulator(cfg, fmt, rows, cols, dv, norm_lanes=lanes, banks=banks)
    rng = np.random.default_rng(seed)
    info_l, res_l = dut.info.payload.shape(), dut.result.payload.shape()
    infos, results, want = [], [], []
    for tiles, acc, state in qtiles:
        n = acc.shape[0]
        for tinfo, ev in tiles:
            infos += [info_l.const(i) for i in tinfo]
            beats = [(r, g) for r in range(n) for g in range(dv // cols)]
            if shuffle:
                rng.shuffle(beats)
            for k, (r, g) in enumerate(beats):
                results.append(res_l.const({
                    "data": [int(x) for x in ev[r, g * cols:(g + 1) * cols]],
                    "row": r, "col": g * cols, "last": int(k == len(beats) - 1)}))
        recip, lead = row_reciprocal(state.row_sum, cfg.recip_bits)
        a = tile_output(cfg, fmt, acc, recip, lead, state.started, rq)
        for r in range(n):
            for c in range(0, dv, lanes):
                want.append(([int(x) for x in a[r, c:c + lanes]], r, c,
                             int(r == n - 1 and c + lanes == dv)))
    ip = StreamProducer(dut.info, infos, idle=idle, seed=seed)
    rp = StreamProducer(dut.result, results, idle=idle, seed=seed + 1)
    out = StreamConsumer(dut.out, len(want), backpressure=backpressure, seed=seed + 2,
                         linger=60, max_cycles=40 * (len(results) + len(want)) + 2000,
                         convert=lambda p: ([int(x) for x in p.data], int(p.row), int(p.col),
                                            int(p.last)))

    async def settings(ctx):
        ctx.set(dut.rq_mult, rq.mult)
        ctx.set(dut.rq_shift, rq.shift)

    simulate(Fragment.get(dut, CollisionScramble()), settings, ip, rp, out)
    assert len(out.items) == len(want)
    for k, (g, w) in enumerate(zip(out.items, want)):
        assert g == w, f"output beat {k}: {g} != {w}"
    return (out, ip, rp) if keep else out


@pytest.mark.parametrize("lanes,banks", [(1, 2), (2, 2), (4, 2), (2, 3)])
@pytest.mark.parametrize("idle,backpressure", [(0.0, 0.0), (0.3, 0.3)])
def test_query_tiles(lanes, banks, idle, backpressure):
    cfg = TINY
    fmt = tiled_format(cfg, 8)
    rng = np.random.default_rng(lanes)
    qtiles = [query_tile(cfg, fmt, rng, 6, 21, 8),
              query_tile(cfg, fmt, rng, 6, 21, 8, causal=True, q0=6),
              query_tile(cfg, fmt, rng, 3, 13, 8, kv_len=11)]
    rq = Requant(int(rng.integers(20000, 40000)), 23)   # outputs about V's range
    run(cfg, fmt, 6, 4, 8, lanes, qtiles, rq, idle=idle, backpressure=backpressure, seed=lanes,
        banks=banks)


def test_one_tile_one_row_and_rows_without_keys():
    """A query tile of one row with a single key tile; causal rows whose first tiles have no
    valid key (not started, output 0 until a later tile starts them)."""
    cfg = TINY
    fmt = tiled_format(cfg, 8)
    rng = np.random.default_rng(5)
    qtiles = [query_tile(cfg, fmt, rng, 1, 5, 8),
              query_tile(cfg, fmt, rng, 4, 24, 8, kv_len=0),
              query_tile(cfg, fmt, rng, 4, 24, 8, causal=True, q0=0)]
    run(cfg, fmt, 4, 4, 8, 1, qtiles, Requant(30000, 23))


@pytest.mark.parametrize("rq", [Requant((1 << 16) - 1, 1), Requant((1 << 16) - 1, 54),
                                Requant(1, 1), Requant(0, 7)])
def test_extreme_requantizers_saturate_exactly(rq):
    cfg = TINY
    fmt = tiled_format(cfg, 8)
    rng = np.random.default_rng(6)
    run(cfg, fmt, 4, 4, 8, 2, [query_tile(cfg, fmt, rng, 4, 16, 8)], rq)


def test_default_widths():
    """The default configuration's widths at 512 keys: tiles of 64, 8 columns per result
    beat, head_dim 32, 64-row query tiles (here 5 rows of one), one lane."""
    cfg = DEFAULT.replace(max_seq_len=512, max_kv_len=512)
    fmt = tiled_format(cfg, 64)
    rng = np.random.default_rng(7)
    qtiles = [query_tile(cfg, fmt, rng, 5, 200, 32, causal=True, q0=150)]
    run(cfg, fmt, 64, 8, 32, 1, qtiles, Requant(25000, 23), idle=0.1, backpressure=0.2)


def test_long_rows_drop_low_bits_before_the_reciprocal():
    """Running sums above 2**24 (thousands of keys): O loses its low bits (rounded) before the
    reciprocal product. Synthetic entries: one tile, sums and E.V drawn directly (outputs
    within about +-60, so no saturation hides a difference)."""
    cfg = DEFAULT
    fmt = tiled_format(cfg, 64, max_kv_len=4096)
    rng = np.random.default_rng(9)
    rows, dv = 6, 16
    lsum = rng.integers(1 << 24, 1 << fmt.sum_bits, rows)
    recip, lead = row_reciprocal(lsum, cfg.recip_bits)
    assert lead.max() > 24
    ev = rng.integers(-(1 << 31), 1 << 31, (rows, dv))
    infos = [{"slot": r, "rise": 0, "started": 1, "first": 1, "final": 1,
              "last": int(r == rows - 1), "recip": int(recip[r]), "lead": int(lead[r])}
             for r in range(rows)]
    infos[2]["started"] = 0             # a row marked as without keys gives 0 whatever O is
    started = np.arange(rows) != 2
    state = RowState(started, np.zeros(rows, dtype=np.int64), lsum)
    run(cfg, fmt, 8, 8, dv, 2, [([(infos, ev)], ev, state)], Requant(20000, 24))


def test_results_in_engine_order_at_full_rate():
    """Result beats back to back in the engine's order are taken one per cycle."""
    cfg = TINY
    fmt = tiled_format(cfg, 8)
    rng = np.random.default_rng(8)
    run(cfg, fmt, 8, 4, 8, 4, [query_tile(cfg, fmt, rng, 8, 32, 8)], Requant(30000, 23),
        shuffle=False)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_rejects_bad_arguments():
    fmt = tiled_format(TINY, 8)
    with pytest.raises(ValueError, match="norm_lanes = 3 must divide cols = 4"):
        TileAccumulator(TINY, fmt, 4, 4, 8, norm_lanes=3)
    with pytest.raises(ValueError, match="dv = 6 must be a multiple of cols = 4"):
        TileAccumulator(TINY, fmt, 4, 4, 6)
    with pytest.raises(ValueError, match="rows = 0 is out of range: allowed 1..32"):
        TileAccumulator(TINY, fmt, 0, 4, 8)


@pytest.mark.parametrize("cfg,rows,cols,dv,lanes",
                         [(TINY, 6, 4, 8, 2),
                          (DEFAULT.replace(max_seq_len=512, max_kv_len=512), 64, 8, 32, 1)],
                         ids=["tiny", "default-512"])
def test_verilog_lint_clean(cfg, rows, cols, dv, lanes):
    from hw.gen.lint import lint_file
    from hw.gen.verilog import write_verilog
    out = REPO_ROOT / "build" / "lint" / "tile_accumulator" / f"{cfg.name}_{rows}"
    vfile = write_verilog(TileAccumulator(cfg, tiled_format(cfg, 8), rows, cols, dv, lanes),
                          "tile_accumulator", out / "tile_accumulator.v")
    res = lint_file(vfile, "tile_accumulator", out / "lint.txt")
    assert res.issues == (), f"verilator -Wall beyond the waivers ({res.report}): " \
                             f"{res.issues[:5]}"


@pytest.mark.parametrize("lanes,banks", [(1, 2), (2, 2), (4, 2), (2, 3)])
def test_cycle_model_is_exact(lanes, banks):
    """Entries and result beats offered back to back from the start, ``out`` always ready:
    the model gives the cycle of every entry and beat taken and every value group out."""
    from hw.perf.tile_accumulator import AccTile, out_latency, tile_accumulator_schedule
    cfg = TINY
    fmt = tiled_format(cfg, 8)
    rng = np.random.default_rng(20 + lanes)
    qtiles = [query_tile(cfg, fmt, rng, 6, 21, 8), query_tile(cfg, fmt, rng, 2, 8, 8),
              query_tile(cfg, fmt, rng, 5, 30, 8, causal=True)]
    dut_out = run(cfg, fmt, 6, 4, 8, lanes, qtiles, Requant(30000, 23), shuffle=False,
                  keep=True, banks=banks)
    out, ip, rp = dut_out
    tiles = []
    for tq, acc, _ in qtiles:
        for k, (infos, _) in enumerate(tq):
            n = len(infos)
            tiles.append(AccTile([0] * n, [0] * (n * 2), k == len(tq) - 1,
                                 groups=n * 8 // lanes))
    model = tile_accumulator_schedule(tiles, out_latency(cfg, fmt, lanes), banks)
    assert ip.accepted == [c for t in model.info for c in t]
    assert rp.accepted == [c for t in model.results for c in t]
    assert out.cycles == [c for t in model.out for c in t]
