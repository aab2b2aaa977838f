"""rope_token (stdlib_kernels/rope.tile: all of a token's heads in one program) on the interpreter against the
float64 rotate-half reference, at head counts that are not powers of two (the padding rows masked) and a half
width that is not one (HALF 48 in a 64-wide tile)."""
import math

import numpy as np
import pytest

from test_stdlib import ref_rope
from tilex.stdlib import _launch as L


@pytest.mark.parametrize("s,hq,hk,half", [(5, 28, 4, 64), (3, 12, 2, 64), (2, 14, 2, 32), (3, 7, 3, 48), (1, 1, 1, 8)])
def test_rope_token_against_float64(s, hq, hk, half):
    rng = np.random.default_rng(s * 1000 + hq)
    r, theta = 2 * half, 1e6
    mod = L.load("rope", kernel="rope_token", T="f32", I="i32", QB=L.next_pow2(hq), KB=L.next_pow2(hk),
                 HALFB=L.next_pow2(half), WARPS=4)
    q = rng.standard_normal((s, hq, 2, half)).astype(np.float32)
    k = rng.standard_normal((s, hk, 2, half)).astype(np.float32)
    pos = rng.integers(0, 8192, s).astype(np.int32)
    qo, ko = np.full_like(q, np.nan), np.full_like(k, np.nan)
    L.run(mod, "rope_token", q, k, pos, qo, ko, nlog2=-2 * math.log2(theta) / r)
    # f32 angles up to 8192 rad: cos/sin to ~8192 * 2**-24 absolute
    for got, x, h in ((qo, q, hq), (ko, k, hk)):
        want = ref_rope(x.reshape(s, h, r).astype(np.float64), pos, theta, r)
        assert np.abs(got.reshape(s, h, r) - want).max() <= 2e-3


def test_rope_token_needs_every_head_in_its_tile():
    mod = L.load("rope", kernel="rope_token", T="f32", I="i32", QB=4, KB=2, HALFB=8, WARPS=1)
    q, k = np.zeros((1, 5, 2, 8), np.float32), np.zeros((1, 2, 2, 8), np.float32)
    with pytest.raises(Exception, match="HQ <= QB"):
        L.run(mod, "rope_token", q, k, np.zeros(1, np.int32), q.copy(), k.copy(), nlog2=-0.1)


@pytest.mark.gpu
@pytest.mark.parametrize("s,hq,hk,half,t", [(37, 28, 4, 64, "bf16"), (5, 12, 2, 64, "f32"), (9, 7, 3, 48, "f16")])
def test_rope_token_gpu_against_float64_and_interpreter(s, hq, hk, half, t):
    pytest.importorskip("cupy")
    rng = np.random.default_rng(s * 7 + hq)
    r, theta = 2 * half, 1e6
    np_dt = {"bf16": np.float32, "f32": np.float32, "f16": np.float16}[t]
    mod = L.load("rope", kernel="rope_token", T=t, I="i32", QB=L.next_pow2(hq), KB=L.next_pow2(hk),
                 HALFB=L.next_pow2(half), WARPS=4)
    q = rng.standard_normal((s, hq, 2, half)).astype(np.float32)
    k = rng.standard_normal((s, hk, 2, half)).astype(np.float32)
    pos = rng.integers(0, 8192, s).astype(np.int32)
    import torch
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}[t]
    qg, kg = torch.from_numpy(q).cuda().to(tdt), torch.from_numpy(k).cuda().to(tdt)
    qo, ko = torch.full_like(qg, float("nan")), torch.full_like(kg, float("nan"))
    nlog2 = -2 * math.log2(theta) / r
    L.run(mod, "rope_token", qg, kg, torch.from_numpy(pos).cuda(), qo, ko, nlog2=nlog2)
    torch.cuda.synchronize()
    tol = {"bf16": 2e-2, "f16": 4e-3, "f32": 2e-3}[t]  # the dtype's rounding of |x| <= ~5, plus f32 angles
    for got, x, h in ((qo, qg, hq), (ko, kg, hk)):
        want = ref_rope(x.float().cpu().numpy().reshape(s, h, r).astype(np.float64), pos, theta, r)
        g = got.float().cpu().numpy().reshape(s, h, r)
        assert np.abs(g - want).max() <= tol * max(1.0, np.abs(want).max())
    if t != "bf16":  # the interpreter holds bf16 as f32; f32/f16 run exactly its dtype
        qi, ki = np.full(q.shape, np.nan, np_dt), np.full(k.shape, np.nan, np_dt)
        L.run(mod, "rope_token", q.astype(np_dt), k.astype(np_dt), pos, qi, ki, nlog2=nlog2)
        assert np.abs(qo.float().cpu().numpy() - qi.astype(np.float32)).max() <= tol
        assert np.abs(ko.float().cpu().numpy() - ki.astype(np.float32)).max() <= tol
