"""The head sequencer: the job order of one whole multi-head attention layer."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.core.geometry import CoreGeometry
from hw.core.jobs import ASource, BSource, Dest, Requant, job_layout
from hw.core.layouts import sequence_layout
from hw.core.attn_writer import attn_tile_layout
from hw.core.score_feed import tile_feed_layout
from hw.core.streamer import handoff_layout

__all__ = ["HeadSequencer", "tile_layout"]


def tile_layout(geom: CoreGeometry) -> data.StructLayout:
    """The tile the score feed and the P writer work on (tiled path): its ``rows``, ``keys``
    and bank of E, and the feed's fields (:func:`hw.core.score_feed.tile_feed_layout`)."""
    return data.StructLayout({"rows": geom.lb, "keys": geom.lb, "pbank": 1,
                              "feed": tile_feed_layout(geom)})


class HeadSequencer(wiring.Component):
    """Takes a loaded sequence and issues the jobs of its attention layer, head group by head
    group, then hands the finished output buffer to the streamer.

    Job order (``G`` head groups; every job runs on all ``E`` engines at once, engine ``e`` on
    head ``lh * E + e``):

    1. PROJ, per group: Q = rq_q(X Wq^T + bq), K and V likewise from KV (X, or the second
       sequence in cross mode): M = seq/kv rows, N = head_dim, K = d_model;
    2. per group: SCORES, S = Q K^T (raw int32, N = kv rows, K = head_dim), while the softmax
       feed turns S row by row into P; then PV, A = rq_pv(P V) (K = kv rows, N = head_dim),
       whose fetch waits for each row tile of P;
    3. OPROJ, per group: Y[:, cols of the group's heads] = rq_o(A Wo^T + bo), A of all heads;
    4. HANDOFF: the output buffer to the streamer; the next sequence writes the other one.

    With ``kv_tile > 0`` step 2 is the key/value tile loop of :class:`_TileLoop` (states
    DECIDE and DRAIN): scores and E V per query tile and key tile, one tile ahead.

    Members
    -------
    loaded : ``In(stream.Signature(sequence_layout(geom)))``
        The next loaded sequence; taken in IDLE.
    run : ``Out(sequence_layout(geom))``
        The settings of the sequence being computed (registers, stable through its jobs).
    job : ``Out(stream.Signature(job_layout(geom)))``
        The jobs, ``valid`` for one cycle each (``ready`` is the datapath's registered idle,
        which is high whenever the sequencer issues); the next job is decided once the
        datapath is idle again.
    softmax_start : ``Out(1)``
        Strobe with a SCORES job's beat (a register): the score feeds and P writers start.
    handoff : ``Out(stream.Signature(handoff_layout(geom)))``
        The finished sequence, to the streamer; ``o_bank`` flips as it is taken.
    o_bank : ``Out(1)``
        The output buffer half the jobs write.
    array_busy, softmax_stall : ``In(1)``
        Strobes counted while the sequence computes (BUSY_CYCLES, STALL_CYCLES).
    fault : ``In(1)``
        An engine rejected a command: abandon the sequence (``flush``, ``error``) instead of
        waiting for results that never come.
    flush : ``Out(1)``
        The datapath returns to idle this cycle (the sequence is abandoned).
    x_free, o_free : ``Out(1)``, ``In(1)``
        Without ``double_buffer``: the input buffer may take the next sequence (the
        projections are done); the streamer has sent the previous output (the output
        projection may write the single output buffer).
    tile : ``Out(tile_layout(geom))``, tiled path only
        The tile the score feed and the P writer take with ``softmax_start``.
    attn_tile : ``Out(stream.Signature(attn_tile_layout(geom)))``, tiled path only
        A query tile's place in the attention buffer, sent with its final E V job.
    attn_idle, acc_ready, acc_full, feed_idle : ``In``, tiled path only
        Every attention writer idle; every accumulator takes the next tile's results; per
        entry bank, any accumulator still holds it; every score feed idle (see
        :class:`_TileLoop`).
    busy : ``Out(1)``
        A sequence is being computed or waits for the streamer.
    """

    def __init__(self, geom: CoreGeometry):
        self.geom = geom
        ports = {
            "loaded": In(stream.Signature(sequence_layout(geom))),
            "run": Out(sequence_layout(geom)),
            "job": Out(stream.Signature(job_layout(geom))),
            "softmax_start": Out(1),
            "handoff": Out(stream.Signature(handoff_layout(geom))),
            "o_bank": Out(1),
            "array_busy": In(1), "softmax_stall": In(1),
            "fault": In(1), "flush": Out(1), "busy": Out(1),
            "x_free": Out(1), "o_free": In(1),
        }
        if geom.tiled:
            ports.update({
                "tile": Out(tile_layout(geom)),
                "attn_tile": Out(stream.Signature(attn_tile_layout(geom))),
                "attn_idle": In(1), "acc_ready": In(1), "acc_full": In(3), "feed_idle": In(1),
            })
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        geom = self.geom
        G, dk, d = geom.G, geom.dk, geom.d
        run, job = self.run, self.job.payload
        seq, kvrows, cross = run.seq, run.kvrows, run.cross
        job_go = self.job.valid
        # The datapath is idle and no job was issued in the cycle before (job_go masks the
        # cycle in which the registered idle still shows the job just issued as done).
        job_done = self.job.ready & ~job_go
        # Single output buffer: the output projection writes it once the streamer is done.
        o_free = 1 if geom.cfg.double_buffer else self.o_free

        g = Signal(range(G + 1))      # head group
        pj = Signal(2)                # projection: 0 = Q, 1 = K, 2 = V
        running = Signal()
        run_busy = Signal(32)
        run_stall = Signal(32)
        with m.If(running & self.array_busy):
            m.d.sync += run_busy.eq(run_busy + 1)
        tile_wait = Signal()          # tiled path: E V waits for the accumulators
        with m.If(running & (self.softmax_stall | tile_wait)):
            m.d.sync += run_stall.eq(run_stall + 1)

        # The softmax feed of a scores job starts from a register set with the job beat (the
        # decision reached the feeds' and the P writers' counters by both softmax units in
        # the same cycle); its first read waits for score rows, tens of cycles later.
        m.d.sync += self.softmax_start.eq(0)

        def issue(**fields):
            m.d.sync += job_go.eq(1)
            m.d.sync += [job[k].eq(v) for k, v in fields.items()]

        def scores_job(lh):
            issue(a=ASource.Q, b=BSource.K, bias=0, rq=Requant.NONE, dst=Dest.S, m=seq,
                  n=kvrows, k=dk, lh=lh)
            m.d.sync += self.softmax_start.eq(1)

        if geom.tiled:
            tiles = _TileLoop(self, run, tile_wait, o_free)
            tiles.outside(m)          # before the states, whose assignments take precedence

        def abandon_on_fault():
            with m.If(self.fault):
                m.d.comb += self.flush.eq(1)
                m.d.sync += running.eq(0)
                m.next = "IDLE"

        with m.FSM(name="seq") as seq_fsm:
            with m.State("IDLE"):
                m.d.comb += self.loaded.ready.eq(1)
                with m.If(self.loaded.valid):
                    # Take the loaded sequence: its settings, its input buffer.
                    m.d.sync += run.eq(self.loaded.payload)
                    m.d.sync += [g.eq(0), pj.eq(0), running.eq(1), run_busy.eq(0),
                                 run_stall.eq(0)]
                    issue(a=ASource.X, b=BSource.W, w=0, bias=1, rq=Requant.Q, dst=Dest.Q,
                          m=self.loaded.payload.seq, n=dk, k=d, lh=0)
                    m.next = "PROJ"
            with m.State("PROJ"):
                with m.If(job_done):
                    with m.If(pj == 2):
                        with m.If(g + 1 == G):
                            m.d.sync += [g.eq(0), pj.eq(0)]
                            if geom.tiled:
                                tiles.restart(m)
                            else:
                                scores_job(lh=0)
                                m.next = "SCORES"
                        with m.Else():
                            m.d.sync += [g.eq(g + 1), pj.eq(0)]
                            issue(a=ASource.X, w=0, rq=Requant.Q, dst=Dest.Q, m=seq, lh=g + 1)
                    with m.Else():
                        m.d.sync += pj.eq(pj + 1)
                        issue(a=Mux(cross, ASource.KV, ASource.X), m=kvrows, w=pj + 1,
                              rq=Mux(pj == 0, Requant.K, Requant.V),
                              dst=Mux(pj == 0, Dest.K, Dest.V))
                abandon_on_fault()
            with m.State("SCORES"):
                # The softmax unit works on rows as soon as their scores are written.
                with m.If(job_done):
                    issue(a=ASource.P, b=BSource.V, bias=0, rq=Requant.PV, dst=Dest.ATTN, m=seq,
                          n=dk, k=kvrows)
                    m.next = "PV"
                abandon_on_fault()
            with m.State("PV"):
                with m.If(job_done):
                    with m.If(g + 1 == G):
                        with m.If(o_free):
                            m.d.sync += g.eq(0)
                            issue(a=ASource.ATTN, b=BSource.W, w=3, bias=1, rq=Requant.O,
                                  dst=Dest.OUT, m=seq, n=dk, k=d, lh=0)
                            m.next = "OPROJ"
                    with m.Else():
                        m.d.sync += g.eq(g + 1)
                        scores_job(lh=g + 1)
                        m.next = "SCORES"
                abandon_on_fault()
            if geom.tiled:
                tiles.states(m, g, issue, abandon_on_fault, job_done)
            with m.State("OPROJ"):
                with m.If(job_done):
                    with m.If(g + 1 == G):
                        m.d.sync += running.eq(0)
                        m.next = "HANDOFF"
                    with m.Else():
                        m.d.sync += g.eq(g + 1)
                        issue(lh=g + 1)
                abandon_on_fault()
            with m.State("HANDOFF"):
                # The output buffer is complete: hand it to the streamer once that has
                # finished the previous sequence, and write the other buffer next. (seq >= 1:
                # the register block refuses SEQ_LEN 0, so there is a word to stream.)
                ho = self.handoff
                m.d.comb += [ho.valid.eq(1), ho.payload.seq.eq(seq),
                             ho.payload.bank.eq(self.o_bank), ho.payload.t0.eq(run.t0),
                             ho.payload.busy.eq(run_busy), ho.payload.stall.eq(run_stall)]
                with m.If(ho.ready):
                    m.d.sync += self.o_bank.eq(~self.o_bank)
                    m.next = "IDLE"
        # A job beat lasts one cycle: the datapath's ready is high whenever one is issued.
        with m.If(job_go & self.job.ready):
            m.d.sync += job_go.eq(0)
        m.d.comb += self.busy.eq(~seq_fsm.ongoing("IDLE"))
        # Single input buffer: free again once the projections no longer read it.
        m.d.comb += self.x_free.eq(~seq_fsm.ongoing("PROJ"))
        return m


class _TileLoop:
    """The tiled path's states of :class:`HeadSequencer`: per head group, per query tile of
    ``q_tile`` rows, per key/value tile of ``kv_tile`` keys, S = Q K^T of the tile (the score
    feed and the online softmax turn it into E and the row state), then O += E V into the tile
    accumulator; after a query tile's final key tile the accumulator's normalising pass writes
    its attention rows (the attention writer). Key tiles that hold no key any row of the query
    tile counts are skipped: those at or past ``keylen`` (key padding) and, in causal mode,
    those above the query tile's last row. After the last group, the output projection waits
    for the last pass.

    The jobs run one tile ahead: S(T0), S(T1), E V(T0), S(T2), E V(T1), ... over the tiles of
    every query tile and head group in turn, so the softmax works on a tile while the array
    computes the next tile's scores, and a tile's E V starts with its E complete. DECIDE
    issues, once the previous job is done, E V of the older pending tile when two are
    pending (or one and none is left), else S of the next tile:

    - S waits for the score feed to have sent the previous tile (one score buffer) and for
      the accumulators' entry bank of this tile to be free (three banks: the tile before,
      this one and the one whose results or pass are still running);
    - E V waits until every accumulator takes its results at once (so their timing is the
      fetch's alone) and, on a query tile's final key tile, the previous pass is written.

    Two banks of E alternate between tiles (``pbank``)."""

    def __init__(self, seq, run, wait, o_free):
        geom = seq.geom
        self.seq, self.run, self.geom, self.wait, self.o_free = seq, run, geom, wait, o_free
        QT, KT = geom.cfg.q_tile, geom.cfg.kv_tile
        self.QT, self.KT = QT, KT
        self.q0 = Signal(range(geom.SEQ + QT + 1))       # the next S tile's first row
        self.qr = Signal(range(geom.QTR + 1))            # ... in row tiles
        self.k0 = Signal(range(geom.KV + KT + 1))        # ... its first key
        self.kc = Signal(range(geom.KVC + 1))            # ... in column tiles
        self.more = Signal()                             # tiles left to issue S for
        self.pbank = Signal()                            # the next S tile's bank of E
        self.abank = Signal(range(3))                    # ... its accumulator entry bank
        self.pend = Signal(range(3))                     # tiles with S done, E V not issued
        slot = data.StructLayout({"rows": geom.lb, "keys": geom.lb, "k0": range(geom.KV + 1),
                                  "lh": range(geom.G + 1), "qr": range(geom.QTR + 1),
                                  "final": 1, "pbank": 1})
        self.pv = [Signal(slot, name="pv0"), Signal(slot, name="pv1")]   # oldest first

    def restart(self, m):
        m.d.sync += [self.q0.eq(0), self.qr.eq(0), self.k0.eq(0), self.kc.eq(0),
                     self.more.eq(1), self.pend.eq(0)]
        m.next = "DECIDE"

    def states(self, m, g, issue, abandon_on_fault, job_done):
        seq, run, geom = self.seq, self.run, self.geom
        dk, QT, KT = geom.dk, self.QT, self.KT
        q0, k0, pend, pv = self.q0, self.k0, self.pend, self.pv
        # The next S tile: its rows, the keys its query tile needs, its keys.
        rows = Mux(q0 + QT <= run.seq, QT, run.seq - q0)
        kend = Mux(run.causal & (q0 + rows < run.keylen), q0 + rows, run.keylen)
        keys = Mux(k0 + KT <= kend, KT, kend - k0)
        final = k0 + KT >= kend
        at = seq.attn_tile
        do_pv = (pend == 2) | ((pend == 1) & ~self.more)
        s_ok = seq.feed_idle & ~seq.acc_full.bit_select(self.abank, 1)
        pv_ok = seq.acc_ready & (~pv[0].final | seq.attn_idle)
        with m.State("DECIDE"):
            with m.If(job_done):
                with m.If(do_pv):
                    m.d.comb += self.wait.eq(~pv_ok)
                    with m.If(pv_ok):
                        self._issue_pv(m, issue, at)
                with m.Elif(self.more):
                    m.d.comb += self.wait.eq(~s_ok)
                    with m.If(s_ok):
                        self._issue_scores(m, issue, g, rows, keys, kend, final)
                        self._advance(m, g, final)
                with m.Else():
                    m.next = "DRAIN"
            abandon_on_fault()
        with m.State("DRAIN"):
            # The output projection reads every head's attention rows: the last pass first.
            with m.If(seq.attn_idle & ~at.valid & self.o_free):
                issue(a=ASource.ATTN, b=BSource.W, w=3, bias=1, rq=Requant.O,
                      dst=Dest.OUT, m=run.seq, n=dk, k=geom.d, lh=0)
                m.next = "OPROJ"
            abandon_on_fault()

    def outside(self, m):
        """What runs in every state: the attention tile's handshake, a flush."""
        seq, at = self.seq, self.seq.attn_tile
        m.d.sync += at.valid.eq(at.valid & ~at.ready & ~seq.flush)
        with m.If(seq.flush):
            m.d.sync += self.abank.eq(0)

    def _issue_scores(self, m, issue, g, rows, keys, kend, final):
        seq, pend, pv, tile = self.seq, self.pend, self.pv, self.seq.tile
        k0 = self.k0
        issue(a=ASource.Q, b=BSource.K, bias=0, rq=Requant.NONE, dst=Dest.S, m=rows,
              n=keys, k=self.geom.dk, lh=g, m0=self.qr, n0=self.kc)
        m.d.sync += [seq.softmax_start.eq(1),
                     tile.rows.eq(rows), tile.keys.eq(keys), tile.pbank.eq(self.pbank),
                     tile.feed.q0.eq(self.q0), tile.feed.key0.eq(k0),
                     tile.feed.first.eq(k0 == 0), tile.feed.final.eq(final),
                     self.pbank.eq(~self.pbank),
                     self.abank.eq(Mux(self.abank == 2, 0, self.abank + 1)),
                     pend.eq(pend + 1)]
        entry = {"rows": rows, "keys": keys, "k0": k0, "lh": g, "qr": self.qr, "final": final,
                 "pbank": self.pbank}
        for i in (0, 1):
            with m.If(pend == i):
                m.d.sync += [pv[i][k].eq(v) for k, v in entry.items()]

    def _issue_pv(self, m, issue, at):
        pv = self.pv
        issue(a=ASource.P, b=BSource.V, bias=0, rq=Requant.NONE, dst=Dest.ACC, m=pv[0].rows,
              n=self.geom.dk, k=pv[0].keys, lh=pv[0].lh, k0=pv[0].k0, pbank=pv[0].pbank)
        with m.If(pv[0].final):
            m.d.sync += [at.valid.eq(1), at.payload.m0.eq(pv[0].qr), at.payload.lh.eq(pv[0].lh)]
        m.d.sync += [pv[0].eq(pv[1]), self.pend.eq(self.pend - 1)]

    def _advance(self, m, g, final):
        """The next S tile: the next key tile, or the next query tile, or the next group."""
        geom, run = self.geom, self.run
        QT, KT = self.QT, self.KT
        q0, qr, k0, kc = self.q0, self.qr, self.k0, self.kc
        with m.If(~final):
            m.d.sync += [k0.eq(k0 + KT), kc.eq(kc + KT // geom.C)]
        with m.Else():
            m.d.sync += [k0.eq(0), kc.eq(0), q0.eq(q0 + QT), qr.eq(qr + QT // geom.R)]
            with m.If(q0 + QT >= run.seq):
                m.d.sync += [q0.eq(0), qr.eq(0), g.eq(g + 1)]
                with m.If(g + 1 == geom.G):
                    m.d.sync += [g.eq(0), self.more.eq(0)]
