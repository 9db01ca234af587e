"""Matrix-engine cycle benchmark: ``hw.perf.matmul`` model against the Amaranth simulation.

Run as ``python -m hw bench --what matmul [--config configs/tiny.toml]``. For each shape one command
runs with no stalls; the measured count is inclusive from the first accepted operand beat to
the last accepted result beat, the same definition as ``hw.perf.matmul.matmul_cycles``.
"""

from __future__ import annotations

import numpy as np

from hw.blocks.matmul import MatmulEngine
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from tests.matmul_vectors import expected_rows, operand_beats, random_case

__all__ = ["measure_cycles"]


def measure_cycles(cfg, m: int, n: int, k: int, seed: int = 0) -> int:
    """Simulate one requantized command with bias; checks the result against golden."""
    case = random_case(cfg, np.random.default_rng(seed), m, n, k, bias=True, requant=True)
    a, b, bias = operand_beats(cfg, case)
    expected = expected_rows(cfg, case)
    dut = MatmulEngine(cfg)
    producers = [StreamProducer(dut.cmd, [case.command()]), StreamProducer(dut.a, a),
                 StreamProducer(dut.b, b), StreamProducer(dut.bias, bias)]
    consumer = StreamConsumer(dut.result, len(expected), max_cycles=100 * len(a) + 1000,
                              convert=lambda p: (p.row, p.col, p.last,
                                                 tuple(int(v) for v in p.data)))
    simulate(dut, consumer, background=producers)
    if consumer.items != expected:
        raise AssertionError(f"results differ from golden for m={m} n={n} k={k}")
    return consumer.cycles[-1] - producers[1].accepted[0] + 1
