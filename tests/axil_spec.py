"""The AXI4-Lite register block's specification in plain Python (unit and cocotb tests).

Offsets and bits are written out from the register table of the task (not read from
``hw/bus/regmap.py``), so the tests check the map as well as the hardware. ``SpecModel`` applies
reads, writes and engine events the way the specification describes them.
"""

from __future__ import annotations

OKAY, SLVERR = 0, 2

# Offsets and bits exactly as the task's register table gives them.
ID, VERSION, CTRL, STATUS, CAUSE = 0x000, 0x004, 0x008, 0x00C, 0x010
SEQ_LEN, KV_LEN, KEY_LEN, CYCLES, BUSY_CYCLES = 0x014, 0x018, 0x01C, 0x020, 0x024
CONFIG0, CONFIG1, CONFIG2, STALL_CYCLES, COMMIT = 0x028, 0x02C, 0x030, 0x034, 0x080
CONFIG3 = 0x038
# The positional encoder's registers (configurations that build one).
PE_OFFSET, PE_GRID_W, PE_MULT, PE_SHIFT = 0x084, 0x088, 0x08C, 0x090
# The additive scorer's registers (configurations that build one).
TANH_MULT, TANH_SHIFT = 0x094, 0x098
PARAMS = {0x040 + 4 * i: n for i, n in enumerate(
    ["rq_q_mult", "rq_q_shift", "rq_k_mult", "rq_k_shift", "rq_v_mult", "rq_v_shift",
     "rq_pv_mult", "rq_pv_shift", "rq_o_mult", "rq_o_shift", "exp_mult", "exp_shift"])}
START, CAUSAL, CROSS, IRQ_EN = 1, 2, 4, 8
PE_MODE = 0x30           # CTRL[5:4]: 0 off, 1 1-D, 2 2-D
ADDITIVE = 0x40          # CTRL[6]: additive scoring
CHANNEL_SCALES = 0x80    # CTRL[7]: per-channel scales from the scale table
BUSY, DONE, ERROR, WEIGHTS_VALID, START_READY = 1, 2, 4, 8, 16
(BAD_SEQ_LEN, BAD_KV_LEN, BAD_KEY_LEN, START_WHILE_BUSY, NO_WEIGHTS, STREAM_SHORT,
 STREAM_LONG, WRITE_WHILE_BUSY, BAD_CROSS, BAD_CAUSAL, BAD_SHIFT,
 ENGINE_FAULT, BAD_POSENC, BAD_SCORING, BAD_SCALE) = (1 << i for i in range(15))
MODES = CAUSAL | CROSS | PE_MODE | ADDITIVE | CHANNEL_SCALES


class SpecModel:
    """The register block's specification in plain Python (engine inputs set by the test)."""

    def __init__(self, cfg, rmap):
        self.cfg = cfg
        self.base, self.words = rmap.window_base, rmap.window_words
        # The scale table: after the weights (d*d/4 words each), biases (d words each) and
        # the additive scorer's w vectors (d/4 words), four vectors of d words.
        d = cfg.d_model
        first = d * d + 4 * d + (d // 4 if cfg.additive else 0)
        self.scale_words = range(first, first + 4 * d) if cfg.channel_scales else range(0)
        self.mask = {SEQ_LEN: 0xFFFF, KV_LEN: 0xFFFF, KEY_LEN: 0xFFFF}
        for off, name in PARAMS.items():
            bits = (cfg.requant_mult_bits if name.startswith("rq") else cfg.exp_mult_bits) \
                if name.endswith("mult") else 6
            self.mask[off] = (1 << bits) - 1
        self.rw = {off: 0 for off in self.mask}
        self.layer_regs = set(PARAMS)
        if cfg.pos_enc:
            self.mask.update({PE_OFFSET: 0xFFFF, PE_GRID_W: 0xFFFF, PE_MULT: 0xFFFF,
                              PE_SHIFT: 0x3F})
            self.layer_regs |= {PE_MULT, PE_SHIFT}
        if cfg.additive:
            self.mask.update({TANH_MULT: (1 << cfg.requant_mult_bits) - 1, TANH_SHIFT: 0x3F})
            self.layer_regs |= {TANH_MULT, TANH_SHIFT}
        self.rw = {off: 0 for off in self.mask}
        self.rw[SEQ_LEN], self.rw[KV_LEN] = cfg.max_seq_len, cfg.max_kv_len
        self.ctrl = 0            # CAUSAL | CROSS | IRQ_EN | PE_MODE | ADDITIVE
        self.done = self.causes = self.weights_valid = 0
        self.busy = self.cycles = self.busy_cycles = self.stall_cycles = 0
        self.start_ready = 1     # the engine's input buffer is free
        self.starts = []         # one entry per start strobe
        self.refused = []        # the cause bits of every START refused by its checks
        self.wwin = []           # (word, data, strb) per window write
        self.scale_refusals = 0  # scale-table words refused (BAD_SCALE)

    @property
    def irq(self):
        return int(bool(self.ctrl & IRQ_EN) and bool(self.done or self.causes))

    def ports(self):
        p = {"seq_len": self.rw[SEQ_LEN], "kv_len": self.rw[KV_LEN], "key_len": self.rw[KEY_LEN],
             "causal": int(bool(self.ctrl & CAUSAL)), "cross": int(bool(self.ctrl & CROSS)),
             "pe_mode": (self.ctrl & PE_MODE) >> 4, "additive": int(bool(self.ctrl & ADDITIVE)),
             "channel_scales": int(bool(self.ctrl & CHANNEL_SCALES)),
             "weights_valid": self.weights_valid, "irq": self.irq}
        p.update({name: self.rw[off] for off, name in PARAMS.items()})
        if self.cfg.pos_enc:
            p.update(pe_offset=self.rw[PE_OFFSET], pe_grid_w=self.rw[PE_GRID_W],
                     pe_mult=self.rw[PE_MULT], pe_shift=self.rw[PE_SHIFT])
        if self.cfg.additive:
            p.update(tanh_mult=self.rw[TANH_MULT], tanh_shift=self.rw[TANH_SHIFT])
        return p

    def read(self, addr):
        a = addr & ~3
        c = self.cfg
        values = {
            ID: 0x4154544E, VERSION: 0x00010500, CTRL: self.ctrl,
            STATUS: self.busy | DONE * self.done | ERROR * bool(self.causes)
            | WEIGHTS_VALID * self.weights_valid | START_READY * self.start_ready,
            CAUSE: self.causes, CYCLES: self.cycles, BUSY_CYCLES: self.busy_cycles,
            STALL_CYCLES: self.stall_cycles,
            CONFIG0: c.d_model | c.heads << 16 | c.engines << 24,
            CONFIG1: c.max_seq_len | c.max_kv_len << 16,
            CONFIG2: c.array_rows | c.array_cols << 8 | c.causal_mask << 16
            | c.cross_attention << 17 | ("1d" in c.pos_enc) << 18 | ("2d" in c.pos_enc) << 19,
            CONFIG3: ((c.max_position or c.max_seq_len) if c.pos_enc else 0)
            | c.additive_lanes << 16 | c.channel_scales << 24 | c.act_bits << 25,
            COMMIT: 0, **self.rw}
        return (values[a], OKAY) if a in values else (0, SLVERR)

    def write(self, addr, data, strb):
        a = addr & ~3
        bm = sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)
        new = data & bm
        if a >= self.base:
            word = (a - self.base) // 4
            if word >= self.words:
                return SLVERR
            if self.busy:
                self.causes |= WRITE_WHILE_BUSY
            else:
                self.weights_valid = 0
                if word in self.scale_words and strb == 0xF and self._bad_scale(data):
                    self.causes |= BAD_SCALE        # and the word is not written
                    self.scale_refusals += 1
                else:
                    self.wwin.append((word, data, strb))
        elif a == CTRL:
            v = (self.ctrl & ~bm) | new
            self.ctrl = v & (IRQ_EN | MODES)   # mode bits: sampled by START
            if v & START:
                self._start(v)
        elif a == STATUS:
            if new & DONE:
                self.done = 0
            if new & ERROR:
                self.causes = 0
        elif a == CAUSE:
            self.causes &= ~new
        elif a in self.rw:
            if self.busy and a in self.layer_regs:
                self.causes |= WRITE_WHILE_BUSY
            else:
                self.rw[a] = ((self.rw[a] & ~bm) | new) & self.mask[a]
                if a in self.layer_regs:
                    self.weights_valid = 0
        elif a == COMMIT:
            if new & 1:
                self.weights_valid = 1
        elif a not in (ID, VERSION, CYCLES, BUSY_CYCLES, STALL_CYCLES, CONFIG0, CONFIG1,
                       CONFIG2, CONFIG3):
            return SLVERR
        return OKAY

    def _bad_scale(self, data):
        """A scale-table word: MULT in [requant_mult_bits - 1:0], SHIFT 1..62 in [29:24]."""
        shift = data >> 24 & 0x3F
        above_mult = (data & 0xFFFFFF) >> self.cfg.requant_mult_bits
        return not 1 <= shift <= 62 or bool(data >> 30) or bool(above_mult)

    def _start(self, ctrl):
        if not self.start_ready:
            self.causes |= START_WHILE_BUSY
            return
        c, cross = self.cfg, bool(ctrl & CROSS)
        seq, kv, key = self.rw[SEQ_LEN], self.rw[KV_LEN], self.rw[KEY_LEN]
        bad = 0
        seq_ok = 1 <= seq <= c.max_seq_len and (cross or seq <= c.max_kv_len)
        kv_ok = 1 <= kv <= c.max_kv_len
        if not seq_ok:
            bad |= BAD_SEQ_LEN
        if cross and not kv_ok:
            bad |= BAD_KV_LEN
        rows, rows_ok = (kv, kv_ok) if cross else (seq, seq_ok)
        if rows_ok and key > rows:
            bad |= BAD_KEY_LEN
        if not self.weights_valid:
            bad |= NO_WEIGHTS
        if cross and not c.cross_attention:
            bad |= BAD_CROSS
        if ctrl & CAUSAL and not c.causal_mask:
            bad |= BAD_CAUSAL
        if any(not 1 <= self.rw[off] <= 62 for off, n in PARAMS.items() if n.endswith("shift")):
            bad |= BAD_SHIFT
        if ctrl & PE_MODE and not c.pos_enc:
            bad |= BAD_POSENC     # (a built encoder checks its settings after START)
        if ctrl & ADDITIVE and not (c.additive and 1 <= self.rw[TANH_SHIFT] <= 62):
            bad |= BAD_SCORING
        if ctrl & CHANNEL_SCALES and not c.channel_scales:
            bad |= BAD_SCALE
        if bad:
            self.causes |= bad
            self.refused.append(bad)
        else:
            self.starts.append(ctrl & MODES)

    def engine_error(self, cause):
        self.causes |= cause
