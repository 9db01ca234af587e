"""Random and edge-case score rows for the softmax unit tests, with golden expectations.

Shared by the Amaranth-simulator tests and the cocotb testbench (pure NumPy, no simulator).
A *row* is ``(query_index, scores)`` where ``scores`` holds every key position the producer
sends, padded to whole beats. The expected output follows the unit's documented rule: key j
counts iff j < beats * lanes, j < kv_len, (not causal or j <= row), and the settings are valid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.config import AttentionConfig
from golden.fixed import Requant
from golden.softmax import softmax_int

__all__ = ["Settings", "settings_valid", "expected_row", "random_rows", "edge_rows",
           "realistic_settings", "extreme_settings"]


@dataclass(frozen=True)
class Settings:
    """Run-time inputs of the unit, static during a run."""

    exp_mult: int
    exp_shift: int
    causal: bool
    kv_len: int


def settings_valid(cfg: AttentionConfig, st: Settings) -> bool:
    return (1 <= st.exp_shift <= 62 and 1 <= st.kv_len <= cfg.max_kv_len
            and (cfg.causal_mask or not st.causal))


def expected_row(cfg: AttentionConfig, st: Settings, row: int, scores) -> np.ndarray:
    """Golden probabilities of one row as the unit sees it (all key positions sent)."""
    scores = np.asarray(scores, dtype=np.int64)
    j = np.arange(len(scores))
    valid = (j < st.kv_len) & (j < cfg.max_kv_len)
    if st.causal:
        valid &= j <= row
    if not settings_valid(cfg, st):
        valid[:] = False
    return softmax_int(scores, cfg, st.exp_mult, st.exp_shift, valid=valid)


def _pad(cfg, n_keys):
    lanes = cfg.softmax_lanes
    return -(-n_keys // lanes) * lanes


def _score_range(cfg):
    return -(1 << (cfg.score_bits - 1)), (1 << (cfg.score_bits - 1)) - 1


def random_rows(cfg: AttentionConfig, rng: np.random.Generator, count: int,
                spread: int | None = None):
    """``count`` rows of random length 1..max_kv_len (cycling through every length), random
    query index; scores around a random centre with the given spread (default: full range)."""
    lo, hi = _score_range(cfg)
    rows = []
    lengths = np.arange(1, cfg.max_kv_len + 1)
    for k in range(count):
        n = int(lengths[k % len(lengths)]) if k < 2 * len(lengths) else \
            int(rng.integers(1, cfg.max_kv_len + 1))
        width = _pad(cfg, n)
        if spread is None:
            s = rng.integers(lo, hi + 1, size=width)
        else:
            centre = int(rng.integers(lo + spread, hi - spread + 1))
            s = centre + rng.integers(-spread, spread + 1, size=width)
        rows.append((int(rng.integers(0, cfg.max_seq_len)), s.astype(np.int64)))
    return rows


def edge_rows(cfg: AttentionConfig, rng: np.random.Generator):
    """All equal, one dominant, most negative / most positive, alternating extremes, ties."""
    lo, hi = _score_range(cfg)
    rows = []
    for n in sorted({1, 2, cfg.softmax_lanes, cfg.max_kv_len - 1, cfg.max_kv_len} - {0}):
        w = _pad(cfg, n)
        i = int(rng.integers(0, cfg.max_seq_len))
        rows += [
            (i, np.full(w, 0)), (i, np.full(w, lo)), (i, np.full(w, hi)),
            (i, np.where(np.arange(w) == w // 2, hi, lo)),          # one dominant
            (i, np.where(np.arange(w) == 0, lo, hi)),               # one far below
            (i, np.where(np.arange(w) % 2, hi, lo)),                # alternating extremes
            (i, np.where(np.arange(w) % 3 == 0, 7, 3)),             # ties
            (i, np.where(np.arange(w) == w - 1, 1, 0)),             # one just above
        ]
    return [(i, np.asarray(s, dtype=np.int64)) for i, s in rows]


def realistic_settings(cfg: AttentionConfig, rng: np.random.Generator, causal: bool,
                       kv_len: int, score_spread: int) -> Settings:
    """exp_mult/exp_shift mapping a score spread to 0.5..24 base-2 units of logit spread."""
    units = float(rng.uniform(0.5, 24.0))
    c = units * 2 ** cfg.exp_frac_bits / max(1, score_spread)
    rq = Requant.from_real(c, cfg.exp_mult_bits, what="exp scale")
    return Settings(rq.mult, min(rq.shift, 62), causal, kv_len)


def extreme_settings(cfg: AttentionConfig, causal: bool, kv_len: int) -> list[Settings]:
    """Largest multiplier with the smallest and largest shifts, smallest multiplier, and so on."""
    big = (1 << cfg.exp_mult_bits) - 1
    return [Settings(big, 1, causal, kv_len), Settings(big, 62, causal, kv_len),
            Settings(1, 1, causal, kv_len), Settings(0, 5, causal, kv_len),
            Settings(big, cfg.exp_frac_bits + cfg.score_bits // 2, causal, kv_len)]
