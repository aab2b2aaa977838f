"""Embedding lookup."""
from __future__ import annotations

from . import _launch as L
from . import rows as model


@L.fastpath
def embedding(ids, table):
    """table[ids] (like F.embedding(ids, table)): ids any shape of int32/int64, table [V, D].

    Returns [*ids.shape, D] in table's dtype. An id outside [0, V) gives a row of zeros
    (on the GPU there is no device-side error as in torch).
    """
    dt = L.check_float("table", table, ndim=2)
    idt = L.check_int("ids", ids)
    L.kind_of(ids, table)
    table = L.contiguous(table)
    ids_c = L.contiguous(ids)
    s = 1
    for n in ids.shape:
        s *= int(n)
    v, d = (int(n) for n in table.shape)
    y = L.empty(table, (s, d))
    if s and d:
        cfg = model.column_config(d, s, L.sm_count(table), rows_in_warps=False, many_elems=model.MANY_ELEMS)
        mod = L.load("embedding", T=dt, I=idt, **cfg)
        L.run(mod, "embedding", L.reshape(ids_c, (s,)), table, y)
    return L.reshape(y, tuple(ids.shape) + (d,))
