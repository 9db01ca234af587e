"""The bus side: the register map (one source of truth for registers, fields and error
causes) and the AXI4-Lite register block generated from it."""
