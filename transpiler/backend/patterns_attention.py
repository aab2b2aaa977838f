"""Library patterns for scaled-dot-product attention: causal prefill (attention_prefill) and attention with a
mask against a longer key sequence (decode against a static KV cache: attention_decode over a key table built
from the mask on the device, decodeattn.py; the generated masked_attention where that does not apply)."""
from __future__ import annotations

import math
import operator

import torch
from torch.fx import Node

from .fusion import tensor_meta
from .masks import MASKED_AT
from .match import VIEW_OPS, Match, _float, _is, _stdlib, aten

_SDPA = {aten._scaled_dot_product_flash_attention_for_cpu.default: ("cpu_flash", 3),
         aten._scaled_dot_product_flash_attention.default: ("flash", 3),
         aten._scaled_dot_product_efficient_attention.default: ("efficient", 4),
         aten._scaled_dot_product_cudnn_attention.default: ("cudnn", 4)}




def _is_causal_mask(mask, sq: int, sk: int) -> bool:
    """A bool mask or an additive float mask that is exactly top-left causal (broadcast over batch, heads); an
    additive mask's removed keys may hold -inf or any value <= MASKED_AT (HF's finfo(dtype).min, or the -65504
    fill of PyTorch's cuDNN SDPA)."""
    if mask.shape[-2:] != (sq, sk):
        return False
    tril = torch.ones(sq, sk, dtype=torch.bool, device=mask.device).tril()
    allowed = mask if mask.dtype == torch.bool else mask == 0
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask <= MASKED_AT)).all()):
        return False
    return bool((allowed == tril).all())


def _reads_input(node: Node) -> bool:
    """node's value depends on a tensor input of the graph (it is no folded constant: the same tensor object
    can hold new contents at the next call)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor):
            return True
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return False


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


def _unpad_mask(mask):
    """(m, nodes) when mask = expand(slice(constant_pad_nd(m, [0, p]), -1, 0, n)) with n m's last dim (CUDA's
    memory-efficient SDPA pads a mask's rows to 16 elements and slices them back: the same values as m,
    which the kernels read broadcast as it is); else (mask, [])."""
    chain = []
    node = mask
    if _is(node, aten.expand.default):
        chain.append(node)
        node = node.args[0]
    if not _is(node, aten.slice.Tensor) or len(node.args) < 4:
        return mask, []
    sl, pad = node, node.args[0]
    if not _is(pad, aten.constant_pad_nd.default) or not isinstance(pad.args[0], Node):
        return mask, []
    m = pad.args[0]
    mm = tensor_meta(m)
    widths = list(pad.args[1])
    n = mm.shape[-1] if mm is not None and mm.dim() else None
    if n is None or len(widths) != 2 or widths[0] != 0 or int(sl.args[1]) % mm.dim() != mm.dim() - 1 or \
            sl.args[2] != 0 or str(sl.args[3]) != str(n):
        return mask, []
    return m, [*chain, sl, pad]


def match_sdpa(node: Node):
    """getitem(sdpa(q, k, v, ...), 0) with no dropout, equal q/k lengths and no mask, a causal flag
    or a causal mask (checked on its value: a folded constant) -> attention_prefill(causal=True)."""
    got = _sdpa_call(node)
    if got is None:
        return None
    sd, q, k, v, params, mask = got
    mask, mask_chain = _unpad_mask(mask) if mask is not None else (None, [])
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
    constant = mask is None or not _reads_input(mask)   # else its contents can change between calls

    def check(q, k, v, mask):
        if mask is None:
            return True
        if not constant:
            return _is_causal_mask(mask, q.shape[2], k.shape[2])
        hit = decided.get(id(mask))
        if hit is None or hit[0] is not mask:
            if len(decided) >= 16:
                decided.clear()
            hit = decided[id(mask)] = (mask, _is_causal_mask(mask, q.shape[2], k.shape[2]))
        return hit[1]

    return Match("attention_prefill", node, [q, k, v, mask], call, {sd, *k_chain, *v_chain, *mask_chain}, check,
                 decides=(3,))


def _const(a):
    """The value of a Python number or a folded 0-d constant node (scalar_tensor, full([])), else None."""
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return float(a)
    if _is(a, aten.scalar_tensor.default) and isinstance(a.args[0], (int, float)):
        return float(a.args[0])
    if _is(a, aten.full.default) and list(a.args[0]) == [] and isinstance(a.args[1], (int, float)):
        return float(a.args[1])
    return None


_FLOAT_CASTS = {aten._to_copy.default, torch.ops.prims.convert_element_type.default}


def _bool_source(mask):
    """(b, nodes) when the float mask is where(b, 0, -inf) or where(logical_not(b), -inf, 0) of a bool b, cast
    or not (SDPA making a bool mask additive: the values are exactly 0 and -inf); else (mask, [])."""
    chain = []
    node = mask
    while _is(node, *_FLOAT_CASTS) and _float(node) and _float(node.args[0]):
        chain.append(node)
        node = node.args[0]
    if not _is(node, aten.where.self) or len(node.args) != 3:
        return mask, []
    cond, a, b = node.args
    chain.append(node)
    if _const(a) == 0.0 and _const(b) == float("-inf"):
        pass
    elif _const(a) == float("-inf") and _const(b) == 0.0 and _is(cond, aten.logical_not.default):
        chain.append(cond)
        cond = cond.args[0]
    else:
        return mask, []
    cm = tensor_meta(cond)
    if cm is None or cm.dtype != torch.bool:
        return mask, []
    return cond, chain


def match_sdpa_masked(node: Node):
    """getitem(sdpa(q, k, v, attn_mask), 0) with no dropout and query length != key length (decode
    against a static KV cache), k/v read through HF's repeat_kv as grouped-query heads, the mask read as
    data (any mask: padding, causal, holes): the library's attention_decode over a table of the keys each
    query row allows, built on the device (decodeattn.py), when the head size is the library's and the table
    fits decodeattn.MAX_TABLE_BYTES (`decodeattn.takes`); else (or for a cache layout it cannot read) the
    generated masked attention (cachegen.py)."""
    got = _sdpa_call(node)
    if got is None:
        return None
    sd, q, k, v, params, mask = got
    if mask is None or params.get("dropout_p", 0.0) != 0.0 or params.get("return_debug_mask", False) or \
            params.get("is_causal", False):
        return None
    mask, mask_chain = _unpad_mask(mask)
    mask, bool_chain = _bool_source(mask)
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
    from . import decodeattn

    library = decodeattn.takes(qm.shape[0], qm.shape[2], tensor_meta(k).shape[1], km.shape[2], qm.shape[-1])

    def call(q, k, v, mask):
        if library:
            return decodeattn.decode_attention(q, k, v, mask, scale)
        from . import cachegen

        return cachegen.masked_attention(q, k, v, mask, scale)
    return Match("attention_decode" if library else "masked_attention", node, [q, k, v, mask], call,
                 {sd, *k_chain, *v_chain, *mask_chain, *bool_chain}, native=True)
