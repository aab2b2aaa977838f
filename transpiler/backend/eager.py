"""Running graph nodes in torch eager from an environment of values (node -> value): the lowered program's
eager ops, a library match whose check declined, a generated group whose row is too long for a tile."""
from __future__ import annotations

import torch
from torch.fx import Node
from torch.fx.node import map_arg

aten = torch.ops.aten


def call(target, args, kwargs=None):
    """target(*args, **kwargs), with aten.view of a kernel's output laid out unlike eager's as a copy."""
    if target is aten.view.default:
        try:
            return args[0].view(args[1])
        except RuntimeError:  # a kernel's output laid out unlike eager's: copy
            return aten.reshape.default(*args)
    return target(*args, **(kwargs or {}))


def eager(node: Node, env) -> object:
    """`node` computed in eager from the values of its inputs in `env`."""
    args = map_arg(node.args, env.__getitem__)
    kwargs = map_arg(node.kwargs, env.__getitem__) if node.kwargs else None
    return call(node.target, args, kwargs)


def eager_nodes(nodes, env: dict) -> dict:
    """`env` extended with the eager values of `nodes` (in graph order), each reading the ones before it."""
    local = dict(env)
    for n in nodes:
        local[n] = eager(n, local)
    return local
