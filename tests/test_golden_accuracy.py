"""Accuracy bounds of the golden model against float64 (reduced version of make accuracy)."""

import json
from pathlib import Path

import numpy as np
import pytest

from golden.accuracy import (SOFTMAX_TARGETS, check_bounds, logit_scale, run, softmax_accuracy,
                             softmax_errors, softmax_rows)
from golden.config import load_config
from golden.fixed import Requant

REPO = Path(__file__).resolve().parent.parent
TINY = load_config(REPO / "configs/tiny.toml")
DEFAULT = load_config(REPO / "configs/default.toml")

@pytest.fixture(scope="module")
def reduced():
    # 2 configs x 10 multipliers x 5 row kinds x 110 rows = 11,000 rows.
    return softmax_accuracy([TINY, DEFAULT], rows_per_case=110, seed=7)


def test_reduced_run_has_enough_rows_of_every_length(reduced):
    assert reduced["overall"]["rows"] >= 10_000
    assert reduced["per_config"]["default"]["all"]["rows"] >= 5000


def test_softmax_targets_overall_and_every_config(reduced):
    # tiny included: its short rows (<= 8 keys, large probabilities) need F = 12, L = 32 and
    # exp_bits' floor for short rows to reach 99.9 % (docs/numerics.md, "Softmax accuracy").
    scopes = [reduced["overall"]] + [reduced["per_config"][name][c]
                                     for name in ("tiny", "default")
                                     for c in ("realistic", "extreme")]
    for r in scopes:
        assert r["softmax_max_err_lsb"] <= SOFTMAX_TARGETS["softmax_max_err_lsb"], r
        assert r["softmax_correctly_rounded_pct"] >= \
            SOFTMAX_TARGETS["softmax_correctly_rounded_pct"], r
        assert r["softmax_saturated_max_err_lsb"] <= \
            SOFTMAX_TARGETS["softmax_saturated_max_err_lsb"], r
        assert r["softmax_saturated_outputs"] > 0          # the saturated case was exercised


def test_row_sums_within_documented_bound(reduced):
    for r in [reduced["overall"]]:
        assert r["row_sum_max_dev_minus_half_len"] <= 1.0


def test_errors_are_measured_against_the_implemented_logit_scale():
    # If the float reference used a different scale than exp_mult/exp_shift implement, the
    # error would grow with the logit spread; check a sharp multiplier.
    rng = np.random.default_rng(1)
    rq = Requant.from_real(3.0, 16)
    c = logit_scale(DEFAULT, rq.mult, rq.shift)
    s, v = softmax_rows(DEFAULT, rng, "random", 300, c)
    e = softmax_errors(DEFAULT, s, v, rq.mult, rq.shift)
    unsat = e["ref"] < 255
    assert np.abs(e["probs"] - e["ref"])[unsat].max() <= 0.55
    wrong = softmax_errors(DEFAULT, s * 1.01, v, rq.mult, rq.shift)   # 1 % off in scale
    assert np.abs(wrong["probs"] - e["ref"]).max() > 1


def test_run_writes_json_and_plot(tmp_path):
    rep = run(tmp_path, rows_per_case=8, seed=2,
              layer_sequences={"tiny": (4, None, 16), "default": (1, 32, 4),
                               "bert-base": (1, 8, 2), "long": (1, 72, 2),
                               "default-additive": (1, 8, 2), "act16": (1, 8, 2),
                               "minilm": (1, 8, 2)},
              tiled_lengths=(16, 40),
              real_model=False)
    data = json.loads((tmp_path / "accuracy.json").read_text())
    assert set(data["layer"]) == {"tiny", "default", "bert-base", "long", "default-additive",
                                  "act16", "minilm"}
    for k in SOFTMAX_TARGETS:
        assert data[k] == rep["softmax"]["overall"][k]
    assert data["misses"] == check_bounds(rep)
    assert (tmp_path / "softmax_error.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(data["layer"]["default"]["modes"]) == {"plain", "key_padding", "causal", "cross"}
    assert set(data["layer"]["bert-base"]["modes"]) == {"plain", "key_padding", "causal"}
    # The tiled path: every length and tile, the whole-row path beside it, both layers.
    assert set(data["tiled"]["attention"]) == {"16", "40"}
    assert set(data["tiled"]["attention"]["40"]) == {"16", "64", "256", "rows", "seconds"}
    assert set(data["tiled"]["layer"]) == {"tiny", "default"}
    ae = data["additive_and_encodings"]
    assert ae["tanh_unit"]["max_err_lsb"] <= 1.0
    assert set(ae["layer"]["default"]) == {"dot product", "additive", "sinusoidal 1-D encoding",
                                           "2-D encoding (grid width 4)"}
    # The headline layer figures are the worst over every configuration.
    assert data["layer_cosine_min"] == min(r["layer_cosine_min"] for r in data["layer"].values())
    assert data["layer_max_abs_err"] == max(r["layer_max_abs_err"]
                                            for r in data["layer"].values())
