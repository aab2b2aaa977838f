"""transformers models with the engine's weights: the reference for the GPU checks and the
baseline of the benchmark. No network: the model is built from a config object."""
from __future__ import annotations

import numpy as np

from .config import ModelConfig


def hf_config(cfg: ModelConfig, attn_implementation: str = "sdpa"):
    import transformers

    kw = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
              intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
              num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
              head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps,
              tie_word_embeddings=cfg.tie_word_embeddings,
              max_position_embeddings=cfg.max_position_embeddings, hidden_act="silu",
              rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
              rope_theta=cfg.rope_theta)  # older transformers read the top-level field
    if cfg.model_type == "qwen2":
        c = transformers.Qwen2Config(use_sliding_window=False, **kw)
    else:
        c = transformers.LlamaConfig(attention_bias=cfg.qkv_bias, mlp_bias=False, **kw)
    c.pad_token_id = 0
    try:
        c._attn_implementation = attn_implementation
    except Exception:  # noqa: BLE001 - older/newer config classes
        pass
    return c


def build_hf_model(cfg: ModelConfig, weights: dict, dtype="f32", share: bool = False):
    """A transformers CausalLM on the GPU holding `weights` (HF names -> torch CUDA tensors).

    share=True makes the parameters the very same tensors (no copy; dtype must match);
    otherwise the weights are copied (and cast, e.g. to f32 for a precise reference).
    Checks the rotary frequencies against rope_theta, so a config field that transformers
    ignored cannot pass silently.
    """
    import torch
    import transformers

    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    hc = hf_config(cfg)
    cls = transformers.Qwen2ForCausalLM if cfg.model_type == "qwen2" else transformers.LlamaForCausalLM
    old = torch.get_default_dtype()
    torch.set_default_dtype(tdt)
    try:
        with torch.device("cuda"):
            model = cls(hc)
    finally:
        torch.set_default_dtype(old)
    model.eval().requires_grad_(False)
    params = dict(model.named_parameters())
    for name, p in params.items():
        src = weights.get(name)
        if src is None and name == "lm_head.weight" and cfg.tie_word_embeddings:
            src = weights["model.embed_tokens.weight"]
        if src is None:
            raise KeyError(f"transformers parameter {name} has no engine weight")
        if tuple(src.shape) != tuple(p.shape):
            raise ValueError(f"{name}: engine {tuple(src.shape)} vs transformers {tuple(p.shape)}")
        if share:
            p.data = src
        else:
            p.data.copy_(src)
    unused = set(weights) - set(params) - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    if unused:
        raise KeyError(f"engine weights transformers does not use: {sorted(unused)[:4]}")
    inv = getattr(getattr(model.model, "rotary_emb", None), "inv_freq", None)
    want = 1.0 / cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2) / cfg.head_dim)
    if inv is None:  # another transformers layout: the logit comparison still catches it
        return model
    inv = inv.double().cpu().numpy()
    if inv.shape != want.shape or not np.allclose(inv, want, rtol=1e-4):
        raise RuntimeError("transformers' rotary frequencies do not match rope_theta "
                           f"{cfg.rope_theta}: config not understood")
    return model


def hf_logits(model, ids_list):
    """f32 logits [len(ids), vocab] of each sequence (separate forwards, no padding)."""
    import torch

    out = []
    with torch.no_grad():
        for ids in ids_list:
            x = torch.tensor([ids], device="cuda")
            out.append(model(input_ids=x, use_cache=False).logits[0].float())
    return out


def hf_greedy(model, ids, n: int):
    """n greedy tokens with transformers' own KV cache; also the f32 logits of each step."""
    import torch

    toks, logits = [], []
    with torch.no_grad():
        x = torch.tensor([ids], device="cuda")
        pkv = None
        for _ in range(n):
            o = model(input_ids=x, past_key_values=pkv, use_cache=True)
            pkv = o.past_key_values
            lg = o.logits[0, -1].float()
            t = int(lg.argmax())
            toks.append(t)
            logits.append(lg)
            x = torch.tensor([[t]], device="cuda")
    return toks, torch.stack(logits)
