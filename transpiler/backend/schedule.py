"""The schedule of a lowered program: its steps in an order that computes every input first, and the step
after which each value is read for the last time (the executor drops it there)."""
from __future__ import annotations

from torch.fx import Node

from .fusion import member_inputs


def _order(steps: list) -> list:
    """Topologically order steps (a generated step needs all its members' inputs computed first)."""
    producer = {}
    for i, s in enumerate(steps):
        for n in s.nodes:
            producer[n] = i
        if s.kind == "library":
            producer[s.match.root] = i
            for e in s.match.extra:
                producer[e] = i
    deps = []
    for i, s in enumerate(steps):
        nodes = [s.match.root] if s.kind == "library" else s.nodes
        inputs = set()
        for n in nodes:
            srcs = [a for a in s.match.args if isinstance(a, Node)] if s.kind == "library" else member_inputs(n)
            inputs |= {producer[a] for a in srcs if a in producer and producer[a] != i}
        deps.append(inputs)
    order, state = [], [0] * len(steps)

    def visit(i):
        stack = [(i, iter(sorted(deps[i])))]
        state[i] = 1
        while stack:
            j, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[j] = 2
                order.append(j)
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
            elif state[nxt] == 1:
                raise RuntimeError("tilex backend: cycle between lowered steps (a fusion bug)")
    for i in range(len(steps)):
        if state[i] == 0:
            visit(i)
    return [steps[i] for i in order]


def _last_uses(steps: list, out: Node) -> dict:
    """step index -> nodes read for the last time there (never the graph outputs)."""
    keep = set(out.all_input_nodes)
    last = {}
    for i, s in enumerate(steps):
        reads = [a for a in s.match.args if isinstance(a, Node)] if s.kind == "library" else \
            [a for n in s.nodes for a in member_inputs(n)]
        for a in reads:
            last[a] = i
    res: dict = {}
    for n, i in last.items():
        if n not in keep and n.op != "placeholder":
            res.setdefault(i, []).append(n)
    return res
