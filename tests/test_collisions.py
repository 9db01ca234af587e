"""sim.collisions.CollisionScramble: the simulation check behind ``no_rw_check``."""

from __future__ import annotations

from amaranth.hdl import Fragment, Module
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from sim.collisions import CollisionScramble


def _read_during_write(attrs, transparent=False):
    """Write 0x5A to word 3 (old value 0x0F), reading word 3 in the same cycle and word 2
    the cycle after; returns (colliding read, next read, word 3 read afterwards, count)."""
    m = Module()
    m.submodules.mem = mem = Memory(shape=8, depth=4, init=[0, 0, 0x21, 0x0F], attrs=attrs)
    wp = mem.write_port()
    rp = mem.read_port(transparent_for=(wp,) if transparent else ())
    platform = CollisionScramble()
    sim = Simulator(Fragment.get(m, platform))
    sim.add_clock(1e-8)
    got = []

    async def tb(ctx):
        for port, value in ((rp.addr, 3), (wp.addr, 3), (wp.data, 0x5A), (wp.en, 1)):
            ctx.set(port, value)
        await ctx.tick()
        ctx.set(wp.en, 0)
        got.append(ctx.get(rp.data))
        ctx.set(rp.en, 0)                   # a disabled port holds its (scrambled) data
        await ctx.tick()
        assert ctx.get(rp.data) == got[0]
        ctx.set(rp.en, 1)
        ctx.set(rp.addr, 2)
        await ctx.tick()
        got.append(ctx.get(rp.data))
        ctx.set(rp.addr, 3)
        await ctx.tick()
        got.append(ctx.get(rp.data))
        got.append(sum(ctx.get(c) for _, c in platform.counters))

    sim.add_testbench(tb)
    sim.run()
    return tuple(got)


def test_colliding_read_of_no_rw_check_memory_is_scrambled():
    assert _read_during_write({"no_rw_check": 1}) == (0x0F ^ 0xFF, 0x21, 0x5A, 1)


def test_other_memories_keep_simulator_behaviour():
    assert _read_during_write({}) == (0x0F, 0x21, 0x5A, 0)


def test_transparent_port_is_not_a_collision():
    assert _read_during_write({"no_rw_check": 1}, transparent=True) == (0x5A, 0x21, 0x5A, 0)
