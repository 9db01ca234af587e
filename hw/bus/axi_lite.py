"""AXI4-Lite control/status slave of the attention engine, generated from ``hw/bus/regmap.py``."""

from __future__ import annotations

from typing import NamedTuple

from amaranth import C, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import SCALE_SHIFT_LSB, AttentionConfig
from hw.bus.settings import StartSignature, WindowWriteSignature
from hw.bus.regmap import (ERROR_CAUSES, RESP_OKAY, RESP_SLVERR, Access, Guard, RegisterMap,
                       build_regmap, max_shift)

__all__ = ["AxiLiteSignature", "AxiLiteRegs"]

_CAUSE = {name: i for i, (name, _) in enumerate(ERROR_CAUSES)}


class _HeldWrite(NamedTuple):
    """The held write, as :meth:`AxiLiteRegs._write_channel` hands it on."""
    w_data: Signal          # write data and strobes (valid while the write is held)
    w_strb: Signal
    byte_mask: Value        # w_strb with each bit repeated over its byte
    win_word: Value         # the window word the held address points at
    write: Signal           # the held write executes this cycle
    hit: dict               # register name: Signal, ``write`` to that register
    in_window: Signal       # the held write is to the used part of the weight window
    dirties: Signal         # ... to the window or a layer parameter (clears WEIGHTS_VALID)
    run_only: Signal        # ... to the window or a register that is dropped while busy
    in_scale: Value         # ... to the scale table (channel_scales; else Const(0))


class AxiLiteSignature(wiring.Signature):
    """AXI4-Lite bus seen from the master (a slave port is ``In(AxiLiteSignature(...))``).

    Parameters
    ----------
    addr_width : int
        Byte-address bits, 3..64.
    data_width : int
        32 or 64.

    Members
    -------
    awaddr, awvalid, awready, wdata, wstrb, wvalid, wready, bresp, bvalid, bready,
    araddr, arvalid, arready, rdata, rresp, rvalid, rready
        The AXI4-Lite channel signals with their AXI names (no ``prot``: this bus has a single
        privilege level). Responses are 2 bits (OKAY = 0, SLVERR = 2).
    """

    def __init__(self, addr_width: int, data_width: int = 32):
        if isinstance(addr_width, bool) or not isinstance(addr_width, int) \
                or not 3 <= addr_width <= 64:
            raise TypeError(f"addr_width must be an integer in 3..64, not {addr_width!r}")
        if data_width not in (32, 64):
            raise TypeError(f"data_width must be 32 or 64, not {data_width!r}")
        self._addr_width = addr_width
        self._data_width = data_width
        super().__init__({
            "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    @property
    def addr_width(self) -> int:
        return self._addr_width

    @property
    def data_width(self) -> int:
        return self._data_width

    def __eq__(self, other):
        return (type(other) is type(self) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __hash__(self):
        return hash((type(self), self._addr_width, self._data_width))

    def __repr__(self):
        return f"AxiLiteSignature({self._addr_width}, {self._data_width})"


class AxiLiteRegs(wiring.Component):
    """AXI4-Lite slave holding the control, status and parameter registers of the engine.

    Every register, field width, reset value, access mode and busy guard comes from
    :func:`hw.bus.regmap.build_regmap` (see that module for the map and its bus conventions).

    Parameters
    ----------
    cfg : AttentionConfig
        The engine configuration the map is derived from.

    Members
    -------
    s_axi : ``In(AxiLiteSignature(regmap.addr_width))``
        The bus. AW and W are accepted independently (each into its own holding register);
        one write and one read are in flight at most.
    start : ``Out(StartSignature(cfg))``
        A checked START: ``valid`` for one cycle, never while ``ready`` is low, with the run
        settings (:func:`hw.bus.settings.run_settings_layout`: the register fields below) as
        payload. ``ready`` (the engine's input buffer is free) is STATUS.START_READY.
    causal, cross, seq_len, kv_len, key_len, rq_<q|k|v|pv|o>_<mult|shift>, exp_mult, exp_shift
        ``Out(field width)``: register fields (unsigned). ``seq_len``/``kv_len``/``key_len``
        are the 16-bit fields, within the configuration's limits whenever ``start`` is
        raised. The engine samples them with ``start``.
    weights_valid : ``Out(1)``
        STATUS.WEIGHTS_VALID: parameters and window committed and not written since.
    busy : ``In(1)``
        The engine holds a sequence (loading, computing or streaming). It must rise no
        later than two cycles after ``start``; weight and parameter writes are refused while
        it, ``start`` or ``start`` of the cycle before is high.
    done_set, error_set : ``In(1)``
        Strobes: set STATUS.DONE; OR ``error_cause`` into ERROR_CAUSE (which sets ERROR).
        A strobe wins over a software clear in the same cycle.
    error_cause : ``In(len(ERROR_CAUSES))``
        Cause bits that go with ``error_set`` (STREAM_SHORT, STREAM_LONG from the engine).
    cycles, busy_cycles, stall_cycles : ``In(32)``
        Counters of the last finished sequence: CYCLES, BUSY_CYCLES, STALL_CYCLES.
    irq : ``Out(1)``
        ``CTRL.IRQ_EN & (STATUS.DONE | STATUS.ERROR)``, level.
    window : ``Out(WindowWriteSignature(regmap.window_addr_bits))``
        The weight-window write port: a one-cycle write of ``data`` (bytes enabled by
        ``strb``) to word ``addr`` of the window (regions in ``regmap.regions``). Address,
        data and strobes are valid only in a cycle with ``en``.

    Latency and throughput (cycle n: the cycle whose clock edge completes a handshake; for
    writes the later of the AW and W handshakes)
        - Write: the write executes in cycle n + 1; its effects (register outputs, ``start``,
          ``window``, error bits) and ``bvalid`` appear in cycle n + 2. ``awready``/``wready``
          stay low while a write is held.
        - Read: ``rvalid`` and ``rdata`` in cycle n + 2, showing the state of cycle n + 1.
        - ``done_set``/``error_set`` in cycle n: STATUS, ERROR_CAUSE and ``irq`` in cycle n + 1.
        - One write per 2 cycles and one read per 3 cycles with ``bready``/``rready`` held
          high; reads and writes proceed in parallel.
        All outputs come from registers, except ``irq`` (AND/OR of three registers); no
        combinational path runs from a bus input to a bus output.
    """

    write_latency = 2   # cycles from the later AW/W handshake to the write's effect and bvalid
    read_latency = 2    # cycles from the AR handshake to rvalid

    def __init__(self, cfg: AttentionConfig):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"AxiLiteRegs needs an AttentionConfig, not {cfg!r}")
        self._cfg = cfg
        self._regmap = rmap = build_regmap(cfg)
        ports = {"s_axi": In(AxiLiteSignature(rmap.addr_width)), "start": Out(StartSignature(cfg))}
        for reg, f in rmap.fields_with_port():
            if f.access is Access.RW:
                ports[f.port] = Out(f.width, init=f.reset)
        ports.update({
            "weights_valid": Out(1),
            "busy": In(1), "done_set": In(1), "error_set": In(1),
            "error_cause": In(len(ERROR_CAUSES)),
            "cycles": In(32), "busy_cycles": In(32), "stall_cycles": In(32),
            "irq": Out(1),
            "window": Out(WindowWriteSignature(rmap.window_addr_bits)),
        })
        super().__init__(ports)

    @property
    def cfg(self) -> AttentionConfig:
        return self._cfg

    @property
    def regmap(self) -> RegisterMap:
        return self._regmap

    def elaborate(self, platform):
        m = Module()
        n_causes = len(ERROR_CAUSES)

        # ---------------------------------------------------------------- state
        done = Signal()
        causes = Signal(n_causes)
        error = Signal()
        irq_en = Signal()
        m.d.comb += error.eq(causes.any())
        # A write executes at the earliest 2 cycles after the previous one (bvalid must drop
        # first). busy is a register of the core, high from the second cycle after start;
        # start and its delayed copy cover the two cycles before, so every write after a
        # START is guarded.
        start_d = Signal()
        m.d.sync += start_d.eq(self.start.valid)
        running = Signal()
        m.d.comb += running.eq(self.busy | self.start.valid | start_d)

        source = self._sources(irq_en, done, error, causes)

        def value(reg):
            """The register's 32-bit read value."""
            v = Const(0, 32)
            for f in reg.fields:
                v = v | (source[reg.name, f.name].as_unsigned() << f.lsb)
            return v[:32]

        held = self._write_channel(m)
        w_data, byte_mask = held.w_data, held.byte_mask

        def written(reg, f):
            """Field ``f`` after a strobed write of w_data (unstrobed bytes keep their value)."""
            merged = (value(reg) & ~byte_mask) | (w_data & byte_mask)
            return merged[f.lsb:f.lsb + f.width]

        set_causes = Signal(n_causes)
        clear_causes = Signal(n_causes)
        write_while_busy = Signal()
        weights_dirty = Signal()    # an accepted weight or layer-parameter write
        write, run_only, dirties = held.write, held.run_only, held.dirties
        m.d.comb += [write_while_busy.eq(write & run_only & running),
                     weights_dirty.eq(write & dirties & ~running)]

        self._register_fields(m, source, held.hit, running, written)
        bad_scale = self._scale_check(m, held)
        self._window_port(m, held, running, bad_scale)

        def ones_written(f):
            """Field ``f`` of the strobed write data: the bits a W1C write clears."""
            return (w_data & byte_mask)[f.lsb:f.lsb + f.width]

        self._start_request(m, held.hit, written, ones_written, set_causes)
        self._status_flags(m, held.hit, ones_written, done, causes, set_causes, clear_causes,
                           write_while_busy, weights_dirty, write & ~running & bad_scale)

        m.d.comb += self.irq.eq(irq_en & (done | error))

        self._read_channel(m, value)
        return m

    def _write_channel(self, m):
        """AW and W: one holding register each, the address decoded into flags as AW is
        accepted; the held write executes (``write``) when both are full and B is free, and
        B answers it the cycle after."""
        rmap, bus = self._regmap, self.s_axi
        aw = rmap.addr_width
        aw_full = Signal()
        aw_addr = Signal(aw)
        w_full = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)
        bvalid = Signal()
        bresp = Signal(2)
        m.d.comb += [
            bus.awready.eq(~aw_full), bus.wready.eq(~w_full),
            bus.bvalid.eq(bvalid), bus.bresp.eq(bresp),
        ]
        # The address is decoded as it is accepted, into flags held next to it: the write
        # strobe then meets one flag per register rather than an address compare.
        def guarded(reg, guards):
            return any(f.access is Access.RW and not f.const and f.guard in guards
                       for f in reg.fields)

        aw_word = bus.awaddr[2:]
        aw_hit = {reg.name: Signal(name=f"aw_hit_{reg.name.lower()}") for reg in rmap}
        in_window = Signal()    # the held write is to the used part of the weight window
        in_scale = Signal()     # ... to the scale table
        mapped = Signal()       # ... to a register or the window (else SLVERR)
        dirties = Signal()      # ... to the window or a layer parameter (clears WEIGHTS_VALID)
        run_only = Signal()     # ... to the window or a register that is dropped while busy
        with m.If(bus.awvalid & ~aw_full):
            win = bus.awaddr[aw - 1] & (bus.awaddr[2:aw - 1] < rmap.window_words)
            word_hit = {reg.name: aw_word == reg.offset >> 2 for reg in rmap}
            if rmap.cfg.channel_scales:
                first = rmap.region("SQ").word_offset
                end = rmap.region("SO").word_offset + rmap.region("SO").words
                word = bus.awaddr[2:aw - 1]
                m.d.sync += in_scale.eq(bus.awaddr[aw - 1] & (word >= first) & (word < end))
            m.d.sync += [aw_full.eq(1), aw_addr.eq(bus.awaddr), in_window.eq(win),
                         mapped.eq(win | Cat(*word_hit.values()).any()),
                         dirties.eq(win | Cat(*[word_hit[reg.name] for reg in rmap
                                                if guarded(reg, (Guard.LAYER,))]).any()),
                         run_only.eq(win | Cat(*[word_hit[reg.name] for reg in rmap
                                                 if guarded(reg, (Guard.RUN, Guard.LAYER))]
                                               ).any())]
            m.d.sync += [aw_hit[reg.name].eq(word_hit[reg.name]) for reg in rmap]
        with m.If(bus.wvalid & ~w_full):
            m.d.sync += [w_full.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]

        write = Signal()    # the held write executes this cycle
        m.d.comb += write.eq(aw_full & w_full & ~bvalid)
        with m.If(write):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bvalid.eq(1)]
        with m.Elif(bus.bready):
            m.d.sync += bvalid.eq(0)

        byte_mask = Cat(*[w_strb[i].replicate(8) for i in range(4)])
        win_word = aw_addr[2:aw - 1]
        hit = {reg.name: Signal(name=f"hit_{reg.name.lower()}") for reg in rmap}
        for reg in rmap:
            m.d.comb += hit[reg.name].eq(write & aw_hit[reg.name])
        with m.If(write):
            m.d.sync += bresp.eq(Mux(mapped, RESP_OKAY, RESP_SLVERR))
        return _HeldWrite(w_data=w_data, w_strb=w_strb, byte_mask=byte_mask,
                          win_word=win_word, write=write, hit=hit, in_window=in_window,
                          dirties=dirties, run_only=run_only, in_scale=in_scale)

    def _register_fields(self, m, source, hit, running, written):
        """The writable fields: each takes ``written(reg, f)`` on its register's ``hit``;
        guarded fields only while not ``running``."""
        for reg in self._regmap:
            for f in reg.fields:
                if f.access is not Access.RW or f.const:
                    continue
                target = source[reg.name, f.name]
                if f.guard in (Guard.RUN, Guard.LAYER, Guard.HOLD):
                    with m.If(hit[reg.name] & ~running):
                        m.d.sync += target.eq(written(reg, f))
                else:
                    with m.If(hit[reg.name]):
                        m.d.sync += target.eq(written(reg, f))

    def _scale_check(self, m, held):
        """Whether the held write is a whole scale-table word with a field out of range: the
        shift outside 1..62, or a bit set above the multiplier's width or the shift's."""
        cfg = self._cfg
        if not cfg.channel_scales:
            return Const(0, 1)
        data = held.w_data
        shift = data[SCALE_SHIFT_LSB:SCALE_SHIFT_LSB + 6]
        bad = Signal()
        m.d.comb += bad.eq(held.in_scale & (held.w_strb == 0xF) & (
            (shift == 0) | (shift > 62) | data[cfg.requant_mult_bits:SCALE_SHIFT_LSB].any()
            | data[SCALE_SHIFT_LSB + 6:].any()))
        return bad

    def _window_port(self, m, held, running, bad_scale):
        """The weight-window write port, from the held write (``held``: :class:`_HeldWrite`);
        a scale-table word with a field out of range (``bad_scale``) is not written."""
        write, in_window, win_word = held.write, held.in_window, held.win_word
        w_data, w_strb = held.w_data, held.w_strb
        # Weight window: registered write port, one cycle per accepted write. The address,
        # data and strobes follow the held write every cycle, with no clock enable: they are
        # only read with ``wwin_en``, and the held write stays put until the cycle after it
        # executes. This keeps the write decode (``write``, the window hit, ``running``) off
        # the enables of those flip-flops, which sit by the weight buffers, far from this block.
        m.d.sync += [self.window.addr.eq(win_word), self.window.data.eq(w_data),
                     self.window.strb.eq(w_strb)]
        m.d.sync += self.window.en.eq(write & in_window & ~running & ~bad_scale)

    def _start_request(self, m, hit, written, ones_written, set_causes):
        """``start``: a START written to CTRL raises it the cycle after, with the run settings,
        if the checks pass; otherwise it sets the causes in ``set_causes``."""
        rmap = self._regmap
        # START, checked against the mode bits written together with it.
        ctrl = rmap["CTRL"]
        start_req = hit["CTRL"] & ones_written(ctrl.field("START"))
        causal_new = written(ctrl, ctrl.field("CAUSAL"))
        cross_new = written(ctrl, ctrl.field("CROSS"))
        pe_mode_new = written(ctrl, ctrl.field("PE_MODE"))
        additive_new = written(ctrl, ctrl.field("ADDITIVE"))
        channel_new = written(ctrl, ctrl.field("CHANNEL_SCALES"))
        check = self._start_checks(m, causal_new, cross_new, pe_mode_new, additive_new)
        if not self._cfg.channel_scales:
            m.d.comb += check[_CAUSE["BAD_SCALE"]].eq(channel_new)
        m.d.comb += [self.start.payload[port].eq(getattr(self, port))
                     for port in rmap.run_settings()]
        m.d.sync += self.start.valid.eq(0)
        with m.If(start_req):
            with m.If(~self.start.ready):
                m.d.comb += set_causes[_CAUSE["START_WHILE_BUSY"]].eq(1)
            with m.Elif(check.any()):
                m.d.comb += set_causes.eq(check)
            with m.Else():
                m.d.sync += self.start.valid.eq(1)

    def _status_flags(self, m, hit, ones_written, done, causes, set_causes, clear_causes,
                      write_while_busy, weights_dirty, scale_refused):
        """STATUS.DONE, ERROR_CAUSE (``causes``) and STATUS.WEIGHTS_VALID: their sets, and the
        W1C clears from the bus."""
        rmap = self._regmap
        n_causes = len(ERROR_CAUSES)
        # STATUS W1C bits; clearing ERROR clears every cause.
        status = rmap["STATUS"]
        clear_done = hit["STATUS"] & ones_written(status.field("DONE"))
        with m.If(hit["STATUS"] & ones_written(status.field("ERROR"))):
            m.d.comb += clear_causes.eq((1 << n_causes) - 1)
        with m.If(hit["ERROR_CAUSE"]):
            m.d.comb += clear_causes.eq(Cat(*[ones_written(f) for f in rmap["ERROR_CAUSE"].fields]))

        # Sticky flags: a set in the same cycle as a clear wins, so no event is lost.
        wwb = Signal(n_causes)
        m.d.comb += [wwb[_CAUSE["WRITE_WHILE_BUSY"]].eq(write_while_busy),
                     wwb[_CAUSE["BAD_SCALE"]].eq(scale_refused)]
        engine_causes = Mux(self.error_set, self.error_cause, 0)
        m.d.sync += causes.eq((causes & ~clear_causes) | set_causes | wwb | engine_causes)
        m.d.sync += done.eq((done & ~clear_done) | self.done_set)

        commit = rmap["WEIGHTS_COMMIT"]
        with m.If(weights_dirty):
            m.d.sync += self.weights_valid.eq(0)
        with m.Elif(hit["WEIGHTS_COMMIT"] & ones_written(commit.field("COMMIT"))):
            m.d.sync += self.weights_valid.eq(1)

    def _sources(self, irq_en, done, error, causes):
        """Every readable field's source, by ``(register, field)``; RW fields with a port are
        that output port."""
        rmap = self._regmap
        source = {}
        for reg in rmap:
            for f in reg.fields:
                if f.const:
                    source[reg.name, f.name] = C(f.reset, f.width)
                elif f.access is Access.WO:
                    source[reg.name, f.name] = C(0, f.width)
                elif f.access is Access.RW and f.port:
                    source[reg.name, f.name] = getattr(self, f.port)
        source["CTRL", "IRQ_EN"] = irq_en
        source["STATUS", "BUSY"] = self.busy
        source["STATUS", "DONE"] = done
        source["STATUS", "ERROR"] = error
        source["STATUS", "WEIGHTS_VALID"] = self.weights_valid
        source["STATUS", "START_READY"] = self.start.ready
        for name, bit in _CAUSE.items():
            source["ERROR_CAUSE", name] = causes[bit]
        source["CYCLES", "COUNT"] = self.cycles
        source["BUSY_CYCLES", "COUNT"] = self.busy_cycles
        source["STALL_CYCLES", "COUNT"] = self.stall_cycles
        missing = [(r.name, f.name) for r in rmap for f in r.fields
                   if (r.name, f.name) not in source]
        if missing:
            raise ValueError(f"register fields without hardware: {missing}")

        return source

    def _read_channel(self, m, value):
        """AR and R: ``value(reg)`` is a register's 32-bit read value."""
        rmap, bus = self._regmap, self.s_axi
        # Two stages: the address is decoded as AR is accepted, into one select flag per
        # register; the cycle after, rdata is the AND-OR of the selected register's value.
        # A single-stage multiplexer from araddr to rdata was the register block's longest
        # path (6 LUT levels; it missed 100 MHz on ECP5).
        ar_busy = Signal()      # a read is accepted and its response not yet taken
        ar_sel = {reg.name: Signal(name=f"ar_sel_{reg.name.lower()}") for reg in rmap}
        ar_mapped = Signal()
        rvalid = Signal()
        rdata = Signal(32)
        rresp = Signal(2)
        m.d.comb += [bus.arready.eq(~ar_busy), bus.rvalid.eq(rvalid), bus.rdata.eq(rdata),
                     bus.rresp.eq(rresp)]
        with m.If(bus.arvalid & ~ar_busy):
            ar_word = bus.araddr[2:]
            ar_hit = {reg.name: ar_word == reg.offset >> 2 for reg in rmap}
            m.d.sync += [ar_busy.eq(1), ar_mapped.eq(Cat(*ar_hit.values()).any())]
            m.d.sync += [ar_sel[name].eq(h) for name, h in ar_hit.items()]
        with m.If(ar_busy & ~rvalid):
            selected = Const(0, 32)
            for reg in rmap:
                selected = selected | (ar_sel[reg.name].replicate(32) & value(reg))
            # Unmapped addresses, and the write-only window, read 0 with SLVERR.
            m.d.sync += [rvalid.eq(1), rdata.eq(selected),
                         rresp.eq(Mux(ar_mapped, RESP_OKAY, RESP_SLVERR))]
        with m.If(rvalid & bus.rready):
            m.d.sync += [rvalid.eq(0), ar_busy.eq(0)]

    def _start_checks(self, m, causal_new, cross_new, pe_mode_new, additive_new):
        """ERROR_CAUSE bits a START with these settings would raise (0: it may start). The
        positional encoder's own settings are checked by the engine after START (the 2-D
        mode's divisibility takes a division); here only a mode without an encoder.
        TANH_SHIFT is judged only for an additive run (a dot-product layer leaves it 0)."""
        cfg, rmap = self._cfg, self._regmap
        seq_len, kv_len, key_len = self.seq_len, self.kv_len, self.key_len

        def settled(name, value):
            """``value`` (of the length and shift registers) as a register. It lags them by
            a cycle, and a register write is at least two cycles after the previous one
            (``write`` waits for the B handshake), so START always sees it up to date; the
            compares then stay out of the path from the write strobe to ``start``."""
            reg = Signal(name=f"chk_{name}")
            m.d.sync += reg.eq(value)
            return reg

        bad_seq_both = settled("bad_seq", (seq_len == 0) | (seq_len > cfg.max_seq_len))
        bad_seq = bad_seq_both
        if cfg.max_kv_len < cfg.max_seq_len:
            # Self-attention's keys are its queries: they must fit the key buffers too.
            bad_seq = bad_seq | (~cross_new & settled("seq_gt_kv", seq_len > cfg.max_kv_len))
        bad_kv = cross_new & settled("bad_kv", (kv_len == 0) | (kv_len > cfg.max_kv_len))
        # A key count is only judged against a valid row count.
        bad_key = ~Mux(cross_new, bad_kv, bad_seq) & Mux(
            cross_new, settled("key_gt_kv", key_len > kv_len),
            settled("key_gt_seq", key_len > seq_len))
        check = Signal(len(ERROR_CAUSES))
        m.d.comb += [
            check[_CAUSE["BAD_SEQ_LEN"]].eq(bad_seq),
            check[_CAUSE["BAD_KV_LEN"]].eq(bad_kv),
            check[_CAUSE["BAD_KEY_LEN"]].eq(bad_key),
            check[_CAUSE["NO_WEIGHTS"]].eq(~self.weights_valid),
            check[_CAUSE["BAD_CROSS"]].eq(cross_new & (not cfg.cross_attention)),
            check[_CAUSE["BAD_CAUSAL"]].eq(causal_new & (not cfg.causal_mask)),
            check[_CAUSE["BAD_SHIFT"]].eq(settled("bad_shift", Cat(*[
                (getattr(self, f.port) == 0) | (getattr(self, f.port) > max_shift(cfg, f.port))
                for _, f in rmap.fields_with_port()
                if f.port.endswith("_shift") and f.port not in ("pe_shift", "tanh_shift")
            ]).any())),
            check[_CAUSE["BAD_POSENC"]].eq((pe_mode_new != 0) & (not cfg.pos_enc)),
        ]
        if cfg.additive:
            bad_tanh = settled("bad_tanh_shift", (self.tanh_shift == 0) | (self.tanh_shift > 62))
            m.d.comb += check[_CAUSE["BAD_SCORING"]].eq(additive_new & bad_tanh)
        else:
            m.d.comb += check[_CAUSE["BAD_SCORING"]].eq(additive_new)
        return check
