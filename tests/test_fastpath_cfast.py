"""The C replay of the stdlib fast path (`tilex._cfast`, loaded by `tilex.cfast`) on the CPU, with fake plans.

A `FastCall` is made directly around a Python `slow` function (standing for the Python fast path) and given
entries by hand (`register`, in the form `cfast.entry_data` makes): a call of a registered layout is replayed in
C (outputs from the recorded `empty` call, the parameter buffer packed with this call's addresses, the stand-in
driver called), and every call that differs in anything the key holds, or that the C side cannot replay, calls
`slow` with the same arguments. The build of the extension with the system compiler and TILEX_NO_CFAST are
checked in subprocesses. The stdlib's wrappers on the C path: tests/test_fastpath.py (mode "cpath").
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tilex import cfast
from tilex.runtime.arrays import _TORCH_TYPES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def mod():
    m = cfast.module()
    if cfast.disabled_by_env():
        pytest.skip("TILEX_NO_CFAST is set")
    assert m is not None, cfast.why()  # the CI machine has a compiler: the extension must load
    return m


class Dev:
    def __init__(self, kind="cuda", index=0):
        self.type, self.index = kind, index

    def __eq__(self, other):
        return isinstance(other, Dev) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


BF16, F32 = object(), object()  # dtypes: compared by identity, as torch's singletons


class Ten:
    """A stand-in tensor: a real host buffer (distinct addresses), shape, strides, dtype, device."""

    def __init__(self, shape, dtype=BF16, device=None, offset=0, stride=None):
        n = int(np.prod(shape)) if shape else 1
        self._buf = np.zeros(n * 2 + 64, np.uint8)
        self._ptr = (self._buf.ctypes.data + 15) // 16 * 16 + offset
        self.shape = tuple(shape)
        self._stride = stride or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        self.dtype, self.device = dtype, device or Dev()

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._stride


class SubTen(Ten):
    pass


@pytest.fixture
def drv(mod):
    """A stand-in driver made C-callable: records (grid, block, smem, stream, function, the 8 bytes of each
    parameter or all 128 of a map); `state` holds the current context, device, stream and the result."""
    state = {"ctx": 0xC0, "device": 0, "stream": 0x5000, "result": [], "sizes": None}
    launches = []

    def launch(config, f, params, extra):
        c = config.contents
        sizes = state["sizes"]
        vals = [bytes((ctypes.c_ubyte * n).from_address(params[i])) for i, n in enumerate(sizes)]
        launches.append(dict(grid=(c.gridDimX, c.gridDimY, c.gridDimZ), block=(c.blockDimX, c.blockDimY, c.blockDimZ),
                             smem=c.sharedMemBytes, stream=c.hStream or 0, f=f.value, params=vals))
        return state["result"].pop(0) if state["result"] else 0

    la, ca, keep = cfast.stand_in_driver(launch, lambda: state["ctx"])
    mod.set_driver(la, ca)
    _TORCH_TYPES.update({Ten, SubTen})
    yield state, launches, keep
    mod.set_driver(0, 0)
    _TORCH_TYPES.difference_update({Ten, SubTen})


class Globals(dict):
    """The module namespace a FastCall reads (as tilex.stdlib._launch's)."""


def namespace(**kw):
    import threading
    import time

    class Tls(threading.local):
        rec = None

    class Out(threading.local):
        fn = None

    launcher = object()
    g = dict(FASTPATH=True, POISON=False, CFAST=True, _TLS=Tls(), OUTPUT=Out(), RECHECK_S=60.0,
             STATS={"hit": 0, "record": 0, "full": 0}, _monotonic=time.monotonic, _DRIVER={"launcher": launcher},
             _CFAST_LAUNCHER=launcher)
    g.update(kw)
    return g


def blob_of(values):
    """(bytes, offsets) of parameters given as bytes each, 16-byte aligned."""
    blob, offsets = bytearray(), []
    for v in values:
        blob += bytes((-len(blob)) % 16)
        offsets.append(len(blob))
        blob += v
    return bytes(blob), tuple(offsets)


def make_entry(born, launches, allocs=(((2, 4),), ), tmpl=(2, 0), device=0, current=lambda: 0, stream=None,
               empty=None, name="k"):
    empty = empty or (lambda shape, dtype=None, device=None: Ten(shape, dtype, device))
    stream = stream or (lambda d: 0x5000 + d)
    return (born, device, current, stream, empty,
            tuple((a, {"dtype": BF16, "device": Dev()}) for a in allocs), tuple(launches), tmpl, name)


def simple_launch(maps=()):
    """One kernel: params (x pointer, out pointer, float eps = 0.5, int n = 7) [+ maps]."""
    vals = [bytes(8), bytes(8), struct.pack("f", 0.5), struct.pack("i", 7)] + [bytes(128)] * len(maps)
    blob, offs = blob_of(vals)
    return (0xF00, (3, 1, 1), 128, 1024, blob, offs, ((0, 0, 0), (1, 2, 0)), tuple(maps))


def setup_call(mod, drv, **g):
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4]
    calls = []

    def slow(*args, **kwargs):
        calls.append((args, kwargs))
        return "slow"
    fc = mod.FastCall(slow, namespace(**g))
    x = Ten((2, 4))
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [simple_launch()])) is True
    return fc, x, calls, state, launches


def test_a_registered_layout_replays_in_c(mod, drv):
    fc, x, calls, state, launches = setup_call(mod, drv)
    y = Ten((2, 4))
    h = mod.hits()
    out = fc(y, 1e-6)
    assert not calls and mod.hits() == h + 1
    assert isinstance(out, Ten) and out.shape == (2, 4) and out.dtype is BF16
    (ln,) = launches
    assert ln["grid"] == (3, 1, 1) and ln["block"] == (128, 1, 1) and ln["smem"] == 1024 and ln["f"] == 0xF00
    assert ln["stream"] == 0x5000
    p = [int.from_bytes(v, "little") for v in ln["params"][:2]]
    assert p == [y.data_ptr(), out.data_ptr()]  # this call's input and its new output
    assert struct.unpack("f", ln["params"][2])[0] == 0.5 and struct.unpack("i", ln["params"][3])[0] == 7
    assert fc.lookup(y, 1e-6) is not None and fc.lookup(y, 2e-6) is None


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "device", "align", "type", "scalar value",
                                    "scalar type", "-0.0", "nan", "np scalar", "more args", "keyword",
                                    "big int", "str"])
def test_any_other_layout_calls_the_python_path(mod, drv, change):
    fc, x, calls, state, launches = setup_call(mod, drv)
    args, kwargs = {
        "shape": ((Ten((2, 5)), 1e-6), {}),
        "stride": ((Ten((2, 4), stride=(1, 2)), 1e-6), {}),
        "dtype": ((Ten((2, 4), dtype=F32), 1e-6), {}),
        "device": ((Ten((2, 4), device=Dev("cuda", 1)), 1e-6), {}),
        "align": ((Ten((2, 4), offset=2), 1e-6), {}),
        "type": ((SubTen((2, 4)), 1e-6), {}),
        "scalar value": ((Ten((2, 4)), 1e-5), {}),
        "scalar type": ((Ten((2, 4)), 1), {}),
        "-0.0": ((Ten((2, 4)), -0.0), {}),
        "nan": ((Ten((2, 4)), float("nan")), {}),
        "np scalar": ((Ten((2, 4)), np.float64(1e-6)), {}),
        "more args": ((Ten((2, 4)), 1e-6, None), {}),
        "keyword": ((Ten((2, 4)),), {"eps": 1e-6}),
        "big int": ((Ten((2, 4)), 1 << 70), {}),
        "str": ((Ten((2, 4)), "1e-6"), {}),
    }[change]
    h = mod.hits()
    assert fc(*args, **kwargs) == "slow"
    assert calls == [(args, kwargs)] and not launches and mod.hits() == h


def test_keyword_layouts_and_their_order(mod, drv):
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4]
    calls = []
    fc = mod.FastCall(lambda *a, **k: calls.append((a, k)) or "slow", namespace())
    x = Ten((2, 4))
    assert fc.register((x, 1e-6, True), 1, ("eps", "flag"), make_entry(time.monotonic(), [simple_launch()]))
    assert isinstance(fc(Ten((2, 4)), eps=1e-6, flag=True), Ten) and not calls
    assert fc(Ten((2, 4)), flag=True, eps=1e-6) == "slow"  # another order is another key (as in Python)
    assert fc(Ten((2, 4)), 1e-6, True) == "slow" and fc(Ten((2, 4)), eps=1e-6, flag=False) == "slow"
    assert len(calls) == 3 and len(launches) == 1


@pytest.mark.parametrize("flag,value", [("FASTPATH", False), ("CFAST", False), ("POISON", True),
                                        ("_DRIVER", {"launcher": lambda: None})])  # a replaced driver.launcher
def test_switches_and_recordings_call_the_python_path(mod, drv, flag, value):
    fc, x, calls, state, launches = setup_call(mod, drv, **{flag: value})
    assert fc(Ten((2, 4)), 1e-6) == "slow" and not launches


def test_a_recording_or_an_arena_calls_the_python_path(mod, drv):
    fc, x, calls, state, launches = setup_call(mod, drv)
    ns = namespace()
    fc2 = mod.FastCall(fc.slow, ns)
    import time

    assert fc2.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [simple_launch()]))
    ns["_TLS"].rec = object()
    assert fc2(Ten((2, 4)), 1e-6) == "slow"
    ns["_TLS"].rec = None
    ns["OUTPUT"].fn = lambda *a: None
    assert fc2(Ten((2, 4)), 1e-6) == "slow"
    ns["OUTPUT"].fn = None
    assert isinstance(fc2(Ten((2, 4)), 1e-6), Ten)
    assert ns["STATS"]["hit"] == 1


def test_entries_expire(mod, drv):
    clock = [100.0]
    fc, x, calls, state, launches = setup_call(mod, drv, _monotonic=lambda: clock[0], RECHECK_S=1.0)
    fc.cmemo.clear()
    assert fc.register((x, 1e-6), 2, None, make_entry(100.0, [simple_launch()]))
    clock[0] = 100.5
    assert isinstance(fc(Ten((2, 4)), 1e-6), Ten)
    clock[0] = 101.0
    assert fc(Ten((2, 4)), 1e-6) == "slow"


def test_another_current_device_and_a_refused_first_launch_call_the_python_path(mod, drv):
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4]
    calls = []
    dev = [0]
    fc = mod.FastCall(lambda *a, **k: calls.append(a) or "slow", namespace())
    x = Ten((2, 4))
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [simple_launch()], current=lambda: dev[0]))
    assert isinstance(fc(Ten((2, 4)), 1e-6), Ten)
    state["ctx"] = 0xD0  # another context: the device is asked again
    dev[0] = 1
    assert fc(Ten((2, 4)), 1e-6) == "slow" and len(launches) == 1
    dev[0] = 0
    assert isinstance(fc(Ten((2, 4)), 1e-6), Ten) and len(launches) == 2
    state["result"] = [700]  # the driver refuses: nothing ran, the Python path says why
    assert fc(Ten((2, 4)), 1e-6) == "slow" and len(calls) == 2


def test_a_refused_later_launch_raises(mod, drv):
    import time

    from tilex.diagnostics import LaunchError

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4]
    fc = mod.FastCall(lambda *a, **k: "slow", namespace())
    x = Ten((2, 4))
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [simple_launch(), simple_launch()],
                                                      name="rms"))
    state["result"] = [0, 719]
    with pytest.raises(LaunchError, match="rms: cuLaunchKernelEx failed .CUresult 719. after an earlier kernel"):
        fc(Ten((2, 4)), 1e-6)


def test_tma_maps_are_encoded_when_their_address_changes(mod, drv):
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4, 128]
    encoded = []

    def encode(ptr):
        encoded.append(ptr)
        return ptr.to_bytes(8, "little") * 16

    fc = mod.FastCall(lambda *a, **k: "slow", namespace())
    x = Ten((2, 4))
    launch = simple_launch(maps=[(4, 0, 16, encode, x.data_ptr() + 16)])
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [launch]))
    fc(x, 1e-6)
    assert encoded == []  # the recorded map is for this address
    y = Ten((2, 4))
    fc(y, 1e-6)
    fc(y, 1e-6)
    assert encoded == [y.data_ptr() + 16]
    assert launches[-1]["params"][4] == (y.data_ptr() + 16).to_bytes(8, "little") * 16


def test_results_built_from_the_template(mod, drv):
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4]
    fc = mod.FastCall(lambda *a, **k: "slow", namespace())
    x = Ten((2, 4))
    tmpl = (3, ((2, 1), (1, 0), (0,), (4, ((2, 0),))))  # (out1, x, None, [out0])
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [simple_launch()],
                                                      allocs=(((2, 4),), ((3,),)), tmpl=tmpl))
    y = Ten((2, 4))
    r = fc(y, 1e-6)
    assert type(r) is tuple and r[1] is y and r[2] is None and type(r[3]) is list
    assert r[0].shape == (3,) and r[3][0].shape == (2, 4)


def test_oversized_or_unkeyed_entries_are_refused(mod, drv):
    import time

    fc = mod.FastCall(lambda *a, **k: "slow", namespace())
    x = Ten((2, 4))
    big = simple_launch()
    blob, offs = blob_of([bytes(8)] * 300)
    big = (*big[:4], blob, offs, big[6], ())
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [big])) is False
    assert fc.register((x, np.float32(1)), 2, None, make_entry(time.monotonic(), [simple_launch()])) is False
    bad_patch = (*simple_launch()[:6], ((0, 9, 0),), ())  # a source index past the arguments and outputs
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [bad_patch])) is False
    assert not fc.cmemo


def test_a_fastcall_is_a_function_like_wrapper(mod):
    def f(a, b=2):
        """doc of f"""
        return a + b

    fc = mod.FastCall(f, namespace())
    functools.update_wrapper(fc, f)
    assert fc.__name__ == "f" and fc.__doc__ == "doc of f" and fc.__wrapped__ is f and fc(1) == 3

    class C:
        m = fc
    assert C.m is fc
    bound = C().m
    with pytest.raises(TypeError):  # bound like a function: the instance is its first argument
        bound(1, 2)


def test_the_stdlib_wrappers_are_fastcalls_when_loaded(mod):
    import tilex.stdlib as S
    from tilex.stdlib import _launch as L

    assert type(S.rms_norm) is mod.FastCall and S.rms_norm.python.memo is S.rms_norm.memo
    assert S.rms_norm.__name__ == "rms_norm" and S.rms_norm.full.__name__ == "rms_norm"
    assert S.rms_norm.cmemo in [m for m in L._MEMOS if m is S.rms_norm.cmemo]


def test_tilex_no_cfast_turns_it_off():
    code = ("import tilex.stdlib as S, types; from tilex import cfast; "
            "assert cfast.module() is None and 'TILEX_NO_CFAST' in cfast.why(); "
            "assert isinstance(S.rms_norm, types.FunctionType); print('ok')")
    env = dict(os.environ, TILEX_NO_CFAST="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_the_extension_builds_with_the_system_compiler(tmp_path):
    """The fallback build (`cfast.build`), loaded in a fresh process: it carries this source's hash."""
    out = cfast.build(tmp_path / "_cfast_test.so")
    code = ("import importlib.machinery as m, importlib.util as u, sys; p = sys.argv[1]; "
            "l = m.ExtensionFileLoader('tilex._cfast', p); s = u.spec_from_file_location('tilex._cfast', p, loader=l); "
            "x = u.module_from_spec(s); l.exec_module(x); print(x.SOURCE_SHA, x.driver_loaded())")
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [cfast.source_sha(), "False"]


def test_a_stale_installed_build_is_not_used(tmp_path, monkeypatch):
    """An installed extension whose SOURCE_SHA is another source's: module() builds the current one instead."""
    code = ("import sys, types; from tilex import cfast; "
            "sys.modules['tilex._cfast'] = types.SimpleNamespace(SOURCE_SHA='0000', __file__='old.so'); "
            "m = cfast.module(); print(m is not None and m.SOURCE_SHA == cfast.source_sha(), '|', cfast.why())")
    env = dict(os.environ, TILEX_CACHE_DIR=str(tmp_path))
    env.pop("TILEX_NO_CFAST", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    ok, why = r.stdout.split("|")
    assert ok.strip() == "True" and "another _cfast.c" in why and "built now" in why, r.stdout


def test_a_failed_build_is_not_retried(tmp_path):
    """No compiler: module() is None with the reason, and a later process does not try the compiler again."""
    code = ("import sys, types; sys.modules['tilex._cfast'] = None; from tilex import cfast; "
            "print(cfast.module() is None, '|', cfast.why())")
    env = dict(os.environ, TILEX_CACHE_DIR=str(tmp_path), CC=str(tmp_path / "no-such-cc"))
    env.pop("TILEX_NO_CFAST", None)
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.split("|"))
    assert outs[0][0].strip() == "True" and "no-such-cc" in outs[0][1] and "building it failed" in outs[0][1]
    assert outs[1][0].strip() == "True" and "an earlier build failed" in outs[1][1]
    assert list(tmp_path.rglob("*.failed"))


def test_the_c_launcher_passes_what_the_ctypes_call_passes(mod, tmp_path, monkeypatch):
    """_cfast.Launcher on a stand-in libcuda (tests/test_runtime_driver.py's): the same config, function, parameters
    and result as the ctypes function; driver.launcher() is a Launcher with TILEX_CFAST_LAUNCHER=1 only."""
    import shutil

    from test_runtime_driver import STUB

    from tilex.runtime import driver

    cc = shutil.which("cc") or shutil.which("gcc")
    src, lib = tmp_path / "stub.c", tmp_path / "libcudastub.so"
    src.write_text(STUB)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    so = ctypes.CDLL(str(lib))
    so.stub_meta.restype = ctypes.POINTER(ctypes.c_ulonglong)
    so.stub_record.restype = ctypes.POINTER(ctypes.c_ubyte)
    sizes = [8, 4, 8]
    so.stub_setup(3, (ctypes.c_int * 3)(*sizes), 0)
    slots = [ctypes.c_uint64(0xABCDEF00), ctypes.c_float(1.5), ctypes.c_int64(-7)]
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(s) for s in slots))
    cfg = driver.LaunchConfig(5, 6, 7, 64, 1, 1, 2048, 0x5000, None, 0)
    cfg_ptr, f = ctypes.pointer(cfg), ctypes.c_void_p(0xF00D)
    c_fn = ctypes.CDLL(str(lib)).cuLaunchKernelEx
    c_fn.restype = ctypes.c_int
    seen = []
    for launch in (c_fn, mod.Launcher(str(lib))):
        so.stub_setup(3, (ctypes.c_int * 3)(*sizes), 17)
        r = launch(cfg_ptr, f, params, None)
        seen.append((r, list(so.stub_meta()[:12]), bytes(so.stub_record()[:20])))
    assert seen[0] == seen[1] and seen[0][0] == 17 and seen[0][1][:9] == [0xF00D, 5, 6, 7, 64, 1, 1, 2048, 0x5000]
    with pytest.raises(TypeError):
        mod.Launcher(str(lib))(cfg_ptr, f, params)
    with pytest.raises(OSError):
        mod.Launcher(str(tmp_path / "missing.so"))
    monkeypatch.setattr(driver, "LIBRARY", str(lib))
    monkeypatch.delenv(driver.ENV, raising=False)
    try:
        for flag, kind in (("0", ctypes._CFuncPtr), ("1", mod.Launcher)):
            monkeypatch.setenv(driver.C_ENV, flag)
            driver.launcher.cache_clear()
            assert isinstance(driver.launcher(), kind), flag
    finally:
        driver.launcher.cache_clear()


@pytest.mark.parametrize("registered, called", [(0.0, -0.0), (-0.0, 0.0), (True, 1), (1, True), (1, 1.0),
                                                (1.0, 1), (False, 0)])
def test_scalar_keys_keep_sign_and_type(mod, drv, registered, called):
    """An option registered as one value is not replayed for another that compares equal in Python but packs
    (or means) something else: -0.0 against 0.0, a bool against an int, an int against a float."""
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4]
    calls = []
    fc = mod.FastCall(lambda *a, **k: calls.append((a, k)) or "slow", namespace())
    x = Ten((2, 4))
    assert fc.register((x, registered), 2, None, make_entry(time.monotonic(), [simple_launch()]))
    assert isinstance(fc(Ten((2, 4)), registered), Ten) and not calls  # the registered one replays
    assert fc(Ten((2, 4)), called) == "slow" and len(calls) == 1 and len(launches) == 1


def test_tma_maps_of_a_call_are_its_own_when_an_encoder_reenters(mod, drv):
    """Encoding a changed map calls Python, where another thread (here: a nested call) may replay the same entry
    and re-encode the maps for its own tensor: the first call still launches with the maps of its own tensor
    (the reviewer's race: the shared cache was copied into the call's parameters only after every encode)."""
    import time

    state, launches, _ = drv
    state["sizes"] = [8, 8, 4, 4, 128, 128]
    z, nested = Ten((2, 4)), []
    fc = mod.FastCall(lambda *a, **k: "slow", namespace())

    def enc0(ptr):
        return ptr.to_bytes(8, "little") * 16

    def enc1(ptr):
        if not nested:  # once: the other call replays the entry while this one is between its two maps
            nested.append("running")
            nested.append(fc(z, 1e-6))
        return ptr.to_bytes(8, "little") * 16

    x = Ten((2, 4))
    launch = simple_launch(maps=[(4, 0, 16, enc0, x.data_ptr() + 16), (5, 0, 32, enc1, x.data_ptr() + 32)])
    assert fc.register((x, 1e-6), 2, None, make_entry(time.monotonic(), [launch]))
    y = Ten((2, 4))
    fc(y, 1e-6)
    assert nested and len(launches) == 2
    inner, outer = launches
    assert inner["params"][4] == (z.data_ptr() + 16).to_bytes(8, "little") * 16
    assert outer["params"][4] == (y.data_ptr() + 16).to_bytes(8, "little") * 16
    assert outer["params"][5] == (y.data_ptr() + 32).to_bytes(8, "little") * 16
