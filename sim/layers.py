"""Random but realistic test layers and input sequences, shared by tests and benchmarks.

A float layer with torch's initialisation is quantized on calibration data drawn from the same
distribution as the test inputs, so every requantization parameter is what a user would get.
"""

from __future__ import annotations

import numpy as np

import golden as g

__all__ = ["make_layer", "make_case"]


def make_layer(cfg: g.AttentionConfig, seed: int = 0):
    """(FloatLayer, QuantizedLayer, rng) for ``cfg``."""
    rng = np.random.default_rng(seed)
    fl = g.random_float_layer(cfg, rng)
    calib = rng.normal(0.0, 1.0, (4 * max(cfg.max_seq_len, 8), cfg.d_model))
    calib_kv = rng.normal(0.0, 1.0, calib.shape) if cfg.cross_attention else None
    return fl, g.quantize_layer(cfg, fl, calib, calib_kv), rng


def make_case(cfg: g.AttentionConfig, seed: int, specs: list[dict]):
    """A quantized layer and one run per spec.

    A spec has ``seq`` (query rows), optional ``kv`` (rows of a second sequence: cross mode),
    ``causal`` and ``key_len``. Each run is a dict with int8 arrays ``x`` (and ``kv``) plus the
    mode keys, ready for :func:`golden.attention_int` and the drivers.
    """
    _, layer, rng = make_layer(cfg, seed)
    s_x, s_kv = layer.scales["x"], layer.scales["kv"]
    runs = []
    for spec in specs:
        x = g.quantize_tensor(rng.normal(0.0, 1.0, (spec["seq"], cfg.d_model)), s_x,
                              cfg.act_bits)
        run = {"x": x, "causal": bool(spec.get("causal", False)),
               "key_len": spec.get("key_len")}
        if spec.get("kv"):
            run["kv"] = g.quantize_tensor(rng.normal(0.0, 1.0, (spec["kv"], cfg.d_model)),
                                          s_kv, cfg.act_bits)
        runs.append(run)
    return layer, runs
