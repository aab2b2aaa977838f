"""The programs of the atomics that return old values (`old = atomic_add(...)`), shared by
tests/test_atomics_old.py (interpreter, errors, nvcc) and tests/test_atomics_old_gpu.py (the H200), with the
checks that hold for any valid execution order of their colliding atomics."""
from __future__ import annotations

import numpy as np

# every lane of every program takes a ticket from one counter: the olds are a permutation of 0..n-1
TICKET = """
kernel ticket<B: int = 256>(counter: out i32[1], slots: out i32[N], big: out i64[1], bigslots: out i64[N])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    lanes = arange(i, i + B)
    slot = atomic_add(counter[zeros(i32[B]), mask = lanes < N, other = -1], 1)
    slots[i : i + B] = slot
    wide = atomic_add(big[zeros(i32[B]), mask = lanes < N, other = -1], full(i64[B], 3))
    bigslots[i : i + B] = wide
}
"""

# the max of f32 values given as their int bits, by a compare-and-swap loop: key() orders the bits as the floats
CAS_MAX = """
fn key(b) {
    return b ^ ((b >> 31) & 2147483647)
}

kernel cas_max<B: int = 128, ROUNDS: int = 64>(xb: i32[N], best: out i32[1], left: out i32[P])
    where P >= cdiv(N, B)
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    mine = xb[i : i + B, other = -2147483648]
    z = zeros(i32[B])
    cur = best[z]
    pending = (arange(i, i + B) < N) & (key(mine) > key(cur))
    for r in range(0, ROUNDS) {
        old = atomic_cas(best[z, mask = pending, other = 0], cur, mine)
        pending = pending & (old != cur) & (key(mine) > key(old))
        cur = where(pending, old, cur)
    }
    left[program_id(0)] = sum(pending.to(i32))
}
"""

# split-K with the last program of each output tile doing the sum: partials to a workspace, fence(), a ticket per
# tile; the one that draws SPLIT - 1 adds them up (in split order, so the sum is deterministic) and resets the count
LAST_DONE = """
kernel splitk_last<BM: int = 32, BN: int = 32, BK: int = 64, SPLIT: int = 4>(
    a: f32[M, K], b: f32[K, N], ws: out f32[SPLIT, M, N], count: out i32[T], c: out f32[M, N])
    where T >= cdiv(M, BM) * cdiv(N, BN), K <= SPLIT * BK
    grid (cdiv(M, BM), cdiv(N, BN), SPLIT)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    s = program_id(2)
    k = s * BK
    ws[s, m : m + BM, n : n + BN] = a[m : m + BM, k : k + BK] @ b[k : k + BK, n : n + BN]
    fence()
    tile = program_id(0) * cdiv(N, BN) + program_id(1)
    done = atomic_add(count[tile], 1)
    if done == SPLIT - 1 {
        fence()
        acc = zeros(f32[BM, BN])
        for j in range(0, SPLIT) {
            acc += ws[j, m : m + BM, n : n + BN]
        }
        c[m : m + BM, n : n + BN] = acc
        count[tile] = 0
    }
}
"""

# a lock-free hash set: each lane claims a slot of `table` for its key by compare-and-swap from -1 (empty), probing
# linearly; a lane is done when the slot held -1 (claimed) or its own key (inserted by another lane)
SLOT_CLAIM = """
kernel claim<B: int = 128, ROUNDS: int = 32>(keys: i32[N], table: out i32[T], where_: out i32[N], left: out i32[P])
    where P >= cdiv(N, B)
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    k = keys[i : i + B]
    slot = (k * 7919) % T
    pending = arange(i, i + B) < N
    at = full(i32[B], -1)
    for r in range(0, ROUNDS) {
        old = atomic_cas(table[slot, mask = pending, other = -2], -1, k)
        got = pending & ((old == -1) | (old == k))
        at = where(got, slot, at)
        pending = pending & (got == False)
        slot = where(pending, (slot + 1) % T, slot)
    }
    where_[i : i + B] = at
    left[program_id(0)] = sum(pending.to(i32))
}
"""

# every atomic op and dtype with a result, on tiles (2-byte adds as packed pairs) and scalars
OPS_OLD = """
kernel ops_old<B: int = 64, D: int = 32>(ids: i32[R], x: f32[R, C], ya: out f32[K, C], yb: out bf16[K, C],
                                         yh: out f16[K, C], mx: out f32[K], mi: out i32[K], xi: out i32[K],
                                         oa: out f32[R, C], ob: out bf16[R, C], oh: out f16[R, C],
                                         omx: out f32[R], omi: out i32[R], oxi: out i32[R], first: out i32[1],
                                         ofirst: out i32[P])
    where C == D
    grid (cdiv(R, B),)
{
    i = program_id(0) * B
    t = ids[i : i + B, other = -1]
    rows = x[i : i + B, 0 : D]
    va = atomic_add(ya[t, 0 : D, other = -7.0], rows)
    oa[i : i + B, 0 : D] = va
    vb = atomic_add(yb[t, 0 : D, other = -7.0], rows.to(bf16))
    ob[i : i + B, 0 : D] = vb
    vh = atomic_add(yh[t, 0 : D, other = -7.0], rows.to(f16))
    oh[i : i + B, 0 : D] = vh
    col = x[i : i + B, 0]
    vm = atomic_max(mx[t, other = -7.0], col)
    omx[i : i + B] = vm
    vi = atomic_min(mi[t, other = -7], arange(i, i + B))
    omi[i : i + B] = vi
    vx = atomic_xchg(xi[t, other = -7], arange(i, i + B))
    oxi[i : i + B] = vx
    f = atomic_cas(first[0], -1, program_id(0))
    ofirst[program_id(0)] = f
}
"""


def is_permutation(a: np.ndarray, n: int) -> bool:
    """True if `a` holds each of 0..n-1 exactly once."""
    return a.size == n and np.array_equal(np.sort(a), np.arange(n, dtype=a.dtype))


def key(bits: np.ndarray) -> np.ndarray:
    """The int order of f32 bits that is the float order (CAS_MAX's key())."""
    b = bits.astype(np.int32)
    return b ^ ((b >> 31) & np.int32(0x7FFFFFFF))


def check_ticket(counter, slots, big, bigslots, n) -> None:
    assert counter[0] == n and is_permutation(slots, n), (counter, slots[:20])
    assert big[0] == 3 * n and np.array_equal(np.sort(bigslots), 3 * np.arange(n, dtype=np.int64))


def check_cas_max(xb, best, left) -> None:
    assert not left.any(), f"{int(left.sum())} lanes still pending after the rounds"
    want = xb[np.argmax(key(xb))]
    assert best[0] == want, (best[0], want)


def check_claim(keys, table, where_, left) -> None:
    """Every distinct key sits in exactly one slot, each lane's slot holds its key, nothing else is taken."""
    assert not left.any(), f"{int(left.sum())} lanes still pending"
    assert (table[where_] == keys).all()
    taken = table[table != -1]
    assert np.array_equal(np.sort(taken), np.unique(keys))


def check_ops_olds(ids, x, start: dict, end: dict, serial: bool) -> None:
    """The olds of OPS_OLD against any serial order (serial=True: the interpreter's, element order)."""
    r, _ = x.shape
    inside = (ids >= 0) & (ids < len(start["mi"]))
    # xchg: per bin, the olds and the final value are the chain start -> the lanes' values in some order
    for j in range(len(start["xi"])):
        lanes = np.flatnonzero(ids == j)
        chain = sorted([int(start["xi"][j])] + lanes.tolist())
        got = sorted(end["oxi"][lanes].tolist() + [int(end["xi"][j])])
        assert got == chain, (j, got, chain)
        if serial and lanes.size:
            assert end["oxi"][lanes[0]] == start["xi"][j] and end["xi"][j] == lanes[-1]
    assert (end["oxi"][~inside] == -7).all() and (end["omi"][~inside] == -7).all()
    # min of the lane numbers: each old is >= the final min, and the old of the lane holding the min is >= it
    for j in range(len(start["mi"])):
        lanes = np.flatnonzero(ids == j)
        final = min([int(start["mi"][j])] + lanes.tolist())
        assert end["mi"][j] == final
        assert (end["omi"][lanes] >= final).all()
        if serial and lanes.size:
            assert end["omi"][lanes[0]] == start["mi"][j]
    # cas from -1: exactly one program saw -1 (it won), all the others saw the winner's id
    firsts = end["ofirst"]
    winners = np.flatnonzero(firsts == -1)
    assert winners.size == 1 and (firsts[firsts != -1] == winners[0]).all() and end["first"][0] == winners[0]
    # f32 add: each old is the bin's start plus a subset of the other lanes' rows; in element order exactly the
    # earlier ones (checked on the interpreter), on the GPU only the bounds of that subset
    for j in range(len(start["mx"])):
        lanes = np.flatnonzero(ids == j)
        if not lanes.size:
            continue
        olds = end["oa"][lanes].astype(np.float64)
        base = start["ya"][j].astype(np.float64)
        rows = x[lanes].astype(np.float64)
        if serial:
            want = base + np.concatenate([np.zeros((1, rows.shape[1])), np.cumsum(rows, axis=0)[:-1]])
            np.testing.assert_allclose(olds, want, rtol=1e-4, atol=1e-3)
        lo = base + np.minimum(rows, 0).sum(axis=0)
        hi = base + np.maximum(rows, 0).sum(axis=0)
        assert ((olds >= lo - 1e-2) & (olds <= hi + 1e-2)).all()
        np.testing.assert_allclose(end["ya"][j], base + rows.sum(axis=0), rtol=1e-4, atol=1e-3)
        mx_olds = end["omx"][lanes]
        assert (mx_olds <= end["mx"][j]).all() and end["mx"][j] == max(start["mx"][j], x[lanes, 0].max())
        for name, tol in (("ob", 0.02), ("oh", 2e-3)):  # 2-byte adds (packed pairs): start 0, rounded per add
            o = end[name][lanes].astype(np.float64)
            scale = np.abs(rows).sum(axis=0) + 1
            assert ((o >= np.minimum(rows, 0).sum(axis=0) - tol * scale) &
                    (o <= np.maximum(rows, 0).sum(axis=0) + tol * scale)).all(), name
            if serial:
                assert (o[0] == 0).all(), name
    assert (end["oa"][~inside] == -7.0).all() and (end["omx"][~inside] == -7.0).all()
    assert (end["ob"][~inside].astype(np.float32) == -7.0).all() and (end["oh"][~inside] == -7.0).all()
