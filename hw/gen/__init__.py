"""Verilog and collateral generation: Amaranth to simulator-safe Verilog, lint, file lists,
constraints and FuseSoC cores."""
