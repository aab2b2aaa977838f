"""The row-wise library ops as torch custom ops: norms, rope, activations, embedding, the KV cache, sampling.

No `from __future__ import annotations` here: torch.library reads the annotations as the schema.
"""
from typing import Optional

import torch
from torch import Tensor

from .. import stdlib as S
from ..stdlib import messages as M
from ..stdlib.topk import MAX_K as MAX_TOPK
from . import _checks as C
from ._convert import call
from ._registry import _op, _shown, shown


# ------------------------------------------------------------------------- norms

def _fake_rows(x):
    dt = C.check_float("x", x)
    C.require(x.shape[-1] != 0, lambda: M.empty_rows("x", shown(x.shape)))
    return dt, x.shape[-1]


@_op("rms_norm")
def rms_norm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6) -> Tensor:
    return call(S.rms_norm, x, weight, eps)


@rms_norm.register_fake
def _(x, weight=None, eps=1e-6):
    dt, n = _fake_rows(x)
    C.check_vector("weight", weight, n, dt)
    return x.new_empty(x.shape)


def _fake_fused_add(x, residual, weight):
    dt, n = _fake_rows(x)
    C.check_float("residual", residual)
    C.check_same_dtype("residual", residual, dt)
    C.check_shape("residual", residual, x.shape)
    C.check_vector("weight", weight, n, dt)


@_op("fused_add_rms_norm")
def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor] = None,
                       eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    return call(S.fused_add_rms_norm, x, residual, weight, eps)


@fused_add_rms_norm.register_fake
def _(x, residual, weight=None, eps=1e-6):
    _fake_fused_add(x, residual, weight)
    return x.new_empty(x.shape), x.new_empty(x.shape)


@_op("fused_add_rms_norm_inplace", mutates=("x", "residual"))
def fused_add_rms_norm_inplace(x: Tensor, residual: Tensor, weight: Optional[Tensor] = None,
                               eps: float = 1e-6) -> None:
    call(S.fused_add_rms_norm, x, residual, weight, eps, inplace=True)


@fused_add_rms_norm_inplace.register_fake
def _(x, residual, weight=None, eps=1e-6):
    _fake_fused_add(x, residual, weight)
    if not (x.is_contiguous() and residual.is_contiguous()):
        raise ValueError(M.FUSED_ADD_INPLACE_CONTIGUOUS)


@_op("layer_norm")
def layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5) -> Tensor:
    return call(S.layer_norm, x, weight, bias, eps)


@layer_norm.register_fake
def _(x, weight=None, bias=None, eps=1e-5):
    dt, n = _fake_rows(x)
    C.check_vector("weight", weight, n, dt)
    C.check_vector("bias", bias, n, dt)
    return x.new_empty(x.shape)


# ------------------------------------------------------------------------- rope

def _fake_rope(q, k, positions, theta, rotary_dim):
    dt = C.check_float("q", q, ndim=3)
    C.check_float("k", k, ndim=3)
    C.check_same_dtype("k", k, dt)
    C.check_int("positions", positions, ndim=1)
    s, _, d = q.shape
    msg = lambda: M.rope_k_shape(_shown(s), _shown(d), shown(q.shape), shown(k.shape))  # noqa: E731
    C.require(k.shape[0] == s, msg)
    C.require(k.shape[2] == d, msg)
    C.check_shape("positions", positions, (s,))
    r = d if rotary_dim is None else rotary_dim
    bad_r = lambda: M.bad_rotary_dim(_shown(d), rotary_dim)  # noqa: E731
    C.require(r > 0, bad_r)
    C.require(r <= d, bad_r)
    C.require(r % 2 == 0, bad_r)
    if not theta > 0:
        raise ValueError(M.bad_theta(theta))



@_op("rope")
def rope(q: Tensor, k: Tensor, positions: Tensor, theta: float = 10000.0,
         rotary_dim: Optional[int] = None) -> tuple[Tensor, Tensor]:
    return call(S.rope, q, k, positions, theta, rotary_dim)


@rope.register_fake
def _(q, k, positions, theta=10000.0, rotary_dim=None):
    _fake_rope(q, k, positions, theta, rotary_dim)
    return q.new_empty(q.shape), k.new_empty(k.shape)


@_op("rope_inplace", mutates=("q", "k"))
def rope_inplace(q: Tensor, k: Tensor, positions: Tensor, theta: float = 10000.0,
                 rotary_dim: Optional[int] = None) -> None:
    call(S.rope, q, k, positions, theta, rotary_dim, inplace=True)


@rope_inplace.register_fake
def _(q, k, positions, theta=10000.0, rotary_dim=None):
    _fake_rope(q, k, positions, theta, rotary_dim)
    for name, x in (("q", q), ("k", k)):
        if not x.is_contiguous():
            raise ValueError(M.rope_inplace_contiguous(name))


# ------------------------------------------------------------------------- activations

def _fake_gated(x):
    C.check_float("x", x)
    C.require(x.shape[-1] % 2 == 0, lambda: M.odd_gate(shown(x.shape)))
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@_op("silu_and_mul")
def silu_and_mul(x: Tensor) -> Tensor:
    return call(S.silu_and_mul, x)


@silu_and_mul.register_fake
def _(x):
    return _fake_gated(x)


@_op("gelu_and_mul")
def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    return call(S.gelu_and_mul, x, approximate)


@gelu_and_mul.register_fake
def _(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(M.bad_approximate(approximate))
    return _fake_gated(x)


@_op("softmax")
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return call(S.softmax, x, dim)


@softmax.register_fake
def _(x, dim=-1):
    C.check_float("x", x)
    nd = x.dim()
    if not -nd <= dim < nd:
        raise ValueError(M.bad_dim(dim, nd))
    dim %= nd
    moved = [*x.shape[:dim], *x.shape[dim + 1:], x.shape[dim]]  # the stdlib moves `dim` last
    C.require(x.shape[dim] != 0, lambda: M.empty_rows("x", shown(moved)))
    return x.new_empty(x.shape)


# ------------------------------------------------------------------------- embedding, cache, sampling

@_op("embedding")
def embedding(ids: Tensor, table: Tensor) -> Tensor:
    return call(S.embedding, ids, table)


@embedding.register_fake
def _(ids, table):
    C.check_float("table", table, ndim=2)
    C.check_int("ids", ids)
    return table.new_empty((*ids.shape, table.shape[1]))


def _fake_cache_write(k, v, k_cache, v_cache, slot_mapping):
    dt = C.check_float("k", k, ndim=3)
    C.check_float("v", v, ndim=3)
    C.check_same_dtype("v", v, dt)
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        C.check_float(name, x, ndim=4)
        C.check_same_dtype(name, x, dt)
    C.check_int("slot_mapping", slot_mapping, ndim=1)
    s, h, d = k.shape
    C.check_shape("v", v, (s, h, d))
    nb, bs = k_cache.shape[:2]
    C.check_shape("k_cache", k_cache, (nb, bs, h, d))
    C.check_shape("v_cache", v_cache, (nb, bs, h, d))
    C.check_shape("slot_mapping", slot_mapping, (s,))
    _fake_contiguous_caches(k_cache, v_cache)


def _fake_contiguous_caches(k_cache, v_cache):
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not x.is_contiguous():
            raise ValueError(M.not_contiguous_cache(name))


@_op("kv_cache_write", mutates=("k_cache", "v_cache"))
def kv_cache_write(k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor) -> None:
    call(S.kv_cache_write, k, v, k_cache, v_cache, slot_mapping)


@kv_cache_write.register_fake
def _(k, v, k_cache, v_cache, slot_mapping):
    _fake_cache_write(k, v, k_cache, v_cache, slot_mapping)


def _fake_logits(logits):
    C.check_float("logits", logits, ndim=2)
    C.require(logits.shape[1] != 0, lambda: M.EMPTY_VOCAB)
    return logits.new_empty((logits.shape[0],), dtype=torch.int64)


@_op("argmax")
def argmax(logits: Tensor) -> Tensor:
    return call(S.argmax, logits)


@argmax.register_fake
def _(logits):
    return _fake_logits(logits)


@_op("topk")
def topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    return call(S.topk, x, k)


@topk.register_fake
def _(x, k):
    C.check_float("x", x)
    v = x.shape[-1]
    if not 1 <= k <= v:
        raise ValueError(M.bad_topk_k(k, v))
    if k > MAX_TOPK:
        raise ValueError(M.topk_too_large(k, MAX_TOPK))
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


@_op("sample")
def sample(logits: Tensor, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> Tensor:
    return call(S.sample, logits, temperature, top_p, seed)


@sample.register_fake
def _(logits, temperature=1.0, top_p=1.0, seed=0):
    out = _fake_logits(logits)
    if not temperature >= 0:
        raise ValueError(M.bad_temperature(float(temperature)))
    if not 0 < top_p <= 1:
        raise ValueError(M.bad_top_p(float(top_p)))
    return out
