"""The open FPGA flow: Yosys synthesis scripts, nextpnr place and route, netlist passes,
pin constraints, the registered I/O wrapper, static timing over routed SDF, reports."""
