"""matmul (a @ b with b stored [K, N], + bias: torch.mm / addmm / torch.matmul of a matrix) and bmm (torch.bmm, with
the second operand read in place when it is a transposed view), on stdlib_kernels/matmul.tile.

The tiles of the TMA kernels (`matmul`, `matmul_bias`, `bmm`, `bmm_nt`: K % 8 == 0, and N % 8 == 0 where b is
[K, N]) come from tilex.autoconfig's model over `SPACE`, memoized per shape (as linear's one-pass tiles); other
sizes take the `_any` kernels (cp.async + mma.sync, masked edges) with fixed tiles, and so does the interpreter.
"""
from __future__ import annotations

from . import _launch as L
from . import messages as M

SPACE = dict(BM=(16, 64, 128), BN=(64, 128, 256), BK=(64,), STAGES=(3, 4, 5, 6))
_ANY = dict(BM=64, BN=64, BK=32, STAGES=4)
_CPU = dict(BM=64, BN=64, BK=64, STAGES=2)   # the interpreter: tiles change no value
_CHOSEN: dict = {}


def _tiles(kernel: str, dt: str, sizes: dict, gpu: bool) -> dict:
    """`kernel`'s tiles at `sizes`: the model's choice over SPACE on the GPU (memoized), fixed ones otherwise."""
    if not gpu:
        return dict(_CPU, BM=16 if sizes["M"] <= 16 else 64)
    key = (kernel, dt, tuple(sorted(sizes.items())))
    hit = _CHOSEN.get(key)
    if hit is None:
        from ..autoconfig import choose

        hit = dict(choose(L.source("matmul"), "matmul.tile", kernel, sizes, "sm_90a", defines=dict(T=dt),
                          space=SPACE, tuned=False).defines)
        if len(_CHOSEN) >= 4096:
            _CHOSEN.clear()
        _CHOSEN[key] = hit
    return dict(hit)


def matmul_plan(dt: str, m: int, n: int, k: int, bias: bool, gpu: bool) -> tuple[str, dict]:
    """(kernel, tiles) `matmul` launches for [m, k] @ [k, n] (+ bias) (the backend's prewarm asks the same)."""
    fast = k % 8 == 0 and n % 8 == 0
    kernel = ("matmul" if fast else "matmul_any") + ("_bias" if bias else "")
    return kernel, _tiles(kernel, dt, dict(M=m, N=n, K=k), gpu) if fast else dict(_ANY, BM=16 if m <= 16 else 64)


def bmm_plan(dt: str, bb: int, m: int, n: int, k: int, b_transposed: bool, gpu: bool) -> tuple[str, dict]:
    """(kernel, tiles) `bmm` launches; `b_transposed`: b is the transpose of a contiguous [B, N, K]."""
    kernel = "bmm_nt" if k % 8 == 0 and b_transposed else "bmm" if k % 8 == 0 and n % 8 == 0 else "bmm_any"
    if kernel == "bmm_any":
        return kernel, dict(_ANY, BM=16 if m <= 16 else 64)
    return kernel, _tiles(kernel, dt, dict(B=bb, M=m, N=n, K=k), gpu)


@L.fastpath
def matmul(a, b, bias=None):
    """c = a @ b (+ bias) for a [..., K] and b [K, N] (row-major, as torch.matmul / addmm take them); [..., N]."""
    dt = L.check_float("a", a)
    L.check_rank("b", b, ndim=2)
    L.check_same_dtype("b", b, dt)
    k = int(a.shape[-1])
    if int(b.shape[0]) != k:
        raise ValueError(M.matmul_inner(k, b.shape))
    n = int(b.shape[1])
    m = 1
    for d in a.shape[:-1]:
        m *= int(d)
    a2, b = L.reshape(L.contiguous(a), (m, k)), L.contiguous(b)
    if bias is not None:
        L.check_same_dtype("bias", bias, dt)
        L.check_shape("bias", bias, (n,))
        bias = L.contiguous(bias)
    out_shape = tuple(a.shape[:-1]) + (n,)
    if k == 0 or not (m and n):  # an empty sum is zero (+ bias); kernels take empty operands only with empty grids
        c = L.full(a2, (m, n), 0.0)
        if bias is not None and m and n:
            c[...] = bias
        return L.reshape(c, out_shape)
    c = L.empty(a2, (m, n))
    kernel, cfg = matmul_plan(dt, m, n, k, bias is not None, L.kind_of(a2) != "numpy")
    mod = L.load("matmul", kernel=kernel, T=dt, **cfg)
    L.run(mod, kernel, *((a2, b, bias, c) if bias is not None else (a2, b, c)))
    return L.reshape(c, out_shape)


def _transposed_in_place(b) -> bool:
    """b [B, K, N] is the transpose of a contiguous [B, N, K] (k.transpose(-1, -2)): read in place by bmm_nt."""
    if int(b.shape[1]) < 2 or int(b.shape[2]) < 2:
        return False
    wt = _swap_last(b)
    return bool(wt.is_contiguous()) if hasattr(wt, "is_contiguous") else bool(wt.flags.c_contiguous)


def _swap_last(b):
    """b with its last two axes swapped: a view (torch, NumPy, CuPy)."""
    return b.transpose(1, 2) if hasattr(b, "is_contiguous") else b.swapaxes(1, 2)


@L.fastpath
def bmm(a, b):
    """c[z] = a[z] @ b[z] for a [B, M, K] and b [B, K, N] (torch.bmm); a b that is the transpose of a contiguous
    [B, N, K] (q @ k.transpose(-1, -2)) is read in place."""
    dt = L.check_float("a", a, ndim=3)
    L.check_rank("b", b, ndim=3)
    L.check_same_dtype("b", b, dt)
    bb, m, k = (int(d) for d in a.shape)
    if int(b.shape[0]) != bb or int(b.shape[1]) != k:
        raise ValueError(M.bmm_shapes(a.shape, b.shape))
    n = int(b.shape[2])
    if k == 0 or not (bb and m and n):
        return L.full(a, (bb, m, n), 0.0)
    a = L.contiguous(a)
    c = L.empty(a, (bb, m, n))
    kernel, cfg = bmm_plan(dt, bb, m, n, k, _transposed_in_place(b), L.kind_of(a) != "numpy")
    args = (a, _swap_last(b), c) if kernel == "bmm_nt" else (a, L.contiguous(b), c)  # bmm_nt: b's [B, N, K] in place
    L.run(L.load("matmul", kernel=kernel, T=dt, **cfg), kernel, *args)
    return c
