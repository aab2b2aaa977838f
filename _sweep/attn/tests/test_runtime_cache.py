"""CPU-only tests of the on-disk cubin cache and the compile wrapper (no GPU, no CuPy)."""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from tilex.diagnostics import CacheError, TilexError
from tilex.runtime import cache, default_cache_dir, get_or_build
from tilex.runtime import nvrtc as tnvrtc
from tilex.runtime.cache import CacheWarning


def payload() -> bytes:
    return os.urandom(int.from_bytes(os.urandom(1), "little") + 64)


class Builder:
    """A build function that counts its calls."""

    def __init__(self, data: bytes):
        self.data, self.calls = data, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.data


def entries(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir())


# ---------------------------------------------------------------- directory and keys


def test_default_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEX_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TILEX_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tilex"


def test_cache_key_framing_and_types():
    k = cache.cache_key(("ab", "c"))
    assert len(k) == 64 and k == cache.cache_key(["ab", "c"])
    assert k != cache.cache_key(("a", "bc"))
    assert cache.cache_key(("x",)) != cache.cache_key((b"x",))
    with pytest.raises(TypeError, match="must be str or bytes, got int"):
        cache.cache_key(("x", 3))


# ---------------------------------------------------------------- hits and misses


def test_build_once_then_hit(tmp_path):
    data = payload()
    b = Builder(data)
    key = ("src", os.urandom(8).hex())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_or_build(key, b, tmp_path) == data
        assert get_or_build(key, b, tmp_path) == data
    assert b.calls == 1
    files = entries(tmp_path)
    assert len(files) == 1 and files[0].name == cache.cache_key(key) + ".tlxc"
    raw = files[0].read_bytes()
    assert raw.startswith(cache.MAGIC) and raw.endswith(data)
    other = Builder(payload())
    assert get_or_build(key + ("more",), other, tmp_path) == other.data and other.calls == 1
    assert len(entries(tmp_path)) == 2


def test_no_cache_dir_always_builds(tmp_path):
    b = Builder(payload())
    assert get_or_build(("k",), b, None) == b.data
    assert get_or_build(("k",), b, None) == b.data
    assert b.calls == 2


def test_build_must_return_bytes(tmp_path):
    with pytest.raises(TypeError, match="returned str, expected bytes"):
        get_or_build(("k",), lambda: "text", tmp_path)
    assert entries(tmp_path) == []


def test_decode_entry_errors():
    data = payload()
    good = cache.encode_entry(data)
    assert cache.decode_entry(good) == data
    with pytest.raises(CacheError, match="truncated header"):
        cache.decode_entry(good[:10])
    with pytest.raises(CacheError, match="bad magic"):
        cache.decode_entry(b"XXXXXXXX" + good[8:])
    with pytest.raises(CacheError, match=rf"payload is {len(data) - 1} bytes, header says {len(data)}"):
        cache.decode_entry(good[:-1])
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    with pytest.raises(CacheError, match="sha256 does not match"):
        cache.decode_entry(bytes(flipped))
    bad_version = bytearray(good)
    bad_version[8] = 99
    with pytest.raises(CacheError, match="format version 99"):
        cache.decode_entry(bytes(bad_version))


@pytest.mark.parametrize("damage", ["magic", "truncate", "flip", "empty", "version"])
def test_corrupt_entry_is_warned_removed_and_rebuilt(tmp_path, damage):
    key = ("src", os.urandom(8).hex())
    first = Builder(payload())
    get_or_build(key, first, tmp_path)
    path = cache.entry_path(tmp_path, cache.cache_key(key))
    raw = bytearray(path.read_bytes())
    if damage == "magic":
        raw[:8] = b"NOTTILEX"
    elif damage == "truncate":
        raw = raw[: len(raw) - 5]
    elif damage == "flip":
        raw[-3] ^= 0x01
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[8] += 1
    path.write_bytes(bytes(raw))
    second = Builder(payload())
    with pytest.warns(CacheWarning, match="corrupt entry .* removing it and rebuilding"):
        assert get_or_build(key, second, tmp_path) == second.data
    assert second.calls == 1
    assert cache.read_entry(path) == second.data  # repaired on disk
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_or_build(key, second, tmp_path) == second.data
    assert second.calls == 1


def test_unwritable_cache_dir_warns_and_continues(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    b = Builder(payload())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert get_or_build(("k",), b, blocker / "cache") == b.data
    assert b.calls == 1
    assert [w.category for w in caught] == [CacheWarning]
    assert "cannot write to cache directory" in str(caught[0].message)
    assert "continuing without caching" in str(caught[0].message)


def test_atomic_write_leaves_no_temp_files(tmp_path, monkeypatch):
    data = payload()
    cache.write_entry(tmp_path / "a.tlxc", data)
    assert [p.name for p in entries(tmp_path)] == ["a.tlxc"]

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        cache.write_entry(tmp_path / "b.tlxc", data)
    assert [p.name for p in entries(tmp_path)] == ["a.tlxc"]


# ---------------------------------------------------------------- concurrency


def _slow_build_worker(cache_dir, marker_dir, key, data, barrier, results):
    """Runs in a child process: waits for its sibling, then builds through the cache."""
    warnings.simplefilter("error", CacheWarning)

    def build():
        (Path(marker_dir) / str(os.getpid())).write_text("built")
        time.sleep(0.3)
        return data

    barrier.wait(timeout=10)
    try:
        results.put(("ok", get_or_build(key, build, cache_dir)))
    except BaseException as e:  # report, don't hang the parent
        results.put(("error", repr(e)))


def test_two_processes_compiling_same_kernel_both_succeed(tmp_path):
    ctx = mp.get_context("spawn")  # fork is unsafe once CuPy/torch threads exist
    cache_dir, markers = tmp_path / "cache", tmp_path / "markers"
    markers.mkdir()
    key, data = ("concurrent", os.urandom(8).hex()), payload()
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_slow_build_worker,
                         args=(str(cache_dir), str(markers), key, data, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    got = [results.get(timeout=20) for _ in procs]
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    assert got == [("ok", data), ("ok", data)]
    assert len(list(markers.iterdir())) == 2  # both missed the cache and built at once
    assert [p.name for p in entries(cache_dir)] == [cache.cache_key(key) + ".tlxc"]
    b = Builder(b"unused")
    assert get_or_build(key, b, cache_dir) == data and b.calls == 0


# ---------------------------------------------------------------- compile_cubin (faked compiler)


def test_compile_cubin_cache_key_covers_inputs(tmp_path, monkeypatch):
    calls = []

    def fake_compile(source, arch, options):
        calls.append((source, arch, options))
        return b"\x7fELF" + f"{source}|{arch}|{options}".encode()  # cached payloads must look like cubins

    version = ["nvrtc 13.0"]
    monkeypatch.setattr(tnvrtc, "compile_with_nvrtc", fake_compile)
    monkeypatch.setattr(tnvrtc, "toolkit_version", lambda backend="nvrtc": version[0])
    src = f'extern "C" __global__ void k_{os.urandom(4).hex()}() {{}}'
    c1 = tnvrtc.compile_cubin(src, "sm_90a", (), tmp_path)
    assert calls == [(src, "sm_90a", ("--std=c++17", "-default-device"))]
    assert c1 == b"\x7fELF" + f"{src}|sm_90a|('--std=c++17', '-default-device')".encode()
    assert tnvrtc.compile_cubin(src, "sm_90a", (), tmp_path) == c1 and len(calls) == 1
    tnvrtc.compile_cubin(src, "sm_80", (), tmp_path)
    tnvrtc.compile_cubin(src, "sm_90a", ("-lineinfo",), tmp_path)
    tnvrtc.compile_cubin(src + " ", "sm_90a", (), tmp_path)
    assert len(calls) == 4 and calls[2][2] == ("--std=c++17", "-default-device", "-lineinfo")
    version[0] = "nvrtc 13.1"
    tnvrtc.compile_cubin(src, "sm_90a", (), tmp_path)
    assert len(calls) == 5
    tnvrtc.compile_cubin(src, "sm_90a", (), False)  # cache disabled
    assert len(calls) == 6 and len(entries(tmp_path)) == 5


def test_cached_payload_that_is_not_a_cubin_is_warned_removed_and_rebuilt(tmp_path, monkeypatch):
    """An entry with a valid header (magic, version, sha256) whose payload is not an ELF cubin
    would fail in cuModuleLoadData: compile_cubin treats it as damaged and rebuilds it."""
    calls = []

    def fake_compile(source, arch, options):
        calls.append(source)
        return b"\x7fELF fresh cubin"

    monkeypatch.setattr(tnvrtc, "compile_with_nvrtc", fake_compile)
    monkeypatch.setattr(tnvrtc, "toolkit_version", lambda backend="nvrtc": "nvrtc 13.0")
    src = f'extern "C" __global__ void k_{os.urandom(4).hex()}() {{}}'
    assert tnvrtc.compile_cubin(src, "sm_90a", (), tmp_path) == b"\x7fELF fresh cubin" and len(calls) == 1
    (entry,) = entries(tmp_path)
    cache.write_entry(entry, b"#include <not a cubin>")  # intact header, wrong payload
    with pytest.warns(CacheWarning, match="not a cubin"):
        assert tnvrtc.compile_cubin(src, "sm_90a", (), tmp_path) == b"\x7fELF fresh cubin"
    assert len(calls) == 2 and cache.read_entry(entry) == b"\x7fELF fresh cubin"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tnvrtc.compile_cubin(src, "sm_90a", (), tmp_path) == b"\x7fELF fresh cubin" and len(calls) == 2


def test_nvrtc_compile_error_is_internal_error_with_log():
    class FakeNVRTC:
        destroyed = []

        def createProgram(self, src, name, headers, include_names):
            return 1234

        def compileProgram(self, prog, options):
            self.options = options
            raise RuntimeError("NVRTC_ERROR_COMPILATION (6)")

        def getProgramLog(self, prog):
            return 'kernel.cu(3): error: identifier "foo" is undefined\n'

        def destroyProgram(self, prog):
            self.destroyed.append(prog)

    fake = FakeNVRTC()
    orig = tnvrtc._nvrtc_module
    tnvrtc._nvrtc_module = lambda: fake
    try:
        with pytest.raises(TilexError) as e:
            tnvrtc.compile_with_nvrtc("bad source", "sm_90a")
    finally:
        tnvrtc._nvrtc_module = orig
    msg = str(e.value)
    assert msg.startswith("internal compiler error: NVRTC failed to compile the generated CUDA for sm_90a")
    assert "bug in tilex's code generator" in msg
    assert 'identifier "foo" is undefined' in msg
    assert "--gpu-architecture=sm_90a" in msg and fake.options[-1] == "--gpu-architecture=sm_90a"
    assert fake.destroyed == [1234]


def test_arch_for_capability():
    assert tnvrtc.arch_for_capability(9, 0) == "sm_90a"
    assert tnvrtc.arch_for_capability(8, 6) == "sm_86"
    assert tnvrtc.arch_for_capability(12, 0) == "sm_120"


def test_import_does_not_need_cupy_or_torch():
    code = ("import sys, tilex.runtime\n"
            "assert 'cupy' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr
