"""The fast path's pure pieces (tilex.stdlib._launch.fastpath): a tensor's byte extent, and the result templates
`_finish` records: which arguments they return, and the function that rebuilds a result from (args, outs)."""
from __future__ import annotations

import operator


def _extent(t) -> int:
    """Bytes from a tensor's address to one past its last element (0 when it has none)."""
    shape, stride = tuple(t.shape), tuple(t.stride())
    if any(int(n) == 0 for n in shape):
        return 0
    return (sum((int(n) - 1) * int(s) for n, s in zip(shape, stride)) + 1) * int(t.element_size())


class _NoReplay(Exception):
    pass


def _inputs_of(t):
    """The argument positions a `_finish` template returns."""
    if t[0] == "in":
        yield t[1]
    elif t[0] in (tuple, list):
        for x in t[1]:
            yield from _inputs_of(x)


def _builder(t):
    """(args, outs) -> the wrapper's result, from a `_finish` template."""
    kind = t[0]
    if kind == "none":
        return lambda args, outs: None
    if kind == "in":
        i = t[1]
        return lambda args, outs: args[i]
    if kind == "out":
        j = t[1]
        return lambda args, outs: outs[j]
    if kind is tuple and len(t[1]) > 1 and all(x[0] == "out" for x in t[1]):  # (q, k, v), (y, h): one C call
        pick = operator.itemgetter(*(x[1] for x in t[1]))
        return lambda args, outs: pick(outs)
    parts = tuple(_builder(x) for x in t[1])
    if kind is tuple:
        return lambda args, outs: tuple(b(args, outs) for b in parts)
    return lambda args, outs: [b(args, outs) for b in parts]
