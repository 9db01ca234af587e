"""hw.flow.sta: static timing over a routed SDF (a hand-written netlist with known delays)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hw.flow.sta import TimingGraph, block_endpoints, format_endpoints, parse_sdf
from hw.flow.synth import REPO_ROOT

# ff_a --net--> lut1 --net--> lut2 --net--> ff_c.DI ; ff_b --net--> lut2 ; a slower branch
# ff_b --net--> a\/b (escaped name) --> ff_c.CE ; a combinational loop lut1 <-> lut3.
SDF = r"""
(DELAYFILE
  (SDFVERSION "3.0")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL (CELLTYPE "top") (INSTANCE )
    (DELAY (ABSOLUTE
      (INTERCONNECT ff_a/Q lut1/A (100:150:200) (100:150:200))
      (INTERCONNECT lut1/F lut2/A (300:400:500) (300:400:500))
      (INTERCONNECT ff_b/Q lut2/B (1000:1000:1000) (1000:1000:1000))
      (INTERCONNECT lut2/F ff_c/DI (50:60:70) (50:60:70))
      (INTERCONNECT ff_b/Q a\/b/A (10:10:10) (10:10:10))
      (INTERCONNECT a\/b/F ff_c/CE (2000:2000:2000) (2000:2000:2000))
      (INTERCONNECT lut1/F lut3/A (1:1:1) (1:1:1))
      (INTERCONNECT lut3/F lut1/B (1:1:1) (1:1:1))
      (INTERCONNECT in_pad/O lut4/A (9000:9000:9000) (9000:9000:9000))
      (INTERCONNECT lut4/F ff_c/LSR (1:1:1) (1:1:1))
    ))
  )
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE ff_a)
    (DELAY (ABSOLUTE (IOPATH CLK Q (400:450:500) (400:450:500)))))
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE ff_b)
    (DELAY (ABSOLUTE (IOPATH (posedge CLK) Q (300:300:300) (300:300:300)))))
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE lut1)
    (DELAY (ABSOLUTE (IOPATH A F (200:220:240) (200:220:240))
                     (IOPATH B F (200:220:240) (200:220:240)))))
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE lut2)
    (DELAY (ABSOLUTE (IOPATH A F (200:220:240) (200:220:240))
                     (IOPATH B F (200:220:240) (200:220:240)))))
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE lut3)
    (DELAY (ABSOLUTE (IOPATH A F (200:220:240) (200:220:240)))))
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE lut4)
    (DELAY (ABSOLUTE (IOPATH A F (200:220:240) (200:220:240)))))
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE a\/b)
    (DELAY (ABSOLUTE (IOPATH A F (100:100:100) (100:100:100)))))
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE ff_c)
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:0) (267:285:303))
      (SETUPHOLD (posedge CE) (posedge CLK) (0:5:10) (0:0:0))
      (SETUPHOLD (posedge LSR) (posedge CLK) (271:347:424) (0:0:0))))
)
"""


def test_longest_paths_clock_starts_setup_and_escaped_names():
    g = TimingGraph(SDF)
    eps = g.endpoints()
    by_pin = {e.pin: e for e in eps}
    # DI: max(ff_a 0.5 + 0.2 + lut1 0.24 + 0.5 (+ loop: ignored), ff_b 0.3 + 1.0) + lut2 0.24
    # + 0.07 = 1.75 (via ff_a) against 1.61 (via ff_b); setup 0.
    assert by_pin["DI"].arrival_ns == pytest.approx(0.5 + 0.2 + 0.24 + 0.5 + 0.24 + 0.07)
    assert [p[0] for p in by_pin["DI"].path] == ["ff_a", "lut1", "lut1", "lut2", "lut2", "ff_c"]
    # CE through the escaped instance "a/b": 0.3 + 0.01 + 0.1 + 2.0, setup 0.01.
    assert by_pin["CE"].arrival_ns == pytest.approx(2.41 + 0.01)
    assert ("a/b", "F", pytest.approx(0.1), "cell") in by_pin["CE"].path
    # LSR is reached only from an unclocked pad: not timed.
    assert "LSR" not in by_pin and len(eps) == 2
    assert eps[0].pin == "CE"          # latest first
    text = format_endpoints(eps, 2.0, 5, g.cell_type)
    assert "2 timed endpoints; 1 over 2 ns; worst 2.420 ns" in text
    assert "slack -0.420" in text and "end  ff_c.CE" in text


def test_block_endpoints_leave_out_paths_outside_the_block():
    g = TimingGraph(SDF)
    # Block "ff_b": paths from ff_b (to DI via lut2, to CE via a/b); ff_a's path to DI, the
    # worst one at DI, starts and ends outside the block.
    eps = {e.pin: e for e in block_endpoints(g, "ff_b")}
    assert eps["DI"].arrival_ns == pytest.approx(0.3 + 1.0 + 0.24 + 0.07)
    assert eps["DI"].path[0][0] == "ff_b"
    assert eps["CE"].arrival_ns == pytest.approx(2.42)
    # Block "ff_c": every path ends there, so all are timed as before.
    assert [e.arrival_ns for e in block_endpoints(g, "ff_c")] == \
        [e.arrival_ns for e in g.endpoints()]
    # A block no path touches: nothing is timed; the graph itself is unchanged.
    assert block_endpoints(g, "lut9") == []
    assert g.endpoints()[1].arrival_ns == pytest.approx(1.75)


def test_malformed_sdf_is_refused():
    with pytest.raises(ValueError, match="DELAYFILE"):
        parse_sdf("(CELL (INSTANCE x))")
    with pytest.raises(ValueError, match="unbalanced"):
        parse_sdf("(DELAYFILE ))")
    with pytest.raises(ValueError, match="TIMESCALE"):
        TimingGraph("(DELAYFILE (TIMESCALE 1 parsec))")


def test_command_line(tmp_path):
    sdf = tmp_path / "routed.sdf"
    sdf.write_text(SDF)
    run = lambda *a: subprocess.run([sys.executable, "-m", "hw", "sta", *a], cwd=REPO_ROOT,
                                    capture_output=True, text=True)
    ok = run(str(sdf), "--period", "3")
    assert ok.returncode == 0 and "0 over 3 ns" in ok.stdout
    block = run(str(sdf), "--period", "2", "--block", "ff_b")
    assert block.returncode == 0 and "2 timed endpoints; 1 over 2 ns" in block.stdout
    assert "worst 2.420 ns" in block.stdout
    assert run(str(tmp_path / "none.sdf")).returncode == 2
    bad = run(str(sdf), "--period", "0")
    assert bad.returncode == 2 and "--period" in bad.stderr
