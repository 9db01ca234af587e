"""Random but realistic test layers and input sequences, shared by tests and benchmarks.

A float layer with torch's initialisation is quantized on calibration data drawn from the same
distribution as the test inputs, so every requantization parameter is what a user would get.
"""

from __future__ import annotations

import numpy as np

import golden as g

__all__ = ["make_layer", "make_case", "mode_specs", "pos_enc_specs", "whole_top_configs",
           "STALLS"]

# Idle-cycle and backpressure probabilities of the stream tests: none, and random stalls.
STALLS = {"none": (0.0, 0.0), "stalls": (0.3, 0.4)}


def whole_top_configs(tiny: g.AttentionConfig) -> dict[str, g.AttentionConfig]:
    """The whole-top test configurations, derived from ``configs/tiny.toml``."""
    return {
        # one engine, 4x4, causal + cross-attention
        "tiny": tiny,
        # two head engines in parallel; the 1-D positional encoding on a 20-position table;
        # per-channel weight scales (its layers are quantized per channel)
        "tiny-2eng": tiny.replace(name="tiny-2eng", engines=2, pos_enc=["1d"],
                                  max_position=20, channel_scales=True),
        # non-square array, two softmax lanes, longer sequences; both positional encodings;
        # an additive scorer of 3 lanes (its layers are quantized for additive scores)
        "narrow": tiny.replace(name="narrow", array_rows=2, array_cols=4, softmax_lanes=2,
                               max_seq_len=12, max_kv_len=10, pos_enc=["1d", "2d"],
                               additive_lanes=3),
        # the key/value-tiled path: two query tiles (8 + 4 rows) by three key tiles at the
        # longest lengths, two engines; single input and output buffers, biases (and the
        # per-channel scale table) in LUT RAM
        "tiled": tiny.replace(name="tiled", engines=2, max_seq_len=12, max_kv_len=12,
                              kv_tile=4, q_tile=8, double_buffer=False,
                              bias_in_lut_ram=True, channel_scales=True),
        # 16-bit activations (two per bus word) and probabilities (a 256-interval exp table,
        # a 24-bit reciprocal) with per-channel scales, two engines; the 35-bit accumulators
        # its 8-term int16 Q.K^T needs
        "wide": tiny.replace(name="wide", engines=2, act_bits=16, acc_bits=35,
                             channel_scales=True, prob_bits=16, recip_bits=24,
                             exp_table_size=256, exp_frac_bits=18),
    }


def mode_specs(cfg: g.AttentionConfig) -> list[dict]:
    """Every mode and the edge lengths (for :func:`make_case`): full, 1, odd, causal with key
    padding, one key; in cross mode also kv_len != seq_len and a single key/value row."""
    S, KV = cfg.max_seq_len, cfg.max_kv_len
    SS = min(S, KV)          # self-attention: the queries are also the keys
    out = [dict(seq=SS), dict(seq=1), dict(seq=3 if SS > 3 else 1, causal=cfg.causal_mask),
           dict(seq=SS, causal=cfg.causal_mask, key_len=max(1, SS // 2)),
           dict(seq=max(1, SS - 1), key_len=1)]
    if cfg.cross_attention:
        out += [dict(seq=max(1, S // 2), kv=KV), dict(seq=S, kv=1),
                dict(seq=S, kv=max(1, KV - 3), causal=cfg.causal_mask, key_len=max(1, KV - 4))]
    return out + pos_enc_specs(cfg)


def pos_enc_specs(cfg: g.AttentionConfig) -> list[dict]:
    """Runs of each positional encoding the configuration builds, alone and with causal,
    key padding and cross-attention: 1-D from position 0 and from an offset that ends at
    the table's last position, 2-D grids of 2 and of the whole length in one row."""
    S, KV, P = cfg.max_seq_len, cfg.max_kv_len, cfg.positions
    SS = min(S, KV)
    out = []
    if "1d" in cfg.pos_enc:
        out += [dict(seq=SS, pos_enc="1d"),
                dict(seq=max(1, SS - 2), pos_enc="1d", pe_offset=P - max(1, SS - 2),
                     causal=cfg.causal_mask, key_len=max(1, SS - 4))]
        if cfg.cross_attention:
            out.append(dict(seq=S, kv=max(1, KV - 1), pos_enc="1d", pe_offset=min(1, P - S)))
    if "2d" in cfg.pos_enc:
        even = SS - SS % 2
        out += [dict(seq=even, pos_enc="2d", grid_width=2, pe_offset=1,
                     causal=cfg.causal_mask),
                dict(seq=SS, pos_enc="2d", grid_width=SS, key_len=max(1, SS // 2))]
        if cfg.cross_attention:
            out.append(dict(seq=S - S % 2, kv=KV, pos_enc="2d", grid_width=2))
    return out


def make_layer(cfg: g.AttentionConfig, seed: int = 0, scoring: str | None = None,
               weight_scales: str | None = None):
    """(FloatLayer, QuantizedLayer, rng) for ``cfg``, quantized for ``scoring`` ("dot" or
    "additive"; default: additive where the configuration builds an additive scorer) and
    ``weight_scales`` ("tensor" or "channel"; default: channel where the configuration builds
    the scale table)."""
    if scoring is None:
        scoring = "additive" if cfg.additive else "dot"
    if weight_scales is None:
        weight_scales = "channel" if cfg.channel_scales else "tensor"
    rng = np.random.default_rng(seed)
    fl = g.random_float_layer(cfg, rng, additive=scoring == "additive")
    calib = rng.normal(0.0, 1.0, (4 * max(cfg.max_seq_len, 8), cfg.d_model))
    calib_kv = rng.normal(0.0, 1.0, calib.shape) if cfg.cross_attention else None
    # With an encoder, X is calibrated with the 1-D encoding added (its PE_MULT/PE_SHIFT
    # serve every mode: they only bring the codes to X's scale).
    pos_enc = ("1d", None) if cfg.pos_enc else None
    return fl, g.quantize_layer(cfg, fl, calib, calib_kv, pos_enc=pos_enc,
                                scoring=scoring, weight_scales=weight_scales), rng


def make_case(cfg: g.AttentionConfig, seed: int, specs: list[dict],
              scoring: str | None = None, weight_scales: str | None = None):
    """A quantized layer (for ``scoring`` and ``weight_scales``, as :func:`make_layer`) and
    one run per spec.

    A spec has ``seq`` (query rows), optional ``kv`` (rows of a second sequence: cross mode),
    ``causal``, ``key_len`` and the positional encoding's ``pos_enc`` (``"off"``, ``"1d"``,
    ``"2d"``), ``pe_offset`` and ``grid_width``. Each run is a dict with int8 arrays ``x``
    (and ``kv``) plus the mode keys, ready for :func:`golden.attention_int` and the drivers.
    """
    _, layer, rng = make_layer(cfg, seed, scoring, weight_scales)
    s_x, s_kv = layer.scales["x"], layer.scales["kv"]
    runs = []
    for spec in specs:
        x = g.quantize_tensor(rng.normal(0.0, 1.0, (spec["seq"], cfg.d_model)), s_x,
                              cfg.act_bits)
        run = {"x": x, "causal": bool(spec.get("causal", False)),
               "key_len": spec.get("key_len"), "pos_enc": spec.get("pos_enc", "off"),
               "pe_offset": spec.get("pe_offset", 0), "grid_width": spec.get("grid_width")}
        if spec.get("kv"):
            run["kv"] = g.quantize_tensor(rng.normal(0.0, 1.0, (spec["kv"], cfg.d_model)),
                                          s_kv, cfg.act_bits)
        runs.append(run)
    return layer, runs
