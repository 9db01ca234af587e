"""Score select: a scores job of an additive run goes to the additive scorer instead of the
matrix engine."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.core.geometry import CoreGeometry
from hw.core.jobs import Dest, job_layout

__all__ = ["ScoreSelect"]


class ScoreSelect(wiring.Component):
    """Routes one engine's command, operands and results either through its matrix engine or,
    for the scores job (``Dest.S``) of a run with CTRL.ADDITIVE, through its additive scorer
    (:class:`hw.blocks.additive.AdditiveScorer`, which has the engine's contract for
    ``S = Q K^T``).

    Members
    -------
    job : ``In(stream.Signature(job_layout(geom)))``
        Always ready; the route and the head group are set with each job beat, two cycles
        before its command (:class:`~hw.core.commands.EngineCommands`), and hold until the
        next job, which the sequencer issues only once every result is written.
    additive : ``In(1)``
        The run's CTRL.ADDITIVE.
    cmd, a, b : ``In`` (the engine's streams, from the command block and the operand fetch)
    result : ``Out`` (the engine's result stream, to the result writer)
    engine_cmd, engine_a, engine_b : ``Out``; engine_result : ``In``
    scorer_cmd, scorer_a, scorer_b : ``Out``; scorer_result : ``In``
        The two destinations. The scorer's command is the engine command's ``m``, ``n``,
        ``k`` with the job's head group.

    Combinational: no latency, the throughput of the unit selected. Operand payloads go to
    both units; only ``valid``, ``ready`` and the result payload pass a multiplexer, and
    the result ``ready`` goes to both units unselected.
    """

    def __init__(self, geom: CoreGeometry, engine, scorer):
        self.geom = geom
        cmd = stream.Signature(engine.cmd_layout)
        a = engine.a.signature.flip()
        b = engine.b.signature.flip()
        res = stream.Signature(engine.result_layout)
        if scorer.result_layout != engine.result_layout:
            raise ValueError("the scorer's result layout differs from the engine's")
        super().__init__({
            "job": In(stream.Signature(job_layout(geom))), "additive": In(1),
            "cmd": In(cmd), "a": In(a), "b": In(b), "result": Out(res),
            "engine_cmd": Out(cmd), "engine_a": Out(a), "engine_b": Out(b),
            "engine_result": In(res),
            "scorer_cmd": Out(stream.Signature(scorer.cmd_layout)),
            "scorer_a": Out(scorer.a.signature.flip()),
            "scorer_b": Out(scorer.b.signature.flip()),
            "scorer_result": In(stream.Signature(scorer.result_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        sel = Signal()              # this job runs on the scorer
        lh = Signal.like(self.job.payload.lh)
        m.d.comb += self.job.ready.eq(1)
        with m.If(self.job.valid):
            m.d.sync += [sel.eq(self.additive & (self.job.payload.dst == Dest.S)),
                         lh.eq(self.job.payload.lh)]
        sc = self.scorer_cmd.payload
        m.d.comb += [
            self.engine_cmd.payload.eq(self.cmd.payload),
            sc.m.eq(self.cmd.payload.m), sc.n.eq(self.cmd.payload.n),
            sc.k.eq(self.cmd.payload.k), sc.lh.eq(lh),
            self.engine_a.payload.eq(self.a.payload), self.scorer_a.payload.eq(self.a.payload),
            self.engine_b.payload.eq(self.b.payload), self.scorer_b.payload.eq(self.b.payload),
        ]
        for src, eng, scr in ((self.cmd, self.engine_cmd, self.scorer_cmd),
                              (self.a, self.engine_a, self.scorer_a),
                              (self.b, self.engine_b, self.scorer_b)):
            m.d.comb += [eng.valid.eq(src.valid & ~sel), scr.valid.eq(src.valid & sel),
                         src.ready.eq(Mux(sel, scr.ready, eng.ready))]
        res, er, sr = self.result, self.engine_result, self.scorer_result
        m.d.comb += [
            res.valid.eq(Mux(sel, sr.valid, er.valid)),
            res.payload.eq(Mux(sel, sr.payload.as_value(), er.payload.as_value())),
            # Both units see the writer's ready: the one not selected holds no result (a
            # job's results are all written before the next job), and with the select in it
            # the ready into the scorer's result slice (about 340 enables) did not fit a cycle.
            er.ready.eq(res.ready), sr.ready.eq(res.ready),
        ]
        return m
