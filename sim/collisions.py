"""Simulation platform that makes ``no_rw_check`` claims testable.

A memory marked ``no_rw_check`` (``attrs={"no_rw_check": 1}``) promises that the data of a
synchronous read of an address written in the same cycle is never used: synthesis then drops
Yosys's read-first collision emulation (``hw.flow.synth.declare_no_rw_collisions``) and the real
block RAM returns whatever its ports give on a collision. Amaranth's simulator always returns
the old word, so an exact-equality test alone cannot tell whether the promise holds.

:class:`CollisionScramble` is a platform to elaborate a design with (``Fragment.get(dut,
CollisionScramble())``, then simulate the fragment). For every ``no_rw_check`` memory it
builds the usual memory, except that a synchronous read port whose address is being written
in that cycle by a non-transparent write port of its domain returns the old word inverted
(every bit wrong) until its next enabled read. Any use of such data then fails the
exact-equality comparison with the golden model. ``counters`` holds, per checked memory, a
counter of the reads that collided, so a test can also show that the check was not vacuous.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Shape, Signal, Value
from amaranth.hdl._mem import MemoryInstance

__all__ = ["CollisionScramble"]


class CollisionScramble:
    """Platform for simulation: scrambles colliding reads of ``no_rw_check`` memories."""

    def __init__(self):
        #: (checked memory, counter of its colliding reads), in elaboration order
        self.counters: list[tuple[object, Signal]] = []

    def get_memory(self, memory):
        instance = MemoryInstance(data=memory.data, attrs=memory.attrs, src_loc=memory.src_loc)
        write_index = {}
        for port in memory.write_ports:
            write_index[port] = instance.write_port(domain=port.domain, addr=port.addr,
                                                    data=port.data, en=port.en)
        checked = bool(memory.attrs.get("no_rw_check"))
        if not checked:
            for port in memory.read_ports:
                instance.read_port(domain=port.domain, addr=port.addr, data=port.data,
                                   en=port.en, transparent_for=tuple(
                                       write_index[w] for w in port.transparent_for))
            return instance

        m = Module()
        m.submodules.instance = instance
        count = Signal(32, name="collisions")
        events = []
        width = Shape.cast(memory.shape).width
        for port in memory.read_ports:
            transparent = tuple(write_index[w] for w in port.transparent_for)
            if port.domain == "comb":
                instance.read_port(domain="comb", addr=port.addr, data=port.data, en=port.en,
                                   transparent_for=transparent)
                continue
            raw = Signal(width, name="raw_data")
            instance.read_port(domain=port.domain, addr=port.addr, data=raw, en=port.en,
                               transparent_for=transparent)
            hit = 0
            for w in memory.write_ports:
                if w.domain == port.domain and w not in port.transparent_for:
                    hit = hit | (w.en.any() & (w.addr == port.addr))
            collided = Signal(name="collided")
            with m.If(port.en):
                m.d[port.domain] += collided.eq(hit)
            m.d.comb += Value.cast(port.data).eq(Mux(collided, ~raw, raw))
            events.append(port.en & hit)
        if events:
            # (the counter runs in the domain of the first read port: tests use one clock)
            domain = next(p.domain for p in memory.read_ports if p.domain != "comb")
            total = sum(e.as_unsigned() for e in events)
            m.d[domain] += count.eq(count + total)
            self.counters.append((memory, count))
        return m
