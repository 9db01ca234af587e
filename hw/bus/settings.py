"""What the register block hands the core: the ``start`` stream of run settings and the weight
window's word writes.

The run settings are

One :class:`~amaranth.lib.data.StructLayout` with a field per read-write register field that
has a port (:meth:`hw.bus.regmap.RegisterMap.run_settings`), at that field's width: ``causal``,
``cross``, ``seq_len``, ``kv_len``, ``key_len``, ``rq_<q|k|v|pv|o>_<mult|shift>``,
``exp_mult``, ``exp_shift``. A field added to the register map reaches the core's settings
without another hand-written port.
"""

from __future__ import annotations

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import Out

from golden.config import AttentionConfig

from hw.bus.regmap import build_regmap

__all__ = ["run_settings_layout", "StartSignature", "WindowWriteSignature"]


def run_settings_layout(cfg: AttentionConfig) -> data.StructLayout:
    """The settings of one run, as sampled at START."""
    return data.StructLayout(build_regmap(cfg).run_settings())


def StartSignature(cfg: AttentionConfig) -> stream.Signature:
    """``start``: a stream of run settings; a beat is a checked START (the register block raises
    ``valid`` only while ``ready``, so a beat always goes through in its first cycle)."""
    return stream.Signature(run_settings_layout(cfg))


def WindowWriteSignature(addr_width: int) -> wiring.Signature:
    """A one-cycle write of ``data`` (bytes enabled by ``strb``) to word ``addr`` of the weight
    window while ``en`` (the register block's side: every member ``Out``)."""
    return wiring.Signature({"en": Out(1), "addr": Out(addr_width), "data": Out(32),
                             "strb": Out(4)})
