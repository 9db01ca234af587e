"""Register map of the attention engine's AXI4-Lite control port: the one source of truth.

:func:`build_regmap` derives, from an :class:`~golden.config.AttentionConfig`, every register,
field, access mode and the write-only weight window. The hardware block (``hw/bus/axi_lite.py``),
the JSON and C-header emitters, the Markdown documentation and the software-side helpers
(:func:`pack_window`, :func:`param_values`) all read this one description.

Bus conventions
    32-bit registers at byte addresses, little-endian; ``addr[1:0]`` is ignored (word access).
    Responses are OKAY (0) or SLVERR (2). SLVERR answers addresses that hold no register, reads
    of the weight window, and writes past the end of the used part of the window. Writes to
    read-only registers and fields are ignored (OKAY); reads of write-only registers return 0.

Weight window
    A write-only window at ``window_base``, a power of two: 0x10000 when the window fits in
    64 KiB, else the window size rounded up to a power of two. The window then spans
    ``[window_base, 2 * window_base)`` and is decoded by the top address bit alone, so
    ``addr_width = log2(window_base) + 1``. Regions, in order, each starting on a word:
    ``WQ, WK, WV, WO`` (d_model x d_model weights, torch (out, in) layout, row-major, packed
    little-endian: byte ``k`` of word ``a`` holds element ``4a + k`` for int8, halfword ``k``
    holds element ``2a + k`` for 9..16-bit weights), then ``BQ, BK, BV, BO`` (d_model biases,
    one sign-extended 32-bit word each; two words, low first, when bias_bits > 32, which
    the packing supports and the hardware does not), then with an additive scorer ``WA``
    (the heads' ``w`` vectors, (heads, head_dim) int8, four to a word), then with
    ``channel_scales`` the scale table ``SQ, SK, SV, SO`` (d_model words each: the output
    channel's requantization multiplier in bits [requant_mult_bits - 1:0], its shift 1..62 in
    [29:24]). Each
    region is padded to whole words; the configuration already requires d_model % 4 == 0, so
    every weight row starts on a word and no padding occurs for the shipped configurations.

Busy rules (``busy`` is the engine's run flag)
    Guard ``run`` fields (lengths) and ``layer`` fields (requantization parameters) and the
    weight window: a write while busy is dropped and raises ``ERROR_CAUSE.WRITE_WHILE_BUSY``.
    An accepted ``layer`` or window write clears ``STATUS.WEIGHTS_VALID`` until the next
    ``WEIGHTS_COMMIT``. Guard ``hold`` fields (``CTRL.CAUSAL``, ``CTRL.CROSS``) keep their value
    while busy, silently, so ``CTRL`` can still be written to change ``IRQ_EN`` during a run.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from golden.config import POS_ENC_MODES, SCALE_SHIFT_LSB, AttentionConfig

__all__ = [
    "Access", "Guard", "Field", "Register", "WindowRegion", "RegisterMap", "RegmapError",
    "build_regmap", "regmap_json", "regmap_c_header", "regmap_markdown", "pack_window",
    "param_values", "max_shift", "ERROR_CAUSES", "PE_MODE_VALUES", "ID_VALUE", "VERSION_VALUE", "RESP_OKAY", "RESP_SLVERR",
]

ID_VALUE = 0x4154544E            # "ATTN" in ASCII, most significant byte first
VERSION_VALUE = 0x00010500       # 1.5.0: major[31:16], minor[15:8], patch[7:0]
DATA_BITS = 32
REG_BLOCK_SIZE = 0x100           # registers live in 0x000..0x0FF
MIN_WINDOW_BASE = 0x10000
SHIFT_BITS = 6                   # requantization shifts are 1..62
LENGTH_BITS = 16                 # SEQ_LEN / KV_LEN / KEY_LEN fields (configs allow <= 4096)
RESP_OKAY = 0
RESP_SLVERR = 2

# ERROR_CAUSE bits, in bit order, with what raises each one.
ERROR_CAUSES = (
    ("BAD_SEQ_LEN", "START with SEQ_LEN outside 1..max_seq_len, or (self-attention, where "
                    "the queries are also the keys) above max_kv_len"),
    ("BAD_KV_LEN", "START in CROSS mode with KV_LEN outside 1..max_kv_len"),
    ("BAD_KEY_LEN", "START with KEY_LEN larger than the key rows (KV_LEN in CROSS mode, "
                    "else SEQ_LEN)"),
    ("START_WHILE_BUSY", "START written while STATUS.START_READY is 0: the input buffer holds "
                         "a sequence still loading or waiting for the arrays (the start is "
                         "dropped)"),
    ("NO_WEIGHTS", "START while STATUS.WEIGHTS_VALID is 0"),
    ("STREAM_SHORT", "an input stream ended (tlast) before the expected row count (engine)"),
    ("STREAM_LONG", "tlast missing where the expected row count ends (engine)"),
    ("WRITE_WHILE_BUSY", "weight-window or parameter write during a run (the write is "
                         "dropped)"),
    ("BAD_CROSS", "START with CTRL.CROSS set but the configuration has no cross-attention"),
    ("BAD_CAUSAL", "START with CTRL.CAUSAL set but the configuration has no causal mask"),
    ("BAD_SHIFT", "START while a requantization or exponent shift register is outside 1..62 "
                  "(1..54 for RQ_PV_SHIFT on the tiled path; they reset to 0: after a reset, "
                  "write the parameters again)"),
    ("ENGINE_FAULT", "a matrix engine rejected a command or the softmax unit flagged invalid "
                     "settings; the run was abandoned (engine)"),
    ("BAD_POSENC", "START with CTRL.PE_MODE set to a mode the configuration does not build; "
                   "or (engine, a few cycles after START, before any input word is loaded; the "
                   "run's input is then discarded up to its last word) "
                   "PE_SHIFT outside 1..62, 1-D with PE_OFFSET + SEQ_LEN past the table, 2-D "
                   "with PE_GRID_W 0, above the table, or not dividing SEQ_LEN, or grid rows "
                   "PE_OFFSET + SEQ_LEN / PE_GRID_W past the table"),
    ("BAD_SCORING", "START with CTRL.ADDITIVE set but the configuration builds no additive "
                    "scorer, or with TANH_SHIFT outside 1..62"),
    ("BAD_SCALE", "START with CTRL.CHANNEL_SCALES set but the configuration builds no scale "
                  "table; or a write to the scale table (SQ..SO) with SHIFT outside 1..62 or "
                  "bits set above MULT's width or above SHIFT (the write is dropped)"),
)

#: CTRL.PE_MODE values, in the order of :data:`golden.posenc.PE_MODES`.
PE_MODE_VALUES = {"off": 0, "1d": 1, "2d": 2}


class RegmapError(ValueError):
    """A register map that cannot be built; the message names the value and the limit."""


class Access(enum.Enum):
    """How software sees a field."""
    RO = "ro"      # read-only; writes are ignored
    RW = "rw"      # read/write, byte strobes honoured
    W1C = "w1c"    # sticky flag; writing 1 clears it
    WO = "wo"      # writing 1 triggers an action; reads 0


class Guard(enum.Enum):
    """What a write to a field does while the engine is busy."""
    NONE = "none"    # always written
    HOLD = "hold"    # value kept while busy, silently
    RUN = "run"      # write dropped while busy, raises WRITE_WHILE_BUSY
    LAYER = "layer"  # as RUN; an accepted write also clears STATUS.WEIGHTS_VALID


@dataclass(frozen=True)
class Field:
    """``width`` bits at ``lsb`` of a register. ``reset`` is the value read after reset: for
    an engine input (RO with a ``port``), what the idle engine drives. ``const`` fields always
    read ``reset``.

    ``port`` names the hardware port that carries the field (RW fields: an output of the
    register block; RO fields: an input from the engine), if any.
    """
    name: str
    lsb: int
    width: int
    access: Access
    desc: str
    reset: int = 0
    const: bool = False
    port: str | None = None
    guard: Guard = Guard.NONE

    def __post_init__(self):
        if not 0 <= self.lsb or not 1 <= self.width or self.lsb + self.width > DATA_BITS:
            raise RegmapError(f"field {self.name}: bits {self.lsb}+{self.width} do not fit "
                              f"a {DATA_BITS}-bit register")
        if not 0 <= self.reset < 1 << self.width:
            raise RegmapError(f"field {self.name}: value {self.reset} does not fit "
                              f"{self.width} bits (allowed 0..{(1 << self.width) - 1})")

    @property
    def mask(self) -> int:
        """The field's bits in place within the register."""
        return ((1 << self.width) - 1) << self.lsb

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    desc: str
    fields: tuple[Field, ...]

    def __post_init__(self):
        if self.offset % 4 or not 0 <= self.offset < REG_BLOCK_SIZE:
            raise RegmapError(f"register {self.name}: offset {self.offset:#x} must be "
                              f"word-aligned in 0..{REG_BLOCK_SIZE - 4:#x}")
        used = 0
        for f in self.fields:
            if used & f.mask:
                raise RegmapError(f"register {self.name}: field {f.name} overlaps another field")
            used |= f.mask

    @property
    def reset(self) -> int:
        """Value read after reset, engine inputs as the idle engine drives them."""
        return sum(f.reset << f.lsb for f in self.fields if f.access is not Access.WO)

    @property
    def access(self) -> str:
        """The fields' access mode when they share one, else ``"mixed"``."""
        modes = {f.access.value for f in self.fields}
        return modes.pop() if len(modes) == 1 else "mixed"

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}; fields: "
                       f"{', '.join(f.name for f in self.fields)}")


@dataclass(frozen=True)
class WindowRegion:
    """One tensor in the weight window: ``offset``/``size`` in bytes from the window base."""
    name: str
    tensor: str          # QuantizedLayer attribute (wq, ..., bo)
    offset: int
    size: int
    shape: tuple[int, ...]
    element_bits: int    # bits of one stored element (8, 16 or 32 ... per word slot)
    desc: str

    @property
    def word_offset(self) -> int:
        return self.offset // 4

    @property
    def words(self) -> int:
        return self.size // 4


@dataclass(frozen=True)
class RegisterMap:
    """The complete map of one configuration (see the module docstring for the conventions)."""
    cfg: AttentionConfig
    registers: tuple[Register, ...]
    regions: tuple[WindowRegion, ...]
    window_base: int
    window_size: int     # bytes used by the regions
    addr_width: int
    _by_name: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        self._by_name.update({r.name: r for r in self.registers})

    def __getitem__(self, name: str) -> Register:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no register {name!r}; registers: "
                           f"{', '.join(self._by_name)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self.registers)

    @property
    def window_span(self) -> int:
        """Bytes of address space the window decodes (``window_base``, a power of two)."""
        return self.window_base

    @property
    def window_words(self) -> int:
        return self.window_size // 4

    @property
    def window_addr_bits(self) -> int:
        """Width of a word address within the used part of the window."""
        return max(1, (self.window_words - 1).bit_length())

    def region(self, name: str) -> WindowRegion:
        for r in self.regions:
            if r.name == name or r.tensor == name:
                return r
        raise KeyError(f"no window region {name!r}; regions: "
                       f"{', '.join(r.name for r in self.regions)}")

    def fields_with_port(self):
        """``(register, field)`` pairs of every field carried by a hardware port."""
        return [(r, f) for r in self.registers for f in r.fields if f.port]

    def run_settings(self) -> dict[str, int]:
        """``{port: width}`` of every read-write field with a port, in map order: the settings
        a run samples at START (mode bits, lengths, requantization and exponent fields)."""
        return {f.port: f.width for _, f in self.fields_with_port() if f.access is Access.RW}

    def to_dict(self) -> dict:
        return {
            "name": self.cfg.name,
            "generator": "hw/bus/regmap.py",
            "bus": {"protocol": "AXI4-Lite", "data_width": DATA_BITS,
                    "addr_width": self.addr_width, "endianness": "little",
                    "resp": {"OKAY": RESP_OKAY, "SLVERR": RESP_SLVERR}},
            "registers": [{
                "name": r.name, "offset": r.offset, "access": r.access, "reset": r.reset,
                "desc": r.desc,
                "fields": [{
                    "name": f.name, "lsb": f.lsb, "width": f.width, "mask": f.mask,
                    "access": f.access.value, "reset": f.reset, "const": f.const,
                    "guard": f.guard.value, "port": f.port, "desc": f.desc,
                } for f in r.fields],
            } for r in self.registers],
            "window": {
                "base": self.window_base, "span": self.window_span, "size": self.window_size,
                "access": "wo",
                "regions": [{
                    "name": g.name, "tensor": g.tensor, "offset": g.offset, "size": g.size,
                    "shape": list(g.shape), "element_bits": g.element_bits, "desc": g.desc,
                } for g in self.regions],
            },
            "error_causes": [{"name": n, "bit": i, "desc": d}
                             for i, (n, d) in enumerate(ERROR_CAUSES)],
            "config": self.cfg.to_dict(),
        }


# ------------------------------------------------------------------------------ building

def max_shift(cfg: AttentionConfig, port: str) -> int:
    """The largest valid value of a shift register (its ``port`` name): 62, except the P.V
    shift on the tiled path, which the normalising pass applies plus its guard bits."""
    if port == "rq_pv_shift" and cfg.tiled:
        from golden.online_softmax import NORM_GUARD_BITS
        return 62 - NORM_GUARD_BITS
    return 62


def _requant_registers(cfg: AttentionConfig) -> list[Register]:
    regs = []
    offset = 0x040
    stages = [("Q", "rq_q", "query projection"), ("K", "rq_k", "key projection"),
              ("V", "rq_v", "value projection"), ("PV", "rq_pv", "P.V product"),
              ("O", "rq_o", "output projection")]
    for tag, attr, what in stages:
        for part, width, desc in (
                ("MULT", cfg.requant_mult_bits, f"requantization multiplier of the {what}"),
                ("SHIFT", SHIFT_BITS, f"requantization right shift of the {what} "
                                      f"(1..{max_shift(cfg, attr + '_shift')})")):
            port = f"{attr}_{part.lower()}"
            regs.append(Register(f"RQ_{tag}_{part}", offset, desc[0].upper() + desc[1:] + ".", (
                Field(part, 0, width, Access.RW, desc, port=port, guard=Guard.LAYER),)))
            offset += 4
    for part, width, desc in (
            ("MULT", cfg.exp_mult_bits, "score-to-exponent multiplier of the softmax"),
            ("SHIFT", SHIFT_BITS, "score-to-exponent right shift of the softmax (1..62)")):
        regs.append(Register(f"EXP_{part}", offset, desc[0].upper() + desc[1:] + ".", (
            Field(part, 0, width, Access.RW, desc, port=f"exp_{part.lower()}",
                  guard=Guard.LAYER),)))
        offset += 4
    return regs


def _pos_enc_registers(cfg: AttentionConfig) -> list[Register]:
    """The positional encoder's run settings and layer parameters (configurations that
    build one)."""
    if not cfg.pos_enc:
        return []
    P = cfg.positions
    return [
        Register("PE_OFFSET", 0x084, "Position of the first input row (1-D), or its grid row "
                 "(2-D, counting whole grid rows), so a long input is sent in pieces.", (
                     Field("OFFSET", 0, LENGTH_BITS, Access.RW, f"first position, 1-D: "
                           f"PE_OFFSET + SEQ_LEN <= {P}", port="pe_offset"),)),
        Register("PE_GRID_W", 0x088, "Grid width W of the 2-D encoding: row i is grid row "
                 "PE_OFFSET + i / W, column i % W (row-major); W must divide SEQ_LEN.", (
                     Field("W", 0, LENGTH_BITS, Access.RW, f"grid columns, 1..{P}",
                           port="pe_grid_w"),)),
        Register("PE_MULT", 0x08C, "Multiplier of the encoding codes to X's scale.", (
            Field("MULT", 0, 16, Access.RW, "code * PE_MULT >> PE_SHIFT (rounded) is added "
                  "to each int8 input", port="pe_mult", guard=Guard.LAYER),)),
        Register("PE_SHIFT", 0x090, "Right shift of the encoding product (1..62).", (
            Field("SHIFT", 0, SHIFT_BITS, Access.RW, "right shift, 1..62 when PE_MODE is "
                  "not 0", port="pe_shift", guard=Guard.LAYER),)),
    ]


def _additive_registers(cfg: AttentionConfig) -> list[Register]:
    """The additive scorer's layer parameters (configurations that build one)."""
    if not cfg.additive:
        return []
    return [
        Register("TANH_MULT", 0x094, "Multiplier of q + k to the tanh argument (additive "
                 "scoring).", (
                     Field("MULT", 0, cfg.requant_mult_bits, Access.RW, "tanh argument = "
                           "(q + k) * TANH_MULT >> TANH_SHIFT (rounded), 10 fraction bits",
                           port="tanh_mult", guard=Guard.LAYER),)),
        Register("TANH_SHIFT", 0x098, "Right shift of the tanh argument product (1..62).", (
            Field("SHIFT", 0, SHIFT_BITS, Access.RW, "right shift, 1..62 when CTRL.ADDITIVE "
                  "is set", port="tanh_shift", guard=Guard.LAYER),)),
    ]


def _window_regions(cfg: AttentionConfig) -> list[WindowRegion]:
    if cfg.weight_bits > 16:
        raise RegmapError(f"weight_bits = {cfg.weight_bits} cannot be packed into the window: "
                          f"allowed 2..16")
    d = cfg.d_model
    wbits = 8 if cfg.weight_bits <= 8 else 16
    bias_words = -(-cfg.bias_bits // 32)
    regions, offset = [], 0
    for t in ("q", "k", "v", "o"):
        size = -(-(d * d * wbits // 8) // 4) * 4      # padded to whole words
        regions.append(WindowRegion(
            f"W{t.upper()}", f"w{t}", offset, size, (d, d), wbits,
            f"W_{t} (out, in) row-major, {32 // wbits} elements per word"))
        offset += size
    for t in ("q", "k", "v", "o"):
        size = d * bias_words * 4
        regions.append(WindowRegion(
            f"B{t.upper()}", f"b{t}", offset, size, (d,), 32 * bias_words,
            f"b_{t}, one sign-extended {32 * bias_words}-bit value per "
            f"{'word' if bias_words == 1 else f'{bias_words} words (low word first)'}"))
        offset += size
    if cfg.additive:
        regions.append(WindowRegion(
            "WA", "wa", offset, cfg.heads * cfg.head_dim, (cfg.heads, cfg.head_dim), 8,
            "additive scoring's w vectors (heads, head_dim) row-major, 4 elements per word"))
        offset += cfg.heads * cfg.head_dim
    if cfg.channel_scales:
        for t in ("q", "k", "v", "o"):
            regions.append(WindowRegion(
                f"S{t.upper()}", f"rq_{t}", offset, 4 * d, (d,), 32,
                f"per-channel requantization of the {t.upper()} projection, one word per "
                f"output channel: MULT [{cfg.requant_mult_bits - 1}:0], SHIFT 1..62 "
                f"[{SCALE_SHIFT_LSB + 5}:{SCALE_SHIFT_LSB}]"))
            offset += 4 * d
    return regions


def scale_words(rq, channels: int) -> list[int]:
    """The scale-table words of one projection's requantization ``rq``: per channel
    ``mult | shift << 24`` (a per-tensor ``Requant`` repeated over the channels)."""
    import numpy as np
    mult = np.broadcast_to(np.asarray(rq.mult, dtype=np.int64), (channels,))
    shift = np.broadcast_to(np.asarray(rq.shift, dtype=np.int64), (channels,))
    return [int(mu) | int(sh) << SCALE_SHIFT_LSB for mu, sh in zip(mult, shift)]


def build_regmap(cfg: AttentionConfig) -> RegisterMap:
    """Derive the register map of ``cfg``."""
    if not isinstance(cfg, AttentionConfig):
        raise TypeError(f"build_regmap needs an AttentionConfig, not {cfg!r}")
    R, F = Register, Field
    ro_count = lambda port, desc: (F("COUNT", 0, 32, Access.RO, desc, port=port),)  # noqa: E731
    regs = [
        R("ID", 0x000, "Identification: ASCII \"ATTN\".",
          (F("ID", 0, 32, Access.RO, "constant 0x4154544E", reset=ID_VALUE, const=True),)),
        R("VERSION", 0x004, "Register-map version major[31:16].minor[15:8].patch[7:0].",
          (F("VERSION", 0, 32, Access.RO, "constant", reset=VERSION_VALUE, const=True),)),
        R("CTRL", 0x008, "Control: run start and run mode.", (
            F("START", 0, 1, Access.WO, "write 1 to start a run (checked first; reads 0)"),
            F("CAUSAL", 1, 1, Access.RW, "causal mask: key j > query i is masked",
              port="causal"),
            F("CROSS", 2, 1, Access.RW, "cross-attention: K/V from the second input sequence",
              port="cross"),
            F("IRQ_EN", 3, 1, Access.RW, "irq = IRQ_EN & (DONE | ERROR)"),
            F("PE_MODE", 4, 2, Access.RW, "positional encoding added to X: 0 off, 1 "
              "sinusoidal 1-D, 2 2-D grid (a mode the configuration does not build: "
              "BAD_POSENC)", port="pe_mode"),
            F("ADDITIVE", 6, 1, Access.RW, "additive scoring sum_d w[d] tanh(q[d] + k[d]) "
              "instead of the dot product (not built: BAD_SCORING)", port="additive"),
            F("CHANNEL_SCALES", 7, 1, Access.RW, "the projections requantize each output "
              "channel by its own multiplier and shift from the scale table SQ..SO instead "
              "of RQ_Q/K/V/O_MULT/SHIFT (not built: BAD_SCALE)", port="channel_scales"),
        )),
        R("STATUS", 0x00C, "Status.", (
            F("BUSY", 0, 1, Access.RO, "a run is in progress", port="busy"),
            F("DONE", 1, 1, Access.W1C, "a run finished (sticky)"),
            F("ERROR", 2, 1, Access.W1C,
              "some ERROR_CAUSE bit is set; writing 1 clears every cause"),
            F("WEIGHTS_VALID", 3, 1, Access.RO,
              "weights and parameters committed and unchanged since", port="weights_valid"),
            # 1 out of reset: the idle engine's input buffer is free.
            F("START_READY", 4, 1, Access.RO,
              "a START now would be accepted: the input buffer is free (a new sequence may "
              "start while the previous ones compute and stream out)", reset=1,
              port="start_ready"),
        )),
        R("ERROR_CAUSE", 0x010, "Why STATUS.ERROR is set; write 1 to clear a cause.",
          tuple(F(n, i, 1, Access.W1C, d) for i, (n, d) in enumerate(ERROR_CAUSES))),
        R("SEQ_LEN", 0x014, f"Query rows of the next run, 1..{cfg.max_seq_len}.",
          (F("LEN", 0, LENGTH_BITS, Access.RW, "query rows", reset=cfg.max_seq_len,
             port="seq_len"),)),
        R("KV_LEN", 0x018, f"Rows of the second sequence in CROSS mode, 1..{cfg.max_kv_len}.",
          (F("LEN", 0, LENGTH_BITS, Access.RW, "key/value rows (CROSS mode only)",
             reset=cfg.max_kv_len, port="kv_len"),)),
        R("KEY_LEN", 0x01C, "Keys that count (key padding); 0 means all key rows.",
          (F("LEN", 0, LENGTH_BITS, Access.RW, "valid keys, 0 = all", reset=0,
             port="key_len"),)),
        R("CYCLES", 0x020, "Clock cycles of the last finished sequence, from its START to "
          "its done (time queued behind the previous sequence included).",
          ro_count("cycles", "cycles")),
        R("BUSY_CYCLES", 0x024, "Cycles the matrix arrays took operands for the last "
          "finished sequence.", ro_count("busy_cycles", "cycles")),
        R("STALL_CYCLES", 0x034, "Cycles the arrays of the last finished sequence waited for "
          "softmax probabilities (P.V held for rows of P).",
          ro_count("stall_cycles", "cycles")),
        R("CONFIG0", 0x028, "Generated configuration.", (
            F("D_MODEL", 0, 16, Access.RO, "d_model", reset=cfg.d_model, const=True),
            F("HEADS", 16, 8, Access.RO, "heads", reset=cfg.heads, const=True),
            F("ENGINES", 24, 8, Access.RO, "head engines", reset=cfg.engines, const=True),
        )),
        R("CONFIG1", 0x02C, "Generated configuration.", (
            F("MAX_SEQ_LEN", 0, 16, Access.RO, "max_seq_len", reset=cfg.max_seq_len,
              const=True),
            F("MAX_KV_LEN", 16, 16, Access.RO, "max_kv_len", reset=cfg.max_kv_len,
              const=True),
        )),
        R("CONFIG2", 0x030, "Generated configuration.", (
            F("ARRAY_ROWS", 0, 8, Access.RO, "systolic array rows", reset=cfg.array_rows,
              const=True),
            F("ARRAY_COLS", 8, 8, Access.RO, "systolic array columns", reset=cfg.array_cols,
              const=True),
            F("CAUSAL_MASK", 16, 1, Access.RO, "causal mask supported",
              reset=int(cfg.causal_mask), const=True),
            F("CROSS_ATTENTION", 17, 1, Access.RO, "cross-attention supported",
              reset=int(cfg.cross_attention), const=True),
            F("POS_ENC_1D", 18, 1, Access.RO, "1-D positional encoding built",
              reset=int("1d" in cfg.pos_enc), const=True),
            F("POS_ENC_2D", 19, 1, Access.RO, "2-D positional encoding built",
              reset=int("2d" in cfg.pos_enc), const=True),
        )),
        R("CONFIG3", 0x038, "Generated configuration.", (
            F("MAX_POSITION", 0, 16, Access.RO, "positions in the encoding table (0: no "
              "encoder)", reset=cfg.positions if cfg.pos_enc else 0, const=True),
            F("ADDITIVE_LANES", 16, 8, Access.RO, "tanh terms per cycle of each engine's "
              "additive scorer (0: not built)", reset=cfg.additive_lanes, const=True),
            F("CHANNEL_SCALES", 24, 1, Access.RO, "the scale table of per-channel weight "
              "scales is built", reset=int(cfg.channel_scales), const=True),
            F("ACT_BITS", 25, 5, Access.RO, "bits of an activation on the AXI4-Stream ports "
              "(8: four per word, 16: two per word)", reset=cfg.act_bits, const=True),
        )),
        *_requant_registers(cfg),
        R("WEIGHTS_COMMIT", 0x080, "Write 1 when all weights and parameters are loaded.",
          (F("COMMIT", 0, 1, Access.WO, "sets STATUS.WEIGHTS_VALID"),)),
        *_pos_enc_registers(cfg),
        *_additive_registers(cfg),
    ]
    offsets = sorted(r.offset for r in regs)
    if len(set(offsets)) != len(offsets):
        raise RegmapError("two registers share an offset")

    regions = _window_regions(cfg)
    size = regions[-1].offset + regions[-1].size
    base = max(MIN_WINDOW_BASE, 1 << (size - 1).bit_length())
    addr_width = base.bit_length()     # log2(base) + 1: the top bit selects the window
    if addr_width > 32:
        raise RegmapError(f"the weight window needs {size} bytes, beyond a 32-bit address "
                          f"space (d_model = {cfg.d_model})")
    return RegisterMap(cfg, tuple(regs), tuple(regions), base, size, addr_width)


# ------------------------------------------------------------------------------ software helpers

def pack_window(rmap: RegisterMap, layer) -> list[int]:
    """Window image of ``layer`` (a ``QuantizedLayer``): ``rmap.window_words`` 32-bit words.

    Word ``i`` is written to byte address ``rmap.window_base + 4 * i``.
    """
    import numpy as np
    words = np.zeros(rmap.window_words, dtype=np.uint32)
    for g in rmap.regions:
        if g.tensor == "wa" and getattr(layer, "wa", None) is None:
            continue        # a dot-product layer on a configuration with additive scoring
        if g.tensor.startswith("rq_"):
            words[g.word_offset:g.word_offset + g.words] = scale_words(
                getattr(layer, g.tensor), g.words)
            continue
        t = np.asarray(getattr(layer, g.tensor), dtype=np.int64)
        if t.shape != g.shape:
            raise ValueError(f"{g.tensor} has shape {t.shape}: expected {g.shape}")
        flat = t.reshape(-1)
        if g.element_bits >= 32:
            nw = g.element_bits // 32
            v = flat.astype(object)
            chunks = [(int(x) >> (32 * j)) & 0xFFFFFFFF for x in v for j in range(nw)]
            words[g.word_offset:g.word_offset + len(chunks)] = chunks
        else:
            per = 32 // g.element_bits
            lanes = np.zeros(g.words * per, dtype=np.int64)
            lanes[:flat.size] = flat & ((1 << g.element_bits) - 1)
            lanes = lanes.reshape(g.words, per)
            packed = sum(lanes[:, k] << (k * g.element_bits) for k in range(per))
            words[g.word_offset:g.word_offset + g.words] = packed.astype(np.uint32)
    return [int(w) for w in words]


def param_values(rmap: RegisterMap, layer) -> dict[str, int]:
    """Register name -> value of every requantization/exponent parameter of ``layer``."""
    import numpy as np
    out = {}
    if getattr(layer, "scoring", "dot") != "dot" and "TANH_MULT" not in rmap:
        raise ValueError(f"the layer is quantized for {layer.scoring} scoring; the "
                         f"configuration builds no additive scorer (additive_lanes = 0): it "
                         f"scores by dot product only")
    if getattr(layer, "per_channel", False) and not rmap.cfg.channel_scales:
        raise ValueError(f"the layer requantizes per output channel; {rmap.cfg.name} has one "
                         f"multiplier and shift per projection (build it with [features] "
                         f"channel_scales = true, or quantize with weight_scales = 'tensor')")
    for stage in ("q", "k", "v", "pv", "o"):
        rq = getattr(layer, f"rq_{stage}")
        # A per-channel projection runs from the scale table (CTRL.CHANNEL_SCALES); its
        # registers get the first channel's values, which START checks like any.
        out[f"RQ_{stage.upper()}_MULT"] = int(np.atleast_1d(rq.mult)[0])
        out[f"RQ_{stage.upper()}_SHIFT"] = int(np.atleast_1d(rq.shift)[0])
    out["EXP_MULT"] = int(layer.exp_mult)
    out["EXP_SHIFT"] = int(layer.exp_shift)
    if "PE_MULT" in rmap:
        # 0 for a layer quantized without an encoding: runs with PE_MODE 0 only.
        out["PE_MULT"] = int(getattr(layer, "pe_mult", 0))
        out["PE_SHIFT"] = int(getattr(layer, "pe_shift", 0))
    if "TANH_MULT" in rmap:
        # 0 for a layer quantized for dot-product scores: runs without CTRL.ADDITIVE only.
        additive = getattr(layer, "scoring", "dot") == "additive"
        out["TANH_MULT"] = int(layer.tanh_mult) if additive else 0
        out["TANH_SHIFT"] = int(layer.tanh_shift) if additive else 0
    for name, value in out.items():
        f = rmap[name].fields[0]
        if not 0 <= value < 1 << f.width:
            raise ValueError(f"{name} = {value} is out of range: allowed 0..{(1 << f.width) - 1}")
    return out


# ------------------------------------------------------------------------------ emitters

def regmap_json(cfg: AttentionConfig) -> str:
    return json.dumps(build_regmap(cfg).to_dict(), indent=2) + "\n"


def _c_ident(name: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in name.upper())
    return out if not out[0].isdigit() else "_" + out


def regmap_c_header(cfg: AttentionConfig, prefix: str = "ATTN") -> str:
    """C header with offsets, field shifts/masks/widths, window layout and config constants."""
    rmap = build_regmap(cfg)
    guard = f"{prefix}_REGS_{_c_ident(cfg.name)}_H"
    lines = [
        f"/* Register map of attention engine \"{cfg.name}\". Generated by hw/bus/regmap.py from",
        " * the configuration; do not edit. Offsets are bytes from the AXI4-Lite base. */",
        f"#ifndef {guard}", f"#define {guard}", "",
        f"#define {prefix}_ADDR_WIDTH {rmap.addr_width}u",
        f"#define {prefix}_ID_VALUE 0x{ID_VALUE:08X}u",
        f"#define {prefix}_VERSION_VALUE 0x{VERSION_VALUE:08X}u",
        f"#define {prefix}_RESP_OKAY {RESP_OKAY}u",
        f"#define {prefix}_RESP_SLVERR {RESP_SLVERR}u", "",
    ]
    for r in rmap:
        p = f"{prefix}_{r.name}"
        lines.append(f"/* {r.name} ({r.access}): {r.desc} */")
        lines.append(f"#define {p}_OFFSET 0x{r.offset:03X}u")
        lines.append(f"#define {p}_RESET 0x{r.reset:08X}u")
        for f in r.fields:
            lines.append(f"#define {p}_{f.name}_SHIFT {f.lsb}u")
            lines.append(f"#define {p}_{f.name}_WIDTH {f.width}u")
            lines.append(f"#define {p}_{f.name}_MASK 0x{f.mask:08X}u")
        lines.append("")
    lines.append("/* Write-only weight window (reads return SLVERR). */")
    lines.append(f"#define {prefix}_WINDOW_BASE 0x{rmap.window_base:08X}u")
    lines.append(f"#define {prefix}_WINDOW_SPAN 0x{rmap.window_span:08X}u")
    lines.append(f"#define {prefix}_WINDOW_SIZE 0x{rmap.window_size:08X}u")
    for g in rmap.regions:
        p = f"{prefix}_WINDOW_{g.name}"
        lines.append(f"/* {g.desc} */")
        lines.append(f"#define {p}_OFFSET 0x{g.offset:08X}u")
        lines.append(f"#define {p}_SIZE 0x{g.size:08X}u")
        lines.append(f"#define {p}_ELEMENT_BITS {g.element_bits}u")
    if rmap.cfg.channel_scales:
        lines.append("/* A scale-table word (SQ..SO): MULT | SHIFT << SCALE_SHIFT_LSB. */")
        lines.append(f"#define {prefix}_SCALE_MULT_BITS {rmap.cfg.requant_mult_bits}u")
        lines.append(f"#define {prefix}_SCALE_SHIFT_LSB {SCALE_SHIFT_LSB}u")
        lines.append(f"#define {prefix}_SCALE_SHIFT_BITS {SHIFT_BITS}u")
    lines.append("")
    lines.append("/* Generated configuration. */")
    c = cfg.to_dict()
    for section, values in c.items():
        if not isinstance(values, dict):
            continue
        for k, v in values.items():
            if isinstance(v, (list, tuple)):
                # pos_enc: a bit per mode, in POS_ENC_MODES order (1d = bit 0, 2d = bit 1)
                v = sum(1 << i for i, mode in enumerate(POS_ENC_MODES) if mode in v)
            v = int(v)
            lines.append(f"#define {prefix}_CFG_{_c_ident(k)} {v}{'u' if v < 1 << 32 else 'ull'}")
    lines += ["", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def regmap_markdown(cfg: AttentionConfig) -> str:
    """Register map documentation (docs/register_map.md holds the default config's)."""
    rmap = build_regmap(cfg)
    out = [
        f"# Register map (configuration `{cfg.name}`)", "",
        "Generated by `hw/bus/regmap.py` (`python -m hw regmap --config configs/default.toml "
        "--out DIR`); do not "
        "edit. The same description drives the hardware (`hw/bus/axi_lite.py`), `regmap.json` "
        "and the C header.", "",
        f"AXI4-Lite, 32-bit data, {rmap.addr_width}-bit byte addresses, little-endian; "
        "`addr[1:0]` is ignored. Responses: OKAY (0), or SLVERR (2) for addresses with no "
        "register, reads of the weight window and writes past its used part. Writes to "
        "read-only registers are ignored (OKAY); write-only registers read 0.", "",
        "Access: `ro` read-only, `rw` read/write (byte strobes honoured), `w1c` sticky, write 1 "
        "to clear, `wo` write 1 to trigger (reads 0). Guard (what a write does while "
        "`STATUS.BUSY`): `none` always written; `run` dropped and raises `WRITE_WHILE_BUSY`; "
        "`layer` the same, and an accepted write clears `STATUS.WEIGHTS_VALID`; `hold` the "
        "value is kept, silently.",
        "", "## Registers", "",
        "| offset | name | access | reset | description |",
        "|---|---|---|---|---|",
    ]
    for r in rmap:
        out.append(f"| 0x{r.offset:03X} | `{r.name}` | {r.access} | 0x{r.reset:08X} | "
                   f"{r.desc} |")
    out += ["", "## Fields", ""]
    for r in rmap:
        out += [f"### 0x{r.offset:03X} `{r.name}`", "", r.desc, "",
                "| bits | field | access | reset | guard | description |",
                "|---|---|---|---|---|---|"]
        for f in sorted(r.fields, key=lambda f: -f.lsb):
            bits = f"{f.msb}:{f.lsb}" if f.width > 1 else f"{f.lsb}"
            out.append(f"| {bits} | `{f.name}` | {f.access.value} | {f.reset:#x} | "
                       f"{f.guard.value} | {f.desc} |")
        out.append("")
    out += [
        "## Weight window", "",
        f"Base 0x{rmap.window_base:X} (span 0x{rmap.window_span:X} bytes, "
        f"{rmap.window_size} bytes used), write-only: reads return SLVERR. Weights are in "
        "torch (out, in) layout, row-major, packed little-endian (byte `k` of word `a` is "
        "element `4a + k` for int8). Every region starts on a word and is padded to whole "
        "words (the configuration requires d_model % 4 == 0, so rows never straddle words). "
        "A write here while busy is dropped and raises `WRITE_WHILE_BUSY`; an accepted "
        "write clears `STATUS.WEIGHTS_VALID` until `WEIGHTS_COMMIT`.", "",
        "| address | region | bytes | element bits | layout |",
        "|---|---|---|---|---|",
    ]
    for g in rmap.regions:
        out.append(f"| 0x{rmap.window_base + g.offset:X} | `{g.name}` | {g.size} | "
                   f"{g.element_bits} | {g.desc} |")
    out += [
        "", "## Run sequence", "",
        "1. Write the weight window and the `RQ_*` / `EXP_*` registers, then "
        "`WEIGHTS_COMMIT = 1`.",
        "2. Write `SEQ_LEN`, `KV_LEN` (CROSS mode), `KEY_LEN`.",
        "3. Write `CTRL` with `START` and the mode bits of this run (they take effect with "
        "the same write). The start is checked first: `SEQ_LEN`, `KV_LEN` (CROSS only), "
        "`KEY_LEN`, `WEIGHTS_VALID`, and the mode bits against the configuration; any failure "
        "sets its `ERROR_CAUSE` bits and `STATUS.ERROR` and no run starts.",
        "4. Send the sequence on the input stream; its result comes out on the output "
        "stream. Each finished sequence sets `STATUS.DONE` (or `irq` with `IRQ_EN`); clear it "
        "by writing 1. `CYCLES`, `BUSY_CYCLES` and `STALL_CYCLES` then hold that sequence's "
        "counts.", "",
        "Sequences overlap: the input and output buffers are double. As soon as "
        "`STATUS.START_READY` is 1 (the previous sequence has been loaded and the arrays have "
        "taken it), steps 2-4 may run for the next sequence while the previous one computes "
        "and streams out. Results come out in START order. The length and mode registers "
        "are sampled by START, so they may be rewritten while busy.", "",
        "## Errors and interrupt", "",
        "- `STATUS.ERROR` is set while any `ERROR_CAUSE` bit is set. Writing 1 to a cause "
        "clears it; writing 1 to `STATUS.ERROR` clears every cause.",
        "- START while `STATUS.START_READY` is 0 sets `START_WHILE_BUSY` and is dropped. A "
        "write to the weight window or an `RQ_*`/`EXP_*` register while busy (any sequence "
        "loading, computing or streaming) is dropped and sets `WRITE_WHILE_BUSY` (the bus "
        "still answers OKAY).",
        "- The engine sets `STREAM_SHORT` / `STREAM_LONG` (and `DONE`); an engine event in the "
        "same cycle as a software clear wins, so no event is lost.",
        "- `irq = CTRL.IRQ_EN & (STATUS.DONE | STATUS.ERROR)`, a level.", "",
        "## Positional encoding", "",
        "A configuration with `[posenc] pos_enc` (for example `pos_enc = [\"1d\", \"2d\"]`) "
        "builds an encoder that adds the sinusoidal encoding to X as it streams in, before "
        "the projections (a cross run's second sequence gets none). It adds four registers "
        "(`python -m hw regmap --config C` lists them): `PE_OFFSET` (0x084, the first "
        "position; 2-D: the first grid row), `PE_GRID_W` (0x088, the 2-D grid width), "
        "`PE_MULT` and `PE_SHIFT` (0x08C, 0x090: layer parameters, written with the `RQ_*` "
        "registers and guarded like them). `CTRL.PE_MODE` chooses the encoding per run; "
        "`CONFIG2.POS_ENC_1D`/`POS_ENC_2D` and `CONFIG3.MAX_POSITION` say what is built. A "
        "mode that is not built is refused at START with `BAD_POSENC`; the built encoder "
        "checks its settings (the table's range, `PE_SHIFT`, and in 2-D that `PE_GRID_W` "
        "divides `SEQ_LEN`) in the cycles after START (2 cycles, in 2-D 2 plus one per bit "
        "of a length), before it loads an input word, and raises `BAD_POSENC` with "
        "`STATUS.ERROR` instead of loading. The run's input is then discarded as it "
        "arrives (both packets of a cross run), so a host may send it before reading "
        "STATUS or not at all: the next START ends the discarding and loads from the next "
        "word.", "",
        "## Additive scoring", "",
        "A configuration with `[scoring] additive_lanes` (1..array_rows * array_cols) builds "
        "an additive scorer beside each engine: with `CTRL.ADDITIVE` a run scores "
        "`sum_d w_h[d] tanh(q_i[d] + k_j[d])` instead of `q_i . k_j` (then the same masks, "
        "softmax and P.V). It adds the window region `WA` after the biases (the heads' `w` "
        "vectors, int8, `(heads, head_dim)` row-major, four to a word) and two layer "
        "parameters, `TANH_MULT` and `TANH_SHIFT` (0x094, 0x098: `(q + k) TANH_MULT >> "
        "TANH_SHIFT`, rounded, is the tanh argument with 10 fraction bits), written with the "
        "`RQ_*` registers and guarded like them. `CONFIG3.ADDITIVE_LANES` says what is built. "
        "START with `CTRL.ADDITIVE` on a configuration without a scorer, or with "
        "`TANH_SHIFT` outside 1..62, is refused with `BAD_SCORING`.", "",
        "## Per-channel weight scales", "",
        "A configuration with `[features] channel_scales = true` builds a scale table beside "
        "the bias buffers: the window regions `SQ, SK, SV, SO` after the biases (and `WA`), "
        "one word per output channel of each projection, the requantization multiplier in "
        "bits `[requant_mult_bits - 1:0]` and the shift (1..62) in `[29:24]`, written whole "
        "(`WSTRB = 0xF`; other writes are ignored, as for biases). A word with the shift "
        "outside 1..62 or a bit set above the multiplier's width or above bit 29 is dropped "
        "and sets `BAD_SCALE`. With `CTRL.CHANNEL_SCALES` a run requantizes the Q, K, V and "
        "output projections per channel from the table (`RQ_PV_*` still scales P.V); without "
        "it, from `RQ_Q/K/V/O_*` as before. `CONFIG3.CHANNEL_SCALES` says whether the table "
        "is built; START with `CTRL.CHANNEL_SCALES` on a configuration without it is refused "
        "with `BAD_SCALE`.", "",
    ]
    return "\n".join(out)
