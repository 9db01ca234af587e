"""Engine commands: one matrix-engine command per job, to every engine."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.bus.regmap import SHIFT_BITS
from hw.core.geometry import CoreGeometry
from hw.core.jobs import Requant, job_layout
from hw.core.layouts import sequence_layout

__all__ = ["EngineCommands"]


class EngineCommands(wiring.Component):
    """Turns each job into a :class:`hw.blocks.matmul.MatmulEngine` command (``m``, ``n``,
    ``k``, bias and requantization enables, the requantization multiplier and shift of the
    job's stage; with ``channel_scales``, ``channel`` for a projection of a run with
    CTRL.CHANNEL_SCALES) and offers it to every engine until each has taken it.

    Members
    -------
    job : ``In(stream.Signature(job_layout(geom)))``
        Taken when every engine has taken the previous command (``ready``).
    run : ``In(sequence_layout(geom))``
        The run's requantization fields (stable through a run).
    cmd : ``Out(stream.Signature(cmd_layout))`` per engine
        Valid from the second cycle after the job beat until taken.
    flush : ``In(1)``
        Withdraw the commands (the sequence is abandoned).

    The multiplier and shift are registers loaded with the job (the selection multiplexer sat
    in front of the engines' command checks).
    """

    def __init__(self, geom: CoreGeometry, cmd_layout: data.StructLayout):
        self.geom = geom
        super().__init__({
            "job": In(stream.Signature(job_layout(geom))),
            "run": In(sequence_layout(geom)),
            "cmd": Out(stream.Signature(cmd_layout)).array(geom.E),
            "flush": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        E = self.geom.E
        job, run = self.job, self.run
        cur = Signal.like(job.payload)         # the job being run
        pending = Signal(E)
        rq_mult = Signal(self.geom.cfg.requant_mult_bits)
        rq_shift = Signal(SHIFT_BITS)
        rq_en = Signal()
        m.d.comb += job.ready.eq(pending == 0)
        for e in range(E):
            cmd, p = self.cmd[e], self.cmd[e].payload
            m.d.comb += [
                cmd.valid.eq(pending[e]),
                p.m.eq(cur.m), p.n.eq(cur.n), p.k.eq(cur.k),
                p.bias_en.eq(cur.bias), p.requant_en.eq(rq_en),
                p.mult.eq(rq_mult), p.shift.eq(rq_shift),
            ]
            if self.geom.cfg.channel_scales:
                # CTRL.CHANNEL_SCALES: the projections (the jobs with a bias) per channel
                m.d.comb += p.channel.eq(cur.bias & run.channel_scales)
            with m.If(cmd.valid & cmd.ready):
                m.d.sync += pending[e].eq(0)
        with m.If(job.valid):
            m.d.sync += [cur.eq(job.payload), pending.eq((1 << E) - 1),
                         rq_en.eq(job.payload.rq != Requant.NONE)]
            with m.Switch(job.payload.rq):
                for code in (Requant.Q, Requant.K, Requant.V, Requant.PV, Requant.O):
                    n = code.name.lower()
                    with m.Case(code):
                        m.d.sync += [rq_mult.eq(run[f"rq_{n}_mult"]),
                                     rq_shift.eq(run[f"rq_{n}_shift"])]
                with m.Default():
                    m.d.sync += [rq_mult.eq(1), rq_shift.eq(1)]
        with m.If(self.flush):
            m.d.sync += pending.eq(0)
        return m
