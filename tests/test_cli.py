"""The command line (hw/cli.py): outputs, lint, and one error path for every command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hw.cli import _parser, main
from hw.gen.verilog import REPO_ROOT

OUT = REPO_ROOT / "build" / "test-cli"
TINY = str(REPO_ROOT / "configs" / "tiny.toml")


def test_generate_writes_everything(capsys):
    out = OUT / "gen"
    assert main(["generate", "--config", TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("attention_top.v", "attention_top.f", "regmap.json", "attention_regs.h",
                 "config.json", "config.toml", "attention_top.sdc", "attention_top.xdc",
                 "attention_top.core"):
        assert (out / name).stat().st_size > 0
        assert name in printed
    verilog = (out / "attention_top.v").read_text()
    assert "module attention_top(" in verilog
    for port in ("s_axi_awaddr", "s_axi_rdata", "s_axis_tdata", "s_axis_tlast",
                 "m_axis_tvalid", "m_axis_tready", "irq"):
        assert port in verilog.split(");")[0], port
    assert json.loads((out / "config.json").read_text())["model"]["d_model"] == 16
    assert json.loads((out / "regmap.json").read_text())
    assert "create_clock -name clk -period 10.000 [get_ports clk]" in \
        (out / "attention_top.sdc").read_text()
    assert "name: attention-accel:ip:attention_top:" in (out / "attention_top.core").read_text()


def test_clock_option_sets_the_constraint_period():
    out = OUT / "clock"
    assert main(["generate", "--config", TINY, "--out", str(out),
                 "--clock-mhz", "150"]) == 0
    assert "-period 6.667 " in (out / "attention_top.sdc").read_text()
    assert "-period 6.667 " in (out / "attention_top.xdc").read_text()


def test_bad_clock_is_refused(capsys):
    out = OUT / "bad-clock"
    assert main(["generate", "--config", TINY, "--out", str(out),
                 "--clock-mhz", "0"]) == 2
    assert "--clock-mhz" in capsys.readouterr().err
    assert not out.exists()


def test_lint_clean_with_documented_waivers(capsys):
    out = OUT / "lint"
    assert main(["lint", "--config", TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # Every generated block is linted, each with its own report.
    for block in ("attention_top", "matmul_engine", "softmax_unit"):
        assert f"lint {block}: 0 warning(s)" in printed
        assert f"--top-module {block} " in (out / f"{block}.lint.txt").read_text()


@pytest.mark.parametrize("text,field", [
    ("[model]\nd_model = 18\nheads = 4\nhead_dim = 4\n", "d_model"),
    ("[array]\narray_rows = 0\n", "array_rows"),
    ("[model]\nbogus = 1\n", "bogus"),
    ("[widths]\nacc_bits = 16\n", "acc_bits"),
])
def test_bad_config_is_refused_and_nothing_written(tmp_path, text, field):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = OUT / "refused"
    if out.exists():
        for p in out.iterdir():
            p.unlink()
    proc = subprocess.run([sys.executable, "-m", "hw", "generate", "--config", str(cfg),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert field in proc.stderr and "error:" in proc.stderr
    assert not out.exists() or not any(out.iterdir())


def test_help_lists_commands():
    proc = subprocess.run([sys.executable, "-m", "hw", "--help"], capture_output=True,
                          text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0
    for cmd in COMMANDS:
        assert cmd in proc.stdout


# Every command, and a mistake in an option that each one refuses before doing any work.
COMMANDS = {
    "generate": ["--clock-mhz", "0"],
    "lint": ["--block", "nonesuch"],
    "config": ["--bogus"],
    "regmap": ["--out", str(REPO_ROOT / "README.md" / "x")],     # a file, not a folder
    "vectors": ["--seq-len", "999"],
    "accuracy": ["--rows", "0"],
    "bench": ["--what", "layer", "--seq", "999"],
    "perf": ["--seq", "0"],
    "synth-blocks": ["--sizes", "4by4"],
    "synth": ["--freq", "0"],
    "sta": [str(REPO_ROOT / "build" / "test-cli" / "absent.sdf")],
    "run": ["--idle", "1.5"],
    "formal": ["--only", "nonesuch"],
    "soak": ["--values", "0"],
}
# Options a command cannot run without (the files need not exist: the configuration and the
# option values are checked first).
REQUIRED = {"run": ["--layer", "W.npz", "--input", "X.npz", "--out", "Y.npz"]}
# Commands that build something for a configuration.
WITH_CONFIG = [c for c in COMMANDS if c not in ("accuracy", "sta")]


def test_every_command_is_covered():
    sub = next(a for a in _parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)


def _refused(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") or "\nerror:" in err or ": error:" in err, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.mark.parametrize("command", WITH_CONFIG)
def test_invalid_config_is_refused_by_every_command(capsys, tmp_path, command):
    bad = tmp_path / "wide.toml"
    bad.write_text("[widths]\nact_bits = 12\n")
    _refused(capsys, [command, "--config", str(bad), *REQUIRED.get(command, [])],
             "act_bits = 12", "allowed 8 or 16")


@pytest.mark.parametrize("command", WITH_CONFIG)
def test_missing_config_is_refused_by_every_command(capsys, tmp_path, command):
    _refused(capsys, [command, "--config", str(tmp_path / "absent.toml"),
                      *REQUIRED.get(command, [])], "absent.toml", "cannot read")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_bad_option_is_refused_by_every_command(capsys, command):
    extra = ["--config", TINY] if command in WITH_CONFIG else []
    _refused(capsys, [command, *COMMANDS[command], *extra, *REQUIRED.get(command, [])])


def test_unknown_command_and_range_message(capsys):
    _refused(capsys, ["nonesuch"], "invalid choice")
    _refused(capsys, ["perf", "--config", TINY, "--seq", "9"], "--seq 9 is out of range",
             "allowed 1..8")


def test_additive_model_and_benchmark_need_a_scorer(capsys):
    """perf --additive and bench --what scoring on a configuration without an additive
    scorer: named errors; on one with a scorer the model prints the additive layer."""
    _refused(capsys, ["perf", "--config", TINY, "--additive"], "--additive: tiny builds no "
             "additive scorer")
    _refused(capsys, ["bench", "--what", "scoring", "--config", TINY], "--what scoring: tiny "
             "builds no additive scorer")
    add = str(REPO_ROOT / "configs" / "default-additive.toml")
    assert main(["perf", "--config", add, "--additive", "--seq", "16"]) == 0
    line = capsys.readouterr().out.splitlines()[-1].split()
    from hw.perf.layer import layer_timing
    import golden as g
    assert int(line[5]) == layer_timing(g.load_config(add), 16, additive=True).latency


def test_errors_from_the_module_entry_point(tmp_path):
    """python -m hw as a process: one error line, status 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "hw", "vectors", "--config",
                           str(tmp_path / "absent.toml")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot read configuration") and "Traceback" not in \
        proc.stderr


def test_default_config_is_the_repository_one(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)         # works from any directory
    assert main(["config"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "default"


# ---------------------------------------------------------------------------- python -m hw run

def _float_files(tmp_path, rows=6, mask=None, d=16, additive=False, **extra):
    import numpy as np
    import golden as g
    cfg = g.load_config(TINY)
    rng = np.random.default_rng(2)
    fl = g.random_float_layer(cfg, rng, additive=additive)
    w = tmp_path / "W.npz"
    np.savez(w, Wq=fl.wq, Wk=fl.wk, Wv=fl.wv, Wo=fl.wo, bq=fl.bq, bk=fl.bk, bv=fl.bv,
             bo=fl.bo, **({"wa": fl.wa} if additive else {}))
    x = tmp_path / "X.npz"
    arrays = {"x": rng.normal(size=(rows, d)), **extra}
    if mask is not None:
        arrays["key_padding_mask"] = np.array(mask, dtype=bool)
    np.savez(x, **arrays)
    return w, x


def test_run_golden_writes_the_result_and_its_reference(capsys, tmp_path):
    import numpy as np
    w, x = _float_files(tmp_path, rows=6, mask=[False] * 4 + [True] * 2)
    out = tmp_path / "Y.npz"
    assert main(["run", "--config", TINY, "--layer", str(w), "--input", str(x), "--causal",
                 "--sim", "golden", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "row cosine against float64: worst 0.9" in text
    with np.load(out) as y:
        assert y["y"].shape == y["y_ref"].shape == (6, 16)
        assert y["y_int"].dtype.kind == "i" and np.abs(y["y_int"]).max() <= 128
        assert int(y["cycles"]) > 0
        assert y["row_cosine"].min() > 0.99


def test_run_with_16bit_activations(capsys, tmp_path):
    """A 16-bit configuration quantizes to int16 (per-channel weights) and lands closer to
    float64 than int8 on the same layer and input."""
    import numpy as np
    w, x = _float_files(tmp_path, rows=6)
    wide = tmp_path / "wide.toml"
    wide.write_text(open(TINY).read().replace("act_bits = 8", "act_bits = 16")
                    .replace("acc_bits = 32", "acc_bits = 35")
                    .replace("[features]", "[features]\nchannel_scales = true"))
    cos = {}
    for name, cfg in (("int8", TINY), ("int16", str(wide))):
        out = tmp_path / f"Y{name}.npz"
        assert main(["run", "--config", cfg, "--layer", str(w), "--input", str(x),
                     "--sim", "golden", "--out", str(out)]) == 0
        with np.load(out) as y:
            cos[name] = y["row_cosine"].min()
            if name == "int16":
                assert np.abs(y["y_int"]).max() > 1 << 12
    capsys.readouterr()
    assert cos["int16"] > 0.9999 > cos["int8"], cos


@pytest.mark.parametrize("mode,extra", [("1d", ["--pe-offset", "3"]),
                                        ("2d", ["--grid-width", "3", "--pe-offset", "1"])])
def test_run_with_positional_encoding(capsys, tmp_path, mode, extra):
    """--pos-enc: the hardware adds the encoding (here the golden model with its cycle
    model), the calibration and the float reference too: the cosine stays high, and the
    output differs from a run without it."""
    import numpy as np
    import golden as g
    conf = tmp_path / "pe.toml"
    conf.write_text(g.load_config(TINY).replace(pos_enc=["1d", "2d"], max_position=12)
                    .to_toml())
    w, x = _float_files(tmp_path, rows=6)
    outs = {}
    for name, opts in (("pe", ["--pos-enc", mode, *extra]), ("off", [])):
        outs[name] = tmp_path / f"Y{name}.npz"
        assert main(["run", "--config", str(conf), "--layer", str(w), "--input", str(x),
                     "--sim", "golden", "--out", str(outs[name]), *opts]) == 0
    capsys.readouterr()
    with np.load(outs["pe"]) as y, np.load(outs["off"]) as y0:
        assert y["row_cosine"].min() > 0.98     # int8 on 16 channels (make accuracy: 0.998 on tiny)
        assert not np.array_equal(y["y_ref"], y0["y_ref"])
        assert not np.array_equal(y["y_int"], y0["y_int"])


@pytest.mark.parametrize("opts,needles", [
    (["--pos-enc", "1d"], ["--pos-enc 1d: the configuration builds no positional encoder"]),
    (["--pos-enc", "2d", "--grid-width", "4"], ["--grid-width 4 does not divide the input's "
                                                "6 rows"]),
    (["--pos-enc", "2d"], ["--pos-enc 2d needs --grid-width"]),
    (["--pos-enc", "1d", "--pe-offset", "7"], ["positions 7...12 of 6 rows pass the table's "
                                               "12 (max_position)"]),
    (["--pos-enc", "1d", "--pe-offset", "-1"], ["--pe-offset -1 is out of range: allowed "
                                                "0..65535"]),
    (["--pos-enc", "2d", "--grid-width", "0"], ["--grid-width 0 is out of range"]),
])
def test_run_names_bad_encoding_settings(capsys, tmp_path, opts, needles):
    import golden as g
    conf = tmp_path / "pe.toml"
    cfg = g.load_config(TINY)
    conf.write_text((cfg if opts == ["--pos-enc", "1d"] else
                     cfg.replace(pos_enc=["1d", "2d"], max_position=12)).to_toml())
    w, x = _float_files(tmp_path, rows=6)
    out = tmp_path / "Y.npz"
    _refused(capsys, ["run", "--config", str(conf), "--layer", str(w), "--input", str(x),
                      "--sim", "golden", "--out", str(out), *opts], *needles)
    assert not out.exists()


@pytest.mark.parametrize("case,needles", [
    ("mask", ["key_padding_mask pads keys [0", "only pad at the end"]),
    ("all_padded", ["pads every key"]),
    ("long", ["x has 9 rows, allowed 1..8"]),
    ("width", ["x has shape (6, 12), expected (rows, 16)"]),
    ("layer", ["plain layer (no prefix) lacks Wk", "the file holds Wq (16, 16)"]),
    ("d_model", ["the plain layer has d_model 8, the configuration tiny has d_model 16"]),
    ("calib_gap", ["calibration arrays x0, x2 must be numbered x0, x1, … without gaps"]),
    ("percentile", ["--percentile 20 is out of range: allowed 50..100"]),
    ("percentile_nan", ["--percentile nan is not a number"]),
    ("cross", ["kv given (cross-attention) but the configuration has cross_attention = false"]),
    ("out", ["must end in .npz"]),
])
def test_run_names_each_bad_input(capsys, tmp_path, case, needles):
    import numpy as np
    import golden as g
    cfg = g.load_config(TINY)
    args = {"rows": 6}
    if case == "mask":
        args["mask"] = [True, False, False, False, False, True]
    elif case == "all_padded":
        args["mask"] = [True] * 6
    elif case == "long":
        args["rows"] = 9
    elif case == "width":
        args["d"] = 12
    w, x = _float_files(tmp_path, **args)
    conf = TINY
    extra = []
    if case == "layer":
        np.savez(w, Wq=np.zeros((16, 16)))
    elif case == "d_model":
        np.savez(w, **{n: np.zeros((8, 8)) for n in ("Wq", "Wk", "Wv", "Wo")},
                 **{n: np.zeros(8) for n in ("bq", "bk", "bv", "bo")})
    elif case == "calib_gap":
        np.savez(tmp_path / "C.npz", x0=np.ones((3, 16)), x2=np.ones((3, 16)))
        extra = ["--calib", str(tmp_path / "C.npz")]
    elif case == "percentile":
        extra = ["--percentile", "20"]
    elif case == "percentile_nan":
        extra = ["--percentile", "nan"]
    elif case == "cross":
        conf = tmp_path / "self.toml"
        conf.write_text(cfg.replace(cross_attention=False).to_toml())
        np.savez(x, x=np.zeros((4, 16)), kv=np.zeros((4, 16)))
    out = tmp_path / ("Y.txt" if case == "out" else "Y.npz")
    _refused(capsys, ["run", "--config", str(conf), "--layer", str(w), "--input", str(x),
                      "--sim", "golden", "--out", str(out), *extra], *needles)
    assert not out.exists()


def test_run_takes_checkpoints_in_every_naming_and_ragged_calibration(capsys, tmp_path):
    # The same weights as plain .npz, torch MultiheadAttention .safetensors and a two-layer
    # BERT .safetensors (layer 1 chosen) give the same output; calibration sequences of
    # different lengths (x0, x1, x2) are taken as they are.
    import numpy as np
    from safetensors.numpy import save_file
    w, x = _float_files(tmp_path, rows=6)
    with np.load(w) as f:
        p = {k: f[k].astype(np.float32) for k in f.files}
    np.savez(w, **p)
    rng = np.random.default_rng(7)
    cal = tmp_path / "C.npz"
    np.savez(cal, x0=rng.normal(size=(3, 16)), x1=rng.normal(size=(8, 16)),
             x2=rng.normal(size=(5, 16)))
    mha = tmp_path / "mha.safetensors"
    save_file({"attn.in_proj_weight": np.concatenate([p["Wq"], p["Wk"], p["Wv"]]),
               "attn.in_proj_bias": np.concatenate([p["bq"], p["bk"], p["bv"]]),
               "attn.out_proj.weight": p["Wo"], "attn.out_proj.bias": p["bo"]}, str(mha))
    bert = {}
    for layer, scale in ((0, 0.5), (1, 1.0)):
        pre = f"encoder.layer.{layer}.attention."
        for t, name in (("q", "query"), ("k", "key"), ("v", "value")):
            bert[pre + f"self.{name}.weight"] = p[f"W{t}"] * np.float32(scale)
            bert[pre + f"self.{name}.bias"] = p[f"b{t}"]
        bert[pre + "output.dense.weight"] = p["Wo"]
        bert[pre + "output.dense.bias"] = p["bo"]
    bpath = tmp_path / "bert.safetensors"
    save_file(bert, str(bpath))
    outs = []
    for layer, more in ((w, []), (mha, []), (bpath, ["--layer-index", "1"])):
        out = tmp_path / f"Y{len(outs)}.npz"
        assert main(["run", "--config", TINY, "--layer", str(layer), "--input", str(x),
                     "--calib", str(cal), "--sim", "golden", "--out", str(out), *more]) == 0
        with np.load(out) as y:
            outs.append(y["y_int"])
    capsys.readouterr()
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    _refused(capsys, ["run", "--config", TINY, "--layer", str(bpath), "--input", str(x),
                      "--sim", "golden", "--out", str(tmp_path / "Z.npz")],
             "indices 0, 1; choose one with the layer index")
    # The whole prefix chooses as well.
    out = tmp_path / "Yp.npz"
    assert main(["run", "--config", TINY, "--layer", str(bpath), "--input", str(x),
                 "--calib", str(cal), "--sim", "golden", "--out", str(out),
                 "--layer-prefix", "encoder.layer.1."]) == 0
    with np.load(out) as y:
        assert np.array_equal(y["y_int"], outs[0])
    _refused(capsys, ["run", "--config", TINY, "--layer", str(bpath), "--input", str(x),
                      "--sim", "golden", "--out", str(tmp_path / "Z.npz"),
                      "--layer-prefix", "encoder.layer.7."],
             "no layer under the prefix 'encoder.layer.7.'")


def test_synth_blocks_tile_softmax_options_refused(capsys):
    _refused(capsys, ["synth-blocks", "--what", "tile-softmax", "--kv-tile", "0"],
             "--kv-tile 0 is out of range: allowed 1..64")
    _refused(capsys, ["synth-blocks", "--what", "tile-softmax", "--rows", "65"],
             "--rows 65 is out of range: allowed 1..64")


def test_run_with_additive_scoring(capsys, tmp_path):
    """--scoring additive on a configuration with a scorer, on both harnesses' golden
    stand-in: a high cosine against the float64 additive layer; without wa in the file, or
    on a configuration without a scorer, a named error and nothing written."""
    import numpy as np
    import golden as g
    conf = tmp_path / "add.toml"
    conf.write_text(g.load_config(TINY).replace(additive_lanes=4).to_toml())
    w, x = _float_files(tmp_path, rows=6, additive=True)
    out = tmp_path / "Y.npz"
    assert main(["run", "--config", str(conf), "--layer", str(w), "--input", str(x),
                 "--sim", "golden", "--scoring", "additive", "--out", str(out)]) == 0
    capsys.readouterr()
    with np.load(out) as y:
        assert y["row_cosine"].min() > 0.98
    (tmp_path / "plain").mkdir()
    plain, _ = _float_files(tmp_path / "plain", rows=6)
    for args, needle in (
            (["--config", str(conf), "--layer", str(plain)], "holds no wa (heads, head_dim)"),
            (["--config", str(TINY), "--layer", str(w)], "builds no additive scorer")):
        bad = tmp_path / "bad.npz"
        _refused(capsys, ["run", *args, "--input", str(x), "--sim", "golden", "--scoring",
                          "additive", "--out", str(bad)], needle)
        assert not bad.exists()


def test_run_with_channel_scales(capsys, tmp_path):
    """--weight-scales channel on a configuration with a scale table: a per-channel layer (a
    high cosine, other codes than per-tensor); on one without, a named error and nothing
    written."""
    import numpy as np
    import golden as g
    conf = tmp_path / "chan.toml"
    conf.write_text(g.load_config(TINY).replace(channel_scales=True).to_toml())
    w, x = _float_files(tmp_path, rows=6)
    outs = {}
    for scales in ("tensor", "channel"):
        out = tmp_path / f"Y-{scales}.npz"
        assert main(["run", "--config", str(conf), "--layer", str(w), "--input", str(x),
                     "--sim", "golden", "--weight-scales", scales, "--out", str(out)]) == 0
        with np.load(out) as y:
            assert y["row_cosine"].min() > 0.98
            outs[scales] = y["y_int"]
    capsys.readouterr()
    assert not np.array_equal(outs["tensor"], outs["channel"])
    bad = tmp_path / "bad.npz"
    _refused(capsys, ["run", "--config", str(TINY), "--layer", str(w), "--input", str(x),
                      "--sim", "golden", "--weight-scales", "channel", "--out", str(bad)],
             "--weight-scales channel: the configuration tiny builds no scale table")
    assert not bad.exists()


def test_accuracy_rtl_needs_the_model(capsys):
    _refused(capsys, ["accuracy", "--rtl", "verilator", "--no-model"],
             "--rtl runs the real model's layer: it cannot go with --no-model")


def test_bench_reports_have_their_own_files():
    """make bench's bench.json is not overwritten by the scoring or harness reports."""
    from argparse import Namespace
    from hw.cli import _bench_out
    assert _bench_out(Namespace(out=None), "bench") == Path("build/bench/bench.json")
    assert _bench_out(Namespace(out=None), "scoring") == Path("build/bench/scoring.json")
    assert _bench_out(Namespace(out=None), "harness") == Path("build/bench/harness.json")
    assert _bench_out(Namespace(out="x/y.json"), "scoring") == Path("x/y.json")
