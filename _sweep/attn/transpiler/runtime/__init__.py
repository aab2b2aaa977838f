"""The CuPy runtime of tilex: compile generated CUDA to a cubin, check arguments, launch.

    from tilex.runtime import Kernel
    k = Kernel(spec, cuda_source)      # compiles lazily, caches cubins on disk
    k(x, w, out, eps=1e-6)             # checks arguments, launches on the GPU

CuPy is imported only when compiling or launching, so this package (and the argument
checks the interpreter shares) imports without CuPy or a GPU.
"""
from __future__ import annotations

from .args import BoundArgs, bind_arguments
from .cache import CacheWarning, default_cache_dir, get_or_build
from .launch import Kernel
from .nvrtc import compile_cubin

__all__ = ["Kernel", "compile_cubin", "bind_arguments", "BoundArgs", "default_cache_dir",
           "get_or_build", "CacheWarning"]
