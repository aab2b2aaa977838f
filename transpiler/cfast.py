"""The optional C fast path of the stdlib wrappers (`_cfast.c`): loading it, and the data it replays.

`tilex.stdlib._launch.fastpath` memoizes a wrapper call per argument layout in Python (`_Entry`); when this
module's `module()` is not None, each wrapper is also a `_cfast.FastCall`, and every `_Entry` made is handed to
it (`register`, with `entry_data`). A later call of that layout is then replayed by one C function: the layout
read and compared, the outputs allocated with the recorded torch.empty call, the parameters packed and
cuLaunchKernelEx called on torch's current stream. Any call the C side cannot replay (another layout, an
argument it does not key on, the fast path off, tilex.runtime.driver.launcher replaced, another device current,
a refused launch) runs the Python fast
path unchanged, with all of its checks and clear errors.

The extension is built by setuptools where a compiler and Python's headers exist (`setup.py`: optional, so an
install without them works, on the Python path). Where the installed package has no built extension (an
editable install made before it existed, a wheel built without a compiler) or whose build is stale (its
SOURCE_SHA is not the hash of the `_cfast.c` next to this file: an in-place build of an older source),
`module()` compiles `_cfast.c` once with the system C compiler (`$CC`, else cc) into the tilex cache directory
and loads that; `TILEX_CFAST_BUILD=0` (or false / no / off; unset or empty: on, as every tilex switch) turns that off (a failed build is noted next to where it would be, and not tried again by later processes).
`TILEX_NO_CFAST=1` disables the C path altogether. `why()` says why it is off.
The CUDA driver is opened by the C side with dlopen at first use (`ready()`), from `tilex.runtime.driver.LIBRARY`.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .envflags import switch

ENV_OFF = "TILEX_NO_CFAST"
ENV_BUILD = "TILEX_CFAST_BUILD"
SOURCE = Path(__file__).with_name("_cfast.c")
_why: list = []  # why the C path is off (module() None), or how it was loaded


def disabled_by_env() -> bool:
    return switch(ENV_OFF, False)


def why() -> str:
    """How the C path was loaded, or why it is off (after module())."""
    module()
    return _why[-1] if _why else ""


@functools.lru_cache(maxsize=1)
def module():
    """The `_cfast` extension module, or None (TILEX_NO_CFAST set, or neither installed nor buildable here)."""
    if disabled_by_env():
        _why.append(f"off: {ENV_OFF} is set")
        return None
    try:
        from . import _cfast  # built by setuptools (setup.py)

        if not SOURCE.exists() or getattr(_cfast, "SOURCE_SHA", None) == source_sha():
            _why.append(f"installed: {_cfast.__file__}")
            return _configure(_cfast)
        installed_error = f"the installed {_cfast.__file__} is of another _cfast.c"
    except ImportError as e:
        installed_error = str(e)
    if not switch(ENV_BUILD, True):
        _why.append(f"off: not installed ({installed_error}) and {ENV_BUILD}=0")
        return None
    try:
        return _configure(_build_and_load(installed_error))
    except Exception as e:  # noqa: BLE001 - no compiler, no headers, a failed build: the Python path
        _why.append(f"off: not installed ({installed_error}); building it failed: {type(e).__name__}: {e}")
        return None


def _configure(mod):
    from .diagnostics import LaunchError
    from .runtime.arrays import _TORCH_TYPES

    from .runtime import driver

    mod.configure(LaunchError, _TORCH_TYPES)
    if hasattr(mod, "Launcher") and not driver.C_LAUNCHER:  # TILEX_CFAST_LAUNCHER=1's launcher (runtime/driver.py)
        driver.C_LAUNCHER.append(mod.Launcher)
        driver.launcher.cache_clear()
    return mod


def source_sha() -> str:
    """The hash a build of `_cfast.c` carries as SOURCE_SHA (setup.py computes the same)."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def build_path() -> Path:
    """Where `module()` builds the extension when it is not installed (keyed by the source and this Python)."""
    from .runtime.cache import default_cache_dir

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(SOURCE.read_bytes() + sys.version.encode() + suffix.encode()).hexdigest()[:16]
    return default_cache_dir() / "cfast" / key / f"_cfast{suffix}"


def build(out: Path) -> Path:
    """Compile `_cfast.c` into the extension file `out` with the system compiler (atomic: a temporary file, then
    a rename). CalledProcessError / FileNotFoundError when the compiler or Python's headers are missing."""
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise FileNotFoundError(f"Python.h is not in {include} (no Python headers here)")
    cc = os.environ.get("CC", "cc").split()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so")
    os.close(fd)
    try:
        cmd = [*cc, "-O2", "-shared", "-fPIC", "-std=c11", f'-DTILEX_CFAST_SHA="{source_sha()}"', f"-I{include}",
               str(SOURCE), "-o", tmp, "-ldl"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr[-2000:])
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _build_and_load(reason: str):
    path = build_path()
    failed = path.with_name(path.name + ".failed")  # an earlier process's failed build: not tried again
    if failed.exists():
        raise RuntimeError(f"an earlier build failed (delete {failed} to try again): {failed.read_text()[:500]}")
    how = "built earlier"
    if not path.exists():
        try:
            build(path)
        except Exception as e:
            try:
                failed.parent.mkdir(parents=True, exist_ok=True)
                failed.write_text(f"{type(e).__name__}: {e} {getattr(e, 'stderr', '') or ''}")
            except OSError:
                pass
            raise
        how = "built now"
    loader = importlib.machinery.ExtensionFileLoader("tilex._cfast", str(path))
    spec = importlib.util.spec_from_file_location("tilex._cfast", str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules["tilex._cfast"] = mod
    _why.append(f"{how} with the system compiler (not installed: {reason}): {path}")
    return mod


_driver_tried: list = []


def ready() -> bool:
    """Whether the C side can launch: the module is loaded and has the driver's functions (dlopen of
    tilex.runtime.driver.LIBRARY on the first call; tests set stand-ins with `_cfast.set_driver`)."""
    mod = module()
    if mod is None:
        return False
    if mod.driver_loaded():
        return True
    if _driver_tried:
        return False
    _driver_tried.append(True)
    from .runtime import driver

    if not switch(driver.ENV, True):  # TILEX_DIRECT_LAUNCH=0, as driver.launcher() reads it
        return False
    return bool(mod.load_driver(driver.LIBRARY))


# ------------------------------------------------------------------ the data of one entry, for FastCall.register

def _tmpl(t) -> tuple:
    """A `_launch._finish` result template in the C form: (0,) None, (1, i) argument i, (2, j) output j, (3, parts)
    a tuple, (4, parts) a list."""
    kind = t[0]
    if kind == "none":
        return (0,)
    if kind == "in":
        return (1, int(t[1]))
    if kind == "out":
        return (2, int(t[1]))
    return (3 if kind is tuple else 4, tuple(_tmpl(x) for x in t[1]))


def _encoder(plan, mp):
    from .runtime.launch import tma_argument

    def encode(ptr: int) -> bytes:
        return tma_argument(mp.m, mp.param, ptr, plan.symbols).tobytes()
    return encode


def launch_data(plan, tensors: tuple, maps: tuple, writes: tuple) -> tuple:
    """One launch of an `_Entry` (a plan and its `patches`) as FastCall.register takes it: (function, grid, block,
    smem, the parameter bytes (each parameter 16-byte aligned; the scalar writes applied), their offsets,
    pointer patches (parameter, source, offset), TMA map patches (parameter, source, offset, encoder, address
    the bytes are for))."""
    slots = plan._slots
    index = {id(s): i for i, s in enumerate(slots)}
    values = {id(slot): v for slot, v in writes}
    blob, offsets = bytearray(), []
    with plan._lock:  # the map slots are rewritten by the Python path's fire
        map_ptrs = {id(mp.slot): mp.ptr for mp, _, _ in maps}
        for s in slots:
            pad = (-len(blob)) % 16
            blob += bytes(pad)
            offsets.append(len(blob))
            blob += bytes(type(s)(values[id(s)])) if id(s) in values else bytes(s)
    patches = tuple((index[id(slot)], int(j), int(off)) for slot, j, off in tensors)
    mps = tuple((index[id(mp.slot)], int(j), int(off), _encoder(plan, mp), int(map_ptrs[id(mp.slot)]))
                for mp, j, off in maps)
    return (int(plan._function.value or 0), tuple(int(g) for g in plan.grid), int(plan.threads), int(plan.smem),
            bytes(blob), tuple(offsets), patches, mps)


# How the C replay allocates an output: "empty" (torch.empty(shape, dtype=, device=), as the Python path) or
# "empty_strided" (torch.empty_strided(shape, contiguous strides, dtype=, device=): the same tensor; torch 2.11's
# torch.empty parses more overloads). Read when an entry is registered.
ALLOC = os.environ.get("TILEX_CFAST_ALLOC", "empty").strip()


def _contiguous_strides(shape: tuple) -> tuple:
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= max(int(d), 1)
    return tuple(reversed(strides))


def entry_data(entry) -> tuple:
    """A `tilex.stdlib._launch._Entry` as FastCall.register takes it."""
    empty = entry.empty
    torch = sys.modules.get("torch")
    strided = (ALLOC == "empty_strided" and torch is not None and empty is getattr(torch, "empty", None)
               and hasattr(torch, "empty_strided"))
    if strided:
        empty = torch.empty_strided
        allocs = tuple(((tuple(shape), _contiguous_strides(tuple(shape))), {"dtype": dt, "device": dev})
                       for shape, dt, dev in entry.allocs)
    else:
        allocs = tuple(((tuple(shape),), {"dtype": dt, "device": dev}) for shape, dt, dev in entry.allocs)
    launches = tuple(launch_data(*launch) for launch in entry.launches)
    name = entry.launches[0][0].spec.name if entry.launches else ""
    current = entry.current_device if entry.current_device is not None else (lambda: entry.device)
    device = entry.device if entry.device is not None else -1
    return (float(entry.born), int(device), current, entry.stream, empty, allocs, launches,
            _tmpl(entry.tmpl), name)


def stand_in_driver(launch, current_context):
    """(launch address, context address, keep-alive) of two Python callables made C functions, for
    `_cfast.set_driver` in tests: launch(config, f, params, extra) -> int gets the LaunchConfig pointer, the
    function as a ctypes.c_void_p and the parameter array; current_context() -> an int (the context)."""
    from .runtime.driver import LaunchConfig

    LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(LaunchConfig), ctypes.c_void_p,
                              ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
    CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))

    def _launch(config, f, params, extra):
        return launch(config, ctypes.c_void_p(f), params, extra)

    def _ctx(out):
        out[0] = current_context()
        return 0
    cl, cc = LAUNCH(_launch), CTX(_ctx)
    return (ctypes.cast(cl, ctypes.c_void_p).value, ctypes.cast(cc, ctypes.c_void_p).value, (cl, cc))
