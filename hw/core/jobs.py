"""The job stream: one matrix product of one head group, as the sequencer issues it.

Every matrix product runs on all engines at once, in lock-step, each on its own head's slice
(engine ``e`` works on head ``lh * E + e``): ``m x k`` rows of operand A times a ``k x n``
operand B, optionally plus a bias row and requantized to ``act_bits``, written to ``dst``.
"""

from __future__ import annotations

from amaranth.lib import data, enum


from hw.core.geometry import CoreGeometry

__all__ = ["ASource", "BSource", "Requant", "Dest", "job_layout"]


class ASource(enum.Enum, shape=3):
    """Operand A: rows of the M side (one element per array row per cycle)."""
    X = 0        # the input sequence (act_bits integers)
    KV = 1       # the second sequence of a cross run
    Q = 2        # Q of the head
    P = 3        # probabilities of the head (unsigned, prob_bits)
    ATTN = 4     # attention output A of every head, for the output projection


class BSource(enum.Enum, shape=2):
    """Operand B: columns of the N side (one element per array column per cycle)."""
    W = 0        # a weight matrix (Wq, Wk, Wv, Wo: ``JobLayout.w``), the head's rows
    K = 1        # K of the head, for S = Q K^T
    V = 2        # V of the head, for A = P V


class Requant(enum.Enum, shape=3):
    """Which run setting's multiplier and shift requantize the result (NONE: raw int32)."""
    NONE = 0
    Q = 1
    K = 2
    V = 3
    PV = 4
    O = 5


class Dest(enum.Enum, shape=3):
    """The buffer the result goes to."""
    Q = 0
    K = 1
    V = 2
    S = 3        # raw scores, for the softmax
    ATTN = 4
    OUT = 5      # the output buffer the streamer reads
    ACC = 6      # raw E.V of a key/value tile, to the tile accumulator (tiled path)


def job_layout(geom: CoreGeometry) -> data.StructLayout:
    """A job: sources, weight matrix ``w`` (0..3 = q, k, v, o), ``bias`` (add the bias row of
    ``w``), requantization, destination, the product's ``m``, ``n``, ``k`` and the head group
    ``lh``. The tiled path adds where a tile's operands start: ``m0`` (row tiles of Q),
    ``n0`` (column tiles of K) and ``k0`` (rows of V), and ``pbank``, the tile bank of E."""
    lb = geom.lb
    fields = {
        "a": ASource, "b": BSource, "w": 2, "bias": 1, "rq": Requant, "dst": Dest,
        "m": lb + 1,
        "n": max(lb, geom.dk.bit_length()) + 1,
        "k": max(lb, geom.d.bit_length()) + 1,
        "lh": range(geom.G + 1),
    }
    if geom.tiled:
        fields.update({"m0": range(geom.QTR + 1), "n0": range(geom.KVC + 1),
                       "k0": range(geom.KV + 1), "pbank": 1})
    return data.StructLayout(fields)
