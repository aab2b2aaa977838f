"""GPU cases of issue 22: the on-disk cubin cache under damage and concurrency, f8e4m3 scalars, and
kernels whose generated CUDA once failed to build (fp8 made in the body, abs of a bool).

Marked `gpu` (conftest skips them without CuPy and a device). Every launch is compared with NumPy.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import warnings

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.runtime import cache
from tilex.runtime.cache import CacheWarning

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng()


def _src(tag: str) -> str:
    # a unique kernel name per test run: a fresh cache key, so NVRTC really compiles
    return (f"kernel axpy_{tag}(x: f32[N], y: f32[N], z: out f32[N], a: f32)\n    grid (cdiv(N, 256),)\n{{\n"
            "    i = program_id(0) * 256\n    z[i : i + 256] = a * x[i : i + 256] + y[i : i + 256]\n}\n")


def _launch_and_check(src: str, cache_dir, n: int | None = None) -> None:
    import cupy as cp

    n = n or int(RNG.integers(1, 50_000))
    x, y = RNG.standard_normal(n, dtype=np.float32), RNG.standard_normal(n, dtype=np.float32)
    a = float(RNG.standard_normal())
    z = cp.empty(n, cp.float32)
    mod = tilex.compile(src, cache_dir=cache_dir)
    name = next(iter(mod.specs))
    getattr(mod, name)(cp.asarray(x), cp.asarray(y), z, a=a)
    np.testing.assert_allclose(cp.asnumpy(z), np.float32(a) * x + y, rtol=1e-6, atol=1e-6)


def _entries(d) -> list:
    return sorted(p for p in d.iterdir() if p.suffix == cache.SUFFIX)


def test_corrupted_cubin_is_rebuilt_through_nvrtc_and_relaunched(tmp_path):
    src = _src(os.urandom(4).hex())
    _launch_and_check(src, tmp_path)
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the sha256 in the header no longer matches
    entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="corrupt entry"):
        _launch_and_check(src, tmp_path)
    assert cache.read_entry(entry)[:4] == b"\x7fELF"  # rewritten with a good cubin


def test_valid_header_with_a_non_cubin_payload_is_rebuilt(tmp_path):
    src = _src(os.urandom(4).hex())
    _launch_and_check(src, tmp_path)
    (entry,) = _entries(tmp_path)
    cache.write_entry(entry, b"not a cubin at all" * 10)  # magic, version and sha256 all valid
    with pytest.warns(CacheWarning, match="not a cubin"):
        _launch_and_check(src, tmp_path)
    assert cache.read_entry(entry)[:4] == b"\x7fELF"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _launch_and_check(src, tmp_path)  # a clean hit now


def _compile_and_launch_worker(src: str, cache_dir: str, barrier, results) -> None:
    try:
        barrier.wait(60)
        _launch_and_check(src, cache_dir, n=12_345)
        results.put("ok")
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put(f"{type(e).__name__}: {e}")


def test_four_processes_compiling_through_nvrtc_at_once(tmp_path):
    src = _src(os.urandom(4).hex())
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_compile_and_launch_worker, args=(src, str(tmp_path), barrier, results))
             for _ in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    assert got == ["ok"] * 4, got
    (entry,) = _entries(tmp_path)
    assert cache.read_entry(entry)[:4] == b"\x7fELF"
    assert not [p for p in tmp_path.iterdir() if p.suffix != cache.SUFFIX]  # no temporary files left


def test_f8e4m3_scalar_parameter_launches_like_the_interpreter(tmp_path):
    import cupy as cp

    src = ("kernel scale8(x: f32[N], y: out f32[N], s: f8e4m3)\n    grid (cdiv(N, 256),)\n{\n"
           "    i = program_id(0) * 256\n    y[i : i + 256] = x[i : i + 256] * s.to(f32)\n}\n")
    mod = tilex.compile(src, cache_dir=tmp_path)
    n = int(RNG.integers(1, 10_000))
    x = RNG.standard_normal(n, dtype=np.float32)
    s = float(RNG.uniform(-20, 20))
    y = cp.empty(n, cp.float32)
    mod.scale8(cp.asarray(x), y, s=s)
    want = x * np.float32(np.float32(s).astype(ml_dtypes.float8_e4m3fn))
    ref = np.empty(n, np.float32)
    mod.interp("scale8", x, ref, s=s)
    np.testing.assert_allclose(cp.asnumpy(y), want, rtol=1e-6)
    np.testing.assert_array_equal(cp.asnumpy(y), ref)


def test_fp8_made_in_the_body_and_abs_of_bool_launch(tmp_path):
    import cupy as cp

    src = ("kernel k(x: f32[N], y: out f32[N], b: out f32[N])\n    grid (cdiv(N, 256),)\n{\n"
           "    i = program_id(0) * 256\n"
           "    y[i : i + 256] = x[i : i + 256].to(f8e4m3).to(f32) + full(f8e4m3[256], 1.3).to(f32)\n"
           "    b[i : i + 256] = abs(x[i : i + 256] > 0.0).to(f32)\n}\n")
    mod = tilex.compile(src, cache_dir=tmp_path)
    n = int(RNG.integers(1, 10_000))
    x = (RNG.standard_normal(n) * 50).astype(np.float32)
    y, b = cp.empty(n, cp.float32), cp.empty(n, cp.float32)
    mod.k(cp.asarray(x), y, b)
    f8 = ml_dtypes.float8_e4m3fn
    want = np.clip(x, -448, 448).astype(f8).astype(np.float32) + np.float32(np.float32(1.3).astype(f8))
    np.testing.assert_array_equal(cp.asnumpy(y), want)
    np.testing.assert_array_equal(cp.asnumpy(b), (x > 0).astype(np.float32))
