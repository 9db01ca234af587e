"""Sizes the core's blocks share, derived from the configuration in one place."""

from __future__ import annotations

from dataclasses import dataclass

from golden.config import AttentionConfig

from hw.core.arith import addr_bits, cdiv

__all__ = ["CoreGeometry"]


@dataclass(frozen=True)
class CoreGeometry:
    """Array, head and buffer geometry of :class:`hw.core.attention_core.AttentionCore`.

    Engine ``e`` owns heads ``h = g * E + e`` (head group ``g < G``). A head's ``head_dim``
    columns are ``TN`` column tiles of the array's ``C`` columns; a score row of up to
    ``S_KEYS`` keys (``max_kv_len``, or ``kv_tile`` on the tiled path) is ``TNk`` words of
    ``C`` scores and ``KB`` softmax beats of ``L`` lanes; the score and probability buffers
    hold ``S_ROWS`` such rows (``max_seq_len``, or ``q_tile``). Activations are ``A`` bits
    (``act_bits``); an activation row is ``XW`` bus words of ``EPW`` elements (4 int8 or
    2 int16), a weight row ``D4`` window words of 4 int8."""

    cfg: AttentionConfig

    @property
    def R(self) -> int:
        return self.cfg.array_rows

    @property
    def C(self) -> int:
        return self.cfg.array_cols

    @property
    def E(self) -> int:
        return self.cfg.engines

    @property
    def L(self) -> int:
        return self.cfg.softmax_lanes

    @property
    def G(self) -> int:
        return cdiv(self.cfg.heads, self.cfg.engines)

    @property
    def dk(self) -> int:
        return self.cfg.head_dim

    @property
    def d(self) -> int:
        return self.cfg.d_model

    @property
    def TN(self) -> int:
        return cdiv(self.cfg.head_dim, self.cfg.array_cols)

    @property
    def tiled(self) -> bool:
        return self.cfg.tiled

    @property
    def S_KEYS(self) -> int:
        """Keys of a score row the score and probability buffers hold."""
        return self.cfg.kv_tile if self.tiled else self.cfg.max_kv_len

    @property
    def S_ROWS(self) -> int:
        """Query rows the score and probability buffers hold."""
        return self.cfg.q_tile if self.tiled else self.cfg.max_seq_len

    @property
    def fmt(self):
        """The tiled path's widths (:class:`golden.online_softmax.TiledFormat`)."""
        from golden.online_softmax import tiled_format
        return tiled_format(self.cfg, self.cfg.kv_tile) if self.tiled else None

    @property
    def p_bits(self) -> int:
        """Width of a probability in the P buffer: UQ0.prob_bits, or on the tiled path the
        unnormalized E (UQ1.Bt)."""
        return self.fmt.prob_bits + 1 if self.tiled else self.cfg.prob_bits

    @property
    def TNk(self) -> int:
        return cdiv(self.S_KEYS, self.cfg.array_cols)

    @property
    def KB(self) -> int:
        return cdiv(self.S_KEYS, self.cfg.softmax_lanes)

    @property
    def QTR(self) -> int:
        """Row tiles of the longest query sequence (the tiled jobs' row offset ``m0``)."""
        return cdiv(self.SEQ, self.R)

    @property
    def KVC(self) -> int:
        """Column tiles of the longest key sequence (the tiled score jobs' offset ``n0``)."""
        return cdiv(self.KV, self.C)

    @property
    def D4(self) -> int:
        """Weight-window words of one weight row (4 int8 each)."""
        return self.cfg.d_model // 4

    @property
    def A(self) -> int:
        """Bits of an activation (X, Q, K, V, attention, output)."""
        return self.cfg.act_bits

    @property
    def EPW(self) -> int:
        """Activations per 32-bit input buffer / bus word."""
        return self.cfg.act_per_word

    @property
    def XW(self) -> int:
        """Bus words of one activation row."""
        return self.cfg.act_row_words

    @property
    def SEQ(self) -> int:
        return self.cfg.max_seq_len

    @property
    def KV(self) -> int:
        return self.cfg.max_kv_len

    @property
    def lb(self) -> int:
        """Width of a run-time length (rows of a sequence)."""
        return self.cfg.seq_len_bits

    # Weight window word layout: 4 matrices of d*d/4 words, then 4 bias vectors of d words,
    # then (additive scoring) the heads' w vectors, d_k/4 words per head, then (channel_scales)
    # the scale table: 4 vectors of d words, one (multiplier, shift) word per output channel.
    @property
    def matrix_words(self) -> int:
        return self.d * self.d // 4

    @property
    def wa_base(self) -> int:
        """Word address of the w vectors (additive scoring)."""
        return 4 * self.matrix_words + 4 * self.d

    @property
    def wa_words(self) -> int:
        return self.cfg.heads * self.dk // 4 if self.cfg.additive else 0

    @property
    def scale_base(self) -> int:
        """Word address of the scale table (``channel_scales``)."""
        return self.wa_base + self.wa_words

    @property
    def scale_words(self) -> int:
        return 4 * self.d if self.cfg.channel_scales else 0

    @property
    def scale_lane_bits(self) -> int:
        """Bits of one column's entry in the scale buffer: the multiplier, the shift - 1."""
        return self.cfg.requant_mult_bits + 6

    @property
    def window_words(self) -> int:
        return self.scale_base + self.scale_words

    @property
    def window_addr_bits(self) -> int:
        return addr_bits(self.window_words)

    # Buffer depths (words) and the address widths of the double (banked) buffers.
    @property
    def x_depth(self) -> int:
        return cdiv(self.SEQ, self.R) * self.XW

    @property
    def kv_depth(self) -> int:
        return cdiv(self.KV, self.R) * self.XW

    @property
    def x_aw(self) -> int:
        return addr_bits(self.x_depth)

    @property
    def kv_aw(self) -> int:
        return addr_bits(self.kv_depth) if self.cfg.cross_attention else self.x_aw

    @property
    def o_depth(self) -> int:
        return self.SEQ * self.G * self.TN

    @property
    def p_depth(self) -> int:
        """Words of one probability tile per bank of rows (the tiled path keeps two tiles)."""
        return cdiv(self.S_ROWS, self.R) * self.KB

    @property
    def p_aw(self) -> int:
        return addr_bits(self.p_depth)

    @property
    def o_aw(self) -> int:
        return addr_bits(self.o_depth)

    @property
    def out_elems(self) -> int:
        """Elements of one output row the streamer reads per cycle (a whole bus word's
        ``EPW`` when that many adjacent columns always share a buffer word)."""
        from hw.perf.layer import stream_elems_per_cycle
        return stream_elems_per_cycle(self.cfg)
