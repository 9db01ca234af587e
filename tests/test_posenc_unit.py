"""The positional-encoding adder (hw/blocks/posenc.py) against golden ``add_encoding`` of
``encoding_int``, by exact equality, in every mode, with idle/backpressure; invalid settings
raise ``error`` and pass the words unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from golden.posenc import add_encoding, encoding_int
from hw.blocks.posenc import PeMode, PositionalEncoder
from hw.gen.verilog import REPO_ROOT
from sim.amaranth_streams import StreamConsumer, StreamProducer, simulate
from sim.host import pack_rows, unpack_words


def run(d, max_pos, mode, seq, offset=0, grid=0, tail=0, *, modes=("1d", "2d"), mult=20000,
        shift=14, idle=0.0, bp=0.0, seed=0, max_len=None):
    """x rows (seq + tail) through the encoder; returns (rows out, error flag, expected)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (seq + tail, d))
    x[0, :4] = [127, -128, 127, -128]                   # saturation both ways
    dut = PositionalEncoder(d, max_pos, modes, max_len=max_len)
    words = pack_rows(x)
    beats = [{"data": int(w), "last": int(i == len(words) - 1)} for i, w in enumerate(words)]
    prod = StreamProducer(dut.i_stream, beats, idle=idle, seed=seed)
    cons = StreamConsumer(dut.o_stream, len(words), backpressure=bp, seed=seed + 1, linger=20,
                          max_cycles=20 * len(words) + 500,
                          convert=lambda p: (int(p.data), int(p.last)))
    flags = []

    async def settings(ctx):
        ctx.set(dut.mode, {"off": PeMode.OFF, "1d": PeMode.ONE_D, "2d": PeMode.TWO_D}[mode])
        ctx.set(dut.offset, offset)
        ctx.set(dut.grid_width, grid)
        ctx.set(dut.seq_len, seq)
        ctx.set(dut.pe_mult, mult)
        ctx.set(dut.pe_shift, shift)
        ctx.set(dut.restart, 1)
        await ctx.tick()
        ctx.set(dut.restart, 0)
        await ctx.tick().repeat(24)
        flags.append(ctx.get(dut.error))

    simulate(dut, settings, prod, cons)
    out = unpack_words(np.array([w for w, _ in cons.items], dtype=np.uint32), d)
    assert [l for _, l in cons.items] == [b["last"] for b in beats]
    want = x.copy()
    bad = flags[0]
    if mode != "off" and not bad:
        codes = encoding_int(seq, d, mode, offset * (grid if mode == "2d" else 1),
                             grid if mode == "2d" else None)
        want[:seq] = add_encoding(x[:seq], codes, mult, shift)
    return out, bad, want


@pytest.mark.parametrize("mode,offset,grid", [("1d", 0, 0), ("1d", 37, 0), ("2d", 0, 4),
                                              ("2d", 3, 2), ("off", 0, 0),
                                              # the table's last positions exactly
                                              ("1d", 52, 0), ("2d", 61, 4)])
@pytest.mark.parametrize("idle,bp", [(0.0, 0.0), (0.3, 0.4)])
def test_modes_exact(mode, offset, grid, idle, bp):
    out, bad, want = run(16, 64, mode, 12, offset, grid, tail=3, idle=idle, bp=bp,
                         seed=offset + grid)
    assert not bad
    np.testing.assert_array_equal(out, want)


def test_long_tail_passes_unchanged():
    """Rows after the sequence (a cross run's second sequence) pass unchanged however many:
    more than the row counter's range."""
    out, bad, want = run(16, 8, "1d", 4, tail=40)
    assert not bad
    np.testing.assert_array_equal(out, want)


def test_default_width_and_scale():
    """d = 128 (the default configuration), the table's full 64 positions, a realistic scale."""
    out, bad, want = run(128, 64, "1d", 40, offset=24, mult=26000, shift=21)
    assert not bad and (out != want).sum() == 0 and (want != 0).any()


@pytest.mark.parametrize("mode,offset,grid,seq,modes,shift", [
    ("2d", 0, 0, 8, ("1d", "2d"), 14),        # grid width 0
    ("1d", 0, 0, 8, ("1d", "2d"), 0),         # shift 0
    ("2d", 0, 4, 8, ("1d", "2d"), 63),        # shift 63
    ("1d", 65536 - 4, 0, 8, ("1d", "2d"), 14),   # an offset past the table in its high bits
    ("2d", 0, 32 + 4, 8, ("1d", "2d"), 14),   # a grid wider than the table
    ("2d", 0, 3, 8, ("1d", "2d"), 14),        # 3 does not divide 8
    ("2d", 31, 2, 8, ("1d", "2d"), 14),       # grid rows 31..34 past the 32 positions
    ("2d", 29, 2, 8, ("1d", "2d"), 14),       # grid rows 29..32: one past
    ("2d", 40, 2, 8, ("1d", "2d"), 14),       # an offset past the table
    ("1d", 30, 0, 8, ("1d", "2d"), 14),       # positions 30..37 past the table
    ("2d", 0, 4, 8, ("1d",), 14),             # 2-D not built
    ("1d", 0, 0, 8, ("2d",), 14),             # 1-D not built
])
def test_invalid_settings_raise_error_and_pass_words(mode, offset, grid, seq, modes, shift):
    out, bad, want = run(16, 32, mode, seq, offset, grid, modes=modes, shift=shift)
    assert bad
    np.testing.assert_array_equal(out, want)


def test_sequences_longer_than_the_table():
    """A 2-D grid of 6 x 6 on a 6-position table: 36 rows, more than the positions (the row
    counter and the division are as wide as max_len)."""
    out, bad, want = run(16, 6, "2d", 36, 0, 6, max_len=40)
    assert not bad
    np.testing.assert_array_equal(out, want)
    out, bad, _ = run(16, 6, "2d", 36, 1, 6, max_len=40)    # grid rows 1..6: one too many
    assert bad


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_rejects_bad_parameters():
    with pytest.raises(ValueError, match="d = 12 must be a multiple of 8"):
        PositionalEncoder(12, 8)
    with pytest.raises(ValueError, match="max_position = 0 is out of range"):
        PositionalEncoder(16, 0)
    with pytest.raises(ValueError, match="modes = "):
        PositionalEncoder(16, 8, modes=("3d",))


def test_verilog_lint_clean():
    from hw.gen.lint import lint_file
    from hw.gen.verilog import write_verilog
    out = REPO_ROOT / "build" / "lint" / "posenc"
    vfile = write_verilog(PositionalEncoder(128, 64), "positional_encoder", out / "pe.v")
    res = lint_file(vfile, "positional_encoder", out / "lint.txt")
    assert res.issues == (), f"verilator -Wall beyond the waivers ({res.report}): " \
                             f"{res.issues[:5]}"
