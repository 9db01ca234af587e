"""The Amaranth-simulator stream helpers (sim/amaranth_streams.py) on a small FIFO."""

from __future__ import annotations

import pytest
from amaranth.lib.fifo import SyncFIFO

from sim.amaranth_streams import (StreamConsumer, StreamProducer, simulate, stream_get,
                                  stream_put)


def test_put_get_in_order():
    fifo = SyncFIFO(width=8, depth=2)
    got = []

    async def writer(ctx):
        for v in range(10):
            await stream_put(ctx, fifo.w_stream, v * 7)

    async def reader(ctx):
        for _ in range(10):
            got.append(await stream_get(ctx, fifo.r_stream))

    simulate(fifo, writer, reader)
    assert got == [v * 7 for v in range(10)]


@pytest.mark.parametrize("idle,bp", [(0.0, 0.0), (0.4, 0.0), (0.0, 0.5), (0.3, 0.6)])
def test_producer_consumer_handshake_rules(idle, bp):
    """Every payload arrives once, in order; valid stays up with a stable payload until ready;
    the recorded cycles are those of the transfers."""
    fifo = SyncFIFO(width=8, depth=3)
    data = [(i * 37) & 0xFF for i in range(200)]
    producer = StreamProducer(fifo.w_stream, data, idle=idle, seed=3)
    consumer = StreamConsumer(fifo.r_stream, len(data), backpressure=bp, seed=4, linger=5,
                              max_cycles=5000)
    seen = {"held": 0, "violations": [], "writes": [], "reads": []}

    async def monitor(ctx):
        w, r = fifo.w_stream, fifo.r_stream
        waiting = None
        cycle = 0
        async for _, _, valid, payload, ready, r_take in ctx.tick().sample(
                w.valid, w.payload, w.ready, r.valid & r.ready):
            if waiting is not None:
                if not valid or payload != waiting:
                    seen["violations"].append(cycle)
                seen["held"] += 1
            waiting = payload if valid and not ready else None
            if valid and ready:
                seen["writes"].append(cycle)
            if r_take:
                seen["reads"].append(cycle)
            cycle += 1

    simulate(fifo, consumer, background=[producer, monitor])
    assert consumer.items == data
    assert producer.pending == 0
    assert seen["violations"] == []
    assert producer.accepted == seen["writes"]
    assert consumer.cycles == seen["reads"]
    assert len(producer.refused) == seen["held"]
    if idle == 0 and bp == 0:
        assert producer.accepted == list(range(len(data)))   # back to back
    if bp:
        assert seen["held"] > 0      # the FIFO filled, so holding was exercised


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_rejects_bad_probability():
    fifo = SyncFIFO(width=8, depth=2)
    with pytest.raises(ValueError, match="idle = 1.0 is out of range"):
        StreamProducer(fifo.w_stream, idle=1.0)
    with pytest.raises(ValueError, match="backpressure = -0.1 is out of range"):
        StreamConsumer(fifo.r_stream, backpressure=-0.1)
