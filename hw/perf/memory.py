"""Block RAM of the attention core's buffers on ECP5 (DP16KD, 18 kbit), estimated per buffer.

Each memory of :class:`hw.core.buffers.CoreBuffers` maps onto DP16KD blocks in the aspect ratio
that needs the fewest (16384 x 1 ... 1024 x 18, and 512 x 36 for a memory with one read and
one write port, which all of these have); the count is that per memory, times its copies
(banks, engines); the bias and scale buffers count none with ``bias_in_lut_ram``. Synthesis may use
fewer (LUT RAM for the smallest) or split differently:
``make synth`` reports the real figure; this estimate says which buffer limits the sequence
length before any synthesis runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from golden.config import AttentionConfig

__all__ = ["BufferRam", "buffer_ram", "dp16kd_blocks", "max_length", "ECP5_DEVICES"]

# (depth, width) aspect ratios of one DP16KD.
_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))

#: DP16KD blocks and MULT18X18D multipliers of the ECP5 devices the flow knows.
ECP5_DEVICES = {"LFE5U-25F": (56, 28), "LFE5U-45F": (108, 72), "LFE5U-85F": (208, 156)}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def dp16kd_blocks(depth: int, width: int) -> int:
    """DP16KD blocks of one ``depth x width`` memory, in its cheapest aspect ratio."""
    return min(_cdiv(depth, d) * _cdiv(width, w) for d, w in _SHAPES)


@dataclass(frozen=True)
class BufferRam:
    name: str
    depth: int            # words per memory (both halves of a double buffer)
    width: int            # bits per word
    copies: int           # memories (banks x engines)
    blocks: int           # DP16KD blocks of all copies


def buffer_ram(cfg: AttentionConfig) -> list[BufferRam]:
    """The core buffers' block RAM, largest first."""
    from hw.core.buffers import CoreBuffers
    from hw.core.geometry import CoreGeometry
    bufs = CoreBuffers(CoreGeometry(cfg))
    out = []
    for name, (width, depth, _, dims, banked) in bufs._spec.items():
        words = CoreBuffers._depth(depth, banked)
        n = prod(dims)
        lut_ram = name in ("b", "r") and cfg.bias_in_lut_ram
        out.append(BufferRam(name, words, width, n,
                             0 if lut_ram else n * dp16kd_blocks(words, width)))
    if cfg.tiled:
        from golden.online_softmax import tiled_format
        fmt = tiled_format(cfg, cfg.kv_tile)
        # The tile accumulator's running outputs O (q_tile x head_dim, out_acc_bits each).
        words = cfg.q_tile * (cfg.head_dim // cfg.array_cols)
        width = fmt.out_acc_bits * cfg.array_cols
        out.append(BufferRam("acc", words, width, cfg.engines,
                             cfg.engines * dp16kd_blocks(words, width)))
    return sorted(out, key=lambda b: -b.blocks)


def max_length(cfg: AttentionConfig, blocks: int, step: int = 8) -> int | None:
    """The longest ``max_seq_len`` (= ``max_kv_len``, a multiple of ``step``) whose estimated
    buffers fit ``blocks`` DP16KD, the configuration otherwise unchanged; None if not even the
    shortest valid one does. The tiles stay as configured, capped by the length."""
    from golden.config import ConfigError
    best = None
    for n in range(step, 4096 + 1, step):
        changes = {"max_seq_len": n, "max_kv_len": n}
        if cfg.tiled:
            changes["kv_tile"] = min(cfg.kv_tile, n - n % cfg.array_cols or cfg.array_cols)
            changes["q_tile"] = min(cfg.q_tile, n - n % cfg.array_rows or cfg.array_rows)
        try:
            c = cfg.replace(**changes)
        except ConfigError:
            continue
        if sum(b.blocks for b in buffer_ram(c)) > blocks:
            break
        best = n
    return best
