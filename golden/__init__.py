"""Bit-exact NumPy golden model of the attention accelerator (no Amaranth import).

``config`` holds the one configuration object; ``fixed`` the integer primitives; ``softmax``
the fixed-point softmax; ``online_softmax`` the key/value-tiled path with an integer online
softmax; ``attention`` the integer layer; ``reference`` the float64 layer;
``quantize`` the post-training quantizer; ``vectors`` test-vector export.
"""

from .config import AttentionConfig, ConfigError, load_config
from .fixed import Requant, matmul_acc, requantize, round_shift
from .softmax import attention_mask, exp_table, softmax_int
from .attention import AttentionTrace, QuantizedLayer, attention_int
from .reference import FloatLayer, attention_float, random_float_layer, softmax_float
from .quantize import dequantize, quantize_layer, quantize_tensor

__all__ = [
    "AttentionConfig", "ConfigError", "load_config",
    "Requant", "matmul_acc", "requantize", "round_shift",
    "attention_mask", "exp_table", "softmax_int",
    "AttentionTrace", "QuantizedLayer", "attention_int",
    "FloatLayer", "attention_float", "random_float_layer", "softmax_float",
    "dequantize", "quantize_layer", "quantize_tensor",
]
