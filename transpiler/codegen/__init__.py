"""Codegen: the annotated IR -> one self-contained .cu file (and an optional host launcher).

The Jinja templates in `tilex/templates` hold the file and kernel skeletons; `emit.Emitter` (composing
the parts in expr.py, access.py, reduce.py, products.py, matmul.py, stream.py, gather.py) turns each
kernel body into lines; the device helpers (`*.cuh`) a kernel uses are inlined, so the output includes
no tilex file. Output is deterministic: same input, same options, same bytes.
"""
from __future__ import annotations

import dataclasses
import hashlib

from ..version import __version__
from .. import ast as A
from ..exprs import to_c
from ..spec import TMA_DATA_TYPE
from ..types import DType
from .c import rounded_scalar
from .emit import Emitter, reg
from .env import helper as _helper, template

# helper files in the order they must appear (later ones use earlier ones)
HELPER_ORDER = ["tilex_types.cuh", "tilex_fp8.cuh", "tilex_bits.cuh", "tilex_math.cuh", "tilex_reduce.cuh", "tilex_scan.cuh",
                "tilex_mem.cuh", "tilex_atomic.cuh", "tilex_atomic_fetch.cuh", "tilex_mma.cuh", "tilex_shift.cuh", "tilex_gather.cuh", "tilex_stream.cuh", "tilex_sm90.cuh",
                "tilex_tma.cuh", "tilex_tma_store.cuh"]


# the helper file a dtype's storage needs, for the dtypes that have one
DTYPE_HELPERS = {DType.F8E4M3: "tilex_fp8.cuh", DType.F8E5M2: "tilex_fp8.cuh", DType.I8: "tilex_bits.cuh",
                 DType.U8: "tilex_bits.cuh", DType.I16: "tilex_bits.cuh", DType.U16: "tilex_bits.cuh"}


def _dtype_helpers(k: A.Kernel) -> set[str]:
    """The helper files of the dtypes `k` uses: its parameters', and those of values made in the body
    (`.to(f8e4m3)`, `full(u8[...], v)`), which reach the IR only through a dtype or tile-type literal."""
    found = {DTYPE_HELPERS[p.type.dtype] for p in k.params if p.type.dtype in DTYPE_HELPERS}
    todo = [k.body]
    while todo:  # iterative: deeply nested bodies must not exhaust the stack
        n = todo.pop()
        if isinstance(n, (A.DTypeLit, A.TileTypeExpr)) and n.dtype in DTYPE_HELPERS:
            found.add(DTYPE_HELPERS[n.dtype])
        if isinstance(n, (tuple, list)):
            todo.extend(n)
        elif isinstance(n, (A.Expr, A.Stmt, A.Block)):
            todo.extend(getattr(n, f.name) for f in dataclasses.fields(n))
    return found


def _param_decl(p: A.Param) -> str:
    dt = DType(p.type.dtype)
    if p.type.dims is None:
        return f"const {reg(dt)} {p.name}"
    const = "" if p.is_out else "const "
    return f"{const}{dt.ctype}* __restrict__ {p.name}"


def _kernel_param_decl(p: A.Param) -> str:
    """A kernel's parameter: bf16/f16/fp8 scalars arrive as floats under another name (`Emitter.prologue`
    rounds them to their dtype under their own name, as the interpreter does)."""
    if rounded_scalar(p):
        return f"const float tx_arg_{p.name}"
    return _param_decl(p)


def _param_type(p: A.Param) -> str:
    return _param_decl(p).rsplit(" ", 1)[0]


def generate(program: A.Program, options, specs: dict, host: bool = False) -> tuple[str, str | None]:
    source_hash = hashlib.sha256(program.source.encode()).hexdigest()[:16]
    source_name = program.file.replace("\\", "/").rsplit("/", 1)[-1]
    helpers: set[str] = set()
    functions: dict[str, str] = {}
    kernels = []
    for k in program.kernels:
        em = Emitter(k, source_name)
        em.setup()
        em.body()
        helpers |= em.helpers
        functions.update(em.functions)
        helpers |= _dtype_helpers(k)
        params = [_kernel_param_decl(p) for p in k.params] + [f"const int {s}" for s in k.symbols] \
            + [f"const __grid_constant__ tilex_tmap {m.param}" for m in em.tma_maps]
        defines = ", ".join(f"{n}={v}" for n, v in k.defines)
        kernels.append(dict(
            name=k.name, line=k.span.line, threads=k.info.launch_threads, smem=k.info.smem_bytes,
            min_blocks=_min_blocks(k), smem_align=getattr(k.info, "align", 16),
            grid_text=", ".join(specs[k.name].grid), defines=defines,
            params=params, prologue=em.prologue(), body=em.lines,
        ))
    ctx = dict(version=__version__, source_name=source_name, source_hash=source_hash, kernels=kernels,
               helpers=[_helper(h) for h in HELPER_ORDER if h in helpers] + [functions[f] for f in sorted(functions)])
    cuda = template("kernel.cu.j2").render(**ctx)
    host_code = _host(program, specs, ctx) if host else None
    return cuda, host_code


def _min_blocks(k: A.Kernel) -> int | None:
    """`__launch_bounds__`' blocks-per-SM argument: MIN_BLOCKS, else 1 for a warp-specialized kernel."""
    if k.info.min_blocks:
        return k.info.min_blocks
    return 1 if k.info.producers else None


def _host_tma(m, p) -> dict:
    """What host.cu.j2 encodes for TMA map `m` of tensor parameter `p` (a ParamSpec)."""
    dt = DType(p.dtype)
    return dict(param=m.param, tensor=m.tensor, box_rows=m.box_rows, box_cols=m.box_cols,
                type=TMA_DATA_TYPE[dt][0], item=dt.itemsize, rows=p.dims[0], cols=p.dims[1],
                # an N-D map (a streamed loop's ring): the tensor's dims outermost first, the box innermost first
                box=list(m.box), dims=[f"(long long){d}" for d in p.dims])


def _host(program: A.Program, specs: dict, ctx: dict) -> str:
    kernels = []
    for k in program.kernels:
        grid = [to_c(g) for g in k.grid] + ["1LL"] * (3 - len(k.grid))
        host_params = [_param_decl(p) for p in k.params] + [f"long long {s}" for s in k.symbols]
        spec = specs[k.name]
        call_args = [p.name for p in k.params] + [f"(int){s}" for s in k.symbols] + [m.param for m in spec.tma]
        params = {p.name: p for p in spec.params}
        tma = [_host_tma(m, params[m.tensor]) for m in spec.tma]
        cons = []
        for c, spec in zip(k.where, specs[k.name].constraints):
            cons.append(dict(c=to_c(c), text=spec.text))
        kernels.append(dict(
            name=k.name, threads=k.info.launch_threads, smem=k.info.smem_bytes, symbols=k.symbols,
            param_types=[_param_type(p) for p in k.params] + ["const int"] * len(k.symbols) + ["const __grid_constant__ tilex_tmap"] * len(tma),
            tma=tma, min_blocks=_min_blocks(k),
            host_params=host_params, call_args=call_args, constraints=cons, grid_c=grid,
        ))
    return template("host.cu.j2").render(version=ctx["version"], source_name=ctx["source_name"],
                                                    uses_tma=any(k["tma"] for k in kernels),
                                                    uses_tma_nd=any(m["box"] for k in kernels for m in k["tma"]),
                                                    source_hash=ctx["source_hash"], kernels=kernels)
