"""Attention writer (tiled path): one engine's normalised query tiles into its attention buffer."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from hw.core.arith import divmod_const, mixed_radix
from hw.core.geometry import CoreGeometry

__all__ = ["AttnWriter", "attn_tile_layout"]


def attn_tile_layout(geom: CoreGeometry) -> data.StructLayout:
    """Where a query tile's attention rows go: its first row tile ``m0`` and head group."""
    return data.StructLayout({"m0": range(geom.QTR + 1), "lh": range(geom.G + 1)})


class AttnWriter(wiring.Component):
    """Gathers the tile accumulator's normalised values (``norm_lanes`` per beat, columns in
    order within a row) into words of ``C`` activations and writes them into the attention buffer,
    where the output projection reads them as on the whole-row path.

    Members
    -------
    tile : ``In(stream.Signature(attn_tile_layout(geom)))``
        The query tile whose normalising pass comes next (the sequencer sends it with the
        tile's final E.V job). ``ready`` while no tile is pending: the previous pass is
        written completely.
    out : ``In(stream.Signature(tile_output_layout(...)))``
        The accumulator's output (row within the tile, first column, ``last`` on the tile's
        final beat). Always ready.
    a_write : ``In(WritePort.Signature)`` per bank (``R``)
        Row ``i`` of the tile (query ``m0 * R + i``) into bank ``i % R`` at word
        ``((m0 + i // R) * G + lh) * TN + col // C``; a head past ``heads`` is not written.
    idle : ``Out(1)``
        No tile pending (the same as ``tile.ready``).

    Latency: a word is written the cycle after the beat that completes it. Throughput: one
    beat per cycle.
    """

    def __init__(self, geom: CoreGeometry, engine: int, out_layout: data.StructLayout,
                 a_sig: WritePort.Signature):
        self.geom, self.engine = geom, engine
        self.lanes = out_layout["data"].shape.length
        super().__init__({
            "tile": In(stream.Signature(attn_tile_layout(geom))),
            "out": In(stream.Signature(out_layout)),
            "a_write": In(a_sig).array(geom.R),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        g, e, NL = self.geom, self.engine, self.lanes
        R, C, G, TN = g.R, g.C, g.G, g.TN
        tile, out = self.tile, self.out
        pending = Signal()
        cur = Signal.like(tile.payload)
        m.d.comb += [tile.ready.eq(~pending), self.idle.eq(~pending), out.ready.eq(1)]
        with m.If(tile.valid & tile.ready):
            m.d.sync += [cur.eq(tile.payload), pending.eq(1)]

        # The word being gathered: lane group col % C // NL of the beat.
        A = g.A
        word = Signal(A * C, reset_less=True)
        beat = out.payload
        col_tile, col_in = divmod_const(beat.col, C)
        groups = C // NL
        for grp in range(groups):
            hit = out.valid & (col_in == grp * NL) if groups > 1 else out.valid
            with m.If(hit):
                m.d.sync += word[grp * NL * A:(grp + 1) * NL * A].eq(
                    Cat(*[beat.data[lane][:A] for lane in range(NL)]))
        complete = out.valid & (col_in + NL >= C)
        row_tile, row_bank = divmod_const(beat.row, R)
        w_en = Signal()
        w_bank = Signal(range(R))
        w_addr = Signal.like(self.a_write[0].addr)
        head_ok = (cur.lh * g.E + e) < g.cfg.heads
        m.d.sync += [w_en.eq(complete & head_ok), w_bank.eq(row_bank),
                     w_addr.eq(mixed_radix(cur.m0 + row_tile, (cur.lh, G), (col_tile, TN)))]
        for r in range(R):
            aw = self.a_write[r]
            m.d.comb += [aw.addr.eq(w_addr), aw.data.eq(word), aw.en.eq(w_en & (w_bank == r))]
        # The tile is done once its last word is written (a cycle after its last beat).
        w_last = Signal()
        m.d.sync += w_last.eq(out.valid & beat.last)
        with m.If(w_last):
            m.d.sync += pending.eq(0)
        return m
