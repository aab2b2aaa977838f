"""The compile-run-compare harness shared by `tilex run` and `tilex tune`: one launch's host inputs for a
kernel's spec (`Problem`, `pick_kernel`), the interpreter's reference outputs, the comparison of outputs with it, and the
work a launch does (bytes, matmul flop) for its rates.

NumPy-only (no CuPy): the device side stays with the callers (`tilex run` launches once through
`tilex.runtime.Kernel`, `tilex tune` through a `tune.Runner`). Bad inputs raise `InputError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .diagnostics import TilexError
from .explain import has_matmul
from .inputs import InputError, compare, load_input, make_inputs, resolve_symbols, tensor_bytes
from .spec import KernelSpec, ParamKind


@dataclass
class Problem:
    """The host data of one launch: every symbol's size, the arrays (outputs too, randomly filled so that
    backends agree where a kernel does not write), the scalars, and the outputs with their dtypes."""

    symbols: dict[str, int]
    arrays: dict[str, np.ndarray]
    scalars: dict[str, Any]
    outputs: dict[str, str]  # output tensor name -> dtype name, in parameter order

    @property
    def elements(self) -> int:
        return sum(a.size for a in self.arrays.values())


def pick_kernel(names, file: str, kernel: str | None = None, error: type[Exception] = TilexError) -> str:
    """`kernel` if given, else the file's only kernel; `error` saying which to choose when there are several."""
    if kernel is not None:
        return kernel
    names = list(names)
    if len(names) == 1:
        return names[0]
    if not names:
        raise error(f"{file}: no kernels")
    raise error(f"{file} has {len(names)} kernels ({', '.join(names)}): choose one with --kernel NAME")


def load_inputs(spec: KernelSpec, files: Mapping[str, str]) -> dict[str, np.ndarray]:
    """`--input NAME=FILE.npy` arrays for the tensor parameters of `spec` (dtype and shape checked)."""
    params = {p.name: p for p in spec.params}
    loaded = {}
    for pname, path in files.items():
        p = params.get(pname)
        if p is None:
            raise InputError(f"--input {pname}=...: kernel {spec.name} has no parameter '{pname}' "
                             f"(parameters: {', '.join(params)})")
        if p.kind != ParamKind.TENSOR:
            raise InputError(f"--input {pname}=...: '{pname}' is a scalar parameter: pass --arg {pname}=VALUE")
        loaded[pname] = load_input(path, p)
    return loaded


def problem(spec: KernelSpec, shapes: Mapping[str, int], seed: int = 0,
            loaded: Mapping[str, np.ndarray] | None = None, args: Mapping[str, str] | None = None) -> Problem:
    """The launch of `spec` at `shapes` (with the sizes of `loaded` arrays): random inputs from `seed`,
    scalars from `args` (text) or their declared defaults."""
    symbols = resolve_symbols(spec, shapes, loaded)
    arrays, scalars = make_inputs(spec, symbols, seed, loaded, args)
    outputs = {p.name: p.dtype for p in spec.params if p.kind == ParamKind.TENSOR and p.is_out}
    return Problem(symbols, arrays, scalars, outputs)


def reference(program, kernel: str, prob: Problem) -> dict[str, np.ndarray]:
    """{output: array} of the NumPy interpreter running `kernel` of the checked `program` on copies of the inputs."""
    try:
        from . import interp
    except ImportError as e:
        raise TilexError(f"the interpreter is not available in this installation (cannot import tilex.interp: {e})") \
            from None
    local = {k: v.copy() for k, v in prob.arrays.items()}
    interp.launch(program, kernel, **local, **prob.scalars)
    return {n: np.asarray(local[n]) for n in prob.outputs}


def compare_outputs(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], prob: Problem) -> dict[str, dict]:
    """{output: `inputs.compare` of got against want} (max_abs_err, rel_err, tol, ok), in output order."""
    return {n: compare(got[n], want[n], dtype) for n, dtype in prob.outputs.items()}


def work(kernel_ir, spec: KernelSpec, symbols: Mapping[str, int]) -> tuple[int, float | None]:
    """(bytes of every tensor parameter, 2*M*N*K for a kernel with @ and symbols M, N, K else None)."""
    flop = None
    if has_matmul(kernel_ir) and all(s in symbols for s in ("M", "N", "K")):
        flop = 2.0 * symbols["M"] * symbols["N"] * symbols["K"]
    return tensor_bytes(spec, symbols), flop
