"""Library patterns for products: linear (mm / addmm of a transposed weight), bmm, the gated MLP, and a
GEMM with its residual-add + RMSNorm epilogue (linear_add_rms_norm)."""
from __future__ import annotations

from torch.fx import Node

from .fusion import tensor_meta
from .match import TRANSPOSE_2D, VIEW_OPS, Match, _float, _is, _stdlib, _strip_views, aten
from .patterns_rows import match_rms_norm

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
        bm, om = tensor_meta(bias), tensor_meta(node)
        if bm is None or bm.dim() != 1 or om is None or str(bm.shape[0]) != str(om.shape[-1]):
            return None  # (a bias that broadcasts, [1]: eager's addmm; the kernels take [N])
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
    if w is None:  # a plain product x @ b (b [K, N]: GPT-2's Conv1D, user code): read as it is stored
        return Match("matmul", node, [x, b, bias], lambda x, b, bias: S.matmul(x, b, bias))
    return Match("linear", node, [x, w, bias], lambda x, w, bias: S.linear(x, w, bias), {b})


def match_bmm(node: Node):
    if not _is(node, aten.bmm.default) or not (_float(node.args[0]) and _float(node.args[1])):
        return None
    if tensor_meta(node.args[0]).dtype != tensor_meta(node.args[1]).dtype:
        return None
    from .fusion import is_outer_product

    if is_outer_product(node):  # K = 1: elementwise, a generated kernel (fusion.template)
        return None
    S = _stdlib()
    return Match("bmm", node, list(node.args[:2]), lambda a, b: S.bmm(a, b))



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


