"""Row normalizations over the last axis: rms_norm, fused_add_rms_norm, layer_norm."""
from __future__ import annotations

from ..types import DType
from . import _launch as L
from . import messages as M
from . import rows as model


def _rows(name, x):
    """x as a contiguous [M, N] view, and its dtype."""
    dt = L.check_float(name, x)
    x = L.contiguous(x)
    n = int(x.shape[-1])
    m = 1
    for d in x.shape[:-1]:
        m *= int(d)
    if n == 0:
        raise ValueError(M.empty_rows(name, x.shape))
    return L.reshape(x, (m, n)), dt, m, n


def _vector(name, v, n, dt, like, fill):
    if v is None:
        return L.full(like, (n,), fill, dt)
    L.check_float(name, v, ndim=1)
    L.check_same_dtype(name, v, dt)
    L.check_shape(name, v, (n,))
    L.kind_of(like, v)
    return L.contiguous(v)


@L.fastpath
def rms_norm(x, weight=None, eps: float = 1e-6):
    """RMSNorm over the last axis: x / sqrt(mean(x**2) + eps) * weight (like F.rms_norm).

    x: [..., N] f32/f16/bf16; weight: [N] of the same dtype (None = no scaling). Returns a
    new array of x's kind, dtype and shape. Statistics are computed in f32.
    """
    x2, dt, m, n = _rows("x", x)
    w = _vector("weight", weight, n, dt, x2, 1.0)
    y = L.empty(x2, (m, n))
    name, cfg = model.plan("rms_norm", n, m, DType(dt).itemsize, L.sm_count(x2), prefetch=dt == "bf16")
    mod = L.load("rms_norm", kernel=name, T=dt, **cfg)
    L.run(mod, name, *_pieces_view(name, cfg, m, n, x2, w, y), eps=L.check_number("eps", eps))
    return L.reshape(y, tuple(x.shape))


def _pieces_view(name: str, cfg: dict, m: int, n: int, *arrays):
    """The arrays as the kernel `name` takes them: as they are, or (a `_k2` pieces kernel, see rows.py)
    [m, n] ones as [m * K, W] and [n] ones as [K, W]."""
    if not name.endswith("_k2"):
        return arrays
    w = cfg["W"]
    k = n // w
    return tuple(L.reshape(a, (m * k, w) if len(a.shape) == 2 else (k, w)) for a in arrays)


@L.fastpath
def fused_add_rms_norm(x, residual, weight=None, eps: float = 1e-6, inplace: bool = False):
    """h = x + residual; returns (rms_norm(h, weight, eps), h), as vLLM's fused_add_rms_norm.

    h is rounded to x's dtype before the norm (as when it is stored). With inplace=True the
    normed output overwrites x and h overwrites residual, and (x, residual) are returned.
    """
    x2, dt, m, n = _rows("x", x)
    L.check_float("residual", residual)
    L.check_same_dtype("residual", residual, dt)
    L.check_shape("residual", residual, tuple(x.shape))
    L.kind_of(x, residual)
    r2 = L.reshape(L.contiguous(residual), (m, n))
    w = _vector("weight", weight, n, dt, x2, 1.0)
    if inplace:
        if not _is_contig(x) or not _is_contig(residual):
            raise ValueError(M.FUSED_ADD_INPLACE_CONTIGUOUS)
        name, cfg = model.plan("fused_add_rms_norm", n, m, DType(dt).itemsize, L.sm_count(x2), prefetch=False)
        if name.endswith("_k2"):  # a row per program, as below, in two power-of-two pieces (rows.py)
            cfg = {k: cfg[k] for k in ("W", "P1", "P2", "WARPS")}
            name = "fused_add_rms_norm_inplace_k2"
            mod = L.load("fused_add_rms_norm", kernel=name, T=dt, **cfg)
            L.run(mod, name, *_pieces_view(name, cfg, m, n, x2, r2, w), eps=L.check_number("eps", eps))
            return x, residual
        cfg = L.row_config(n, m, L.sm_count(x2))
        # a row per program: the kernel writes x and residual, so its loads are not streamed
        cfg = dict(BLOCK=cfg["BLOCK"], ONE_PASS=cfg["ONE_PASS"], WARPS=min(32, max(1, cfg["BLOCK"] // 256)))
        mod = L.load("fused_add_rms_norm", kernel="fused_add_rms_norm_inplace", T=dt, **cfg)
        L.run(mod, "fused_add_rms_norm_inplace", x2, r2, w, eps=L.check_number("eps", eps))
        return x, residual
    name, cfg = model.plan("fused_add_rms_norm", n, m, DType(dt).itemsize, L.sm_count(x2), prefetch=dt == "bf16")
    if cfg["STAGES"] == 1 and name == "fused_add_rms_norm" and dt == "bf16" and not cfg.get("PREFETCH"):
        # one-pass rows straight into registers (rows.py): x's and residual's loads in flight together.
        # sweep_rows.py on an H200 (2026-11-30, bf16 16384x4096): 0.1313 ms (97% of copy; torch.compile
        # 0.1357) against 0.143-0.146 for the persistent ring configs. bf16 without a register cap (64
        # registers, 4 CTAs per SM either way, 283 SASS instructions per row against 299 capped); f16/f32
        # keep row_config's MIN_BLOCKS: uncapped, f32 takes 70-73 registers (3 CTAs per SM at 8 warps, 1
        # at 16) and f16 spills at BLOCK 8192
        cfg["MIN_BLOCKS"] = 0
    # (a PREFETCH grid keeps the model's MIN_BLOCKS: its PROGRAMS are that many resident blocks per SM)
    y = L.empty(x2, (m, n))
    r_out = L.empty(x2, (m, n))
    mod = L.load("fused_add_rms_norm", kernel=name, T=dt, **cfg)
    L.run(mod, name, *_pieces_view(name, cfg, m, n, x2, r2, w, y, r_out), eps=L.check_number("eps", eps))
    return L.reshape(y, tuple(x.shape)), L.reshape(r_out, tuple(x.shape))


def _is_contig(x) -> bool:
    from ..runtime.args import describe_array

    return describe_array(x).c_contiguous


@L.fastpath
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    """LayerNorm over the last axis (like F.layer_norm(x, (N,), weight, bias, eps)).

    x: [..., N]; weight, bias: [N] of x's dtype or None. Biased variance, f32 statistics.
    """
    x2, dt, m, n = _rows("x", x)
    w = _vector("weight", weight, n, dt, x2, 1.0)
    b = _vector("bias", bias, n, dt, x2, 0.0)
    y = L.empty(x2, (m, n))
    name, cfg = model.plan("layer_norm", n, m, DType(dt).itemsize, L.sm_count(x2), prefetch=dt == "bf16")
    if not name.endswith("_k2"):  # (rows.TRAITS caps layer_norm's ring at 2 stages: 3 spilled at BLOCK 4096 and 16384)
        cfg["EXACT"] = cfg["ONE_PASS"] and cfg["BLOCK"] == n  # rows exactly BLOCK wide need no column mask
    mod = L.load("layer_norm", kernel=name, T=dt, **cfg)
    L.run(mod, name, *_pieces_view(name, cfg, m, n, x2, w, b, y), eps=L.check_number("eps", eps))
    return L.reshape(y, tuple(x.shape))
