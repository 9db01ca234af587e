"""Checkpoint import (golden/checkpoint.py): every naming from .npz and .safetensors, layer
choice by index, and named errors that list what the file holds."""

import numpy as np
import pytest
from safetensors.numpy import save_file

from golden.checkpoint import CheckpointError, import_layer

D = 16


def _weights(rng):
    return {n: rng.normal(size=(D, D)).astype(np.float32) for n in ("Wq", "Wk", "Wv", "Wo")} | \
        {n: rng.normal(size=D).astype(np.float32) for n in ("bq", "bk", "bv", "bo")}


def _mha(w, prefix=""):
    return {prefix + "in_proj_weight": np.concatenate([w["Wq"], w["Wk"], w["Wv"]]),
            prefix + "in_proj_bias": np.concatenate([w["bq"], w["bk"], w["bv"]]),
            prefix + "out_proj.weight": w["Wo"], prefix + "out_proj.bias": w["bo"]}


def _bert(w, layer):
    p = f"bert.encoder.layer.{layer}."
    out = {}
    for t, name in (("q", "query"), ("k", "key"), ("v", "value")):
        out[p + f"attention.self.{name}.weight"] = w[f"W{t}"]
        out[p + f"attention.self.{name}.bias"] = w[f"b{t}"]
    out[p + "attention.output.dense.weight"] = w["Wo"]
    out[p + "attention.output.dense.bias"] = w["bo"]
    # The feed-forward block's dense layers share the suffix words; they must not match.
    out[p + "output.dense.weight"] = np.zeros((D, 4 * D), np.float32)
    out[p + "intermediate.dense.weight"] = np.zeros((4 * D, D), np.float32)
    return out


def _save(tmp_path, tensors, suffix):
    path = tmp_path / f"w{suffix}"
    if suffix == ".npz":
        np.savez(path, **tensors)
    else:
        save_file(tensors, str(path))
    return path


def _same(imp, w):
    for n in ("Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo"):
        assert np.array_equal(getattr(imp.layer, n.lower()), w[n].astype(np.float64)), n


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_every_naming_reads_the_same_layer(tmp_path, suffix):
    rng = np.random.default_rng(0)
    w = _weights(rng)
    plain = import_layer(_save(tmp_path, w, suffix))
    assert (plain.naming, plain.prefix, plain.d_model) == ("plain", "", D)
    _same(plain, w)
    mha = import_layer(_save(tmp_path, _mha(w, "self_attn."), suffix))
    assert (mha.naming, mha.prefix) == ("torch-mha", "self_attn.")
    _same(mha, w)
    other = _weights(rng)
    both = _bert(other, 0) | _bert(w, 1)
    bert = import_layer(_save(tmp_path, both, suffix), layer_index=1)
    assert (bert.naming, bert.layer_index) == ("hf-bert", 1)
    _same(bert, w)


def test_bias_free_multihead_attention_has_zero_biases(tmp_path):
    w = _weights(np.random.default_rng(1))
    t = _mha(w)
    del t["in_proj_bias"], t["out_proj.bias"]
    imp = import_layer(_save(tmp_path, t, ".npz"))
    assert not imp.layer.bq.any() and not imp.layer.bo.any()
    # One bias without the other is a broken file, not a bias-free layer.
    t["out_proj.bias"] = w["bo"]
    with pytest.raises(CheckpointError, match="lacks in_proj_bias"):
        import_layer(_save(tmp_path, t, ".npz"))


def test_several_layers_need_an_index(tmp_path):
    w = _weights(np.random.default_rng(2))
    path = _save(tmp_path, _bert(w, 0) | _bert(w, 3), ".safetensors")
    with pytest.raises(CheckpointError, match=r"holds 2 attention layers that match "
                                              r"\('bert.encoder.layer.0.', 'bert.encoder.layer.3.'\); "
                                              r"indices 0, 3; choose one with the layer index"):
        import_layer(path)
    with pytest.raises(CheckpointError, match="no layer 2; the file holds layers 0, 3"):
        import_layer(path, layer_index=2)


def test_errors_list_what_the_file_holds(tmp_path):
    w = _weights(np.random.default_rng(3))
    with pytest.raises(CheckpointError, match=r"no attention layer in any known naming.*"
                                              r"the file holds a \(2,\)"):
        import_layer(_save(tmp_path, {"a": np.zeros(2)}, ".npz"))
    t = dict(w)
    del t["bk"]
    with pytest.raises(CheckpointError, match=r"plain layer \(no prefix\) lacks bk; the file "
                                              r"holds Wk \(16, 16\)"):
        import_layer(_save(tmp_path, t, ".npz"))
    t = dict(w, Wo=np.zeros((D, D + 1)))
    with pytest.raises(CheckpointError, match=r"Wo has shape \(16, 17\), expected \(16, 16\)"):
        import_layer(_save(tmp_path, t, ".npz"))
    t = dict(w, bq=np.full(D, np.nan))
    with pytest.raises(CheckpointError, match="bq holds values that are not finite"):
        import_layer(_save(tmp_path, t, ".npz"))
    with pytest.raises(CheckpointError, match="more than one naming"):
        import_layer(_save(tmp_path, w | _mha(w, "m."), ".npz"))
    with pytest.raises(CheckpointError, match="does not exist"):
        import_layer(tmp_path / "none.npz")
    bad = tmp_path / "w.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="is not a readable .safetensors"):
        import_layer(bad)
    with pytest.raises(CheckpointError, match=r"unknown file type '.pt'; allowed .npz and "
                                              r".safetensors"):
        (tmp_path / "w.pt").write_bytes(b"")
        import_layer(tmp_path / "w.pt")


def test_bfloat16_safetensors_widen_exactly(tmp_path):
    # safetensors.numpy cannot hold bfloat16; the importer widens it to float32 itself.
    import json
    import struct
    rng = np.random.default_rng(4)
    w = _weights(rng)
    header, blobs, off = {}, [], 0
    for n, a in w.items():
        bits = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
        w[n] = (bits.astype(np.uint32) << 16).view(np.float32)      # the bfloat16 value
        b = bits.tobytes()
        header[n] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    _same(import_layer(path), w)


def test_an_ambiguous_index_is_refused_and_a_prefix_chooses(tmp_path):
    # nn.Transformer: encoder and decoder both have a layers.0 attention.
    rng = np.random.default_rng(5)
    w_enc, w_dec = _weights(rng), _weights(rng)
    path = _save(tmp_path, _mha(w_enc, "encoder.layers.0.self_attn.")
                 | _mha(w_dec, "decoder.layers.0.self_attn."), ".safetensors")
    with pytest.raises(CheckpointError, match=r"holds 2 attention layers that match .*"
                                              r"choose one by its prefix"):
        import_layer(path, layer_index=0)
    _same(import_layer(path, prefix="decoder.layers.0.self_attn."), w_dec)
    with pytest.raises(CheckpointError, match=r"no layer under the prefix 'dec.'; the file's "
                                              r"attention layers are under 'decoder.layers.0"):
        import_layer(path, prefix="dec.")
