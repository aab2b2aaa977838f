"""Names a kernel cannot have: they collide with CUDA C++ once the kernel is emitted.

A kernel becomes an `extern "C" __global__` function under its own name (hosts look it up
by that name), in a file that nvcc compiles with the CUDA headers and, through them, the
C library headers. A kernel named like a function there (`norm`, `rsqrt`, `select`), a
type or variable (`float4`, `dim3`, `threadIdx`), a macro (`assert`, `NAN`) or a C++
keyword (`class`, `new`) does not compile, so resolve_names rejects it.

The tables are data (FUNCTIONS in cuda_functions.py, MACROS and DECLARED in
cuda_declared.py), found by compiling one `extern "C" __global__ void NAME(float* x,
const int N) { }` per identifier that appears in the CUDA 13.0 headers (and the host
headers they include on Linux/glibc) with `nvcc -c -arch=sm_90a` and keeping the names
nvcc rejected. KEYWORDS also lists by hand the C++20 keywords (nvcc's default C++17 takes
them as names). Names starting with '_' (and any with '__') are reserved in C++ at global
scope and are rejected by rule, so they are not listed. Regenerate after a CUDA update if
nvcc starts rejecting a name that is not here.
"""
from __future__ import annotations

from .cuda_declared import DECLARED, MACROS
from .cuda_functions import FUNCTIONS


def reserved_reason(name: str) -> str | None:
    """Why `name` cannot be a kernel's CUDA symbol, or None if it can."""
    if name.startswith("_") or "__" in name:
        return "C++ reserves names that start with '_' or contain '__'"
    if name == "main":
        return "'main' is the entry point of a C++ program"
    if name in KEYWORDS:
        return f"'{name}' is a C++ keyword"
    if name in FUNCTIONS:
        return f"the CUDA math API or the C library has a function '{name}'"
    if name in MACROS:
        return f"the CUDA or C library headers define a macro '{name}'"
    if name in DECLARED:
        return f"the CUDA or C library headers declare a type, variable or constant '{name}'"
    return None


# CUDA built-in variables the generated code reads
BUILTIN_VARIABLES: frozenset[str] = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"})


def identifier_reason(name: str) -> str | None:
    """Why `name` cannot be a parameter, variable or shape symbol (a C++ identifier inside the kernel), or None."""
    if name.startswith("_") or "__" in name:
        return "C++ reserves names that start with '_' or contain '__'"
    if name in KEYWORDS and name != "main":
        return f"'{name}' is a C++ keyword"
    if name in MACROS:
        return f"the CUDA or C library headers define a macro '{name}'"
    if name in BUILTIN_VARIABLES:
        return f"'{name}' is a CUDA built-in variable the generated code uses"
    return None


# C++ keywords and alternative tokens (and/or/not are .tile keywords already), and main
KEYWORDS: frozenset[str] = frozenset("""
alignas alignof and_eq asm auto bitand bitor break case catch char char16_t char32_t char8_t class
co_await co_return co_yield compl concept const const_cast consteval constexpr constinit continue
decltype default delete do double dynamic_cast enum explicit export extern false float friend goto
inline int long main mutable namespace new noexcept not_eq nullptr operator or_eq private protected
public register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid typename union
unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())
