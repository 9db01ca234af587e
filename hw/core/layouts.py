"""Stream payloads and settings layouts shared by the core's blocks."""

from __future__ import annotations

from amaranth.lib import data, stream

from hw.bus.regmap import SHIFT_BITS
from hw.core.geometry import CoreGeometry

__all__ = ["WordStream", "sequence_layout"]

#: 32-bit bus words with the stream's last flag (input rows in, result rows out).
WordStream = stream.Signature(data.StructLayout({"data": 32, "last": 1}))


def sequence_layout(geom: CoreGeometry) -> data.StructLayout:
    """The settings of one sequence as the core's stages hand it on (loader, sequencer,
    streamer): lengths resolved (``kvrows``: rows of K/V, the second sequence's in cross mode;
    ``keylen``: keys not masked as padding), the run's mode and requantization fields, the START
    timestamp ``t0`` and the input buffer ``bank`` it was loaded into. With an additive scorer,
    CTRL.ADDITIVE and the tanh argument's multiplier and shift; with a scale table,
    CTRL.CHANNEL_SCALES."""
    cfg, lb = geom.cfg, geom.lb
    fields = {"seq": lb, "kvrows": lb, "keylen": lb, "causal": 1, "cross": 1,
              "exp_mult": cfg.exp_mult_bits, "exp_shift": SHIFT_BITS}
    for n in ("q", "k", "v", "pv", "o"):
        fields[f"rq_{n}_mult"] = cfg.requant_mult_bits
        fields[f"rq_{n}_shift"] = SHIFT_BITS
    if cfg.channel_scales:
        fields["channel_scales"] = 1
    if cfg.additive:
        fields.update({"additive": 1, "tanh_mult": cfg.requant_mult_bits,
                       "tanh_shift": SHIFT_BITS})
    fields.update({"t0": 32, "bank": 1})
    return data.StructLayout(fields)
