"""The K-split decode GEMMs (stdlib/swap_split.py) on the GPU: `linear` and `linear_add_rms_norm` at shapes where
the model splits (and one where it does not) against float32 torch on fresh random data, and against the same
call with the split turned off (S = 1): the split only reorders the f32 sums (the tensor cores' accumulation
error, ~1e-3 of a 18944-term sum, can move a small output by several bf16 steps: session 25 on the H200), so
each result's error against float32 torch stays within 1.25x the unsplit call's (+ 1e-3)."""
from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import tilex.stdlib as S  # noqa: E402

swap_split = importlib.import_module("tilex.stdlib.swap_split")
SHAPES = [(1, 3584, 512), (16, 3584, 512), (1, 4096, 1024), (3, 2816, 1024), (1, 18944, 3584), (5, 1024, 256),
          (1, 3584, 3584)]


def _unsplit(monkeypatch, fn):
    """fn() with the split off; the fast path's memoized launches (the split ones, recorded by the first call)
    cleared before and after, so the call runs the wrapper again."""
    from tilex.stdlib import _launch as L

    with monkeypatch.context() as mp:
        mp.setattr(swap_split, "shares", lambda *a, **k: 1)
        L.clear_fastpath()
        try:
            return fn()
        finally:
            L.clear_fastpath()


def _err(got, ref) -> float:
    return float((got.float() - ref).abs().max() / ref.abs().max())


@pytest.mark.gpu
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_split_linear_matches_torch_and_the_unsplit_call(m, k, n, bias, monkeypatch):
    g = torch.Generator("cuda").manual_seed(m * 7 + k + n)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(torch.bfloat16)
    b = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if bias else None
    from tilex.stdlib import _launch as L

    L.clear_fastpath()
    y = S.linear(x, w, b)
    ref = torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float())
    err = _err(y, ref)
    assert err < 8e-3, err
    y1 = _unsplit(monkeypatch, lambda: S.linear(x, w, b))
    assert err <= 1.25 * _err(y1, ref) + 1e-3, (err, _err(y1, ref))


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,n", [(1, 2816, 1024), (2, 18944, 3584), (1, 4096, 1024)])
def test_split_partials_feed_the_fused_add_rms_norm(m, k, n, monkeypatch):
    g = torch.Generator("cuda").manual_seed(m + k + n)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(torch.bfloat16)
    r = torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)
    nw = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    y, h = S.linear_add_rms_norm(x, w, r, nw, 1e-6)
    href = torch.nn.functional.linear(x.float(), w.float()) + r.float()
    yref = href * torch.rsqrt(href.pow(2).mean(-1, keepdim=True) + 1e-6) * nw.float()
    assert _err(h, href) < 8e-3 and _err(y, yref) < 1.6e-2, (_err(h, href), _err(y, yref))
    y1, h1 = _unsplit(monkeypatch, lambda: S.linear_add_rms_norm(x, w, r, nw, 1e-6))
    assert _err(h, href) <= 1.25 * _err(h1, href) + 1e-3 and _err(y, yref) <= 1.25 * _err(y1, yref) + 1e-3
