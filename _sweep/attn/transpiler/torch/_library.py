"""Every tilex.stdlib function as a torch custom op `torch.ops.tilex.NAME`: a fake rule (output shapes
and the wrapper's checks, ._checks), one implementation for CUDA tensors (the generated kernels on
torch's current stream) and CPU tensors (the NumPy interpreter), and a backward that raises.

In-place variants (`fused_add_rms_norm_inplace`, `rope_inplace`, `kv_cache_write`, and the caches of
`linear_qkv_rope_cache`) declare `mutates_args`; every returned tensor is new (no output aliases an input).
No `from __future__ import annotations` here: torch.library reads the annotations as the schema.
"""
import functools
import operator
from typing import Optional

import torch
from torch import Tensor

from .. import stdlib as S
from ..stdlib import attention as _attn
from ..stdlib import messages as M
from . import _checks as C
from ._convert import call

NAMESPACE = "tilex"
OPS: dict = {}  # name -> the custom op (torch.ops.tilex.NAME is its OpOverloadPacket)
shown, _shown = C.shown, C._shown  # sizes as messages show them


@torch.library.custom_op(f"{NAMESPACE}::inference_only", mutates_args=())
def inference_only(op: str, grad: Tensor, shape: list[int], dtype: torch.dtype) -> Tensor:
    """The gradient a tilex op's backward returns: raises when it runs (eager, or a compiled backward)."""
    raise RuntimeError(f"{op} is inference-only: no backward")


@inference_only.register_fake
def _(op, grad, shape, dtype):
    return grad.new_empty(shape, dtype=dtype)


def _no_backward(name: str):
    """register_autograd arguments for the op named `name` ("tilex::linear"): the backward of the first input that needs a gradient
    is tilex::inference_only, which raises only when it runs (so a forward with parameters that require
    grad still runs, and still compiles)."""
    def setup_context(ctx, inputs, output):
        ctx.tilex_inputs = [(i, tuple(x.shape), x.dtype) for i, x in enumerate(inputs)
                            if isinstance(x, Tensor)]

    def backward(ctx, *grads):
        out = [None] * len(ctx.needs_input_grad)
        grad = next(g for g in grads if isinstance(g, Tensor))
        for i, shape, dtype in ctx.tilex_inputs:
            if ctx.needs_input_grad[i]:
                out[i] = torch.ops.tilex.inference_only(name, grad, list(shape), dtype)
                break
        return tuple(out)

    return backward, setup_context


_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")  # the autograd kernels of the in-place ops
_AUTOGRAD_KEYS = ("AutogradCPU", "AutogradCUDA")


def forbid_grad_in_place(lib, qualname: str, opname: str) -> None:
    """An autograd kernel for an op that writes its inputs (torch takes no backward formula for those, and
    without one gradients would flow through it as if it were the identity): with grad enabled and a tensor
    argument that requires grad it raises the inference-only error at once; otherwise it runs the op."""
    overload = None

    def autograd(keyset, *args, **kwargs):
        nonlocal overload
        if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                           for a in (*args, *kwargs.values())):
            raise RuntimeError(f"{qualname} is inference-only: no backward (it writes its inputs in place; "
                               "call it under torch.no_grad() or on tensors that do not require grad)")
        if overload is None:
            ns, name = qualname.split("::")
            overload = getattr(getattr(torch.ops, ns), name).default
        with torch._C._AutoDispatchBelowAutograd():
            return overload.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)

    for key in _AUTOGRAD_KEYS:
        lib.impl(opname, autograd, key, with_keyset=True)


def _op(name: str, mutates: tuple = ()):
    """Decorator: define tilex::name from its eager function (signature = schema), record it in OPS."""
    def wrap(fn):
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates)
        if mutates:  # torch takes autograd formulas for functional ops only
            forbid_grad_in_place(_LIB, f"{NAMESPACE}::{name}", name)
        else:
            backward, setup = _no_backward(f"{NAMESPACE}::{name}")
            op.register_autograd(backward, setup_context=setup)
        OPS[name] = op
        return op
    return wrap


def sym_or(*conds):
    """`or` of bools and SymBools without converting a SymBool to bool (which would guard on it)."""
    return functools.reduce(operator.or_, conds)


def _one_of(v, allowed):
    """v (an int or SymInt) equals one of `allowed`, as a (Sym)Bool."""
    return sym_or(*(v == a for a in allowed))


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
        # linear_any (in_features % 8 != 0) has no bias variant; empty problems launch nothing
        C.require(sym_or(k % 8 == 0, k == 0, m == 0, n == 0), lambda: M.linear_bias_k(_shown(k)))
    return x.new_empty((*x.shape[:-1], n))


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
