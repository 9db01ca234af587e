"""Accuracy of the key/value-tiled attention path against float64 (``make accuracy``).

The attention output ``A`` (before the output projection) of :func:`attend_tiled` is compared
with the float64 softmax attention of **the same integer Q, K and V** at the logit scale the
integer path implements, in units of A's LSB: the float target is
``softmax(c S) V * 2**B * rq.real`` with ``rq`` calibrated so the largest float value of the
case maps to 127. The quantization of Q, K and V is not charged to the softmax; the whole-layer
figures in :mod:`golden.accuracy` charge everything.

Cases, per sequence length L (queries = keys = L) and tile size:

random
    Q, K, V int8, normal with standard deviation 32 (clipped); logits of every spread from
    near-uniform to near-one-hot (the exponent multiplier is drawn per case).
peaky
    K is Q permuted: every query has one key equal to itself, whose score |q|^2 stands out
    from the others by about sqrt(d_k) standard deviations.
tied
    K's rows are copies of three vectors, so each row has three score levels, each repeated.
causal
    random, with key j > query i masked: rows of every length 1..L, the tile holding the
    diagonal partly masked.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .config import AttentionConfig
from .fixed import Requant
from .online_softmax import TILE_PROB_BITS, attend_rows, attend_tiled, tiled_format
from .reference import softmax_float

__all__ = ["TILED_TARGETS", "TILED_KINDS", "tiled_case", "tiled_accuracy"]

# The target: A within 1 LSB of its format for >= 99.9 % of values.
TILED_TARGETS = {"within_1_lsb_pct": 99.9}

TILED_KINDS = ("random", "peaky", "tied", "causal")

# Integer operands: int8 with this standard deviation (about a quarter of the range).
OPERAND_STD = 32.0


def _int8(rng: np.random.Generator, shape) -> np.ndarray:
    return np.clip(np.floor(rng.normal(0.0, OPERAND_STD, shape) + 0.5), -128, 127).astype(np.int64)


def tiled_case(rng: np.random.Generator, kind: str, L: int, head_dim: int, rows: int):
    """Integer ``(scores, v, valid)`` of one case: ``rows`` query rows (spread over 0..L-1)
    against L keys."""
    q = _int8(rng, (L, head_dim))
    if kind == "peaky":
        k = q[rng.permutation(L)]
    elif kind == "tied":
        k = _int8(rng, (3, head_dim))[rng.integers(0, 3, L)]
    elif kind in ("random", "causal"):
        k = _int8(rng, (L, head_dim))
    else:
        raise ValueError(f"kind = {kind!r} is not one of {TILED_KINDS}")
    v = _int8(rng, (L, head_dim))
    sel = np.sort(rng.choice(L, size=min(rows, L), replace=False))
    scores = q[sel] @ k.T
    valid = np.ones(scores.shape, dtype=bool)
    if kind == "causal":
        valid = np.arange(L)[None, :] <= sel[:, None]
    return scores, v, valid


def _exp_multiplier(cfg: AttentionConfig, scores, spread: float) -> tuple[int, int, float]:
    """``(exp_mult, exp_shift, c)`` giving the case's scores a logit standard deviation of
    ``spread`` (natural-log units); ``c`` is the logit per score unit actually implemented."""
    std = max(float(scores.std()), 1.0)
    c = spread / std
    rq = Requant.from_real(c / math.log(2.0) * 2.0 ** cfg.exp_frac_bits, cfg.exp_mult_bits,
                           what="exp multiplier")
    c_real = rq.mult * 2.0 ** -rq.shift / 2.0 ** cfg.exp_frac_bits * math.log(2.0)
    return rq.mult, rq.shift, c_real


def _errors(out, ref):
    """Error of int outputs against float targets, with the target clipped to the range."""
    ref = np.clip(ref, -128.0, 127.0)
    err = np.abs(out - ref)
    return err, np.minimum(np.floor(ref + 0.5), 127)


def tiled_accuracy(cfg: AttentionConfig, lengths, tiles, prob_bits: int = TILE_PROB_BITS,
                   seed: int = 0,
                   cases: int = 2, rows: int = 256, with_rows: bool = True) -> dict:
    """Errors of the tiled path (and, with ``with_rows``, the whole-row path) per length.

    For each length, kind and case: one logit spread drawn log-uniformly in 0.1..8, the P.V
    requantizer calibrated on the float result, then every tile size run on the same inputs.
    """
    rng = np.random.default_rng(seed)
    B = cfg.prob_bits
    result = {}
    for L in lengths:
        t0 = time.perf_counter()
        stats = {t: {"n": 0, "within": 0, "rounded": 0, "max": 0.0, "sum": 0.0}
                 for t in list(tiles) + (["rows"] if with_rows else [])}
        for kind in TILED_KINDS:
            for _ in range(cases):
                scores, v, valid = tiled_case(rng, kind, L, cfg.head_dim, rows)
                spread = float(np.exp(rng.uniform(np.log(0.1), np.log(8.0))))
                em, es, c = _exp_multiplier(cfg, scores, spread)
                ref_a = softmax_float(scores.astype(np.float64) * c, valid) @ v
                peak = max(float(np.abs(ref_a).max()), 1e-9)
                rq = Requant.from_real(127.0 / peak / 2.0 ** B, cfg.requant_mult_bits,
                                       what="P.V multiplier")
                ref = ref_a * 2.0 ** B * rq.real
                lcfg = cfg.replace(max_seq_len=L, max_kv_len=L) if with_rows else cfg
                runs = {t: attend_tiled(lcfg, scores, v, valid, em, es, rq,
                                        tiled_format(lcfg, min(t, L), prob_bits,
                                                     max_kv_len=L))
                        for t in tiles}
                if with_rows:
                    runs["rows"] = attend_rows(lcfg, scores, v, valid, em, es, rq)
                for t, out in runs.items():
                    err, rounded = _errors(out, ref)
                    st = stats[t]
                    st["n"] += err.size
                    st["within"] += int((err <= 1.0).sum())
                    st["rounded"] += int((out == rounded).sum())
                    st["max"] = max(st["max"], float(err.max()))
                    st["sum"] += float(err.sum())
        result[int(L)] = {
            str(t): {"values": st["n"],
                     "within_1_lsb_pct": 100.0 * st["within"] / st["n"],
                     "correctly_rounded_pct": 100.0 * st["rounded"] / st["n"],
                     "max_err_lsb": st["max"],
                     "mean_abs_err_lsb": st["sum"] / st["n"]}
            for t, st in stats.items()}
        result[int(L)]["seconds"] = round(time.perf_counter() - t0, 2)
    return result
