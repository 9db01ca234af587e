"""Amaranth-simulator tests of the key/value-tiled softmax unit (hw/blocks/tile_softmax.py).

Every E and every row's rise, started flag and final reciprocal are compared with the golden
per-tile step (golden.online_softmax.softmax_tile) by exact equality.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.hdl import Fragment

from golden import load_config
from golden.online_softmax import (RowState, row_reciprocal, score_log2, softmax_tile,
                                   tiled_format)
from hw.blocks.tile_softmax import TileSoftmaxUnit
from hw.gen.verilog import REPO_ROOT
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from sim.collisions import CollisionScramble
from tests.softmax_cases import Settings, realistic_settings, settings_valid

TINY = load_config(REPO_ROOT / "configs" / "tiny.toml").replace(max_seq_len=32, max_kv_len=32)
WIDE = TINY.replace(softmax_lanes=2)
DEFAULT = load_config(REPO_ROOT / "configs" / "default.toml")


@dataclass
class QueryTile:
    """Rows ``q0 .. q0 + len(scores) - 1`` of a run, their scores against ``kv_rows`` keys."""

    q0: int
    scores: np.ndarray          # (rows, kv_rows)


def _valid(cfg, st: Settings, q0: int, rows: int, k0: int, keys: int) -> np.ndarray:
    i = np.arange(q0, q0 + rows)[:, None]
    j = np.arange(k0, k0 + keys)[None, :]
    v = np.broadcast_to(j < st.kv_len, (rows, keys)).copy()
    if st.causal:
        v &= j <= i
    if not settings_valid(cfg, st):
        v[:] = False
    return v


def expected(cfg, fmt, st: Settings, tiles: list[QueryTile]):
    """Golden ``probs`` beats ``(E per lane, slot, last)`` and ``row_info`` entries."""
    lanes, R = cfg.softmax_lanes, cfg.recip_bits
    probs, info = [], []
    for qt in tiles:
        rows, kv_rows = qt.scores.shape
        state = RowState.empty(rows)
        starts = list(range(0, kv_rows, fmt.kv_tile))
        for t, k0 in enumerate(starts):
            keys = min(fmt.kv_tile, kv_rows - k0)
            y = score_log2(qt.scores[:, k0:k0 + keys], st.exp_mult, st.exp_shift)
            e, rise, state = softmax_tile(cfg, fmt, y, _valid(cfg, st, qt.q0, rows, k0, keys),
                                          state)
            beats = -(-keys // lanes)
            padded = np.zeros((rows, beats * lanes), dtype=np.int64)
            padded[:, :keys] = e
            final = t == len(starts) - 1
            for r in range(rows):
                for b in range(beats):
                    probs.append((padded[r, b * lanes:(b + 1) * lanes].tolist(), r,
                                  int(b == beats - 1)))
                entry = {"slot": r, "rise": int(rise[r]), "started": int(state.started[r]),
                         "first": int(t == 0), "final": int(final), "last": int(r == rows - 1)}
                if final:       # rows without a valid key divide 1, as golden
                    recip, lead = row_reciprocal(state.row_sum[r:r + 1], R)
                    entry.update(recip=int(recip[0]), lead=int(lead[0]))
                info.append(entry)
    return probs, info


def score_beats(layout, cfg, fmt, tiles: list[QueryTile]):
    lanes = cfg.softmax_lanes
    beats = []
    for qt in tiles:
        rows, kv_rows = qt.scores.shape
        starts = list(range(0, kv_rows, fmt.kv_tile))
        for t, k0 in enumerate(starts):
            keys = min(fmt.kv_tile, kv_rows - k0)
            n = -(-keys // lanes)
            for r in range(rows):
                row = np.zeros(n * lanes, dtype=np.int64)
                row[:keys] = qt.scores[r, k0:k0 + keys]
                for b in range(n):
                    beats.append(layout.const({
                        "data": [int(v) for v in row[b * lanes:(b + 1) * lanes]],
                        "row": qt.q0 + r, "slot": r, "rows": rows, "key0": k0,
                        "first": int(t == 0), "final": int(t == len(starts) - 1),
                        "last": int(b == n - 1)}))
    return beats


def run_unit(cfg, fmt, rows, st: Settings, tiles, *, idle=0.0, backpressure=0.0, seed=0):
    dut = TileSoftmaxUnit(cfg, fmt, rows)
    beats = score_beats(dut.scores.payload.shape(), cfg, fmt, tiles)
    want_probs, want_info = expected(cfg, fmt, st, tiles)
    producer = StreamProducer(dut.scores, beats, idle=idle, seed=seed)
    limit = 60 * len(beats) + 2000
    probs = StreamConsumer(dut.probs, len(want_probs), backpressure=backpressure, seed=seed + 1,
                           linger=40, max_cycles=limit,
                           convert=lambda p: ([int(v) for v in p.data], int(p.slot),
                                              int(p.last)))
    info = StreamConsumer(dut.row_info, len(want_info), backpressure=backpressure,
                          seed=seed + 2, linger=40, max_cycles=limit,
                          convert=lambda p: {"slot": int(p.slot), "rise": int(p.rise),
                                             "started": int(p.started), "first": int(p.first),
                                             "final": int(p.final), "last": int(p.last),
                                             "recip": int(p.recip), "lead": int(p.lead)})

    async def settings(ctx):
        ctx.set(dut.exp_mult, st.exp_mult)
        ctx.set(dut.exp_shift, st.exp_shift)
        ctx.set(dut.causal, int(st.causal))
        ctx.set(dut.kv_len, st.kv_len)

    # The ring is no_rw_check: a colliding read returns scrambled data (sim.collisions).
    simulate(Fragment.get(dut, CollisionScramble()), settings, producer, probs, info)
    assert probs.items == want_probs
    got_info = [{k: v for k, v in g.items() if k in w} for g, w in zip(info.items, want_info)]
    assert len(info.items) == len(want_info)
    for n, (g, w) in enumerate(zip(got_info, want_info)):
        assert g == w, f"row_info entry {n}: {g} != {w}"
    return producer, probs


def rising_scores(cfg, rng, rows, kv_rows, spread):
    """Scores whose maxima rise from tile to tile (so rescales happen), with ties and
    outliers."""
    base = rng.integers(-spread, spread + 1, (rows, kv_rows))
    base += (np.arange(kv_rows) * spread // max(1, kv_rows // 3))[None, :]
    base[:, rng.integers(0, kv_rows)] = base.max()           # a tie at the top
    lo, hi = -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1
    return np.clip(base, lo, hi)


@pytest.mark.parametrize("cfg", [TINY, WIDE], ids=["lanes1", "lanes2"])
@pytest.mark.parametrize("idle,backpressure", [(0.0, 0.0), (0.3, 0.3)])
def test_random_tiles(cfg, idle, backpressure):
    rng = np.random.default_rng(7)
    fmt = tiled_format(cfg, 8)
    rows = 6
    for causal in (False, True):
        kv_rows = 21                      # two whole tiles and one of 5 keys
        spread = int(rng.integers(50, 4000))
        st = realistic_settings(cfg, rng, causal, kv_len=int(rng.integers(13, kv_rows + 1)),
                                score_spread=spread)
        tiles = [QueryTile(q0, rising_scores(cfg, rng, n, kv_rows, spread))
                 for q0, n in ((0, 6), (6, 6), (12, 3))]
        run_unit(cfg, fmt, rows, st, tiles, idle=idle, backpressure=backpressure,
                 seed=int(causal))


@pytest.mark.parametrize("cfg", [TINY, WIDE], ids=["lanes1", "lanes2"])
def test_one_row_tiles_and_short_final_tile(cfg):
    """A one-row query tile (each tile waits for its previous tile's sum) whose final tile has
    one key, and two-row tiles, back to back."""
    rng = np.random.default_rng(8)
    fmt = tiled_format(cfg, 8)
    st = realistic_settings(cfg, rng, False, kv_len=25, score_spread=600)
    tiles = [QueryTile(0, rising_scores(cfg, rng, 1, 25, 600)),
             QueryTile(1, rising_scores(cfg, rng, 2, 25, 600)),
             QueryTile(3, rising_scores(cfg, rng, 1, 3, 600))]
    run_unit(cfg, fmt, 4, st, tiles)


def test_causal_rows_with_empty_tiles_and_big_rises():
    """Causal rows see no valid key in later tiles (state kept, rise 0); a huge score jump
    caps the rise; the largest multiplier makes every E but the maximum vanish."""
    cfg = TINY
    fmt = tiled_format(cfg, 8)
    rng = np.random.default_rng(9)
    scores = rng.integers(-300, 300, (8, 24))
    scores[:, 16:] += 1 << (cfg.score_bits - 3)          # the last tile jumps far up
    for st in (Settings(23170, 14, True, 24), Settings((1 << cfg.exp_mult_bits) - 1, 1,
                                                         False, 24),
               Settings(1, 1, False, 20)):
        run_unit(cfg, fmt, 8, st, [QueryTile(0, scores), QueryTile(8, scores[:3])])


@pytest.mark.parametrize("bad", [Settings(1000, 0, False, 8), Settings(1000, 63, False, 8),
                                 Settings(1000, 10, False, 0), Settings(1000, 10, False, 33)])
def test_invalid_settings_give_zero_rows(bad):
    rng = np.random.default_rng(10)
    run_unit(TINY, tiled_format(TINY, 8), 4, bad,
             [QueryTile(0, rng.integers(-500, 500, (3, 12)))])


def test_full_throughput():
    """With both outputs always ready and query tiles of enough rows, one beat per cycle."""
    cfg = TINY
    rng = np.random.default_rng(11)
    st = realistic_settings(cfg, rng, False, kv_len=32, score_spread=800)
    tiles = [QueryTile(0, rising_scores(cfg, rng, 16, 32, 800))]
    producer, _ = run_unit(cfg, tiled_format(cfg, 8), 16, st, tiles)
    accepted = producer.accepted
    assert accepted == list(range(accepted[0], accepted[0] + len(accepted)))


def test_default_widths_elaborate_and_match():
    """The default configuration's widths (score_bits, exp_frac_bits) with tiles of 16 keys
    and the E width of the tiled format, UQ1.16."""
    cfg = DEFAULT.replace(max_seq_len=48, max_kv_len=48)
    rng = np.random.default_rng(12)
    fmt = tiled_format(cfg, 16)
    st = realistic_settings(cfg, rng, True, kv_len=40, score_spread=3000)
    run_unit(cfg, fmt, 8, st, [QueryTile(0, rising_scores(cfg, rng, 8, 40, 3000)),
                               QueryTile(8, rising_scores(cfg, rng, 5, 40, 3000))],
             idle=0.2, backpressure=0.2)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_rejects_bad_arguments():
    fmt = tiled_format(TINY, 8)
    with pytest.raises(ValueError, match="rows = 0 is out of range: allowed 1..32"):
        TileSoftmaxUnit(TINY, fmt, 0)
    with pytest.raises(TypeError, match="TiledFormat"):
        TileSoftmaxUnit(TINY, 8, 4)
    with pytest.raises(ValueError, match="kv_tile = 5 must be a multiple of softmax_lanes = 2"):
        TileSoftmaxUnit(WIDE, tiled_format(WIDE, 5), 4)


@pytest.mark.parametrize("cfg,tile,rows", [(TINY, 8, 6), (WIDE, 8, 4),
                                           (DEFAULT.replace(max_seq_len=512, max_kv_len=512),
                                            64, 64)],
                         ids=["tiny", "lanes2", "default-512"])
def test_verilog_lint_clean(cfg, tile, rows):
    from hw.gen.lint import lint_file
    from hw.gen.verilog import write_verilog
    out = REPO_ROOT / "build" / "lint" / "tile_softmax" / f"{cfg.name}_{cfg.softmax_lanes}"
    vfile = write_verilog(TileSoftmaxUnit(cfg, tiled_format(cfg, tile), rows),
                          "tile_softmax_unit", out / "tile_softmax_unit.v")
    res = lint_file(vfile, "tile_softmax_unit", out / "lint.txt")
    assert res.issues == (), f"verilator -Wall beyond the waivers ({res.report}): " \
                             f"{res.issues[:5]}"


def _timing_case(cfg, fmt, rows, tiles, seed=0):
    """Simulate with both outputs always ready and every input beat offered at once; returns
    (sim taken, probs and info cycles per row, the model's schedule)."""
    from hw.blocks.divider import ReciprocalDivider
    from hw.perf.tile_softmax import TileRow, tile_softmax_schedule
    rng = np.random.default_rng(seed)
    st = realistic_settings(cfg, rng, False, kv_len=cfg.max_kv_len, score_spread=500)
    producer, probs = None, None
    dut = TileSoftmaxUnit(cfg, fmt, rows)
    beats = score_beats(dut.scores.payload.shape(), cfg, fmt, tiles)
    want_probs, want_info = expected(cfg, fmt, st, tiles)
    producer = StreamProducer(dut.scores, beats)
    probs = StreamConsumer(dut.probs, len(want_probs), max_cycles=100 * len(beats) + 2000)
    info = StreamConsumer(dut.row_info, len(want_info), max_cycles=100 * len(beats) + 2000)

    async def settings(ctx):
        ctx.set(dut.exp_mult, st.exp_mult)
        ctx.set(dut.exp_shift, st.exp_shift)
        ctx.set(dut.kv_len, st.kv_len)

    simulate(Fragment.get(dut, CollisionScramble()), settings, producer, probs, info)
    spec = []
    for qt in tiles:
        n, kv_rows = qt.scores.shape
        starts = list(range(0, kv_rows, fmt.kv_tile))
        for t, k0 in enumerate(starts):
            b = -(-min(fmt.kv_tile, kv_rows - k0) // cfg.softmax_lanes)
            spec += [TileRow(b, t == 0, n)] * n
    model = tile_softmax_schedule(spec, ring_depth=dut.ring_depth,
                                  divider_latency=ReciprocalDivider.latency_for(
                                      cfg.recip_bits),
                                  row_queue=dut.ROW_QUEUE)
    return producer.accepted, probs.cycles, info.cycles, model


@pytest.mark.parametrize("cfg", [TINY, WIDE], ids=["lanes1", "lanes2"])
@pytest.mark.parametrize("shape", ["big-tiles", "one-row", "two-rows", "short-rows"])
def test_cycle_model_is_exact(cfg, shape):
    rng = np.random.default_rng(13)
    fmt = tiled_format(cfg, 8)
    tiles = {
        "big-tiles": [QueryTile(0, rng.integers(-500, 500, (12, 32))),
                      QueryTile(12, rng.integers(-500, 500, (5, 19)))],
        "one-row": [QueryTile(0, rng.integers(-500, 500, (1, 25))),
                    QueryTile(1, rng.integers(-500, 500, (1, 9)))],
        "two-rows": [QueryTile(0, rng.integers(-500, 500, (2, 32)))],
        "short-rows": [QueryTile(0, rng.integers(-500, 500, (16, 3))),
                       QueryTile(16, rng.integers(-500, 500, (16, 17)))],
    }[shape]
    taken, probs, info, model = _timing_case(cfg, fmt, 16, tiles)
    assert taken == [c for row in model.taken for c in row]
    assert probs == [c for row in model.probs for c in row]
    assert info == model.info
