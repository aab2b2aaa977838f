"""The fused gated MLP, silu(x @ w_gate.T) * (x @ w_up.T), on stdlib_kernels/linear.tile.

One `gated_mlp` kernel (both products share each x tile; g and u never reach memory) with tiles from
tilex.autoconfig's model over linear's `_GATED_SPACE`, `gated_mlp_persistent` for its 128x128 4-stage tile at
M > 64 on the GPU. `_SWAP` (off until timed on the GPU) takes decode sizes (M <= 16, as linear's swap path) as
two `linear_swap_splitk` launches into f32 partials, with the weight rows on the tensor cores' 64-row side,
and `gated_sum` (silu(g) * u): the padded 64-row x tile of `gated_mlp` is what limits it at M = 1 (H200 sweep,
session 23: 77.6 us at K=3584 N=18944 where cuBLAS's two products take 72.7), while `linear_swap` streams the
lm_head at 4.3 TB/s; predicted ~68 us there.
"""
from __future__ import annotations

from . import _launch as L
from . import linear as Lm
from . import messages as M

_SWAP = False  # decode sizes through linear_swap_splitk + gated_sum (not yet timed on a GPU: off)


def _swap_partials(x2, w_gate, w_up, y, dt: str, m: int, n: int, k: int) -> None:
    """y = silu(x2 @ w_gate.T) * (x2 @ w_up.T) as two swapped-operand products into f32 [1, m, n] partials and
    their gated sum (three launches; the partials are 8 m n bytes, small next to the 4 n k bytes of weights)."""
    cfg = Lm._tuned("linear_swap_splitk", dt, m, n, k, Lm._swap_config(n), S=1)
    mod = L.load("linear", kernel="linear_swap_splitk", T=dt, **cfg)
    parts = []
    for w in (w_gate, w_up):
        part = L.empty(x2, (1, m, n), "f32")
        L.run(mod, "linear_swap_splitk", x2, L.contiguous(w), part)
        parts.append(part)
    L.run(L.load("linear", kernel="gated_sum", T=dt), "gated_sum", *parts, y)


@L.fastpath
def gated_mlp(x, w_gate, w_up):
    """silu(x @ w_gate.T) * (x @ w_up.T) in one kernel (the Llama/Qwen MLP before down_proj); x [..., in]."""
    dt = L.check_float("x", x)
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        L.check_rank(name, w, ndim=2)
        L.check_same_dtype(name, w, dt)
    x2, m, k = Lm._flatten(x)
    n = int(w_gate.shape[0])
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        if tuple(int(s) for s in w.shape) != (n, k):
            raise ValueError(M.gated_weight(name, n, k, w.shape))
    if k % 8:
        raise ValueError(M.gated_k(k))
    if k == 0:  # silu(0) * 0
        return L.reshape(L.full(x2, (m, n), 0.0), tuple(x.shape[:-1]) + (n,))
    y = L.empty(x2, (m, n))
    gpu = L.kind_of(x2) != "numpy"
    if m and n and _SWAP and Lm._use_swap(m, k, gpu):
        _swap_partials(x2, w_gate, w_up, y, dt, m, n, k)
    elif m and n:
        kernel = "gated_mlp"
        cfg = Lm._tuned(kernel, dt, m, n, k, Lm._model_config(kernel, dt, m, n, k, Lm._GATED_SPACE,
                                                              Lm._config(m, Lm._GATED_SKINNY, Lm._GATED, Lm._GATED)))
        if gpu and m > 64 and cfg == Lm._GATED and Lm._PERSISTENT:
            kernel, cfg = "gated_mlp_persistent", dict(cfg, PROGRAMS=L.sm_count(x2))
        mod = L.load("linear", kernel=kernel, T=dt, **cfg)
        L.run(mod, kernel, x2, L.contiguous(w_gate), L.contiguous(w_up), y)
    return L.reshape(y, tuple(x.shape[:-1]) + (n,))
