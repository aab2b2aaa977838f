"""Patterns that write a graph input in place: HF StaticCache's index_copy_ (the generated cache_write scatter)
and the write-back copy_ of any other mutated input (the generated copy_into)."""
from __future__ import annotations

import torch
from torch.fx import Node

from .fusion import tensor_meta
from .ops import DTYPES
from .match import Match, _is, aten

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
                 native=True, writes=0 if in_place else None)


def is_inplace_copy_back(node: Node, roots: set) -> bool:
    """copy_(a, x) where x is an in-place cache write of a (match_cache_write): a is already updated."""
    return _is(node, aten.copy_.default) and node.args[1] in roots and node.args[1].args[0] is node.args[0] \
        and node.args[0].op == "placeholder" and _cache_copies(node.args[0], node.args[1]) is not None


def match_copy_back(node: Node):
    """copy_(a, src) of a graph input `a` (AOTAutograd's write-back of a mutated input, e.g. StaticCache's
    `cumulative_length` counter on the device) that is not a cache written in place by cache_write: the
    generated copy_into writes src into a. A 0-d CPU input is host work (program.py's view steps)."""
    if not _is(node, aten.copy_.default) or len(node.args) != 2 or node.kwargs:
        return None
    a, src = node.args
    am, sm = tensor_meta(a), tensor_meta(src)
    if not isinstance(src, Node) or a.op != "placeholder" or am is None or sm is None:
        return None
    if am.dim() == 0 and am.device.type == "cpu" or am.device != sm.device:
        return None
    if am.dtype not in DTYPES or sm.dtype not in DTYPES or not am.is_contiguous() or \
            tuple(map(str, am.shape)) != tuple(map(str, sm.shape)):
        return None
    if _is(src, aten.index_copy.default) and src.args[0] is a:
        w = match_cache_write(src)
        if w is not None and w.kernel == "cache_write":
            return None  # the scatter writes a itself; this copy_ is an alias step
    from . import cachegen

    return Match("copy_into", node, [a, src], cachegen.copy_into, native=True, writes=0)
