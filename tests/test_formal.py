"""The short formal set of ``make test`` (``python -m hw formal --quick``), one check per test:
the register block's AXI4-Lite rules (BMC and k-induction), its response bound, the top's
``m_axis`` by k-induction, and each group's mutant, which must fail on the assertion it
breaks (so no proof passes vacuously). ``make formal`` runs the full set on the default
configuration."""

from dataclasses import replace
from pathlib import Path

import pytest

from golden.config import load_config
from sim.formal import MUTANTS, checks, mutate, run_check, verilog_ports, FormalError

REPO = Path(__file__).resolve().parents[1]
TINY = load_config(REPO / "configs" / "tiny.toml")


@pytest.mark.formal
@pytest.mark.parametrize("check", checks(quick=True), ids=lambda c: c.name)
def test_quick_check(check):
    # SymbiYosys's YoWASP tools only see the repository, not /tmp.
    out = REPO / "build" / "test-formal" / check.name
    res = run_check(TINY, check, out, {})
    assert res.ok, (f"{check.name}: {res.status}, expected {res.expected}; "
                    f"failed: {res.failed}")
    if check.mutant:
        mu = next(m for m in MUTANTS if m.name == check.mutant)
        assert any(mu.expect in f for f in res.failed)


def test_every_group_has_a_mutant():
    groups = {c.group for c in checks()}
    assert groups == {m.group for m in MUTANTS}


def test_mutate_changes_exactly_one_register_update():
    text = ("module m(a);\n  input a;\n  reg s_axi__bvalid;\n  always @(posedge clk)\n"
            "    s_axi__bvalid <= \\$655 ;\nendmodule\n")
    by_name = {m.name: replace(m, module="m") for m in MUTANTS}
    out = mutate(text, by_name["bvalid_drops"])
    assert "s_axi__bvalid <= \\$655 & ~f_mutant ;" in out
    assert "(* anyseq *) wire [0:0] f_mutant;" in out
    with pytest.raises(FormalError, match="0 updates of s_axi__rdata"):
        mutate(text, by_name["rdata_changes"])


def test_verilog_ports_reads_escaped_names():
    text = "module t(a, \\cross );\n  input [3:0] a;\n  output \\cross ;\nendmodule\n"
    assert verilog_ports(text, "t") == [("input", 4, "a"), ("output", 1, "\\cross")]
