"""Embedding lookup."""
from __future__ import annotations

from . import _launch as L


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
        block, rows, warps = embedding_config(s, d)
        mod = L.load("embedding", T=dt, I=idt, BLOCK=block, ROWS=rows, WARPS=warps)
        L.run(mod, "embedding", L.reshape(ids_c, (s,)), table, y)
    return L.reshape(y, tuple(ids.shape) + (d,))


def embedding_config(s: int, d: int) -> tuple[int, int, int]:
    """(BLOCK, ROWS, WARPS) for s tokens of d columns: a [ROWS, BLOCK] tile per program, up to
    4 16-byte chunks per thread (ROWS * BLOCK <= 4 * 8 * 32 * WARPS elements), all loaded
    before the stores, while at least 4 programs per SM remain (132 SMs: 528).

    D=4096: BLOCK=2048 ROWS=4 WARPS=8 (previously ROWS=1: one 16-byte load per thread, after the
    id's; H200 0.0730 ms at T=16384). A guess to sweep on the GPU: `tilex tune` over ROWS=1,2,4,8.
    """
    block = min(2048, max(8, L.next_pow2(d)))
    warps = max(1, min(8, block // 256))
    rows = 1
    while rows < 8 and 2 * rows * block <= 1024 * warps and s >= rows * 2 * 528:
        rows *= 2
    return block, rows, warps
