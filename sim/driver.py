"""Run attention layers on the simulated ``attention_top`` from NumPy arrays (cocotb 2).

::

    drv = AttentionDriver(dut, cfg)
    await drv.start()                       # clock + reset
    await drv.load_layer(layer)             # golden.QuantizedLayer -> weight window, registers
    res = await drv.run(x)                  # int8 (seq_len, d_model) in, RunResult out
    res.out, res.cycles, res.busy_cycles    # output array, CYCLES and BUSY_CYCLES registers
    results = await drv.run_overlapped([dict(x=x0), dict(x=x1, causal=True)])

``run_overlapped`` uses the double buffers: each sequence starts as soon as STATUS.START_READY
allows, while the previous ones compute and stream out.

Everything goes through the real interfaces (cocotbext-axi models, :mod:`sim.bus`): AXI4-Lite
for registers and weights, AXI4-Stream for activations, with :class:`sim.axi_monitor.AxiMonitor`
checking the AXI rules on every cycle (``drv.monitor``; it also places TLAST on each output
packet). Register addresses and fields come from :func:`hw.bus.regmap.build_regmap`, so the
driver follows the map.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, First, Lock, RisingEdge
from cocotb.utils import get_sim_time

from golden.config import AttentionConfig
from hw.bus.regmap import ERROR_CAUSES, RESP_OKAY, build_regmap, pack_window, param_values

from sim.axi_monitor import AxiMonitor
from sim.bus import AxiLiteMaster, AxiStreamWords, pack_rows, unpack_words
from sim.host import ctrl_word

__all__ = ["AttentionDriver", "RunResult", "cause_names"]


def cause_names(bits: int) -> list[str]:
    return [name for i, (name, _) in enumerate(ERROR_CAUSES) if bits >> i & 1]


@dataclass
class RunResult:
    out: np.ndarray | None          # (seq_len, d_model) int8, None when the run failed
    cycles: int                     # CYCLES register: start to done
    busy_cycles: int                # BUSY_CYCLES register: cycles the arrays took operands
    status: int                     # STATUS register after the run
    error_cause: int                # ERROR_CAUSE register after the run
    words_sent: int = 0
    words: list = field(default_factory=list)
    stall_cycles: int = 0           # STALL_CYCLES register: arrays waiting for softmax
    end_cycle: int | None = None    # simulation cycle of the last output word (overlapped runs)

    @property
    def errors(self) -> list[str]:
        return cause_names(self.error_cause)


class AttentionDriver:
    """Drives one ``attention_top`` instance.

    ``idle`` and ``backpressure`` are the probabilities of an idle cycle on the input stream
    and of ``tready`` low on the output stream; ``bus_delay`` pauses every AXI4-Lite channel
    with that probability (see :class:`sim.bus.AxiLiteMaster`); ``seed`` makes them
    repeatable.
    """

    def __init__(self, dut, cfg: AttentionConfig, *, idle: float = 0.0,
                 backpressure: float = 0.0, bus_delay: float = 0.0, seed: int = 0,
                 period_ns: int = 10, strict_monitor: bool = True):
        self.dut, self.cfg = dut, cfg
        self.rmap = build_regmap(cfg)
        self.additive = False       # the loaded layer's scoring: CTRL.ADDITIVE of its runs
        self.channel = False        # its per-channel scales: CTRL.CHANNEL_SCALES
        self.period_ns = period_ns
        self.bus = AxiLiteMaster(dut, dut.clk, "s_axi", reset=dut.rst, delay=bus_delay,
                                 seed=seed)
        self.source = AxiStreamWords(dut, "s_axis", dut.clk, dut.rst, sink=False, pause=idle,
                                     seed=seed)
        self.sink = AxiStreamWords(dut, "m_axis", dut.clk, dut.rst, sink=True,
                                   pause=backpressure, seed=seed + 1)
        self.monitor = AxiMonitor(dut, strict=strict_monitor)
        self.out_words = cfg.act_row_words   # output words per row
        self._bus_lock = Lock()     # overlapped runs use the bus from two coroutines

    def set_stalls(self, idle: float, backpressure: float, bus_delay: float, seed: int):
        """New stall probabilities (see the class) from now on."""
        self.source.set_pause(idle, seed)
        self.sink.set_pause(backpressure, seed + 1)
        self.bus.set_delay(bus_delay, seed + 2)

    def addr(self, reg: str) -> int:
        return self.rmap[reg].offset

    def bit(self, reg: str, fld: str) -> int:
        return 1 << self.rmap[reg].field(fld).lsb

    async def start(self):
        Clock(self.dut.clk, self.period_ns, unit="ns").start()
        await self.reset()

    async def reset(self, cycles: int = 4):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        await FallingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def write(self, reg: str, value: int, strb: int = 0xF) -> int:
        async with self._bus_lock:
            return await self.bus.write(self.addr(reg), value, strb)

    async def read(self, reg: str) -> int:
        async with self._bus_lock:
            data, resp = await self.bus.read(self.addr(reg))
        assert resp == RESP_OKAY, f"read of {reg} answered {resp}"
        return data

    async def load_layer(self, layer, *, weights: bool = True, commit: bool = True):
        """Write the weights and biases (unless ``weights`` is False: they are resident in
        block RAM and survive a reset), every requantization parameter of ``layer`` (registers:
        a reset clears them) and, with ``commit``, WEIGHTS_COMMIT."""
        layer.check(self.cfg)
        self.additive = layer.scoring == "additive"     # CTRL.ADDITIVE of the runs
        self.channel = layer.per_channel                # CTRL.CHANNEL_SCALES
        if weights:
            base = self.rmap.window_base
            resps = await self.bus.write_block(base, pack_window(self.rmap, layer))
            bad = [i for i, r in enumerate(resps) if r != RESP_OKAY]
            assert not bad, f"window words {bad[:4]}... answered an error"
        for name, value in param_values(self.rmap, layer).items():
            assert await self.write(name, value) == RESP_OKAY
        if commit:
            assert await self.write("WEIGHTS_COMMIT", 1) == RESP_OKAY

    def start_bits(self) -> int:
        """CTRL's START with the loaded layer's scoring (CTRL.ADDITIVE for an additive one)
        and scales (CTRL.CHANNEL_SCALES), for a raw START without other mode bits."""
        return ctrl_word(self.rmap, additive=self.additive, channel_scales=self.channel)

    async def clear_status(self):
        await self.write("ERROR_CAUSE", (1 << len(ERROR_CAUSES)) - 1)
        await self.write("STATUS", self.bit("STATUS", "DONE") | self.bit("STATUS", "ERROR"))

    async def program(self, seq_len: int, kv_len: int, *, cross: bool, causal: bool = False,
                      key_len: int | None = None, pos_enc: str = "off", pe_offset: int = 0,
                      grid_width: int | None = None, irq: bool = False):
        """Write one run's lengths and encoding registers, then CTRL with START and its mode
        bits."""
        await self.write("SEQ_LEN", seq_len)
        await self.write("KV_LEN", kv_len)
        await self.write("KEY_LEN", key_len or 0)
        if "PE_OFFSET" in self.rmap:
            await self.write("PE_OFFSET", pe_offset)
            await self.write("PE_GRID_W", grid_width or 0)
        await self.write("CTRL", ctrl_word(self.rmap, causal=causal, cross=cross,
                                           pos_enc=pos_enc,
                                           additive=self.additive,
                                           channel_scales=self.channel, irq=irq))

    async def run(self, x, kv=None, *, causal: bool = False, key_len: int | None = None,
                  pos_enc: str = "off", pe_offset: int = 0, grid_width: int | None = None,
                  words: list[int] | None = None, seq_len: int | None = None,
                  kv_len: int | None = None, timeout: int = 5_000_000) -> RunResult:
        """One sequence. ``words`` (one packet, TLAST on its last word), ``seq_len`` and
        ``kv_len`` override what is sent and programmed (for error tests); by default they
        follow ``x`` and ``kv`` (cross-attention: two packets). ``pos_enc``, ``pe_offset``,
        ``grid_width``: the positional encoding (:class:`sim.host.Sequence`)."""
        x = np.asarray(x)
        seq_len = len(x) if seq_len is None else seq_len
        cross = kv is not None
        if kv_len is None:
            kv_len = len(kv) if cross else 0
        packets = ([words] if words is not None
                   else [pack_rows(x, self.cfg.act_bits)]
                   + ([pack_rows(kv, self.cfg.act_bits)] if cross else []))
        n_words = sum(len(p) for p in packets)
        self.sink.clear()
        await self.clear_status()
        await self.program(seq_len, kv_len, cross=cross, causal=causal, key_len=key_len,
                           pos_enc=pos_enc, pe_offset=pe_offset, grid_width=grid_width,
                           irq=True)
        status = await self.read("STATUS")
        if status & self.bit("STATUS", "ERROR"):
            return RunResult(None, 0, 0, status, await self.read("ERROR_CAUSE"))

        async def send():
            for p in packets:
                await self.source.send(p)

        beats0 = self.monitor.beats["s_axis"]
        self.monitor.expect_packet(seq_len * self.out_words)
        send_task = cocotb.start_soon(send())
        recv_task = cocotb.start_soon(self.sink.receive(timeout=timeout))
        if not int(self.dut.irq.value):
            await First(RisingEdge(self.dut.irq), ClockCycles(self.dut.clk, timeout))
        status = await self.read("STATUS")
        cause = await self.read("ERROR_CAUSE")
        out = None
        got = []
        if status & self.bit("STATUS", "DONE"):
            got = await recv_task
            assert got is not None, "DONE without the final output word"
            out = np.array(unpack_words(got, self.cfg.d_model, self.cfg.act_bits), dtype=np.int64)
        else:
            recv_task.cancel()
            self.monitor.forget_packets()
        if not send_task.done():
            # After STREAM_LONG the engine drains the rest of the stream; give it time.
            await First(send_task, ClockCycles(self.dut.clk, 4 * n_words + 100))
        if not send_task.done():
            send_task.cancel()
            self.source.clear()
        sent = self.monitor.beats["s_axis"] - beats0
        cycles = await self.read("CYCLES")
        busy = await self.read("BUSY_CYCLES")
        stall = await self.read("STALL_CYCLES")
        return RunResult(out, cycles, busy, status, cause, sent, got, stall)

    def cycle(self) -> int:
        return int(get_sim_time("ns")) // self.period_ns

    async def run_overlapped(self, runs, *, timeout: int = 5_000_000) -> list[RunResult]:
        """Sequences back to back through the double buffers.

        ``runs``: dicts with ``x`` and optionally ``kv``, ``causal``, ``key_len``,
        ``pos_enc``, ``pe_offset``, ``grid_width``. Sequence
        n + 1 is programmed and started as soon as STATUS.START_READY is 1, and its input sent,
        while sequence n computes and streams out. Returns one RunResult per sequence, in
        order, with its counters (read right after its output's last word) and the cycle of
        that word (``end_cycle``). Raises AssertionError when a START is refused.
        """
        self.sink.clear()
        await self.clear_status()
        ready = self.bit("STATUS", "START_READY")
        results: list[RunResult] = []

        async def receiver():
            for run in runs:
                got = await self.sink.receive(timeout=timeout)
                end = self.cycle()
                assert got is not None, f"sequence {len(results)}: no final output word"
                out = np.array(unpack_words(got, self.cfg.d_model, self.cfg.act_bits), dtype=np.int64)
                counts = [await self.read(r) for r in ("CYCLES", "BUSY_CYCLES", "STALL_CYCLES")]
                results.append(RunResult(out, counts[0], counts[1], 0, 0, 0, got, counts[2],
                                         end_cycle=end))

        recv = cocotb.start_soon(receiver())
        for i, run in enumerate(runs):
            x, kv = np.asarray(run["x"]), run.get("kv")
            for _ in range(timeout // 8):
                if await self.read("STATUS") & ready:
                    break
                await ClockCycles(self.dut.clk, 8)
            else:
                raise AssertionError(f"sequence {i}: START_READY never came")
            self.monitor.expect_packet(len(x) * self.out_words)
            await self.program(len(x), len(kv) if kv is not None else 0, cross=kv is not None,
                               causal=bool(run.get("causal")), key_len=run.get("key_len"),
                               pos_enc=run.get("pos_enc", "off"),
                               pe_offset=run.get("pe_offset", 0),
                               grid_width=run.get("grid_width"))
            cause = await self.read("ERROR_CAUSE")
            assert cause == 0, f"sequence {i}: START refused: {cause_names(cause)}"
            if kv is not None:
                await self.source.send(pack_rows(x, self.cfg.act_bits))
                await self.source.send(pack_rows(kv, self.cfg.act_bits))
            else:
                await self.source.send(pack_rows(x, self.cfg.act_bits))
        await First(recv, ClockCycles(self.dut.clk, timeout))
        assert recv.done(), "outputs did not all arrive"
        status = await self.read("STATUS")
        for r in results:
            r.status = status
        return results
