"""Cycle model of a whole attention layer on :class:`hw.core.attention_core.AttentionCore`.

Pure Python (the block latencies come from :mod:`hw.perf.matmul` and :mod:`hw.perf.softmax`). It
follows the core's schedule with an always-valid input stream and an always-ready output
stream:

1. **load**: START, then one input word per cycle (``seq * act_row_words``: ``d_model / 4``
   words a row of int8, ``d_model / 2`` of int16, plus the second sequence in cross mode);
2. **compute**: the sequencer's jobs one after another, each a matrix-engine command
   (:func:`hw.perf.matmul.matmul_cycles`) plus :data:`JOB_OVERHEAD` cycles of issue and completion:
   for every head group Q, K, V projections, then for every group scores and P.V, then for
   every group the output projection. P.V may wait for the softmax unit (``softmax_stall``):
   a row tile of P is fetched only when all its rows are written, which the model finds by
   following score rows through the softmax unit row by row (:func:`_pv_stall`);
3. **stream**: the output buffer onto the bus, ``seq * act_row_words`` words, one per
   ``act_per_word / P`` cycles (P = elements per buffer read, :func:`stream_elems_per_cycle`).

``latency`` is what the CYCLES register shows for a sequence started on an idle engine.
``interval`` is the steady-state cycles per sequence when sequences are started as soon as
STATUS.START_READY allows: the double buffers overlap one sequence's load and stream with
the neighbours' compute, so the slowest stage sets the pace.

``python -m hw perf --config configs/default.toml`` prints the model for a sweep of
lengths; ``python -m hw bench --what layer`` compares it with simulated cycles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from golden.config import AttentionConfig

from hw.perf.matmul import ARRAY_LATENCY_EXTRA, POST_LATENCY, matmul_cycles, row_delay
from hw.perf.softmax import SoftmaxTiming

__all__ = ["LayerTiming", "layer_timing", "stream_elems_per_cycle", "JOB_OVERHEAD",
           "LOAD_OVERHEAD", "STREAM_OVERHEAD", "FETCH_LATENCY", "TOP_CYCLES", "encoder_cycles",
           "top_latency"]

# Cycles from a job's go pulse to the engine's first operand beat: command and fetch registers.
FETCH_LATENCY = 6
# Cycles a job spends beyond matmul_cycles: FETCH_LATENCY before its first beat, then the
# result register (rs), the result write register, the result-done register, the registered
# job_done and the sequencer's job_done -> job_go step after its last result.
JOB_OVERHEAD = FETCH_LATENCY + 4
# From START to the first job's go pulse, beyond the input words: the start strobe is
# sampled into the loader, which hands the loaded sequence to the sequencer (take) one cycle
# after its last word, and the sequencer raises go the cycle after that.
LOAD_OVERHEAD = 2
# When the first input word reaches the core, in cycles after START, for a sequence started
# on an idle engine and driven as sim.host's Verilator harness does (input words from the
# cycle after STATUS is read back following the START write; an always-ready output):
# without an encoder what CYCLES reads beyond ``latency``, constant over every mode and
# length of the test configurations (tests/test_fast_layers.py); with one, the encoder's
# checks overlap it (top_latency). The cocotb driver's AXI4-Lite timing differs by a cycle.
TOP_CYCLES = 4
# From the softmax feeder's score buffer read to the beat at the softmax unit's input: the
# block RAM read and its data register (ss2).
SCORE_FEED_LATENCY = 2
# From the last job's completion to the final output word, beyond one word per 4 / P cycles:
# the HANDOFF state starts the streamer, whose first buffer read is registered (os2), then
# the output register slice.
STREAM_OVERHEAD = 3


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def stream_elems_per_cycle(cfg: AttentionConfig) -> int:
    """Elements the output streamer reads per cycle: a bus word's ``act_per_word`` (a word
    per cycle) when that many adjacent output columns always share one buffer word, else a
    divisor of it."""
    return math.gcd(cfg.act_per_word, math.gcd(cfg.array_cols, cfg.head_dim))


@dataclass(frozen=True)
class LayerTiming:
    seq_len: int
    kv_len: int
    load: int                 # START to the first job
    jobs: tuple               # (name, cycles) per job, softmax stalls included
    softmax_stall: int        # cycles P.V waited for probability rows (STALL_CYCLES)
    stream: int               # last job to the final output word
    macs: int                 # multiply-accumulates of the layer
    ideal: float              # macs / total PEs
    double_buffer: bool = True

    def _cycles_of(self, prefixes) -> int:
        return sum(c for name, c in self.jobs if name.rstrip("0123456789") in prefixes)

    @property
    def compute(self) -> int:
        return sum(c for _, c in self.jobs)

    @property
    def latency(self) -> int:
        """CYCLES of a sequence started on an idle engine."""
        return self.load + self.compute + self.stream

    @property
    def interval(self) -> int:
        """Cycles per sequence in a back-to-back stream of equal sequences: the slowest of
        the three overlapped stages (load, compute plus its hand-offs, stream). With single
        input and output buffers a sequence loads only once the previous one's projections
        are done, and its output projection waits for the previous output to leave, so the
        projections add to the load and the output projection to the stream (an estimate
        within a few cycles: the hand-offs between the stages are not modelled there)."""
        if self.double_buffer:
            return max(self.load, self.compute + LOAD_OVERHEAD, self.stream)
        proj = self._cycles_of(("q", "k", "v"))
        return max(self.load + proj, self.compute + LOAD_OVERHEAD,
                   self.stream + self._cycles_of(("oproj",)))

    @property
    def utilization(self) -> float:
        return self.ideal / self.latency


def _score_row_times(cfg, seq, kv, start):
    """Cycle each score row is counted as written (score_rows visible), for a scores job
    whose first operand beat is taken at ``start``."""
    R, C = cfg.array_rows, cfg.array_cols
    k = cfg.head_dim
    tiles_n = _cdiv(kv, C)
    step = max(k, cfg.min_tile_steps)
    out = []
    for i in range(seq):
        last_tile = (i // R) * tiles_n + tiles_n - 1
        last_beat = start + (k - 1) + last_tile * step
        # + 3: the result register (rs), the result write register, then the score_rows
        # count.
        out.append(last_beat + C + ARRAY_LATENCY_EXTRA + i % R + row_delay(cfg, i % R)
                   + POST_LATENCY + 3)
    return out


def _softmax_row_done(cfg, arrivals, beats):
    """Cycle each row's probabilities are all written (prob_rows visible), for rows whose
    first beat reaches the softmax unit at ``arrivals[i]`` (one beat per cycle)."""
    t = SoftmaxTiming.of(cfg)
    x_last = n_last = -1 << 30
    out = []
    for a in arrivals:
        readable = a + beats - 1 + t.reduce_latency + t.queue_latency
        x_load = max(readable, x_last)
        x_last = x_load + beats
        recip_ready = x_last + t.exp_latency + 1 + t.divider_latency + t.queue_latency
        n_load = max(recip_ready, n_last)
        n_last = n_load + beats
        out.append(n_last + t.normalise_latency + 1)
    return out


# From the scores job's go pulse to its command at the engine (or the additive scorer): the
# command block's job and command registers.
COMMAND_LATENCY = 2


def _additive_scores(cfg, seq, kv, s_go, fill_end):
    """The additive scores job starting at ``s_go``: (its cycles, the cycle each score row
    is counted as written). Its command waits for the tanh tables (``filling`` low at
    ``fill_end``); the scorer takes its first operand beat once the fetch offers it and the
    command is in its register; :func:`hw.perf.additive.scorer_cycles` then times every
    result beat."""
    from hw.perf.additive import scorer_cycles
    R, C = cfg.array_rows, cfg.array_cols
    cmd_taken = max(s_go + COMMAND_LATENCY, fill_end)
    first = max(s_go + FETCH_LATENCY, cmd_taken + 1)
    out = scorer_cycles(R, C, cfg.additive_lanes, [(seq, kv, cfg.head_dim)])
    tiles_n = _cdiv(kv, C)
    rows = []
    for i in range(seq):
        tm = i // R
        rows_t = min(R, seq - tm * R)
        beat = tm * tiles_n * R + (tiles_n - 1) * rows_t + i % R
        rows.append(first + out[beat] + 3)     # as _score_row_times: rs, write, count
    cycles = first - s_go + out[-1] + 1 + (JOB_OVERHEAD - FETCH_LATENCY)
    return cycles, rows


def _pv_stall(cfg, seq, kv, rows_written, pv_go):
    """Cycles the P.V job starting at ``pv_go`` waits for rows of P, given the cycle each
    score row is counted as written."""
    R, C = cfg.array_rows, cfg.array_cols
    beats = _cdiv(kv, cfg.softmax_lanes)
    # The feeder reads a row once its scores are written, one beat per cycle, rows back to
    # back; the unit sees a beat SCORE_FEED_LATENCY cycles after its read.
    arrivals, free = [], -1 << 30
    for w in rows_written:
        first = max(free, w)
        arrivals.append(first + SCORE_FEED_LATENCY)
        free = first + beats
    p_done = _softmax_row_done(cfg, arrivals, beats)
    # P.V: row tiles of kv beats per column tile; a row tile's first beat waits until its
    # rows of P are counted.
    tiles_n = _cdiv(cfg.head_dim, C)
    step = max(kv, cfg.min_tile_steps)
    t = pv_go + FETCH_LATENCY      # first beat with no wait
    prev_last = None
    for tm in range(_cdiv(seq, R)):
        need = p_done[min(seq, (tm + 1) * R) - 1]
        for tn in range(tiles_n):
            # p_ready is seen by the fetch counters, FETCH_LATENCY - 1 stages before the
            # engine's input.
            first = max(t, need + FETCH_LATENCY - 1) if tn == 0 else t
            last = first + kv - 1
            if prev_last is not None:
                last = max(last, prev_last + step)
            prev_last, t = last, last + 1
    nominal_end = pv_go + FETCH_LATENCY + (kv - 1) + (_cdiv(seq, R) * tiles_n - 1) * step
    needs = [p_done[min(seq, (tm + 1) * R) - 1] for tm in range(_cdiv(seq, R))]
    return max(0, prev_last - nominal_end), _fetch_waits(cfg, kv, needs, pv_go)


def _fetch_waits(cfg, kv, needs, pv_go):
    """The cycles the P.V fetch waits for rows of P (the STALL_CYCLES count: the fetch's
    ``p_stall``), stepped cycle by cycle. The fetch runs ahead of the engine by its operand
    queue (OPQ_DEPTH beats), so it reaches a row tile, and starts waiting for its rows of P
    (``needs[tm]``: the cycle ``p_ready`` rises), earlier than the engine would take the
    tile's first beat; part of that wait the engine spends on the queued beats and on tile
    spacing, so it need not lengthen the job (the job's length is :func:`_pv_stall`'s)."""
    from hw.core.operand_fetch import OPQ_DEPTH
    R, C = cfg.array_rows, cfg.array_cols
    tiles_n = _cdiv(cfg.head_dim, C)
    step = max(kv, cfg.min_tile_steps)
    beats = [(tm, tn == 0 and kk == 0, kk == kv - 1)
             for tm in range(len(needs)) for tn in range(tiles_n) for kk in range(kv)]
    n = len(beats)
    t = pv_go + FETCH_LATENCY - 5      # the fetch's first cycle (its first beat's issue)
    j = e = waits = 0                  # next beat to issue, next beat to take
    stages = [None] * 4                # s0, s1, sd, sb: the beat each holds
    queue = []
    advance = True
    prev_last = None                   # the cycle the engine took a tile's last beat
    while e < n:
        p_ok = j >= n or not beats[j][1] or t >= needs[beats[j][0]]
        if j < n and not p_ok:
            waits += 1
        go = j < n and p_ok
        pop = bool(queue) and (not beats[e][2] or prev_last is None
                               or t >= prev_last + step)
        push = advance and stages[3] is not None
        level = len(queue)
        if pop:
            if beats[e][2]:
                prev_last = t
            queue.pop(0)
            e += 1
        if advance:
            if push:
                queue.append(stages[3])
            stages = [j if go else None] + stages[:3]
            j += go
        advance = level + push <= OPQ_DEPTH - 1
        t += 1
    return waits


def encoder_cycles(cfg: AttentionConfig, pos_enc: str = "off", first_word: int = 0) -> int:
    """Cycles the positional encoder adds to the load (configurations that build one, in
    every mode): the loader's CHECK (2 cycles, plus the 2-D mode's division, one cycle per
    bit of a length) as far as it is not hidden behind the first input word's arrival
    (``first_word`` cycles after START), and SETTLE (:data:`hw.core.loader.ENCODER_SETTLE`)."""
    if not cfg.pos_enc:
        return 0
    from hw.core.loader import ENCODER_SETTLE
    check = 2 + (cfg.max_seq_len.bit_length() if pos_enc == "2d" else 0)
    return max(0, check - first_word) + ENCODER_SETTLE


def top_latency(cfg: AttentionConfig, seq: int, kv: int | None = None, **kwargs) -> int:
    """What the top's CYCLES register reads for one sequence on an idle engine, driven as
    :mod:`sim.host`'s harness does: the core's latency with the input words arriving
    :data:`TOP_CYCLES` cycles after START (:func:`layer_timing`'s ``first_word``)."""
    return layer_timing(cfg, seq, kv, first_word=TOP_CYCLES, **kwargs).latency


def layer_timing(cfg: AttentionConfig, seq: int, kv: int | None = None, *,
                 causal: bool = False, key_len: int | None = None,
                 pos_enc: str = "off", additive: bool = False,
                 first_word: int = 0) -> LayerTiming:
    """The model's cycles for one sequence of ``seq`` queries (and ``kv`` keys/values in
    cross mode; self-attention when None). ``causal`` and ``key_len`` (key padding) matter on
    the tiled path only, which skips the key tiles no query of a query tile counts
    (:mod:`hw.perf.tiled_layer`). ``pos_enc`` is the run's CTRL.PE_MODE (``"off"``,
    ``"1d"``, ``"2d"``): a configuration with an encoder loads a few cycles longer
    (:func:`encoder_cycles`). ``first_word``: cycles from START to the first input word at
    the core (0: the words wait for START, as in the core's own tests; the top:
    :func:`top_latency`). ``additive`` is the run's CTRL.ADDITIVE (configurations with an
    additive scorer): the scores jobs run on the scorer, whose tanh tables are filled from
    the first job's cycle on."""
    if not 1 <= seq <= cfg.max_seq_len:
        raise ValueError(f"seq = {seq} is out of range: allowed 1..{cfg.max_seq_len}")
    cross = kv is not None
    kv = seq if kv is None else kv
    if not 1 <= kv <= cfg.max_kv_len:
        raise ValueError(f"kv = {kv} is out of range: allowed 1..{cfg.max_kv_len}")
    if additive and not cfg.additive:
        raise ValueError(f"additive = True but {cfg.name} builds no additive scorer "
                         f"(additive_lanes = 0)")
    d, dk = cfg.d_model, cfg.head_dim
    G = _cdiv(cfg.heads, cfg.engines)
    words = (seq + (kv if cross else 0)) * cfg.act_row_words
    load = words + LOAD_OVERHEAD + first_word + encoder_cycles(cfg, pos_enc, first_word)

    jobs = []
    t = load

    def job(name, m, n, k, extra=0):
        nonlocal t
        c = matmul_cycles(cfg, m, n, k) + JOB_OVERHEAD + extra
        jobs.append((name, c))
        start = t
        t += c
        return start

    for g in range(G):
        job(f"q{g}", seq, dk, d)
        job(f"k{g}", kv, dk, d)
        job(f"v{g}", kv, dk, d)
    stall = 0
    if cfg.tiled:
        from hw.perf.tiled_layer import tiled_attention
        tile_jobs, stall, t_end = tiled_attention(cfg, t, seq, kv, causal, key_len)
        jobs += tile_jobs
        if t_end > t + sum(c for _, c in tile_jobs):
            jobs.append(("drain", t_end - t - sum(c for _, c in tile_jobs)))
        t = t_end
    if additive:
        from hw.perf.additive import fill_cycles
        # the strobe: registered from the sequencer taking the run, the cycle before the
        # first job's go
        fill_end = load + fill_cycles()
    for g in range(G if not cfg.tiled else 0):
        if additive:
            c, rows_written = _additive_scores(cfg, seq, kv, t, fill_end)
            jobs.append((f"scores{g}", c))
            t += c
        else:
            s_go = job(f"scores{g}", seq, kv, dk)
            rows_written = _score_row_times(cfg, seq, kv, s_go + FETCH_LATENCY)
        s, waits = _pv_stall(cfg, seq, kv, rows_written, t)
        stall += waits
        job(f"pv{g}", seq, dk, kv, s)
    for g in range(G):
        job(f"oproj{g}", seq, dk, d)
    stream = (seq * cfg.act_row_words) * (cfg.act_per_word // stream_elems_per_cycle(cfg)) \
        + STREAM_OVERHEAD
    macs = cfg.layer_macs(seq, kv)
    return LayerTiming(seq, kv, load, tuple(jobs), stall, stream, macs, macs / cfg.total_pes,
                       cfg.double_buffer)
