"""Simulation of the generated Verilog: the cocotb runner, the bus models and layer driver, test
layers, and the benchmarks (:mod:`sim.bench`)."""
