"""`Kernel`: compile generated CUDA once, load the cubin with CuPy, launch it.

Calling a Kernel binds and checks the arguments against its KernelSpec (`args.py`),
then launches `spec.name` with the grid the spec computes, `spec.threads` threads and
`spec.smem_bytes` bytes of dynamic shared memory. Argument order, as KernelSpec
documents: one device pointer per tensor, one value per scalar, one int32 per symbol.

CuPy is imported on first compile/launch only. Torch tensors are passed by pointer
(`data_ptr()`) after the checks, and launches that involve them go to torch's current
stream unless a stream is given.

Repeated calls: the first call of an argument layout (shapes, dtypes, devices, contiguity,
address alignment: `plan.signature`) is checked in full and makes a `LaunchPlan`; later
calls of that layout replay it (no binding, the scalars still checked) through the
driver's cuLaunchKernelEx (`driver.py`). Anything else (NumPy or other array objects, no
libcuda, TILEX_DIRECT_LAUNCH=0, a device switch, a launch the driver refuses) takes the
full path: bind_arguments and CuPy's launch.
"""
from __future__ import annotations

import os
import statistics
from typing import Any

import numpy as np

from ..diagnostics import LaunchError
from ..spec import KernelSpec, ParamKind
from .args import BoundArgs, bind_arguments
from .arrays import is_cupy_array, is_torch_tensor
from .nvrtc import compile_cubin, default_arch
from .plan import _SCALAR_CTYPES, LaunchPlan, signature
from . import driver

STATIC_SMEM_LIMIT = 48 * 1024
# CUfunction_attribute value of CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuda.h).
_ATTR_MAX_DYNAMIC_SMEM = 8

# a scalar parameter's NumPy type for CuPy's launch: the C type the plans pass (plan._SCALAR_CTYPES), as NumPy
_SCALAR_TYPES = {name: np.dtype(ct).type for name, ct in _SCALAR_CTYPES.items()}


def _device_index(bound: BoundArgs) -> int | None:
    """The CUDA ordinal of the arguments, or None when no tensor says (use current)."""
    dev = bound.device
    if dev is None or not dev.startswith("cuda:") or dev == "cuda:?":
        return None
    return int(dev.split(":", 1)[1])


def _pointer(x: Any, kind: str | None = None) -> np.uint64:
    """The device address of a checked array argument (`kind`: its BoundArgs.kinds entry, if known)."""
    if kind == "torch" or (kind is None and is_torch_tensor(x)):
        return np.uint64(x.data_ptr())
    if kind == "cupy" or (kind is None and is_cupy_array(x)):
        return np.uint64(x.data.ptr)
    cai = getattr(x, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        return np.uint64(cai["data"][0])
    raise LaunchError(f"internal error: cannot take the device address of {type(x).__name__}")


def kernel_arguments(spec: KernelSpec, bound: BoundArgs) -> list:
    """The launch argument list: the parameters in their declared order (the kernel's signature: tensor
    pointers and scalars as C types), then an int32 per symbol."""
    out: list = []
    for p in spec.params:
        if p.kind == ParamKind.TENSOR:
            out.append(_pointer(bound.arrays[p.name], bound.kinds.get(p.name)))
        else:
            out.append(_SCALAR_TYPES[p.dtype](bound.scalars[p.name]))
    for s in spec.symbols:
        out.append(np.int32(bound.symbols[s]))
    if spec.tma:
        params = {p.name: p for p in spec.params}
        for m in spec.tma:
            ptr = int(_pointer(bound.arrays[m.tensor]))
            out.append(tma_argument(m, params[m.tensor], ptr, bound.symbols))
    return out


def tma_argument(m, p, ptr: int, symbols) -> np.void:
    """The 128-byte TMA map `m` of tensor parameter `p` at address `ptr` (`symbols`: the bound sizes);
    LaunchError when TMA cannot read the tensor there (alignment, pitch, strides)."""
    from . import tma

    if m.box:  # a streamed loop's ring: an N-D map of the whole tensor
        return _nd_map(tma, m, p, ptr, symbols)
    rows, cols = (symbols[d] if isinstance(d, str) else d for d in p.dims)
    if rows == 0 or cols == 0:  # an empty operand (K = 0): the loop makes no trips, the map is never read
        return np.void(bytes(128))
    tma.check_alignment(m.tensor, ptr, p.dtype, cols)
    return tma.encode(ptr, p.dtype, rows, cols, m.box_rows, m.box_cols)


def _nd_map(tma, m, p, ptr: int, symbols) -> np.void:
    """The N-D TMA map `m` of tensor parameter `p` at `ptr`. An empty tensor (a dim of 0) is encoded with that
    dim as 1 at a stand-in address: the kernel sends every box outside the map then, so nothing is read."""
    dims = tuple(symbols[d] if isinstance(d, str) else d for d in p.dims)
    if 0 in dims:
        ptr = 256
    why = tma.nd_obstacle(m.tensor, ptr, p.dtype, dims, m.box)
    if why:
        raise LaunchError(why)
    return tma.encode_nd(ptr, p.dtype, dims, m.box)


def _as_cupy_stream(stream: Any, device: int | None):
    """A CuPy stream object for `stream`: a CuPy stream, a torch stream, or a raw handle."""
    if stream is None or type(stream).__module__.split(".")[0] == "cupy":  # Stream, ExternalStream
        return stream
    handle = getattr(stream, "cuda_stream", stream)  # torch.cuda.Stream has .cuda_stream
    if not isinstance(handle, int):
        raise LaunchError(f"stream: expected a CuPy stream, torch.cuda.Stream or stream handle, "
                          f"got {type(stream).__name__}")
    return _external_stream(handle, device)


class _StreamHandle:
    """A raw cudaStream_t exposed through the CUDA stream protocol (`__cuda_stream__`)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


_EXTERNAL_STREAMS: dict[tuple[int, int | None], Any] = {}  # (handle, device) -> CuPy stream object
_MAX_EXTERNAL_STREAMS = 64


def _external_stream(handle: int, device: int | None):
    """Wrap a stream handle owned by someone else (torch, a raw handle) as a CuPy stream.

    The wrapper only names the handle (it never creates or destroys the stream), so one
    wrapper per (handle, device) is made and reused by later launches."""
    key = (handle, device)
    hit = _EXTERNAL_STREAMS.get(key)
    if hit is not None:
        return hit
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)  # CuPy >= 14
    if from_external is not None:
        wrapped = from_external(_StreamHandle(handle))
    else:
        wrapped = cupy.cuda.ExternalStream(handle, device if device is not None else -1)
    if len(_EXTERNAL_STREAMS) >= _MAX_EXTERNAL_STREAMS:
        _EXTERNAL_STREAMS.clear()
    _EXTERNAL_STREAMS[key] = wrapped
    return wrapped


def _torch_stream(device: int | None):
    import torch

    dev = torch.device("cuda", device) if device is not None else None
    return int(torch.cuda.current_stream(dev).cuda_stream)


class Kernel:
    """A launchable generated kernel: `Kernel(spec, cuda_source)(x, w, out, eps=1e-6)`."""

    def __init__(self, spec: KernelSpec, cuda_source: str, arch: str | None = None,
                 options: tuple = (), cache_dir: str | os.PathLike | None | bool = None,
                 *, backend: str = "nvrtc"):
        """arch None: the launching device's arch. cache_dir None: the default cache
        directory; False: no disk cache. backend: "nvrtc" or "nvcc"."""
        self.spec = spec
        self.source = cuda_source
        self.arch = arch
        self.options = tuple(options)
        self.cache_dir = cache_dir
        self.backend = backend
        self._cubins: dict[str, bytes] = {}
        self._functions: dict[int, tuple[Any, Any]] = {}  # device -> (module, function)
        self._plans: dict[tuple, LaunchPlan] = {}  # plan.signature key -> plan

    def __repr__(self) -> str:
        return f"Kernel({self.spec.name!r}, arch={self.arch!r})"

    # -- compiling and loading -------------------------------------------------------

    def cubin_for(self, arch: str) -> bytes:
        """The compiled cubin for `arch` (compiled, or read from the cache, once)."""
        if arch not in self._cubins:
            self._cubins[arch] = compile_cubin(self.source, arch, self.options, self.cache_dir,
                                               backend=self.backend)
        return self._cubins[arch]

    @property
    def cubin(self) -> bytes:
        """The cubin for `self.arch`, or for the current device when arch is None."""
        return self.cubin_for(self.arch or default_arch())

    def _function(self, device: int):
        """The loaded entry point on `device` (loads the module there on first use)."""
        hit = self._functions.get(device)
        if hit is not None:
            return hit[1]
        import cupy

        with cupy.cuda.Device(device):
            cubin = self.cubin_for(self.arch or default_arch())
            from cupy.cuda import function as cuda_function

            module = cuda_function.Module()
            module.load(cubin)
            fn = module.get_function(self.spec.name)
            if self.spec.smem_bytes > STATIC_SMEM_LIMIT:
                from cupy_backends.cuda.api import driver

                attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
                               _ATTR_MAX_DYNAMIC_SMEM)
                driver.funcSetAttribute(fn.ptr, attr, int(self.spec.smem_bytes))
        self._functions[device] = (module, fn)
        return fn

    # -- launching -------------------------------------------------------------------

    def bind(self, *args, **kwargs) -> BoundArgs:
        """Bind and check arguments (no launch); LaunchError on bad arguments."""
        return bind_arguments(self.spec, args, kwargs)

    def _prepare(self, bound: BoundArgs, stream: Any):
        """(launch thunk) for checked arguments, or None when the grid is empty."""
        if bound.empty:
            return None
        import cupy

        device = _device_index(bound)
        if device is None:
            device = cupy.cuda.Device().id
        if stream is None and bound.uses_torch:
            stream = _external_stream(_torch_stream(device), device)
        else:
            stream = _as_cupy_stream(stream, device)
        fn = self._function(device)
        grid, block = bound.grid, (int(self.spec.threads), 1, 1)
        kargs = kernel_arguments(self.spec, bound)
        smem = int(self.spec.smem_bytes)

        def launch():
            if cupy.cuda.runtime.getDevice() == device:  # already current: no need to switch
                fn(grid, block, kargs, shared_mem=smem, stream=stream)
                return
            with cupy.cuda.Device(device):
                fn(grid, block, kargs, shared_mem=smem, stream=stream)
        return launch, device, stream

    MAX_PLANS = 256

    def __call__(self, *args, stream: Any = None, **kwargs) -> None:
        """Check the arguments and launch asynchronously (skipped when the grid is empty)."""
        launch = driver.launcher()
        sig = signature(args, kwargs) if launch is not None else None
        plan = self._plans.get(sig[0]) if sig is not None else None
        if plan is not None and plan.replay(args, kwargs, sig[1], stream, launch):
            return
        bound = bind_arguments(self.spec, args, kwargs)
        if sig is not None and plan is None:
            plan = self._new_plan(bound, len(args), tuple(kwargs), sig)
            if plan.replay(args, kwargs, sig[1], stream, launch):
                return
        prepared = self._prepare(bound, stream)
        if prepared is not None:
            prepared[0]()

    def replay(self, args: tuple, kwargs: dict, stream: Any = None, one_kind: bool = False) -> bool:
        """Launch through the plan of this call's argument layout if one was made (True), else do nothing
        (False: the caller takes the full path, e.g. `self(*args, **kwargs)`). one_kind: only a plan whose
        arrays are all torch tensors or all CuPy arrays (the stdlib's rule)."""
        launch = driver.launcher()
        if launch is None:
            return False
        sig = signature(args, kwargs)
        if sig is None:
            return False
        plan = self._plans.get(sig[0])
        return (plan is not None and (plan.one_kind or not one_kind)
                and plan.replay(args, kwargs, sig[1], stream, launch))

    def _new_plan(self, bound: BoundArgs, nargs: int, kwnames: tuple, sig: tuple) -> LaunchPlan:
        """The plan of checked arguments `bound` (made from a call of signature `sig`), remembered."""
        if bound.empty:  # nothing to launch: no module to load
            plan = LaunchPlan(self.spec, bound, nargs, kwnames, sig[1], -1, None, None)
        else:
            import cupy

            device = _device_index(bound)
            if device is None:
                device = cupy.cuda.Device().id
            fn = self._function(device)
            plan = LaunchPlan(self.spec, bound, nargs, kwnames, sig[1], device, int(fn.ptr),
                              cupy.cuda.runtime.getDevice)
        if len(self._plans) >= self.MAX_PLANS:
            self._plans.clear()
        self._plans[sig[0]] = plan
        return plan

    def bench(self, *args, warmup: int = 10, rep: int = 100, stream: Any = None, **kwargs) -> float:
        """Median time of one launch in milliseconds, measured with CUDA events."""
        prepared = self._prepare(bind_arguments(self.spec, args, kwargs), stream)
        if prepared is None:
            return 0.0
        import cupy

        launch, device, stream = prepared
        with cupy.cuda.Device(device):
            s = stream if stream is not None else cupy.cuda.get_current_stream()
            for _ in range(max(0, warmup)):
                launch()
            events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(max(1, rep))]
            for start, end in events:
                start.record(s)
                launch()
                end.record(s)
            events[-1][1].synchronize()
            times = [cupy.cuda.get_elapsed_time(start, end) for start, end in events]
        return float(statistics.median(times))
