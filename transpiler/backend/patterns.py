"""Library patterns: subgraphs of an ATen FX graph that one tilex.stdlib kernel computes.

Each matcher looks at one node (the root, whose value the kernel produces) and returns a Match
or None. A Match names the library kernel, the graph values it reads (`args`, Nodes or constants),
the interior nodes it replaces and `call(*values)` that computes the root's value. The table
MATCHERS is tried in order on every node, last node first, so that bigger patterns (gated MLP)
claim their parts before smaller ones (linear) do.

The matchers live in patterns_gemm.py (products), patterns_attention.py (SDPA), patterns_rows.py (norms,
softmax, embedding, argmax) and patterns_cache.py (in-place writes of graph inputs); match.py has the
Match record.
"""
from __future__ import annotations

import torch
from torch.fx import Node

from .match import Match
from .patterns_attention import match_sdpa, match_sdpa_masked
from .patterns_cache import is_inplace_copy_back, match_cache_write, match_copy_back
from .patterns_gemm import match_bmm, match_gated_mlp, match_linear, match_linear_add_rms_norm
from .patterns_rows import match_argmax, match_embedding, match_layer_norm, match_rms_norm, match_softmax

__all__ = ["Match", "MATCHERS", "find_matches", "is_inplace_copy_back"]

MATCHERS = (match_gated_mlp, match_linear_add_rms_norm, match_rms_norm, match_sdpa, match_sdpa_masked,
            match_cache_write, match_copy_back, match_layer_norm, match_softmax, match_embedding, match_argmax,
            match_linear, match_bmm)


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
