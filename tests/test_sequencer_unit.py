"""HeadSequencer alone: the job order of one layer, the handoff, and an abandoned sequence."""

from __future__ import annotations

import pytest

import golden as g
from hw.core.geometry import CoreGeometry
from hw.core.jobs import ASource, BSource, Dest, Requant
from hw.core.sequencer import HeadSequencer
from hw.gen.verilog import REPO_ROOT
from sim.amaranth_streams import simulate

TINY = g.load_config(REPO_ROOT / "configs" / "tiny.toml")


def expected_jobs(cfg, seq, kvrows, cross):
    """(a, b, w, bias, rq, dst, m, n, k, lh) of every job, in order."""
    G = -(-cfg.heads // cfg.engines)
    dk, d = cfg.head_dim, cfg.d_model
    kv_src = ASource.KV if cross else ASource.X
    jobs = []
    for lh in range(G):
        jobs += [(ASource.X, BSource.W, 0, 1, Requant.Q, Dest.Q, seq, dk, d, lh),
                 (kv_src, BSource.W, 1, 1, Requant.K, Dest.K, kvrows, dk, d, lh),
                 (kv_src, BSource.W, 2, 1, Requant.V, Dest.V, kvrows, dk, d, lh)]
    for lh in range(G):
        jobs += [(ASource.Q, BSource.K, None, 0, Requant.NONE, Dest.S, seq, kvrows, dk, lh),
                 (ASource.P, BSource.V, None, 0, Requant.PV, Dest.ATTN, seq, dk, kvrows, lh)]
    for lh in range(G):
        jobs.append((ASource.ATTN, BSource.W, 3, 1, Requant.O, Dest.OUT, seq, dk, d, lh))
    return jobs


@pytest.mark.parametrize("engines,cross", [(1, False), (2, True), (2, False)])
def test_job_order_and_handoff(engines, cross):
    cfg = TINY.replace(heads=4, head_dim=4, engines=engines)
    dut = HeadSequencer(CoreGeometry(cfg))
    seq, kvrows = 5, 7 if cross else 5
    jobs, starts, handoffs = [], [], []

    async def datapath(ctx):
        """Idle a few cycles after each job (the registered ready falls with the beat)."""
        busy = 0
        ctx.set(dut.job.ready, 1)
        while True:
            _, _, valid, payload, start = await ctx.tick().sample(
                dut.job.valid, dut.job.payload, dut.softmax_start)
            if start:
                starts.append(len(jobs))
            if valid and busy == 0:
                p = payload
                jobs.append((p.a, p.b, p.w, p.bias, p.rq, p.dst, p.m, p.n, p.k, p.lh))
                busy = 4
                ctx.set(dut.job.ready, 0)
            elif busy:
                busy -= 1
                ctx.set(dut.job.ready, busy == 0)

    async def control(ctx):
        loaded = dut.loaded.payload
        ctx.set(loaded.seq, seq)
        ctx.set(loaded.kvrows, kvrows)
        ctx.set(loaded.cross, int(cross))
        ctx.set(loaded.t0, 1234)
        ctx.set(dut.loaded.valid, 1)
        await ctx.tick().until(dut.loaded.ready)
        ctx.set(dut.loaded.valid, 0)
        ctx.set(dut.handoff.ready, 1)
        for _ in range(2000):
            _, _, valid, payload = await ctx.tick().sample(dut.handoff.valid,
                                                           dut.handoff.payload)
            if valid:
                handoffs.append((payload.seq, payload.bank, payload.t0))
                break
        await ctx.tick()
        assert not ctx.get(dut.busy) and ctx.get(dut.o_bank) == 1

    simulate(dut, control, background=[datapath])
    want = expected_jobs(cfg, seq, kvrows, cross)
    # A scores job leaves w as it was (only W jobs read it).
    got = [j if j[1] == BSource.W else (*j[:2], None, *j[3:]) for j in jobs]
    assert got == want
    # The softmax starts with each scores job's beat (from a register), one per head group.
    assert starts == [i for i, j in enumerate(want) if j[5] == Dest.S]
    assert handoffs == [(seq, 0, 1234)]


def test_fault_abandons_the_sequence():
    cfg = TINY
    dut = HeadSequencer(CoreGeometry(cfg))

    async def control(ctx):
        ctx.set(dut.loaded.payload.seq, 3)
        ctx.set(dut.loaded.payload.kvrows, 3)
        ctx.set(dut.loaded.valid, 1)
        await ctx.tick()
        ctx.set(dut.loaded.valid, 0)
        ctx.set(dut.job.ready, 1)
        for _ in range(3):
            await ctx.tick()
        assert ctx.get(dut.busy)
        ctx.set(dut.fault, 1)
        assert ctx.get(dut.flush)
        await ctx.tick()
        ctx.set(dut.fault, 0)
        assert not ctx.get(dut.busy) and not ctx.get(dut.handoff.valid)
        assert ctx.get(dut.loaded.ready)       # ready for the next sequence

    simulate(dut, control)
