"""tilex.stdlib: the LLM kernel library.

Every function accepts NumPy arrays (runs the NumPy interpreter), CuPy arrays or PyTorch
CUDA tensors (runs on the GPU) and returns the same kind; f32, f16 and bf16 inputs.
Signatures follow torch.nn.functional where an equivalent exists. See docs/stdlib.md.
"""
from __future__ import annotations

from .activations import gelu_and_mul, silu_and_mul, softmax
from .attention import attention_decode, attention_prefill
from .embedding import embedding
from .kvcache import kv_cache_write
from .norms import fused_add_rms_norm, layer_norm, rms_norm
from .rope import rope
from .gated import gated_mlp
from .linear import linear, linear_qkv
from .matmul import bmm, matmul
from .fused import linear_add_rms_norm, linear_qkv_rope_cache
from .sampling import argmax, sample
from .topk import topk

__all__ = [
    "rms_norm", "fused_add_rms_norm", "layer_norm", "rope", "silu_and_mul", "gelu_and_mul",
    "softmax", "embedding", "kv_cache_write", "argmax", "sample",
    "linear", "linear_qkv", "matmul", "bmm", "gated_mlp", "attention_prefill", "attention_decode",
    "linear_qkv_rope_cache", "linear_add_rms_norm", "topk",
]
