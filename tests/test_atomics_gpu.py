"""GPU: atomics under heavy collision, masked stores/loads and checked scatters against the interpreter.

Run: pytest -m gpu tests/test_atomics_gpu.py. The programs are test_atomics.py's; outputs start from
random or poisoned values. Integer atomics and max/min are exact; float sums differ by their order
(stated tolerances); xchg and cas must leave one of the colliding values. Each test runs its body in a
fresh Python process (`isolated`): a kernel fault leaves the CUDA context unusable, and it must fail
that test only, not every one after it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex

from test_atomics import (DISTINCT, GROUP_NORM, HIST, MASKED, MASKED_2D, OPS, ROWSUM, SCATTER_ADD, SPLITK,
                          SPLITK_WGMMA, _ops_inputs,
                          group_norm_reference)

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent


def isolated(body, *args) -> None:
    """Run `body(*args)` (a function of this module) in a fresh Python process; fail with its output."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_atomics_gpu as t; t.{body.__name__}(*{args!r})"
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


def both(src, name, **args):
    """Run kernel `name` on the GPU and in the interpreter from the same arguments (by parameter name;
    arrays are copied to each): ({name: gpu result}, {name: interpreter result})."""
    cp = pytest.importorskip("cupy")
    mod = tilex.compile(src)
    dev = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    getattr(mod, name)(**dev)
    cp.cuda.Device().synchronize()
    host = {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    mod.interp(name, **host)
    return {k: cp.asnumpy(v) for k, v in dev.items() if not np.isscalar(v)}, host


def _histogram_heavy_collision_gpu():
    r = np.random.default_rng()
    for n, k in ((1 << 20, 7), (100_003, 1), (5003, 300)):  # up to 150k hits per bin
        ids = r.integers(-3, k + 3, size=n).astype(np.int32)
        counts = r.integers(0, 5, size=k).astype(np.int32)
        g, h = both(HIST, "hist", ids=ids, counts=counts)
        np.testing.assert_array_equal(g["counts"], h["counts"])


def _scatter_add_gpu():
    r = np.random.default_rng()
    n, k, d = 4099, 5, 45  # packed pairs where aligned and inside, single adds elsewhere
    ids = r.integers(-1, k + 1, size=n).astype(np.int32)
    x = r.standard_normal((n, d)).astype(np.float32)
    y = r.standard_normal((k, d)).astype(np.float32)
    yb, yh = np.zeros((k, d), ml_dtypes.bfloat16), np.zeros((k, d), np.float16)
    g, h = both(SCATTER_ADD, "scatter_add", ids=ids, x=x, y=y, yb=yb, yh=yh)
    np.testing.assert_allclose(g["y"], h["y"], rtol=1e-4, atol=1e-2)  # ~680 f32 additions per element, any order
    scale = np.abs(h["yb"].astype(np.float32)).max()
    assert np.abs(g["yb"].astype(np.float32) - h["yb"].astype(np.float32)).max() <= 0.1 * scale + 1.0  # 8 bits
    assert np.abs(g["yh"].astype(np.float32) - h["yh"].astype(np.float32)).max() <= 0.02 * scale + 0.5


def _splitk_gpu():
    r = np.random.default_rng()
    m, n, k = 67, 93, 301
    a, b = r.standard_normal((m, k)).astype(np.float32), r.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), 0.0, np.float32)
    g, h = both(SPLITK, "splitk", a=a, b=b, c=c)
    np.testing.assert_allclose(g["c"], h["c"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(g["c"], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


def _splitk_wgmma_gpu():
    r = np.random.default_rng()
    m, n, k = 300, 200, 1000  # edge tiles in m and n, 4 splits of 256 (the last short)
    a = r.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    g, h = both(SPLITK_WGMMA, "splitk_wgmma", a=a, b=b, c=np.zeros((m, n), np.float32),
                cb=np.zeros((m, n), ml_dtypes.bfloat16))
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(g["c"], ref, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(g["c"], h["c"], rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(g["cb"].astype(np.float64), ref, rtol=0.05, atol=1.0)


def _max_min_xchg_cas_gpu():
    ids, v, vi, o = _ops_inputs(None, n=50_003, k=11)  # ~4500 hits per bin
    g, h = both(OPS, "ops", ids=ids, v=v, vi=vi, **o)
    for name in ("mx", "mn", "mi", "ni"):
        np.testing.assert_array_equal(g[name], h[name], err_msg=name)
    assert np.signbit(g["mx"]).tolist() == np.signbit(h["mx"]).tolist()
    pos = np.arange(len(ids))
    for j in range(len(o["ex"])):
        hits = pos[ids == j]
        assert g["ex"][j] in (set(hits.tolist()) or {-7})  # one of the colliding writes
        assert g["owner"][j] in (set((hits // 128).tolist()) or {-1})  # one program claimed the bin
    np.testing.assert_allclose(g["total"], h["total"], rtol=1e-4)


def _atomic_of_replicated_tile_counts_once_gpu():
    r = np.random.default_rng()
    m, c, k = 1001, 64, 3
    x = r.standard_normal((m, c)).astype(np.float32)
    ids = r.integers(0, k, size=m).astype(np.int32)
    g, h = both(ROWSUM, "rowsum", x=x, ids=ids, out_=np.zeros(k, np.float32), out2=np.zeros(k, np.float32))
    np.testing.assert_allclose(g["out_"], h["out_"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(g["out2"], h["out2"], rtol=1e-4, atol=1e-3)


def _masked_store_load_gpu(n):
    r = np.random.default_rng()
    x = r.standard_normal(n).astype(np.float32)
    y, z, w = (np.full(n, np.nan, np.float32) for _ in range(3))
    g, h = both(MASKED, "masked", x=x, lim=0.3, y=y, z=z, w=w)
    for name in "yzw":
        np.testing.assert_array_equal(g[name], h[name])


def _masked_2d_and_distinct_scatter_gpu():
    r = np.random.default_rng()
    m, n = 77, 131
    x = r.standard_normal((m, n)).astype(ml_dtypes.bfloat16)
    keep = r.random(n) < 0.5
    g, h = both(MASKED_2D, "masked2d", x=x, keep=keep, y=np.full((m, n), np.nan, ml_dtypes.bfloat16))
    np.testing.assert_array_equal(g["y"].astype(np.float32), h["y"].astype(np.float32))
    p = r.permutation(1000).astype(np.int32)
    xs = r.standard_normal(1000).astype(np.float32)
    g, h = both(DISTINCT, "perm", p=p, x=xs, y=np.zeros(1000, np.float32))
    np.testing.assert_array_equal(g["y"], h["y"])


def _group_norm_masked_store_gpu():
    cp = pytest.importorskip("cupy")
    r = np.random.default_rng()
    m, c, g = 37, 276, 4  # 69 columns per group
    x = (r.standard_normal((m, c)) * 3 + 1).astype(np.float32)
    w, b = r.standard_normal(c).astype(np.float32), r.standard_normal(c).astype(np.float32)
    y = cp.full((m, c), np.nan, np.float32)
    tilex.compile(GROUP_NORM, G=g, BLOCK=128).group_norm(cp.asarray(x), cp.asarray(w), cp.asarray(b), y)
    np.testing.assert_allclose(cp.asnumpy(y), group_norm_reference(x, w, b, g), rtol=1e-4, atol=1e-4)


# ---- the tests: each body in its own process
def test_histogram_heavy_collision_gpu():
    isolated(_histogram_heavy_collision_gpu)


def test_scatter_add_gpu():
    isolated(_scatter_add_gpu)


def test_splitk_gpu():
    isolated(_splitk_gpu)


def test_splitk_wgmma_gpu():
    isolated(_splitk_wgmma_gpu)


def test_max_min_xchg_cas_gpu():
    isolated(_max_min_xchg_cas_gpu)


def test_atomic_of_replicated_tile_counts_once_gpu():
    isolated(_atomic_of_replicated_tile_counts_once_gpu)


@pytest.mark.parametrize("n", [1, 63, 1001, 65537])
def test_masked_store_load_gpu(n):
    isolated(_masked_store_load_gpu, n)


def test_masked_2d_and_distinct_scatter_gpu():
    isolated(_masked_2d_and_distinct_scatter_gpu)


def test_group_norm_masked_store_gpu():
    isolated(_group_norm_masked_store_gpu)
