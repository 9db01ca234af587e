"""Softmax unit cycle benchmark: the model of hw/perf/softmax.py against simulation.

Run as ``python -m hw bench --what softmax [--config configs/default.toml] [--rows 16]``. For every
lane count and row length it streams ``--rows`` rows back to back through the unit in the
Amaranth simulator (scores always valid, probs always ready), measures the cycles from the first
input beat to the last output beat (inclusive), and prints them beside
:func:`hw.perf.softmax.softmax_cycles`, with the model's steady-state cycles per row and the
latency from a row's first input beat to its first output beat. Exits with status 1 if any
measured figure differs from the model.
"""

from __future__ import annotations

import numpy as np

from hw.blocks.softmax import SoftmaxUnit
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate

__all__ = ["measure_cycles"]


def measure_cycles(cfg, n_rows: int, row_len: int, seed: int = 0) -> int:
    """Simulated cycles, first input beat to last output beat inclusive."""
    dut = SoftmaxUnit(cfg)
    lanes = cfg.softmax_lanes
    beats = -(-row_len // lanes)
    layout = dut.scores.payload.shape()
    rng = np.random.default_rng(seed)
    stream = [layout.const({"data": [int(v) for v in rng.integers(-999, 999, lanes)],
                            "row": r % cfg.max_seq_len, "last": int(b == beats - 1)})
              for r in range(n_rows) for b in range(beats)]
    producer = StreamProducer(dut.scores, stream)
    consumer = StreamConsumer(dut.probs, len(stream), max_cycles=50 * len(stream) + 500)

    async def settings(ctx):
        ctx.set(dut.exp_mult, 30000)
        ctx.set(dut.exp_shift, 12)
        ctx.set(dut.kv_len, cfg.max_kv_len)

    simulate(dut, settings, producer, consumer)
    return consumer.cycles[-1] - producer.accepted[0] + 1
