"""StreamQueue (hw/blocks/queue.py): order, count and flags in every storage mode, under
random idle and backpressure."""

from __future__ import annotations

import random

import pytest
from amaranth.lib import data

from hw.blocks.queue import StreamQueue
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate

LAYOUT = data.StructLayout({"value": 12, "tag": 3})


def _payloads(n, seed):
    rng = random.Random(seed)
    return [{"value": rng.randrange(1 << 12), "tag": rng.randrange(8)} for _ in range(n)]


def _as_dict(view):
    return {"value": view.value, "tag": view.tag}


@pytest.mark.parametrize("storage,depth,one_hot", [
    ("registers", 1, False), ("registers", 3, False), ("registers", 3, True),
    ("distributed", 2, False), ("distributed", 5, False)])
@pytest.mark.parametrize("idle,bp", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.3, 0.5)])
def test_checked_queue_is_a_lossless_fifo(storage, depth, one_hot, idle, bp):
    q = StreamQueue(LAYOUT, depth, storage=storage, one_hot=one_hot)
    sent = _payloads(150, seed=depth)
    producer = StreamProducer(q.w_stream, sent, idle=idle, seed=5)
    consumer = StreamConsumer(q.r_stream, len(sent), backpressure=bp, seed=6, linger=8,
                              max_cycles=3000, convert=_as_dict)
    levels = []

    async def monitor(ctx):
        while True:
            if storage == "registers":
                levels.append(ctx.get(q.level))
            await ctx.tick()

    simulate(q, producer, consumer, background=[monitor])
    assert consumer.items == sent
    if storage == "registers":
        assert max(levels) <= depth
        if bp == 0.0 and idle == 0.0 and depth >= 2:
            # back to back at one beat per cycle (depth 1: ready does not look at the pop
            # of the same cycle, so one beat per two cycles)
            assert consumer.cycles[-1] - consumer.cycles[0] == len(sent) - 1


@pytest.mark.parametrize("one_hot", [False, True])
def test_unchecked_queue_with_room_counted_ahead(one_hot):
    """The matrix engine's and the operand fetch's use: the producer writes only with room
    (``level`` plus the write in flight); with ``one_hot`` a write lands in the entry the
    registered one-hot select names."""
    depth = 3
    q = StreamQueue(LAYOUT, depth, checked=False, one_hot=one_hot)
    sent = _payloads(200, seed=9)
    rng = random.Random(11)
    consumer = StreamConsumer(q.r_stream, len(sent), backpressure=0.5, seed=12, linger=8,
                              max_cycles=4000, convert=_as_dict)

    async def producer(ctx):
        i = 0
        valid = False            # the write of the current cycle, decided a cycle ahead
        while i < len(sent) or valid:
            if valid:
                ctx.set(q.w_stream.payload, sent[i])
            ctx.set(q.w_stream.valid, valid)
            # Room for the next cycle's write: level without this cycle's pop, plus this
            # cycle's write (the producers in the design count the same way).
            level = ctx.get(q.level)
            nxt = (i + valid < len(sent) and level + valid <= depth - 1
                   and rng.random() < 0.8)
            await ctx.tick()
            i += valid
            valid = nxt
        ctx.set(q.w_stream.valid, 0)

    simulate(q, producer, consumer)
    assert consumer.items == sent


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="storage must be"):
        StreamQueue(8, 2, storage="bram")
    with pytest.raises(ValueError, match="depth must be an integer >= 2"):
        StreamQueue(8, 1, storage="distributed")
    with pytest.raises(ValueError, match="one-hot write select needs registers"):
        StreamQueue(8, 3, storage="distributed", one_hot=True)
