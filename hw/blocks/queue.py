"""One elastic buffer for the whole design: a stream queue with its storage as a parameter."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["StreamQueue"]


def _wrap_incr(ptr, depth):
    """``ptr + 1`` modulo ``depth`` (rings need not be a power of two deep)."""
    return Mux(ptr == depth - 1, 0, ptr + 1)


class StreamQueue(wiring.Component):
    """A first-in first-out queue of ``depth`` stream payloads.

    Parameters
    ----------
    shape : shape-like
        The payload (a ``data.StructLayout`` in most uses).
    depth : int
        Entries (>= 1 for ``registers``, >= 2 for ``distributed``).
    storage : ``"registers"`` or ``"distributed"``
        ``registers``: a ring of flip-flops read through a multiplexer; a pop moves only the
        read pointer (a shift queue's pop reached the enables of every entry, and was a routed
        top's worst path). For shallow, wide queues: operand beats, result rows.
        ``distributed``: LUT RAM read asynchronously into an output register, so ``r_stream.payload``
        comes from a flip-flop while the storage never becomes block RAM (a DP16KD's
        clock-to-output alone takes most of a cycle on ECP5). For deeper, narrow queues: the
        softmax unit's row descriptors.
    checked : bool
        Whether a write needs ``w_stream.ready`` (``True``: a standard stream sink). ``False`` for a
        producer that counts room itself (from ``level``, a cycle ahead): the write enables
        then depend on ``w_stream.valid`` alone, without the full compare in front of every entry;
        such a producer must never write a full queue.
    one_hot : bool
        ``registers`` only. The slot the next write goes to is a one-hot register, moved on by
        each write, and an entry's write enable is that bit AND the write: one LUT from
        flip-flops when ``w_stream.valid`` is itself one LUT from flip-flops (the matrix
        engine's output buffer, where decoding the write pointer after a late ``valid`` was
        the routed top's worst path).

    Members
    -------
    w_stream : ``In(stream.Signature(shape))``
        Writes. ``w_stream.ready`` is ``level != depth`` (``registers``) or the storage not being full
        (``distributed``), from registers.
    r_stream : ``Out(stream.Signature(shape))``
        Reads. ``r_stream.valid`` is a flip-flop. ``registers``: ``r_stream.payload`` is the head entry
        through the read multiplexer, ``r_stream.valid`` rises the cycle after the first write.
        ``distributed``: ``r_stream.payload`` is a flip-flop, ``r_stream.valid`` rises the cycle after the
        write (the same cycle behaviour as ``amaranth.lib.fifo.SyncFIFOBuffered``).
    level : ``Out(range(depth + 1))``
        ``registers`` only: entries held (a register; a producer computes room from it without
        the pop of the same cycle, which keeps ``r_stream.ready`` out of its enables).

    Throughput: one write and one read per cycle. To empty the queue at once, wrap it in a
    ``ResetInserter`` (the entries keep their contents; pointers, level and valid reset).
    """

    def __init__(self, shape, depth: int, *, storage: str = "registers", checked: bool = True,
                 one_hot: bool = False):
        if storage not in ("registers", "distributed"):
            raise ValueError(f"storage must be 'registers' or 'distributed', not {storage!r}")
        min_depth = 1 if storage == "registers" else 2
        if not isinstance(depth, int) or depth < min_depth:
            raise ValueError(f"depth must be an integer >= {min_depth} for {storage} storage, "
                             f"not {depth!r}")
        if one_hot and storage != "registers":
            raise ValueError("a one-hot write select needs registers storage")
        self.shape, self.depth, self.storage = shape, depth, storage
        self.checked, self.one_hot = checked, one_hot
        ports = {"w_stream": In(stream.Signature(shape)), "r_stream": Out(stream.Signature(shape))}
        if storage == "registers":
            ports["level"] = Out(range(depth + 1))
        super().__init__(ports)

    def elaborate(self, platform):
        if self.storage == "registers":
            return self._registers()
        return self._distributed()

    def _registers(self):
        m = Module()
        depth, w, r = self.depth, self.w_stream, self.r_stream
        entries = [Signal.like(w.payload, name=f"entry{i}", reset_less=True)
                   for i in range(depth)]
        rd = Signal(range(depth))
        push = w.valid & w.ready if self.checked else w.valid
        pop = r.valid & r.ready
        m.d.comb += [w.ready.eq(self.level != depth), r.payload.eq(Array(entries)[rd])]
        if self.one_hot:
            wsel = Signal(depth, init=1)
            with m.If(push):
                m.d.sync += wsel.eq(wsel.rotate_left(1))
            for i in range(depth):
                with m.If(push & wsel[i]):
                    m.d.sync += entries[i].eq(w.payload)
        else:
            wr = Signal(range(depth))
            with m.If(push):
                m.d.sync += [Array(entries)[wr].eq(w.payload), wr.eq(_wrap_incr(wr, depth))]
        with m.If(pop):
            m.d.sync += rd.eq(_wrap_incr(rd, depth))
        level_next = self.level + push - pop
        m.d.sync += [self.level.eq(level_next), r.valid.eq(level_next != 0)]
        return m

    def _distributed(self):
        m = Module()
        w, r = self.w_stream, self.r_stream
        inner_depth = self.depth - 1
        inner_level = Signal(range(inner_depth + 1))
        inner_valid = Signal()
        m.d.comb += [w.ready.eq(inner_level != inner_depth), inner_valid.eq(inner_level != 0)]
        do_write = w.valid & w.ready if self.checked else w.valid
        do_inner_read = inner_valid & (~r.valid | r.ready)
        # ram_style: keep Yosys from turning the read and its register into a block RAM.
        m.submodules.storage = storage = Memory(shape=self.shape, depth=inner_depth, init=[],
                                                attrs={"ram_style": "distributed"})
        w_port = storage.write_port()
        r_port = storage.read_port(domain="comb")
        produce = Signal(range(inner_depth))
        consume = Signal(range(inner_depth))
        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(w.payload),
                     w_port.en.eq(do_write), r_port.addr.eq(consume)]
        with m.If(do_write):
            m.d.sync += produce.eq(_wrap_incr(produce, inner_depth))
        with m.If(do_inner_read):
            m.d.sync += [consume.eq(_wrap_incr(consume, inner_depth)),
                         r.payload.eq(r_port.data)]
        with m.If(do_write & ~do_inner_read):
            m.d.sync += inner_level.eq(inner_level + 1)
        with m.If(do_inner_read & ~do_write):
            m.d.sync += inner_level.eq(inner_level - 1)
        with m.If(do_inner_read):
            m.d.sync += r.valid.eq(1)
        with m.Elif(r.ready):
            m.d.sync += r.valid.eq(0)
        return m
