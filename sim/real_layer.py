"""A real model's attention layer on the generated hardware, word for word against golden.

all-MiniLM-L6-v2's layer ``N`` (:mod:`golden.real_model`), quantized on the calibration
sentences, runs the test sentences on the generated ``attention_top`` of the model's size
through the host API: by default ``configs/minilm.toml`` (16-bit activations, per-channel
weight scales); every output word is compared with :func:`golden.attention_int` and each row
with the float64 layer.
"""

from __future__ import annotations

import time

import numpy as np

import golden as g

__all__ = ["real_layer_rtl"]


def real_layer_rtl(layer: int = 0, sim: str = "verilator", sentences: int | None = None,
                   weight_scales: str = "channel", cfg: g.AttentionConfig | None = None) -> dict:
    """Runs layer ``layer`` on ``sim`` for the first ``sentences`` test sentences (all by
    default) on the top of ``cfg`` (default ``configs/minilm.toml``); returns the figures
    (values compared, mismatches, worst/mean row cosine, cycles, times)."""
    from golden.checkpoint import import_layer
    from golden.real_model import minilm16_config, model_dir, sentence_states
    from sim.host import Sequence, run_layer

    t0 = time.monotonic()
    cfg = minilm16_config() if cfg is None else cfg
    folder = model_dir()
    calib_h, test_h, _ = sentence_states(folder, cfg.heads)
    test_h = test_h[:sentences] if sentences else test_h
    fl = import_layer(folder / "model.safetensors", layer_index=layer).layer
    ql = g.quantize_layer(cfg, fl, [h[layer] for h in calib_h], weight_scales=weight_scales)
    s = ql.scales
    seqs = [Sequence(g.quantize_tensor(h[layer], s["x"], cfg.act_bits)) for h in test_h]
    stats = {}
    results = run_layer(cfg, ql, seqs, sim=sim, stats=stats)
    values = mismatches = 0
    cos, cycles = [], []
    for seq, h, res in zip(seqs, test_h, results):
        want = g.attention_int(cfg, ql, seq.x)
        values += want.size
        mismatches += int((res.out != want).sum())
        y = g.dequantize(res.out, s["out"])
        ref = g.attention_float(cfg, fl, h[layer])
        cos.append((y * ref).sum(1) / (np.linalg.norm(y, axis=1) * np.linalg.norm(ref, axis=1)))
        cycles.append(int(res.cycles))
    cos = np.concatenate(cos)
    return {"layer": layer, "config": cfg.name, "act_bits": cfg.act_bits, "simulator": sim,
            "weight_scales": weight_scales, "sentences": len(seqs),
            "tokens": int(sum(len(q.x) for q in seqs)), "values": int(values),
            "mismatches": mismatches, "cosine_min": float(cos.min()),
            "cosine_mean": float(cos.mean()), "cycles": cycles,
            "sim_cycles": stats.get("sim_cycles"), "wall_s": round(time.monotonic() - t0, 1)}
