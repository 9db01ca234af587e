"""The accelerator generator: RTL blocks (:mod:`hw.blocks`), the attention core (:mod:`hw.core`),
the bus side (:mod:`hw.bus`), the top (:mod:`hw.attention_top`), cycle models (:mod:`hw.perf`),
Verilog and collateral generation (:mod:`hw.gen`), the FPGA flow (:mod:`hw.flow`) and the
command line (``python -m hw``)."""
