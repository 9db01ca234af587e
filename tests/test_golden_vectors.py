"""Test-vector export: hex format, round trip through load_hex, npz contents, CLI."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from golden.attention import attention_int
from golden.config import config_from_dict, load_config
from golden.vectors import export_vectors, load_hex, random_run, write_hex

REPO = Path(__file__).resolve().parent.parent
TINY = load_config(REPO / "configs/tiny.toml")


def test_hex_format_is_fixed_width_twos_complement(tmp_path):
    p = tmp_path / "t.hex"
    write_hex(p, [[-1, 0], [127, -128]], 8, True)
    assert p.read_text() == "ff\n00\n7f\n80\n"
    write_hex(p, [-(1 << 18), (1 << 18) - 1, -5], 19, True)       # 19 bits: 5 hex digits
    assert p.read_text().split() == ["40000", "3ffff", "7fffb"]
    write_hex(p, [0, 1], 1, False)
    assert p.read_text() == "0\n1\n"


@pytest.mark.parametrize("bits, signed", [(1, False), (6, False), (8, True), (9, True),
                                          (19, True), (32, True), (33, False)])
def test_hex_round_trip(tmp_path, bits, signed):
    rng = np.random.default_rng(bits)
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    v = np.concatenate([[lo, hi - 1], rng.integers(lo, hi, (50,))]).reshape(4, 13)
    write_hex(tmp_path / "v.hex", v, bits, signed)
    np.testing.assert_array_equal(load_hex(tmp_path / "v.hex", bits, signed, v.shape), v)


def test_hex_rejects_values_out_of_range(tmp_path):
    with pytest.raises(ValueError, match=r"do not fit signed 8 bits \(-128..127\)"):
        write_hex(tmp_path / "v.hex", [128], 8, True)
    with pytest.raises(ValueError, match="unsigned 4 bits"):
        write_hex(tmp_path / "v.hex", [-1], 4, False)
    (tmp_path / "w.hex").write_text("1ff\n")
    with pytest.raises(ValueError, match="wider than 8 bits"):
        load_hex(tmp_path / "w.hex", 8, True)


def test_load_hex_accepts_readmemh_comments_and_underscores(tmp_path):
    (tmp_path / "c.hex").write_text("// header\nf_f 01 // two words\n\n80\n")
    assert load_hex(tmp_path / "c.hex", 8, True).tolist() == [-1, 1, -128]


@pytest.mark.parametrize("mode", ["plain", "causal_padded", "cross"])
def test_export_round_trip_reproduces_golden(tmp_path, mode):
    layer, x, kv = random_run(TINY, seed=3, seq_len=6, cross=mode == "cross")
    kw = {"causal": True, "key_len": 4} if mode == "causal_padded" else {}
    man = export_vectors(TINY, layer, x, kv, out_dir=tmp_path, **kw)
    assert man == json.loads((tmp_path / "manifest.json").read_text())
    npz = np.load(tmp_path / "vectors.npz")
    assert config_from_dict(json.loads(str(npz["config"]))) == TINY
    # Every tensor's hex file matches the npz and the manifest's shape and format.
    for name, e in man["tensors"].items():
        back = load_hex(tmp_path / e["file"], e["bits"], e["signed"], tuple(e["shape"]))
        np.testing.assert_array_equal(back, npz[name], err_msg=name)
    tr = attention_int(TINY, layer, x, kv, trace=True, **kw)
    for name in ("q", "k", "v", "scores", "valid", "probs", "attn", "out"):
        np.testing.assert_array_equal(npz[name], getattr(tr, name), err_msg=name)
    for name, value in layer.arrays().items():
        np.testing.assert_array_equal(npz[name], value, err_msg=name)
    assert man["tensors"]["scores"]["bits"] == TINY.score_bits
    assert man["tensors"]["probs"] == {"file": "probs.hex", "shape": [2, 6, 8 if kv is not None
                                       else 6], "bits": 8, "signed": False}
    # Rebuilding the run from the files alone gives the same output.
    again = export_vectors(TINY, layer, npz["x"], npz["kv"] if kv is not None else None,
                           bool(npz["causal"]), int(npz["key_len"]), out_dir=tmp_path / "again")
    assert (tmp_path / "again" / "out.hex").read_text() == (tmp_path / "out.hex").read_text()
    assert again == man


def test_cli_writes_vectors(tmp_path):
    out = tmp_path / "vec"
    r = subprocess.run([sys.executable, "-m", "hw", "vectors", "--config",
                        str(REPO / "configs/tiny.toml"), "--seed", "1", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert man["config"] == "tiny" and man["seq_len"] == TINY.max_seq_len
    e = man["tensors"]["out"]
    assert load_hex(out / e["file"], e["bits"], e["signed"]).size == 8 * 16
