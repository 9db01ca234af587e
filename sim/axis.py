"""Old name of the word packing in :mod:`sim.bus`, kept only for
``tests/test_attention_core_unit.py`` until it imports ``sim.bus``; the bus models are there."""

from sim.bus import pack_rows, unpack_words

__all__ = ["pack_rows", "unpack_words"]
