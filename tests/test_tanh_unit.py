"""The additive scoring path's tanh unit (hw/blocks/tanh.py) against golden ``tanh_int`` over
every argument code from -9 to +9 (and the extremes of the argument width), by exact
equality; and the unit against float64 tanh within one output LSB."""

from __future__ import annotations


import numpy as np
import pytest

from golden.additive import TANH_ARG_FRAC, TANH_BITS, tanh_int
from hw.blocks.tanh import TanhUnit
from hw.gen.verilog import REPO_ROOT
from sim.amaranth_streams import simulate


def run_codes(codes, lanes, arg_bits=25):
    dut = TanhUnit(lanes, arg_bits)
    groups = [codes[i:i + lanes] for i in range(0, len(codes), lanes)]
    groups[-1] = list(groups[-1]) + [0] * (lanes - len(groups[-1]))
    out = []

    async def tb(ctx):
        lat = TanhUnit.LATENCY
        for k in range(len(groups) + lat):
            if k < len(groups):
                ctx.set(dut.a, [int(v) for v in groups[k]])
            await ctx.tick()
            if k + 1 >= lat:
                out.extend(int(v) for v in ctx.get(dut.t))

    simulate(dut, tb)
    return np.array(out[:len(codes)])


@pytest.mark.parametrize("lanes", [1, 3])
def test_every_code(lanes):
    hi = 9 << TANH_ARG_FRAC
    lo_w, hi_w = -(1 << 24), (1 << 24) - 1
    codes = np.concatenate([np.arange(-hi, hi + 1), [lo_w, hi_w, lo_w + 1, hi_w - 1]])
    got = run_codes(codes, lanes)
    np.testing.assert_array_equal(got, tanh_int(codes))
    # Odd symmetry exactly, the range -127..127, and within 1 LSB of float64 tanh.
    assert (got[:hi] == -got[hi + 1:2 * hi + 1][::-1]).all()
    assert got.min() == -127 and got.max() == 127
    exact = np.tanh(codes.astype(np.float64) / (1 << TANH_ARG_FRAC)) * (1 << TANH_BITS)
    assert np.abs(got - exact).max() <= 1.0


def test_narrow_argument_width():
    codes = np.arange(-(1 << 13), 1 << 13)
    np.testing.assert_array_equal(run_codes(codes, 2, arg_bits=14), tanh_int(codes))


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="lanes = 0 is out of range: allowed 1..64"):
        TanhUnit(0)
    with pytest.raises(ValueError, match="arg_bits = 13 is out of range: allowed 14..32"):
        TanhUnit(1, 13)


def test_verilog_lint_clean():
    from hw.gen.lint import lint_file
    from hw.gen.verilog import write_verilog
    out = REPO_ROOT / "build" / "lint" / "tanh"
    vfile = write_verilog(TanhUnit(2), "tanh_unit", out / "tanh_unit.v")
    res = lint_file(vfile, "tanh_unit", out / "lint.txt")
    assert res.issues == (), f"verilator -Wall beyond the waivers ({res.report}): " \
                             f"{res.issues[:5]}"
