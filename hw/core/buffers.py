"""The core's on-chip buffers (block RAM), one component that owns every memory."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort
from amaranth.lib.wiring import Out

from hw.core.arith import addr_bits, cdiv
from hw.core.geometry import CoreGeometry

__all__ = ["CoreBuffers"]


class CoreBuffers(wiring.Component):
    """Every buffer of the attention core, with one read and one write port each.

    Buffers (``E`` engines, ``R`` x ``C`` array, see :class:`~hw.core.geometry.CoreGeometry`)
    -------------------------------------------------------------------------------------
    x, kv : ``R`` banks of 32-bit words (``EPW`` activations), double buffered (``double_buffer``)
        Input rows; row ``i`` in bank ``i % R`` at ``(i // R) * XW + word``; the address's top
        bit selects the buffer (the next sequence loads while the arrays read the other;
        single buffered, the port has no such bit and the writers' bank bit falls off). ``kv``
        exists only with ``cross_attention`` (else its ports are absent).
    w, b : per engine, words of ``C`` lanes
        Weights (4 int8 per lane) and biases (``bias_bits`` per lane) of the engine's heads.
    r : per engine, words of ``C`` lanes, with ``channel_scales``
        The scale table beside ``b`` (same addresses): per lane a requantization multiplier
        (``requant_mult_bits``) and shift minus one (6 bits) of that output channel.
    q, a : per engine, ``R`` banks of ``C`` activations (``act_bits`` each)
        Q of the current head group and the attention output A of every head group.
    k : per engine, ``C`` banks of ``C`` activations; v : per engine, ``C`` per word
    s : per engine, ``C`` scores of ``score_bits`` per word (one head's S, or on the tiled
        path one tile of ``q_tile`` rows by ``kv_tile`` keys)
    p : per engine, ``R`` banks of ``softmax_lanes`` probabilities of ``prob_bits`` (tiled:
        the unnormalized E, ``Bt + 1`` bits, of two tiles, the address's top bit selecting
        the tile: the softmax writes the next tile's while P.V reads the current one's)
    o : per engine, ``C`` activations per word, double buffered with ``double_buffer`` (the next
        sequence's output is written while the previous one streams out)

    Members
    -------
    <buffer>_read : ``Out(ReadPort.Signature)``, arrays as above
        Synchronous read port (data the cycle after the address, while ``en``).
    <buffer>_write : ``Out(WritePort.Signature)``, arrays as above
        Write port (``w`` with byte lanes, ``b`` with ``bias_bits`` lanes).

    Every memory carries ``no_rw_check``: no buffer is read in the cycle its address is written
    (the input and output buffers are double, a job reads only what earlier jobs or completed
    rows wrote, weight writes are refused while busy), so synthesis need not emulate
    read-first collisions (:func:`hw.flow.synth.declare_no_rw_collisions`); the unit tests
    check the claim with colliding reads scrambled (:mod:`sim.collisions`).
    """

    def __init__(self, geom: CoreGeometry):
        self.geom = g = geom
        cfg = g.cfg
        R, C, E, G, TN, L, A = g.R, g.C, g.E, g.G, g.TN, g.L, g.A
        SEQ, KV = g.SEQ, g.KV
        # name: (width, depth, granularity, shape of the port array, banked)
        spec = {
            "x": (32, g.x_depth, None, (R,), cfg.double_buffer),
            "w": (32 * C, 4 * G * TN * g.D4, 8, (E,), False),
            "b": (cfg.bias_bits * C, 4 * G * TN, cfg.bias_bits, (E,), False),
            "q": (A * C, cdiv(SEQ, R) * G * TN, None, (E, R), False),
            "k": (A * C, cdiv(KV, C) * G * TN, None, (E, C), False),
            "v": (A * C, KV * G * TN, None, (E,), False),
            "s": (cfg.score_bits * C, g.S_ROWS * g.TNk, None, (E,), False),
            "p": (g.p_bits * L, g.p_depth, None, (E, R), g.tiled),
            "a": (A * C, cdiv(SEQ, R) * G * TN, None, (E, R), False),
            "o": (A * C, g.o_depth, None, (E,), cfg.double_buffer),
        }
        if cfg.cross_attention:
            spec["kv"] = (32, g.kv_depth, None, (R,), cfg.double_buffer)
        if cfg.channel_scales:
            lane = g.scale_lane_bits
            spec["r"] = (lane * C, 4 * G * TN, lane, (E,), False)
        self._spec = spec
        ports = {}
        for name, (width, depth, gran, dims, banked) in spec.items():
            aw = addr_bits(depth) + 1 if banked else addr_bits(depth)
            ports[f"{name}_read"] = Out(ReadPort.Signature(
                addr_width=aw, shape=unsigned(width))).array(*dims)
            ports[f"{name}_write"] = Out(WritePort.Signature(
                addr_width=aw, shape=unsigned(width), granularity=gran)).array(*dims)
        super().__init__(ports)

    @staticmethod
    def _depth(depth, banked):
        # Two buffers of ``depth`` words in one memory: address ``Cat(addr, bank)``.
        return (1 << addr_bits(depth)) + depth if banked else depth

    def elaborate(self, platform):
        m = Module()
        for name, (width, depth, gran, dims, banked) in self._spec.items():
            reads, writes = getattr(self, f"{name}_read"), getattr(self, f"{name}_write")
            attrs = {"no_rw_check": 1}
            if name in ("b", "r") and self.geom.cfg.bias_in_lut_ram:
                attrs["ram_style"] = "distributed"
            for index in _indices(dims):
                mem = Memory(shape=unsigned(width), depth=self._depth(depth, banked), init=[],
                             attrs=attrs)
                m.submodules[f"{name}_mem" + "_".join(map(str, index))] = mem
                wiring.connect(m, wiring.flipped(_at(writes, index)),
                               mem.write_port(granularity=gran))
                wiring.connect(m, wiring.flipped(_at(reads, index)), mem.read_port())
        return m


def _indices(dims):
    if not dims:
        yield ()
        return
    for i in range(dims[0]):
        for rest in _indices(dims[1:]):
            yield (i, *rest)


def _at(ports, index):
    for i in index:
        ports = ports[i]
    return ports
