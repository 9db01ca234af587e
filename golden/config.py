"""The one configuration object of the generator.

``AttentionConfig`` is a frozen dataclass. It is validated once, in ``__post_init__``; every
width, table size and derived quantity used by the golden model, the hardware and the tests is
read from it (see the ``derived`` properties). Configurations are loaded from TOML files in
``configs/`` with :func:`load_config`.

This module is pure Python: the golden model and the hardware both import it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

import tomli_w

__all__ = ["AttentionConfig", "ConfigError", "load_config", "config_from_dict", "POS_ENC_MODES",
           "SCALE_MULT_BITS", "SCALE_SHIFT_LSB"]


class ConfigError(ValueError):
    """An invalid configuration. The message names the field, the value and the allowed range."""


def _clog2(n: int) -> int:
    """Bits needed to count ``n`` distinct values (ceil(log2(n)), at least 0)."""
    return max(0, (n - 1).bit_length())


# (section, field) pairs of the TOML layout; the dataclass fields are flat.
_SECTIONS = {
    "model": ("d_model", "heads", "head_dim", "max_seq_len", "max_kv_len"),
    "array": ("array_rows", "array_cols", "engines", "requant_lanes"),
    "widths": ("act_bits", "weight_bits", "bias_bits", "acc_bits", "prob_bits",
               "requant_mult_bits"),
    "softmax": ("exp_table_size", "exp_frac_bits", "exp_mult_bits", "recip_bits",
                "softmax_lanes"),
    "features": ("causal_mask", "cross_attention", "double_buffer", "bias_in_lut_ram",
                 "channel_scales"),
    "tiling": ("kv_tile", "q_tile", "tile_norm_lanes"),
    "posenc": ("pos_enc", "max_position"),
    "scoring": ("additive_lanes",),
}

#: A scale-table word of ``channel_scales``: the multiplier in bits [23:0], the shift in
#: [29:24] (the weight window's packing, ``hw.bus.regmap``; the hardware's field widths).
ACT_BITS_BUILT = (8, 16)   # activation widths the hardware is built for
SCALE_MULT_BITS = 24
SCALE_SHIFT_LSB = 24

#: Positional-encoding modes the hardware can build (``off`` is always available).
POS_ENC_MODES = ("1d", "2d")


@dataclass(frozen=True)
class AttentionConfig:
    """Parameters of one generated attention engine.

    Model
        ``d_model`` = ``heads`` * ``head_dim``; ``max_seq_len`` query rows and ``max_kv_len``
        key/value rows at most (equal unless cross-attention is enabled).
    Array
        ``array_rows`` x ``array_cols`` processing elements per systolic array; ``engines`` head
        engines (each one array plus one softmax unit) work on different heads at once.
        ``requant_lanes`` columns of a result row are requantized per cycle (0: all
        ``array_cols``, a row per cycle). A lane is one product of two 18 x 18 DSP blocks and
        its rounding shift; with fewer lanes a row takes ``array_cols / requant_lanes``
        cycles, so tiles are issued at least ``array_rows * array_cols / requant_lanes``
        cycles apart, which lengthens only products with a shorter ``k``.
    Widths
        Signed ``act_bits`` activations, ``weight_bits`` weights, ``bias_bits`` biases,
        ``acc_bits`` accumulators; unsigned ``prob_bits`` probabilities (UQ0.prob_bits);
        requantization multipliers are unsigned ``requant_mult_bits``-bit integers.
    Softmax
        ``exp_table_size`` intervals of the interpolated 2^-f table, ``exp_frac_bits`` fraction
        bits of the base-2 exponent argument, ``exp_mult_bits`` bits of the score-to-exponent
        multiplier, ``recip_bits`` bits of the row-sum reciprocal, ``softmax_lanes`` scores per
        cycle.
    Features
        ``causal_mask`` and ``cross_attention`` switch run-time support for those modes on.
        ``double_buffer`` doubles the input and output buffers so the next sequence loads and
        the previous one streams out while one computes; without it (half their block RAM)
        a START waits until the running sequence's projections are done and its output
        projection until the previous output has left. ``bias_in_lut_ram`` keeps the bias
        buffers (a few words each) in LUT RAM instead of block RAM. ``channel_scales`` builds
        a scale table beside the bias buffers: one requantization multiplier and shift per
        output channel of each projection (Q, K, V and the output), used by runs with
        CTRL.CHANNEL_SCALES (per-channel weight scales); without it, or in runs without that
        bit, every projection has one multiplier and shift (per-tensor scales).
    Tiling
        ``kv_tile`` 0 builds the whole-row path: one head's whole score and probability
        matrices on chip (``max_seq_len x max_kv_len``). ``kv_tile`` > 0 builds the key/value
        tiled path (:mod:`golden.online_softmax`): scores and probabilities of ``q_tile`` query
        rows by ``kv_tile`` keys at a time, an online softmax and running output
        accumulators, normalised ``tile_norm_lanes`` values per cycle.
    Positional encoding
        ``pos_enc`` lists the sinusoidal encodings the input loader can add to X at run time
        (``"1d"``, ``"2d"``; empty: no encoder is built). Its table holds ``max_position``
        positions (0: ``max_seq_len``): the 1-D mode needs ``offset + seq_len`` of them, the
        2-D mode the grid's rows and columns.
    Additive scoring
        ``additive_lanes`` > 0 builds an additive (Bahdanau) scorer beside each engine's
        array, ``additive_lanes`` tanh terms per cycle (1..array_rows*array_cols), chosen per
        run by CTRL.ADDITIVE; 0 builds none.
    """

    name: str = "unnamed"
    # model
    d_model: int = 64
    heads: int = 4
    head_dim: int = 16
    max_seq_len: int = 32
    max_kv_len: int = 32
    # array
    array_rows: int = 4
    array_cols: int = 4
    engines: int = 1
    requant_lanes: int = 0
    # widths
    act_bits: int = 8
    weight_bits: int = 8
    bias_bits: int = 32
    acc_bits: int = 32
    prob_bits: int = 8
    requant_mult_bits: int = 16
    # softmax
    exp_table_size: int = 16
    exp_frac_bits: int = 10
    exp_mult_bits: int = 16
    recip_bits: int = 16
    softmax_lanes: int = 1
    # features
    causal_mask: bool = True
    cross_attention: bool = True
    double_buffer: bool = True
    bias_in_lut_ram: bool = False
    channel_scales: bool = False
    # tiling
    kv_tile: int = 0
    q_tile: int = 0
    tile_norm_lanes: int = 2
    # positional encoding
    pos_enc: tuple = ()
    max_position: int = 0
    # additive scoring
    additive_lanes: int = 0

    # ---------------------------------------------------------------- validation

    def __post_init__(self):
        def need(name, lo, hi, why=""):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an integer, not {value!r}")
            if not lo <= value <= hi:
                extra = f" ({why})" if why else ""
                raise ConfigError(f"{name} = {value} is out of range: allowed {lo}..{hi}{extra}")

        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, not {self.name!r}")
        for flag in ("causal_mask", "cross_attention", "double_buffer", "bias_in_lut_ram",
                     "channel_scales"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag} must be true or false, not {getattr(self, flag)!r}")

        need("heads", 1, 64)
        need("head_dim", 1, 1024)
        need("d_model", 1, 8192)
        if self.d_model != self.heads * self.head_dim:
            raise ConfigError(
                f"d_model = {self.d_model} must equal heads * head_dim = "
                f"{self.heads} * {self.head_dim} = {self.heads * self.head_dim}")
        need("max_seq_len", 1, 4096)
        need("max_kv_len", 1, 4096)
        if not self.cross_attention and self.max_kv_len != self.max_seq_len:
            raise ConfigError(
                f"max_kv_len = {self.max_kv_len} must equal max_seq_len = {self.max_seq_len} "
                f"when cross_attention is false (self-attention keys are the queries' rows)")

        # The generated hardware's limits (the golden model alone would take 2..16 bits): the
        # 32-bit AXI4-Stream words carry four 8-bit or two 16-bit activations, the
        # weight-window words four 8-bit weights, and the softmax output feeds the 8-bit P
        # operand of P.V.
        need("act_bits", 8, 16, "32-bit bus words carry four 8-bit or two 16-bit activations")
        if self.act_bits not in ACT_BITS_BUILT:
            raise ConfigError(
                f"act_bits = {self.act_bits} is out of range: allowed 8 or 16 (32-bit bus "
                f"words carry four 8-bit or two 16-bit activations)")
        need("weight_bits", 8, 8, "32-bit weight-window words carry four 8-bit weights")
        need("prob_bits", 2, 16)
        need("acc_bits", 8, 48)
        need("bias_bits", 1, min(32, self.acc_bits),
             "at most acc_bits, and a bias is one 32-bit weight-window word")
        need("requant_mult_bits", 2, min(31, 62 - self.acc_bits),
             "the requantization product acc * multiplier must fit 62 bits")
        if self.channel_scales:
            need("requant_mult_bits", 2, SCALE_MULT_BITS,
                 f"with channel_scales a scale-table word holds the multiplier in bits "
                 f"[{SCALE_MULT_BITS - 1}:0] and the shift in [{SCALE_SHIFT_LSB + 5}:"
                 f"{SCALE_SHIFT_LSB}]")

        need("array_rows", 2, 16, "systolic array rows")
        need("array_cols", 2, 16, "systolic array columns")
        # An array larger than any matrix it will multiply only wastes multipliers.
        need("array_rows", 2, max(2, max(self.max_seq_len, self.max_kv_len)),
             "at most the longest sequence, the largest M of any product")
        need("array_cols", 2, max(2, self.d_model),
             "at most d_model, the largest N of any product")
        need("engines", 1, self.heads, "at most one engine per head")
        need("requant_lanes", 0, self.array_cols,
             f"columns requantized per cycle, 0 for all array_cols = {self.array_cols}")
        if self.requant_lanes and self.array_cols % self.requant_lanes:
            raise ConfigError(
                f"requant_lanes = {self.requant_lanes} must divide array_cols = "
                f"{self.array_cols} (a result row is requantized in equal groups of columns)")

        need("exp_table_size", 2, 1024)
        if self.exp_table_size & (self.exp_table_size - 1):
            raise ConfigError(
                f"exp_table_size = {self.exp_table_size} must be a power of two in 2..1024")
        # At least the table index; the bits below it (the interpolation fraction) are one
        # operand of an 18 x 18 DSP multiply in hw/blocks/exp2.py.
        ib = self.exp_table_index_bits
        need("exp_frac_bits", ib, min(24, ib + 18),
             f"at least log2(exp_table_size) = {ib}, at most that + 18: the interpolation "
             f"fraction is one 18-bit multiplier operand")
        need("exp_mult_bits", 2, 24)
        if self.exp_step_bits > 18:
            raise ConfigError(
                f"exp_table_size = {self.exp_table_size} is too small for prob_bits = "
                f"{self.prob_bits}: a step between table entries is {self.exp_step_bits} bits, "
                f"more than one 18-bit multiplier operand (allowed exp_table_size >= 32 with "
                f"prob_bits > 8)")
        need("recip_bits", self.prob_bits, 24, f"at least prob_bits = {self.prob_bits}")
        need("softmax_lanes", 1, min(16, self.max_kv_len), "scores per cycle, at most max_kv_len")
        if self.array_cols % self.softmax_lanes:
            raise ConfigError(
                f"softmax_lanes = {self.softmax_lanes} must divide array_cols = "
                f"{self.array_cols} (a score word of array_cols values feeds whole softmax beats)")
        if self.d_model % 4:
            raise ConfigError(
                f"d_model = {self.d_model} must be a multiple of 4: the 32-bit weight-window "
                f"words carry 4 int8 weights of one row, the AXI4-Stream words "
                f"{self.act_per_word} activations")

        self._check_tiling(need)
        self._check_pos_enc(need)
        self._check_additive(need)
        if self.act_bits == 16:
            self._check_act16()

        # Every accumulation must be exact in acc_bits (no wrap-around in any product).
        limit = 2 ** (self.acc_bits - 1) - 1
        for what, bound in self.accumulator_bounds().items():
            if bound > limit:
                raise ConfigError(
                    f"acc_bits = {self.acc_bits} is too narrow: the {what} accumulation reaches "
                    f"{bound}, which needs acc_bits >= {bound.bit_length() + 1}")
        # The softmax datapath's widest product must stay in 62 bits (the golden model and
        # the simulators compute in int64).
        if self.sum_bits + self.recip_bits + 2 > 62:
            raise ConfigError(
                f"recip_bits = {self.recip_bits} with max_kv_len = {self.max_kv_len} makes the "
                f"softmax reciprocal {self.sum_bits + self.recip_bits} bits wide: allowed "
                f"recip_bits <= {60 - self.sum_bits}")

    def _check_act16(self):
        """What 16-bit activations are not built for: the additive scorer's tanh argument and
        the positional encoder's adders take int8 operands."""
        if self.additive_lanes:
            raise ConfigError(f"additive_lanes = {self.additive_lanes} with act_bits = 16: the "
                              f"additive scorer takes int8 Q and K (allowed additive_lanes = 0)")
        if self.pos_enc:
            raise ConfigError(f"pos_enc = {list(self.pos_enc)!r} with act_bits = 16: the "
                              f"positional encoder adds to int8 inputs (allowed pos_enc = [])")

    def _check_tiling(self, need):
        """The key/value-tiled path's limits (``kv_tile`` > 0); 0 leaves the others unused."""
        from .online_softmax import NORM_GUARD_BITS, TILE_PROB_BITS

        need("kv_tile", 0, self.max_kv_len, "keys per tile; 0 builds the whole-row path")
        need("tile_norm_lanes", 1, 64)
        if not self.kv_tile:
            if self.q_tile:
                raise ConfigError(f"q_tile = {self.q_tile} needs kv_tile > 0 (the whole-row "
                                  f"path has no query tiles): allowed 0")
            return
        C, R = self.array_cols, self.array_rows
        if self.kv_tile % C:
            raise ConfigError(
                f"kv_tile = {self.kv_tile} must be a multiple of array_cols = {C} (a tile's "
                f"keys are whole column tiles of the score product)")
        peak = self.kv_tile << (TILE_PROB_BITS + self.act_bits - 1)
        if peak > 1 << (self.acc_bits - 1):
            allowed = (1 << (self.acc_bits - 1)) >> (TILE_PROB_BITS + self.act_bits - 1)
            raise ConfigError(
                f"kv_tile = {self.kv_tile} is too large for acc_bits = {self.acc_bits}: one "
                f"tile's E.V reaches {peak}; allowed kv_tile <= {allowed}")
        need("q_tile", R, self.max_seq_len,
             "query rows per tile with kv_tile > 0: array_rows up to max_seq_len")
        if self.q_tile % R:
            raise ConfigError(
                f"q_tile = {self.q_tile} must be a multiple of array_rows = {R} (a query tile "
                f"is whole row tiles of the array)")
        if self.head_dim % C:
            raise ConfigError(
                f"head_dim = {self.head_dim} must be a multiple of array_cols = {C} with "
                f"kv_tile > 0 (the output accumulator holds whole column tiles)")
        lanes = [n for n in range(1, C + 1) if C % n == 0]
        if self.tile_norm_lanes not in lanes:
            raise ConfigError(
                f"tile_norm_lanes = {self.tile_norm_lanes} must divide array_cols = {C}: "
                f"allowed {', '.join(map(str, lanes))}")
        low = TILE_PROB_BITS - 1 + self.recip_bits - self.prob_bits - NORM_GUARD_BITS
        if low < 1:
            raise ConfigError(
                f"recip_bits = {self.recip_bits} is too small for kv_tile > 0: allowed >= "
                f"{self.recip_bits - low + 1}")

    def _check_pos_enc(self, need):
        """The positional encoder's limits; a list from TOML becomes a tuple (hashable)."""
        modes = self.pos_enc
        if isinstance(modes, str) or not isinstance(modes, (list, tuple)):
            raise ConfigError(f"pos_enc must be a list of modes ({', '.join(POS_ENC_MODES)}), "
                              f"not {modes!r}")
        bad = [m for m in modes if m not in POS_ENC_MODES]
        if bad or len(set(modes)) != len(modes):
            raise ConfigError(f"pos_enc = {list(modes)!r}: allowed a list of distinct modes "
                              f"out of {', '.join(POS_ENC_MODES)}")
        object.__setattr__(self, "pos_enc", tuple(m for m in POS_ENC_MODES if m in modes))
        if not modes:
            if self.max_position:
                raise ConfigError(f"max_position = {self.max_position} needs a pos_enc mode "
                                  f"(no encoder is built): allowed 0")
            return
        # The encoder's table words hold eight codes; the 2-D mode splits d_model in halves.
        if self.d_model % 8:
            raise ConfigError(f"d_model = {self.d_model} must be a multiple of 8 with pos_enc "
                              f"(the encoding table's words hold eight channels)")
        need("max_position", 0, 65535, "positions in the encoding table; 0 = max_seq_len")

    def _check_additive(self, need):
        """The additive scorer's limits (``additive_lanes`` > 0 builds one per engine)."""
        R, C = self.array_rows, self.array_cols
        need("additive_lanes", 0, min(255, R * C), f"tanh terms per cycle and engine, at "
             f"most array_rows * array_cols (and 255); 0 builds no additive scorer")
        if not self.additive_lanes:
            return
        if self.kv_tile:
            raise ConfigError(f"additive_lanes = {self.additive_lanes} with kv_tile = "
                              f"{self.kv_tile}: additive scoring is built on the whole-row "
                              f"path only (allowed kv_tile = 0)")
        if self.head_dim % 4:
            raise ConfigError(f"head_dim = {self.head_dim} must be a multiple of 4 with "
                              f"additive_lanes (the w vectors' window words hold four elements "
                              f"of one head)")
        if (self.head_dim * 127 * 128).bit_length() + 1 > self.acc_bits:
            raise ConfigError(f"acc_bits = {self.acc_bits} cannot hold an additive score of "
                              f"head_dim = {self.head_dim} terms")

    @property
    def requant_passes(self) -> int:
        """Cycles the requantizer takes per result row (``array_cols / requant_lanes``)."""
        return self.array_cols // self.requant_lanes if self.requant_lanes else 1

    @property
    def min_tile_steps(self) -> int:
        """Fewest cycles between two tiles' last operand beats on a matrix engine: the array
        drains a row per cycle, the requantizer takes ``requant_passes`` per row."""
        R, C = self.array_rows, self.array_cols
        return max(R, C, self.requant_passes * R)

    @property
    def additive(self) -> bool:
        """The additive scorer is built (``additive_lanes`` > 0)."""
        return self.additive_lanes > 0

    @property
    def positions(self) -> int:
        """Positions in the encoding table (``max_position``, 0 meaning ``max_seq_len``)."""
        return self.max_position or self.max_seq_len

    @property
    def tiled(self) -> bool:
        """The key/value-tiled path is built (``kv_tile`` > 0)."""
        return self.kv_tile > 0

    # ---------------------------------------------------------------- derived

    def accumulator_bounds(self) -> dict[str, int]:
        """Largest accumulator magnitude of each product, bias excluded."""
        amax = 2 ** (self.act_bits - 1)
        wmax = 2 ** (self.weight_bits - 1)
        pmax = 2 ** self.prob_bits - 1
        return {
            "projection (d_model terms)": self.d_model * amax * wmax,
            "score Q.K^T (head_dim terms)": self.head_dim * amax * amax,
            "P.V (max_kv_len terms)": self.max_kv_len * pmax * amax,
        }

    @property
    def projection_bias_limit(self) -> int:
        """Largest |bias| that keeps a projection accumulator exact in acc_bits and bias_bits."""
        headroom = 2 ** (self.acc_bits - 1) - 1 - self.d_model * 2 ** (self.act_bits - 1) \
            * 2 ** (self.weight_bits - 1)
        return min(headroom, 2 ** (self.bias_bits - 1) - 1)

    @property
    def act_per_word(self) -> int:
        """Activations per 32-bit AXI4-Stream word (4 int8 or 2 int16)."""
        return 32 // self.act_bits

    @property
    def act_row_words(self) -> int:
        """32-bit AXI4-Stream words of one row of ``d_model`` activations."""
        return self.d_model // self.act_per_word

    @property
    def score_bits(self) -> int:
        """Signed width of a Q.K^T score: head_dim products of two act_bits integers."""
        bound = self.head_dim * 2 ** (2 * self.act_bits - 2)
        return bound.bit_length() + 1

    @property
    def score_diff_bits(self) -> int:
        """Unsigned width of max(row) - score."""
        return self.score_bits + 1

    @property
    def exp_table_index_bits(self) -> int:
        return _clog2(self.exp_table_size)

    @property
    def exp_interp_bits(self) -> int:
        """Fraction bits below the table index, used for linear interpolation."""
        return self.exp_frac_bits - self.exp_table_index_bits

    @property
    def exp_step_bits(self) -> int:
        """Width of the largest step between neighbouring exp table entries (the first)."""
        T, L = self.exp_table_bits, self.exp_table_size
        return (math.floor(2.0 ** T + 0.5) - math.floor(2.0 ** (T - 1 / L) + 0.5)).bit_length()

    @property
    def exp_table_bits(self) -> int:
        """Fraction bits of a 2^-f table entry (UQ1.exp_table_bits, entries in [0.5, 1])."""
        return 15 if self.prob_bits <= 8 else 23

    @property
    def exp_bits(self) -> int:
        """Fraction bits of an exponential E = 2^-u (UQ1.exp_bits, E <= 1.0).

        ``prob_bits + max(clog2(max_kv_len), 5) + 3``: the smallest E that still matters is
        about 2^-prob_bits / max_kv_len of the row sum, and three guard bits keep the rounding
        of max_kv_len small terms below the output LSB. The floor of 5 is for short rows
        (max_kv_len < 32): their probabilities are large, so E's relative rounding error
        (0.5 LSB of E over the second-largest term) shows up as misrounded outputs near ties;
        with clog2(8) = 3 alone, tiny's correctly-rounded share lost ~0.1 point
        (docs/numerics.md, "Softmax accuracy"). Configs with max_kv_len >= 32 are unaffected.
        """
        return self.prob_bits + max(_clog2(self.max_kv_len), 5) + 3

    @property
    def sum_bits(self) -> int:
        """Unsigned width of a row sum of up to max_kv_len exponentials."""
        return self.exp_bits + _clog2(self.max_kv_len) + 1

    @property
    def seq_len_bits(self) -> int:
        return max(self.max_seq_len, self.max_kv_len).bit_length()

    @property
    def macs_per_layer_max(self) -> int:
        """Multiply-accumulates of one layer at maximum lengths."""
        return self.layer_macs(self.max_seq_len, self.max_kv_len)

    def layer_macs(self, seq_len: int, kv_len: int) -> int:
        """Multiply-accumulates of the whole layer for the given lengths."""
        d, h = self.d_model, self.head_dim
        proj = seq_len * d * d + 2 * kv_len * d * d     # Q, K, V
        attn = self.heads * (seq_len * kv_len * h * 2)  # Q.K^T and P.V
        out = seq_len * d * d
        return proj + attn + out

    @property
    def total_pes(self) -> int:
        return self.array_rows * self.array_cols * self.engines

    # ---------------------------------------------------------------- export

    def to_dict(self) -> dict:
        """Nested dict in the TOML layout, plus a ``derived`` section (ignored on load)."""
        out = {"name": self.name}
        for section, names in _SECTIONS.items():
            out[section] = {n: (list(getattr(self, n)) if n == "pos_enc" else getattr(self, n))
                            for n in names}
        out["derived"] = {
            "score_bits": self.score_bits,
            "exp_table_bits": self.exp_table_bits,
            "exp_bits": self.exp_bits,
            "sum_bits": self.sum_bits,
            "total_pes": self.total_pes,
            "macs_per_layer_max": self.macs_per_layer_max,
            "projection_bias_limit": self.projection_bias_limit,
        }
        if self.tiled:
            from .online_softmax import tiled_format
            fmt = tiled_format(self, self.kv_tile)
            out["derived"].update({"tile_prob_bits": fmt.prob_bits,
                                   "tile_sum_bits": fmt.sum_bits,
                                   "tile_out_acc_bits": fmt.out_acc_bits})
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_toml(self) -> str:
        """The configuration as TOML that :func:`load_config` reads back to an equal object."""
        data = self.to_dict()
        del data["derived"]
        return tomli_w.dumps(data)

    def replace(self, **changes) -> "AttentionConfig":
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name for f in fields(AttentionConfig)}


def config_from_dict(data: dict, source: str = "<dict>") -> AttentionConfig:
    """Build a config from the nested TOML layout. Unknown sections or keys are errors."""
    flat = {}
    for key, value in data.items():
        if key == "name":
            flat["name"] = value
        elif key == "derived":
            continue
        elif key in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: [{key}] must be a table")
            for sub, v in value.items():
                if sub not in _SECTIONS[key]:
                    raise ConfigError(
                        f"{source}: unknown key {key}.{sub}; allowed: "
                        f"{', '.join(_SECTIONS[key])}")
                flat[sub] = v
        else:
            raise ConfigError(
                f"{source}: unknown section or key {key!r}; allowed: name, "
                f"{', '.join(_SECTIONS)}")
    try:
        return AttentionConfig(**flat)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_config(path: str | Path) -> AttentionConfig:
    """Load and validate a TOML configuration file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read configuration {path}: {e.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    data.setdefault("name", path.stem)
    return config_from_dict(data, str(path))
