"""The tensor-core library ops as torch custom ops: linear layers, attention and the decode fusions.

No `from __future__ import annotations` here: torch.library reads the annotations as the schema.
"""
from typing import Optional

import torch
from torch import Tensor

from .. import stdlib as S
from ..stdlib import attention as _attn
from ..stdlib import messages as M
from . import _checks as C
from ._convert import call
from ._ops_rows import _fake_contiguous_caches
from ._registry import _one_of, _op, _shown, shown, sym_or


# ------------------------------------------------------------------------- linear layers

def _fake_flatten(x):
    C.check_rank("x", x, ndim_min=1)
    k = x.shape[-1]
    return C.numel(x.shape[:-1]), k


def _fake_linear(x, weight, x_ndim=None):
    """tilex.stdlib.linear._check_linear: (dtype, m, k, n)."""
    dt = C.check_float("x", x, ndim=x_ndim)
    C.check_rank("weight", weight, ndim=2)
    C.check_same_dtype("weight", weight, dt)
    m, k = _fake_flatten(x)
    n = weight.shape[0]
    C.require(weight.shape[1] == k, lambda: M.linear_weight(_shown(k), shown(weight.shape)))
    return dt, m, k, n


@_op("linear")
def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    return call(S.linear, x, weight, bias)


@linear.register_fake
def _(x, weight, bias=None):
    dt, m, k, n = _fake_linear(x, weight)
    if bias is not None:
        C.check_same_dtype("bias", bias, dt)
        C.check_shape("bias", bias, (n,))
    return x.new_empty((*x.shape[:-1], n))


@_op("matmul")
def matmul(a: Tensor, b: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    return call(S.matmul, a, b, bias)


@matmul.register_fake
def _(a, b, bias=None):
    dt = C.check_float("a", a)
    C.check_rank("b", b, ndim=2)
    C.check_same_dtype("b", b, dt)
    k = a.shape[-1]
    C.require(b.shape[0] == k, lambda: M.matmul_inner(_shown(k), shown(b.shape)))
    n = b.shape[1]
    if bias is not None:
        C.check_same_dtype("bias", bias, dt)
        C.check_shape("bias", bias, (n,))
    return a.new_empty((*a.shape[:-1], n))


@_op("bmm")
def bmm(a: Tensor, b: Tensor) -> Tensor:
    return call(S.bmm, a, b)


@bmm.register_fake
def _(a, b):
    dt = C.check_float("a", a, ndim=3)
    C.check_rank("b", b, ndim=3)
    C.check_same_dtype("b", b, dt)
    C.require(b.shape[0] == a.shape[0] and b.shape[1] == a.shape[2],
              lambda: M.bmm_shapes(shown(a.shape), shown(b.shape)))
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


def _fake_qkv(x, weight, q_size, kv_size, bias, x_ndim=None):
    """tilex.stdlib.linear._check_qkv: (dtype, m, k)."""
    dt = C.check_float("x", x, ndim=x_ndim)
    C.check_rank("weight", weight, ndim=2)
    C.check_same_dtype("weight", weight, dt)
    m, k = _fake_flatten(x)
    n = q_size + 2 * kv_size
    msg = lambda: M.qkv_weight(n, _shown(k), q_size, kv_size, shown(weight.shape))  # noqa: E731
    C.require(weight.shape[0] == n, msg)
    C.require(weight.shape[1] == k, msg)
    if bias is not None:
        C.check_same_dtype("bias", bias, dt)
        C.check_shape("bias", bias, (n,))
    return dt, m, k


@_op("linear_qkv")
def linear_qkv(x: Tensor, weight: Tensor, q_size: int, kv_size: int,
               bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    return call(S.linear_qkv, x, weight, q_size, kv_size, bias)


@linear_qkv.register_fake
def _(x, weight, q_size, kv_size, bias=None):
    _fake_qkv(x, weight, q_size, kv_size, bias)
    lead = tuple(x.shape[:-1])
    return x.new_empty((*lead, q_size)), x.new_empty((*lead, kv_size)), x.new_empty((*lead, kv_size))


@_op("gated_mlp")
def gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor) -> Tensor:
    return call(S.gated_mlp, x, w_gate, w_up)


@gated_mlp.register_fake
def _(x, w_gate, w_up):
    dt = C.check_float("x", x)
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        C.check_rank(name, w, ndim=2)
        C.check_same_dtype(name, w, dt)
    _, k = _fake_flatten(x)
    n = w_gate.shape[0]
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        msg = lambda name=name, w=w: M.gated_weight(name, _shown(n), _shown(k), shown(w.shape))  # noqa: E731
        C.require(w.shape[0] == n, msg)
        C.require(w.shape[1] == k, msg)
    C.require(k % 8 == 0, lambda: M.gated_k(_shown(k)))
    return x.new_empty((*x.shape[:-1], n))


# ------------------------------------------------------------------------- attention

def _fake_head_dim(name, x):
    d = x.shape[-1]
    C.require(_one_of(d, _attn.HEAD_DIMS), lambda: M.bad_head_dim(name, _shown(d), _attn.HEAD_DIMS))


def _fake_heads(hq, hkv, message):
    msg = lambda: message(_shown(hq), _shown(hkv))  # noqa: E731
    C.require(hkv != 0, msg)
    C.require(hq % torch.sym_max(hkv, 1) == 0, msg)


@_op("attention_prefill")
def attention_prefill(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, scale: Optional[float] = None,
                      layout: str = "bhsd") -> Tensor:
    return call(S.attention_prefill, q, k, v, causal, scale, layout=layout)


@attention_prefill.register_fake
def _(q, k, v, causal=True, scale=None, layout="bhsd"):
    if layout not in ("bhsd", "bshd"):
        raise ValueError(M.bad_layout(layout))
    dt = C.check_float("q", q, ndim=4)
    for name, x in (("k", k), ("v", v)):
        C.check_float(name, x, ndim=4)
        C.check_same_dtype(name, x, dt)
    if layout == "bshd":
        b, s, hq, d = q.shape
        hkv = k.shape[2]
        kv_shape = (b, s, hkv, d)
    else:
        b, hq, s, d = q.shape
        hkv = k.shape[1]
        kv_shape = (b, hkv, s, d)
    _fake_head_dim("q", q)
    C.check_shape("k", k, kv_shape)
    C.check_shape("v", v, kv_shape)
    _fake_heads(hq, hkv, M.prefill_heads)
    return q.new_empty(q.shape)


_BLOCK_SIZES = tuple(1 << i for i in range(9))  # powers of two up to 256


@_op("attention_decode")
def attention_decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
                     scale: Optional[float] = None, num_splits: Optional[int] = None) -> Tensor:
    return call(S.attention_decode, q, k_cache, v_cache, block_table, seq_lens, scale, num_splits)


@attention_decode.register_fake
def _(q, k_cache, v_cache, block_table, seq_lens, scale=None, num_splits=None):
    dt = C.check_float("q", q, ndim=3)
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        C.check_float(name, x, ndim=4)
        C.check_same_dtype(name, x, dt)
    C.check_int("block_table", block_table, ndim=2)
    C.check_int("seq_lens", seq_lens, ndim=1)
    b, hq, d = q.shape
    nb, bs, hkv = k_cache.shape[:3]
    _fake_head_dim("q", q)
    C.check_shape("k_cache", k_cache, (nb, bs, hkv, d))
    C.check_shape("v_cache", v_cache, (nb, bs, hkv, d))
    C.require(_one_of(bs, _BLOCK_SIZES), lambda: M.bad_block_size(_shown(bs)))
    _fake_heads(hq, hkv, M.decode_heads)
    C.require(block_table.shape[0] == b, lambda: M.block_table_rows(_shown(b), shown(block_table.shape)))
    C.check_shape("seq_lens", seq_lens, (b,))
    if num_splits is not None and not 1 <= num_splits <= 1024:  # checked by the stdlib when there is work
        C.require(sym_or(b * hq == 0, nb == 0, block_table.shape[1] == 0), lambda: M.bad_num_splits(num_splits))
    return q.new_empty((b, hq, d))


# ------------------------------------------------------------------------- decode fusions

@_op("linear_qkv_rope_cache", mutates=("k_cache", "v_cache"))
def linear_qkv_rope_cache(x: Tensor, weight: Tensor, q_size: int, kv_size: int, positions: Tensor,
                          k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor, theta: float = 10000.0,
                          bias: Optional[Tensor] = None) -> Tensor:
    return call(S.linear_qkv_rope_cache, x, weight, q_size, kv_size, positions, k_cache, v_cache, slot_mapping,
                theta, bias)


@linear_qkv_rope_cache.register_fake
def _(x, weight, q_size, kv_size, positions, k_cache, v_cache, slot_mapping, theta=10000.0, bias=None):
    dt, m, _ = _fake_qkv(x, weight, q_size, kv_size, bias, x_ndim=2)
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        C.check_float(name, c, ndim=4)
        C.check_same_dtype(name, c, dt)
    nb, bs, hkv, d = k_cache.shape
    C.check_shape("v_cache", v_cache, (nb, bs, hkv, d))
    d1 = torch.sym_max(d, 1)
    msg = lambda: M.qkv_heads(q_size, kv_size, _shown(hkv), _shown(d))  # noqa: E731
    C.require(hkv * d == kv_size, msg)
    C.require(q_size % d1 == 0, msg)
    for name, t in (("positions", positions), ("slot_mapping", slot_mapping)):
        C.check_int(name, t, ndim=1)
        C.check_shape(name, t, (m,))
    if not theta > 0:
        raise ValueError(M.bad_theta(theta))
    _fake_contiguous_caches(k_cache, v_cache)
    return x.new_empty((m, q_size // d1, d))


@_op("linear_add_rms_norm")
def linear_add_rms_norm(x: Tensor, weight: Tensor, residual: Tensor, norm_weight: Optional[Tensor] = None,
                        eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    return call(S.linear_add_rms_norm, x, weight, residual, norm_weight, eps)


@linear_add_rms_norm.register_fake
def _(x, weight, residual, norm_weight=None, eps=1e-6):
    dt, m, _, n = _fake_linear(x, weight, x_ndim=2)
    C.check_float("residual", residual, ndim=2)
    C.check_same_dtype("residual", residual, dt)
    C.check_shape("residual", residual, (m, n))
    C.require(n != 0, lambda: M.no_out_features(shown(weight.shape)))
    C.check_vector("norm_weight", norm_weight, n, dt)
    return x.new_empty((m, n)), x.new_empty((m, n))
