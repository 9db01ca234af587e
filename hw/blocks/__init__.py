"""RTL building blocks: processing element, systolic array, DSP multipliers, exp2 unit,
reciprocal divider, matrix-multiply engine, softmax unit, register slice.

Each is one ``wiring.Component`` in its own file; its docstring states ports, latency,
throughput and number formats, and its bit-exact twin lives in :mod:`golden`.
"""
