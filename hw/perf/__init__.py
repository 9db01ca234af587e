"""Cycle models (pure Python, no Amaranth import): the matrix engine, the softmax unit and
the whole layer. Unit tests hold them equal to simulated cycle counts."""
