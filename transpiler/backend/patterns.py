"""Library patterns: subgraphs of an ATen FX graph that one tilex.stdlib kernel computes.

Each matcher looks at one node (the root, whose value the kernel produces) and returns a Match
or None. A Match names the library kernel, the graph values it reads (`args`, Nodes or constants),
the interior nodes it replaces and `call(*values)` that computes the root's value. The table
MATCHERS is tried in order on every node, last node first, so that bigger patterns (gated MLP)
claim their parts before smaller ones (linear) do.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.fx import Node

from .fusion import tensor_meta

aten = torch.ops.aten

VIEW_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
TRANSPOSE_2D = {aten.t.default, aten.transpose.int, aten.permute.default}


@dataclass
class Match:
    kernel: str                 # library function (for reports)
    root: Node
    args: list                  # Nodes (values from the environment) or constants
    call: Callable              # call(*arg values) -> root value
    interior: set = field(default_factory=set)  # nodes computed inside the kernel
    check: Callable | None = None  # check(*arg values) -> bool: use the kernel (else eager)
    native: bool = False        # call takes torch tensors itself (CPU included): no NumPy conversion
    extra: list = field(default_factory=list)  # more nodes the kernel computes that others read: call then
    #                                            returns (root value, *their values)
    decides: tuple = ()         # indices of the args whose values (not only shapes) `check` reads on the host


def _stdlib():
    import tilex.stdlib as S

    return S


def _is(node, *targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _float(node) -> bool:
    m = tensor_meta(node)
    return m is not None and m.dtype in (torch.float32, torch.float16, torch.bfloat16)


def _weight_of(b: Node) -> Node | None:
    """w when b = w.T for a 2-D w (t / transpose(0, 1) / permute([1, 0]))."""
    if not _is(b, *TRANSPOSE_2D) or tensor_meta(b.args[0]) is None or tensor_meta(b.args[0]).dim() != 2:
        return None
    if b.target is aten.transpose.int and sorted(int(d) % 2 for d in b.args[1:3]) != [0, 1]:
        return None
    if b.target is aten.permute.default and [int(d) % 2 for d in b.args[1]] != [1, 0]:
        return None
    return b.args[0]


def _linear_parts(node: Node):
    """(x, w, bias, transposed-view node) for mm(x, w.T) / addmm(bias, x, w.T), else None."""
    if _is(node, aten.mm.default):
        x, b, bias = node.args[0], node.args[1], None
    elif _is(node, aten.addmm.default) and node.kwargs.get("beta", 1) == 1 and node.kwargs.get("alpha", 1) == 1:
        bias, x, b = node.args[:3]
        if tensor_meta(bias) is None or tensor_meta(bias).dim() != 1:
            return None
    else:
        return None
    if not (_float(x) and _float(b)) or tensor_meta(x).dtype != tensor_meta(b).dtype:
        return None
    return x, _weight_of(b), bias, b


def match_linear(node: Node):
    parts = _linear_parts(node)
    if parts is None:
        return None
    x, w, bias, b = parts
    S = _stdlib()
    if w is None:  # a plain product: the library takes [out, in] weights, so b.T is copied
        return Match("linear", node, [x, b, bias], lambda x, b, bias: S.linear(x, _transposed(b), bias))
    return Match("linear", node, [x, w, bias], lambda x, w, bias: S.linear(x, w, bias), {b})


def match_bmm(node: Node):
    if not _is(node, aten.bmm.default) or not (_float(node.args[0]) and _float(node.args[1])):
        return None
    if tensor_meta(node.args[0]).dtype != tensor_meta(node.args[1]).dtype:
        return None
    S = _stdlib()

    def call(a, b):
        from tilex.stdlib import _launch

        out = _launch.empty(a, (a.shape[0], a.shape[1], b.shape[2]))
        for i in range(a.shape[0]):
            out[i] = S.linear(a[i], _transposed(b[i]))
        return out
    return Match("linear (per batch)", node, list(node.args[:2]), call)


def _transposed(b):
    """A contiguous copy of the 2-D array b.T (NumPy, CuPy or torch)."""
    from tilex.stdlib import _launch

    return _launch.contiguous(b.T)


def _strip_views(node):
    while _is(node, *VIEW_OPS):
        node = node.args[0]
    return node


def match_gated_mlp(node: Node):
    """mul(silu(x @ wg.T), x @ wu.T), the products possibly reshaped: one gated_mlp kernel."""
    if not _is(node, aten.mul.Tensor) or not all(isinstance(a, Node) for a in node.args[:2]):
        return None
    a, b = node.args[:2]
    if not _is(a, aten.silu.default):
        a, b = b, a
    if not _is(a, aten.silu.default):
        return None
    g_view, u_view = a.args[0], b
    g, u = _strip_views(g_view), _strip_views(u_view)
    pg, pu = _linear_parts(g), _linear_parts(u)
    if pg is None or pu is None or pg[2] is not None or pu[2] is not None:
        return None
    if _strip_views(pg[0]) is not _strip_views(pu[0]) or tuple(tensor_meta(pg[0]).shape) != tuple(
            tensor_meta(pu[0]).shape):
        return None
    if pg[1] is None or pu[1] is None:
        return None
    k = tensor_meta(pg[0]).shape[-1]
    if not isinstance(k, int) or k % 8:
        return None
    if tuple(tensor_meta(g_view).shape) != tuple(tensor_meta(u_view).shape):
        return None
    x_base = _strip_views(pg[0])  # the product's input before it was flattened to 2-D
    lead, glead = tuple(tensor_meta(x_base).shape[:-1]), tuple(tensor_meta(g_view).shape[:-1])
    if len(lead) != len(glead) or any(str(a) != str(b) for a, b in zip(lead, glead)):
        return None
    S = _stdlib()

    def call(x, wg, wu, like):
        y = S.gated_mlp(x, wg, wu)
        return y.reshape(tuple(like.shape[:-1]) + (y.shape[-1],))

    interior = {a, g_view, u_view, g, u, pg[3], pu[3]}
    while _is(g_view, *VIEW_OPS) and g_view is not g:
        interior.add(g_view)
        g_view = g_view.args[0]
    while _is(u_view, *VIEW_OPS) and u_view is not u:
        interior.add(u_view)
        u_view = u_view.args[0]
    return Match("gated_mlp", node, [pg[0], pg[1], pu[1], x_base], call, interior)


_SDPA = {aten._scaled_dot_product_flash_attention_for_cpu.default: ("cpu_flash", 3),
         aten._scaled_dot_product_flash_attention.default: ("flash", 3),
         aten._scaled_dot_product_efficient_attention.default: ("efficient", 4),
         aten._scaled_dot_product_cudnn_attention.default: ("cudnn", 4)}


def _is_causal_mask(mask, sq: int, sk: int) -> bool:
    """A bool mask or an additive float mask that is exactly top-left causal (broadcast over batch, heads)."""
    if mask.shape[-2:] != (sq, sk):
        return False
    tril = torch.ones(sq, sk, dtype=torch.bool, device=mask.device).tril()
    allowed = mask if mask.dtype == torch.bool else mask == 0
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == float("-inf"))).all()):
        return False
    return bool((allowed == tril).all())


def _strip_full_slices(node, chain: list):
    """Skip slices that keep everything (HF's k[:, :, None, :, :]), appending them to chain."""
    while _is(node, aten.slice.Tensor) and (len(node.args) < 3 or node.args[2] in (0, None)) and \
            [str(d) for d in tensor_meta(node).shape] == [str(d) for d in tensor_meta(node.args[0]).shape]:
        chain.append(node)
        node = node.args[0]
    return node


def _unrepeat_kv(k: Node):
    """(k0, nodes) when k = repeat_kv(k0) as HF writes it (k0[:, :, None].expand(B, Hkv, n, S, D)
    .reshape(B, Hkv * n, S, D)): the attention kernel reads k0 directly (grouped-query heads)."""
    chain = []
    node = k
    if _is(node, *VIEW_OPS):
        chain.append(node)
        node = node.args[0]
    if _is(node, aten.clone.default):
        chain.append(node)
        node = node.args[0]
    if not _is(node, aten.expand.default) or len(node.args[1]) != 5:
        return k, []
    chain.append(node)
    expand = node
    node = _strip_full_slices(node.args[0], chain)
    if not _is(node, aten.unsqueeze.default) or int(node.args[1]) != 2:
        return k, []
    chain.append(node)
    node = _strip_full_slices(node.args[0], chain)
    base = tensor_meta(node)
    if base is None or base.dim() != 4 or str(base.shape[1]) != str(tensor_meta(expand).shape[1]):
        return k, []
    return node, chain


# the optional arguments after (q, k, v) of each ATen SDPA variant, in order
_SDPA_ARGS = {"cpu_flash": ["dropout_p", "is_causal"], "flash": ["dropout_p", "is_causal", "return_debug_mask"],
              "efficient": ["attn_bias", "compute_log_sumexp", "dropout_p", "is_causal"],
              "cudnn": ["attn_bias", "compute_log_sumexp", "dropout_p", "is_causal", "return_debug_mask"]}


def _sdpa_call(node: Node):
    """getitem(sdpa(q, k, v, ...), 0) -> (the sdpa node, q, k, v, its named parameters, the mask or None)."""
    if not (node.op == "call_function" and node.target is operator.getitem and node.args[1] == 0):
        return None
    sd = node.args[0]
    if not _is(sd, *_SDPA):
        return None
    kind, _ = _SDPA[sd.target]
    q, k, v = sd.args[:3]
    params = dict(zip(_SDPA_ARGS[kind], sd.args[3:]))
    params.update(sd.kwargs)
    return sd, q, k, v, params, params.get("attn_mask", params.get("attn_bias"))


def match_sdpa(node: Node):
    """getitem(sdpa(q, k, v, ...), 0) with no dropout, equal q/k lengths and no mask, a causal flag
    or a causal mask (checked on its value: a folded constant) -> attention_prefill(causal=True)."""
    got = _sdpa_call(node)
    if got is None:
        return None
    sd, q, k, v, params, mask = got
    if params.get("dropout_p", 0.0) != 0.0 or params.get("return_debug_mask", False):
        return None
    qm, km = tensor_meta(q), tensor_meta(k)
    if qm is None or qm.dim() != 4 or km.dim() != 4 or not _float(q):
        return None
    sq, sk = qm.shape[2], km.shape[2]
    if str(sq) != str(sk) or qm.shape[-1] not in (16, 32, 64, 128, 256):
        return None
    k, k_chain = _unrepeat_kv(k)
    v, v_chain = _unrepeat_kv(v)
    if tensor_meta(k).shape[1] != tensor_meta(v).shape[1]:
        return None
    is_causal = bool(params.get("is_causal", False))
    if mask is None and not is_causal:
        return None
    scale = params.get("scale")
    S = _stdlib()

    def call(q, k, v, mask):
        # token-major in and out: eager's SDPA output is [B, S, H, D] in memory too, and the
        # transposed views HF takes of q, k, v are then contiguous (no copies)
        o = S.attention_prefill(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), causal=True,
                                scale=scale, layout="bshd")
        return o.swapaxes(1, 2)

    decided: dict = {}  # id(mask) -> (mask, verdict): a folded mask is one object per size binding,
    #                     so it is looked at once (no device sync per call on the GPU)

    def check(q, k, v, mask):
        if mask is None:
            return True
        hit = decided.get(id(mask))
        if hit is None or hit[0] is not mask:
            if len(decided) >= 16:
                decided.clear()
            hit = decided[id(mask)] = (mask, _is_causal_mask(mask, q.shape[2], k.shape[2]))
        return hit[1]

    return Match("attention_prefill", node, [q, k, v, mask], call, {sd, *k_chain, *v_chain}, check, decides=(3,))


def match_sdpa_masked(node: Node):
    """getitem(sdpa(q, k, v, attn_mask), 0) with no dropout and query length != key length (decode
    against a static KV cache): the generated masked attention (cachegen.py), k/v read through
    HF's repeat_kv as grouped-query heads. The mask is read as data (any mask: padding, causal)."""
    got = _sdpa_call(node)
    if got is None:
        return None
    sd, q, k, v, params, mask = got
    if mask is None or params.get("dropout_p", 0.0) != 0.0 or params.get("return_debug_mask", False) or \
            params.get("is_causal", False):
        return None
    qm, km, mm = tensor_meta(q), tensor_meta(k), tensor_meta(mask)
    if qm is None or km is None or mm is None or qm.dim() != 4 or km.dim() != 4 or not _float(q) or mm.dim() > 4:
        return None
    if str(qm.shape[2]) == str(km.shape[2]) or str(mm.shape[-1]) != str(km.shape[-2]):
        return None  # equal lengths: attention_prefill's pattern
    if not isinstance(qm.shape[-1], int) or qm.shape[-1] > 256:
        return None
    k, k_chain = _unrepeat_kv(k)
    v, v_chain = _unrepeat_kv(v)
    if str(tensor_meta(k).shape[1]) != str(tensor_meta(v).shape[1]):
        return None
    scale = params.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(qm.shape[-1])
    from . import cachegen

    def call(q, k, v, mask):
        return cachegen.masked_attention(q, k, v, mask, scale)
    return Match("masked_attention", node, [q, k, v, mask], call, {sd, *k_chain, *v_chain}, native=True)


def _cache_copies(a: Node, root: Node) -> list:
    """The copy_(a, root) nodes (AOTAutograd's write-back of a mutated input), when every other user of
    a is root itself; None when something else reads a (it would see the cache before the write)."""
    copies = [u for u in a.users if u is not root]
    if not all(_is(u, aten.copy_.default) and u.args[0] is a and u.args[1] is root for u in copies):
        return None
    return copies


def match_cache_write(node: Node):
    """index_copy(cache, 2, idx, src) of a 4-D cache (HF StaticCache's index_copy_): the generated
    scatter (cachegen.py). A cache that is a graph input written back by copy_ is updated in place
    (the copy_ then does nothing); any other cache (one created inside the graph) is cloned first."""
    if not _is(node, aten.index_copy.default):
        return None
    a, dim, idx, src = node.args[:4]
    am, sm, im = tensor_meta(a), tensor_meta(src), tensor_meta(idx)
    if am is None or sm is None or im is None or am.dim() != 4 or sm.dim() != 4 or int(dim) % 4 != 2:
        return None
    if am.dtype != sm.dtype or am.dtype not in (torch.float32, torch.float16, torch.bfloat16) or \
            im.dtype not in (torch.int32, torch.int64) or im.dim() != 1:
        return None
    from . import cachegen

    in_place = a.op == "placeholder" and _cache_copies(a, node) is not None and am.is_contiguous()

    def call(a, idx, src):
        return cachegen.cache_write(a if in_place else a.contiguous().clone(), idx, src)
    return Match("cache_write" if in_place else "cache_write (on a copy)", node, [a, idx, src], call,
                 native=True)


def is_inplace_copy_back(node: Node, roots: set) -> bool:
    """copy_(a, x) where x is an in-place cache write of a (match_cache_write): a is already updated."""
    return _is(node, aten.copy_.default) and node.args[1] in roots and node.args[1].args[0] is node.args[0] \
        and node.args[0].op == "placeholder" and _cache_copies(node.args[0], node.args[1]) is not None


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


def match_linear_add_rms_norm(node: Node):
    """rms_norm(residual + view(x @ w.T)) -> linear_add_rms_norm(x, w, residual, norm_w, eps): the GEMM
    with its epilogue (the residual add, and the next norm) after o_proj / down_proj. The sum h is a
    second output (the next layer's residual reads it)."""
    norm = match_rms_norm(node)
    if norm is None:
        return None
    h = norm.args[0]
    if not _is(h, aten.add.Tensor) or len(h.args) < 2 or not all(isinstance(a, Node) for a in h.args[:2]) or \
            h.kwargs.get("alpha", 1) != 1:
        return None
    hm = tensor_meta(h)
    for res, y in (h.args[:2], h.args[1::-1]):
        view = y if _is(y, *VIEW_OPS) else None
        mm = _strip_views(y)
        parts = _linear_parts(mm)
        if parts is None or parts[2] is not None or parts[1] is None:
            continue
        x, w, _, t = parts
        rm, xm = tensor_meta(res), tensor_meta(x)
        if rm is None or tuple(map(str, rm.shape)) != tuple(map(str, hm.shape)) or rm.dtype != hm.dtype or \
                xm.dim() != 2 or tensor_meta(mm).dtype != hm.dtype:
            continue
        interior = set(norm.interior) | {h, mm, t}
        v = y
        while view is not None and _is(v, *VIEW_OPS):
            interior.add(v)
            v = v.args[0]
        S = _stdlib()
        eps_arg = norm.args[2]

        def call(x, w, res, nw, eps):
            shape = tuple(res.shape)
            n = shape[-1]
            y, hv = S.linear_add_rms_norm(x, w, res.reshape(-1, n), nw, float(eps))
            return y.reshape(shape), hv.reshape(shape)
        return Match("linear_add_rms_norm", node, [x, w, res, norm.args[1], eps_arg], call, interior - {h},
                     extra=[h])
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


MATCHERS = (match_gated_mlp, match_linear_add_rms_norm, match_rms_norm, match_sdpa, match_sdpa_masked, match_cache_write, match_layer_norm,
            match_softmax,
            match_embedding, match_argmax, match_linear, match_bmm)


def _extras_computed(m: Match) -> bool:
    """Every node between the args and an extra output is inside the match (none was dropped by the
    fixed point above): else the kernel's extra value would come from a node that is also computed alone."""
    args = {a for a in m.args if isinstance(a, Node)}
    stack = list(m.extra)
    seen = set()
    while stack:
        n = stack.pop()
        for a in n.all_input_nodes:
            if a in args or a in seen:
                continue
            if a not in m.interior:
                return False
            seen.add(a)
            stack.append(a)
    return True


def find_matches(graph: torch.fx.Graph, skip: set) -> list[Match]:
    """Matches over `graph`, no node in two matches, nodes in `skip` (folded constants) untouched.

    An interior node some node outside its match also reads is still computed on its own
    (it is not claimed), so a match never hides a value someone else needs.
    """
    claimed: set = set()
    found = []
    for node in reversed(list(graph.nodes)):
        if node in claimed or node in skip or node.op != "call_function":
            continue
        for matcher in MATCHERS:
            m = matcher(node)
            if m is None or (m.interior & claimed) or (set(m.extra) & claimed):
                continue
            while True:  # keep only nodes whose every user is inside the match (to a fixed point)
                inside = m.interior | {node} | set(m.extra)
                kept = {n for n in m.interior if all(u in inside for u in n.users)}
                if kept == m.interior:
                    break
                m.interior = kept
            if m.extra and any(e in m.interior for e in m.extra):
                continue
            if m.extra and not _extras_computed(m):
                continue  # the kernel computes its extra outputs from its interior: all of it must be kept
            claimed |= m.interior | {node} | set(m.extra)
            found.append(m)
            break
    found.reverse()
    return found
