"""Tests of hw/blocks/dsp.py: the registered multiplier (behavioural form) and its ECP5 form."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Shape, signed, unsigned
from amaranth.sim import Simulator

from hw.blocks.dsp import ECP5, RegisteredMultiplier, WideMultiplier


def _random(rng, shape: Shape, n: int) -> list[int]:
    lo = -(1 << (shape.width - 1)) if shape.signed else 0
    hi = (1 << (shape.width - 1)) if shape.signed else (1 << shape.width)
    values = rng.integers(lo, hi, n).tolist()
    values[:4] = [lo, hi - 1, lo, hi - 1]    # extremes first
    return values


@pytest.mark.parametrize("cls,a_shape,b_shape", [
    (RegisteredMultiplier, signed(9), signed(8)),
    (lambda a, b: RegisteredMultiplier(a, b, fabric_reg=True), signed(9), signed(8)),
    (RegisteredMultiplier, unsigned(18), unsigned(17)),
    (RegisteredMultiplier, signed(18), unsigned(18)),
    (WideMultiplier, signed(33), unsigned(16)),
    (WideMultiplier, unsigned(22), unsigned(16)),
    (WideMultiplier, unsigned(18), unsigned(17)),
    (WideMultiplier, signed(49), unsigned(31)),
    (WideMultiplier, signed(12), unsigned(30)),
    (WideMultiplier, signed(20), signed(20)),
])
def test_product_with_enable(cls, a_shape, b_shape):
    """p equals a * b exactly, ``latency`` enabled steps later; a low ``en`` holds everything."""
    rng = np.random.default_rng(a_shape.width * 100 + b_shape.width)
    dut = cls(a_shape, b_shape)
    steps = 300
    a = _random(rng, a_shape, steps)
    b = _random(rng, b_shape, steps)
    en = (rng.random(steps) < 0.7).tolist()
    en[:8] = [True] * 8
    got, want = [], []

    async def tb(ctx):
        taken = []                       # operands of the enabled steps, in order
        for i in range(steps):
            ctx.set(dut.en, en[i])
            ctx.set(dut.a, a[i])
            ctx.set(dut.b, b[i])
            await ctx.tick()
            if en[i]:
                taken.append(a[i] * b[i])
                if len(taken) >= dut.latency:
                    got.append(ctx.get(dut.p))
                    want.append(taken[-dut.latency])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert got == want
    assert len(got) > 100


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_block_counts_and_latency():
    assert WideMultiplier(signed(33), unsigned(16)).blocks == 2
    assert WideMultiplier(unsigned(18), unsigned(17)).blocks == 1
    assert WideMultiplier.latency_for(unsigned(18), unsigned(17)) == 3
    assert WideMultiplier.latency_for(unsigned(22), unsigned(16)) == 4
    assert RegisteredMultiplier(signed(9), signed(8)).latency == 2
    assert RegisteredMultiplier(signed(9), signed(8), fabric_reg=True).latency == 3
    with pytest.raises(ValueError, match="a width = 19 is out of range"):
        RegisteredMultiplier(signed(19), signed(8))


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_ecp5_form_is_one_registered_mult18x18d():
    """For ECP5 the multiplier is a MULT18X18D instance with input and output registers."""
    text = rtlil.convert(RegisteredMultiplier(signed(9), signed(8)), name="m", platform=ECP5)
    assert text.count("cell \\MULT18X18D") == 1
    for param in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"):
        assert f'parameter \\{param} "CLK0"' in text
    assert 'parameter \\REG_PIPELINE_CLK "NONE"' in text
    text = rtlil.convert(WideMultiplier(signed(33), unsigned(16)), name="w", platform=ECP5)
    assert text.count("cell \\MULT18X18D") == 2
