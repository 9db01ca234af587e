"""Benchmarks (``make bench``): cycle counts of the matrix engine, the softmax unit and the
whole layer against their cycle models, and simulation speed."""
