"""Top-k along the last axis of rows longer than a tile (stdlib_kernels/topk.tile): per-chunk, then merges."""
from __future__ import annotations

from . import _launch as L
from . import messages as M

MAX_K = 1024  # a chunk's top-k is a sort of at least 2K elements in registers
CHUNK = 4096  # elements of x one program sorts (a [4096] tile: 16 (value, index) pairs a thread at 8 warps)


def plan(v: int, k2: int) -> tuple[int, list[int]]:
    """(the first pass's chunk, the merges' chunks in order) for rows of `v` and a power-of-two k2:
    each merge takes C >= 2 k2 workspace entries (a multiple of k2; 4 k2 when that is more than CHUNK, so a
    large k2 shrinks the workspace 4x per merge) to their top k2."""
    ch = min(max(CHUNK, 2 * k2), max(k2, L.next_pow2(v)))
    width = -(-v // ch) * k2
    merges = []
    while width > k2:
        c = min(max(CHUNK, 4 * k2), L.next_pow2(width))
        merges.append(c)
        width = -(-width // c) * k2
    return ch, merges


def _warps(n: int) -> int:
    return max(1, min(8, n // 256))


@L.fastpath
def topk(x, k: int):
    """The k largest of each row of x [..., V] and their int64 indices, in order (like
    `torch.topk(x, k, dim=-1)`): NaN counts as the largest, ties go to the lower index. f32, f16, bf16."""
    dt = L.check_float("x", x)
    v = int(x.shape[-1])
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= v:
        raise ValueError(M.bad_topk_k(k, v))
    if k > MAX_K:
        raise ValueError(M.topk_too_large(k, MAX_K))
    lead = tuple(int(n) for n in x.shape[:-1])
    b = 1
    for n in lead:
        b *= n
    x2 = L.reshape(L.contiguous(x), (b, v))
    k2 = L.next_pow2(k)
    ch, merges = plan(v, k2)
    if b == 0:
        return L.empty(x, lead + (k,)), L.empty(x, lead + (k,), "i64")
    width = -(-v // ch) * k2
    final = not merges  # one chunk: its top-k is the result

    def outs(w: int, last: bool):
        shape = (b, k) if last else (b, w)
        return L.empty(x, shape), L.empty(x, shape, "i64" if last else "i32")

    val, idx = outs(width, final)
    mod = L.load("topk", kernel="topk_chunks", T=dt, I="i64" if final else "i32", CH=ch, K=k2, WARPS=_warps(ch))
    L.run(mod, "topk_chunks", x2, val, idx)
    for i, c in enumerate(merges):
        last = i == len(merges) - 1
        w2 = -(-width // c) * k2
        oval, oidx = outs(w2, last)
        mod = L.load("topk", kernel="topk_merge", T=dt, I="i64" if last else "i32", C=c, K=k2, WARPS=_warps(c))
        L.run(mod, "topk_merge", val, idx, oval, oidx)
        val, idx, width = oval, oidx, w2
    return L.reshape(val, lead + (k,)), L.reshape(idx, lead + (k,))
