"""A float64 NumPy forward of the Llama / Qwen2 architecture: the CPU reference.

No cache, no batching: `reference_logits(cfg, weights, ids)` runs the whole sequence and
returns the logits at every position, so it checks prefill (last position) and decode
steps (later positions) of the engine alike.
"""
from __future__ import annotations

import numpy as np

from .config import ModelConfig


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, theta):
    """Rotate-half RoPE on x [S, H, D] (the Hugging Face / Llama convention)."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rotated = np.concatenate([-x2, x1], axis=-1)
    return x * cos + rotated * sin


def silu(x):
    return x / (1.0 + np.exp(-x))


def reference_logits(cfg: ModelConfig, weights: dict, ids) -> np.ndarray:
    """Logits [len(ids), vocab] in float64 for one sequence starting at position 0."""
    w = {k: _f64(v) for k, v in weights.items()}
    ids = np.asarray(ids, dtype=np.int64)
    s, hq, hkv, d = len(ids), cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    pos = np.arange(s)
    h = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((s, s), -np.inf), k=1)
    for n in range(cfg.num_layers):
        p = f"model.layers.{n}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = x @ w[p + "self_attn.q_proj.weight"].T
        k = x @ w[p + "self_attn.k_proj.weight"].T
        v = x @ w[p + "self_attn.v_proj.weight"].T
        if cfg.qkv_bias:
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        q = rope(q.reshape(s, hq, d), pos, cfg.rope_theta)
        k = rope(k.reshape(s, hkv, d), pos, cfg.rope_theta)
        v = v.reshape(s, hkv, d)
        group = hq // hkv
        k = np.repeat(k, group, axis=1)
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + mask
        scores -= scores.max(axis=-1, keepdims=True)
        prob = np.exp(scores)
        prob /= prob.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", prob, v).reshape(s, hq * d)
        h = h + attn @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        g = x @ w[p + "mlp.gate_proj.weight"].T
        u = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(h, w["model.norm.weight"], cfg.rms_norm_eps)
    head = w["model.embed_tokens.weight"] if cfg.tie_word_embeddings else w["lm_head.weight"]
    return x @ head.T
