"""Library patterns over rows: softmax, embedding, argmax, RMSNorm (HF's, with its casts) and LayerNorm."""
from __future__ import annotations

import operator

import torch
from torch.fx import Node

from .fusion import tensor_meta
from .match import Match, _float, _is, _stdlib, aten

def match_softmax(node: Node):
    if not _is(node, aten._softmax.default) or not _float(node.args[0]) or node.args[2]:
        return None
    nd = tensor_meta(node.args[0]).dim()
    if int(node.args[1]) % nd != nd - 1:
        return None
    S = _stdlib()
    return Match("softmax", node, [node.args[0]], lambda x: S.softmax(x, -1))


def match_embedding(node: Node):
    if not _is(node, aten.embedding.default) or len(node.args) > 2 and node.args[2] not in (-1, None):
        return None
    w, ids = node.args[:2]
    if not _float(w) or tensor_meta(w).dim() != 2 or tensor_meta(ids).dtype not in (torch.int32, torch.int64):
        return None
    S = _stdlib()
    return Match("embedding", node, [ids, w], lambda ids, w: S.embedding(ids, w))


def match_argmax(node: Node):
    if not _is(node, aten.argmax.default) or not _float(node.args[0]):
        return None
    x = tensor_meta(node.args[0])
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if dim is None or keep or int(dim) % x.dim() != x.dim() - 1:
        return None
    S = _stdlib()

    def call(x):
        return S.argmax(x.reshape(-1, x.shape[-1])).reshape(tuple(x.shape[:-1]))
    return Match("argmax", node, [node.args[0]], call)


def _cast_of(node, dtype=None):
    """(source, node) when node is a dtype cast (to `dtype`), else (node, None)."""
    if _is(node, aten._to_copy.default, torch.ops.prims.convert_element_type.default) and \
            set(node.kwargs) <= {"dtype"} and (len(node.args) == 1 or node.target is not aten._to_copy.default):
        if dtype is None or tensor_meta(node).dtype == dtype:
            return node.args[0], node
    return node, None


def _scalar_of(v):
    """(a float, or the 0-d CPU tensor node holding it, [cast nodes skipped]) for a norm's eps: a
    literal, or under dynamic=True a float Dynamo passes as a 0-d tensor (through dtype casts)."""
    if isinstance(v, float):
        return v, []
    casts = []
    while _is(v, torch.ops.prims.convert_element_type.default, aten._to_copy.default):
        casts.append(v)
        v = v.args[0]
    m = tensor_meta(v)
    if m is None or m.dim() != 0 or m.device.type != "cpu" or not m.dtype.is_floating_point:
        return None, []
    return v, casts


def match_rms_norm(node: Node):
    """HF RMSNorm: w * (x * rsqrt(mean(x**2, -1, keepdim) + eps)).to(dtype), x possibly cast to f32."""
    if not _is(node, aten.mul.Tensor) or not all(isinstance(a, Node) for a in node.args[:2]):
        return None
    for w, h in (node.args[:2], node.args[1::-1]):
        wm = tensor_meta(w)
        if wm is None or wm.dim() != 1:
            continue
        h0, cast_back = _cast_of(h)
        if not _is(h0, aten.mul.Tensor) or not all(isinstance(a, Node) for a in h0.args[:2]):
            continue
        for xf, r in (h0.args[:2], h0.args[1::-1]):
            if not _is(r, aten.rsqrt.default) or not _is(r.args[0], aten.add.Tensor):
                continue
            mean, eps = r.args[0].args[:2]
            eps, eps_casts = _scalar_of(eps)
            if eps is None or not _is(mean, aten.mean.dim):
                continue
            if list(mean.args[1]) not in ([-1], [tensor_meta(xf).dim() - 1]) or not (
                    len(mean.args) > 2 and mean.args[2]):
                continue
            p = mean.args[0]
            if not _is(p, aten.pow.Tensor_Scalar) or p.args[0] is not xf or p.args[1] != 2:
                continue
            x, cast_in = _cast_of(xf, torch.float32)
            xm = tensor_meta(x)
            if xm.dtype != wm.dtype or tensor_meta(node).dtype != xm.dtype or not _float(x):
                continue
            if cast_back is not None and tensor_meta(cast_back).dtype != xm.dtype:
                continue
            S = _stdlib()
            interior = {h0, r, r.args[0], mean, p, *eps_casts} | {n for n in (cast_back, cast_in) if n is not None}
            return Match("rms_norm", node, [x, w, eps], lambda x, w, eps: S.rms_norm(x, w, float(eps)), interior)
    return None


def match_layer_norm(node: Node):
    if not (node.op == "call_function" and node.target is operator.getitem and node.args[1] == 0):
        return None
    ln = node.args[0]
    if not _is(ln, aten.native_layer_norm.default) or len(ln.args[1]) != 1:
        return None
    x, _, w, b, eps = ln.args[:5]
    if not _float(x):
        return None
    S = _stdlib()
    return Match("layer_norm", node, [x, w, b], lambda x, w, b: S.layer_norm(x, w, b, eps), {ln})
