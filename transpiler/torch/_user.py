"""A kernel of your own .tile file as a torch custom op, its fake rule derived from the KernelSpec.

    mod = tilex.compile("examples/rmsnorm.tile", BLOCK=1024)
    rmsnorm = tilex.torch.op(mod, "rmsnorm", name="mylib::rmsnorm")
    y = rmsnorm(x, w, eps=1e-6)          # the `out` parameter y is allocated and returned

The op takes the kernel's non-`out` parameters in order (tensors, then scalars with the source's
defaults) and returns its `out` tensors (one: a Tensor; several: a tuple; none: nothing), shaped from
the symbols the inputs bind. Parameters named in `mutates_args` are declared written in place; an `out`
parameter named there is an input the kernel updates (a cache), not a returned tensor.
The fake rule checks what the launch checks (dtype, rank, fixed sizes, one size per symbol, the
`where` constraints) with the launch's messages, on symbolic sizes under torch.compile(dynamic=True).
"""
from __future__ import annotations

import torch

from ..diagnostics import LaunchError
from ..runtime import args as A
from ..spec import ParamKind
from ..stdlib._launch import _torch_dtype
from ..types import DType
from . import _checks as C
from ._convert import to_numpy
from ._library import _no_backward, forbid_grad_in_place

def _scalar_type(p) -> str:
    """The torch schema type of a scalar parameter, from types.DTYPES (an f8e4m3 scalar is a float)."""
    dt = DType(p.dtype)
    return "bool" if dt.is_bool else "float" if dt.is_float else "int"


def _schema(spec, inputs, outs, mutates) -> str:
    def arg(p):
        if p.kind == ParamKind.TENSOR:
            return f"Tensor{'(a!)' if p.name in mutates else ''} {p.name}"
        default = "" if p.default is None else f"={p.default!r}"
        return f"{_scalar_type(p)} {p.name}{default}"
    ret = "()" if not outs else "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return "(" + ", ".join(arg(p) for p in inputs) + ") -> " + ret


def _out_dims(spec, inputs, outs):
    """Check at op creation that every out dim is a fixed size or a symbol some input binds."""
    bound = {d for p in inputs if p.kind == ParamKind.TENSOR for d in p.dims if isinstance(d, str)}
    for p in outs:
        for i, d in enumerate(p.dims):
            if isinstance(d, str) and d not in bound:
                raise ValueError(f"tilex.torch.op: {spec.name}: the size {d} of out parameter '{p.name}' "
                                 f"(dimension {i}) is bound by no input tensor, so the op cannot allocate it; "
                                 "name that parameter in mutates_args (the op then takes it and writes it in place) "
                                 "or give it a fixed size")


def _bind_fake(spec, inputs, values) -> dict:
    """Symbol -> (Sym)Int from the input tensors, with the launch's checks as trace-time checks."""
    symbols, bound_by = {}, {}
    for p, x in zip(inputs, values):
        if p.kind != ParamKind.TENSOR:
            continue
        got = C.dtype_name(x)
        if got != p.dtype:
            raise LaunchError(A.dtype_message(p, str(x.dtype)))
        if x.dim() != len(p.dims):
            raise LaunchError(A.rank_message(p, C.shown(x.shape)))
        for i, d in enumerate(p.dims):
            n = x.shape[i]
            if isinstance(d, int):
                C.require(n == d, lambda p=p, i=i, n=n, x=x: A.fixed_dim_message(p, i, C._shown(n), C.shown(x.shape)),
                          LaunchError)
            elif d in symbols:
                q, j = bound_by[d]
                C.require(n == symbols[d], lambda d=d, q=q, j=j, p=p, i=i, n=n: A.inconsistent_message(
                    d, q, j, C._shown(symbols[d]), p.name, i, C._shown(n)), LaunchError)
            else:
                symbols[d], bound_by[d] = n, (p.name, i)
    for c in spec.constraints:
        C.require(A.eval_expr(c.py, symbols), lambda c=c: A.constraint_message(
            spec, c, {k: C._shown(v) for k, v in symbols.items()}), LaunchError)
    return symbols


def _symbols(inputs, values) -> dict:
    return {d: int(x.shape[i]) for p, x in zip(inputs, values) if p.kind == ParamKind.TENSOR
            for i, d in enumerate(p.dims) if isinstance(d, str)}


def op(module, kernel: str, name: str, mutates_args=()):
    """Register kernel `kernel` of tilex Module `module` (tilex.compile) as the torch custom op `name`
    ("namespace::opname"); returns the op (callable; also torch.ops.namespace.opname)."""
    if kernel not in module.specs:
        raise ValueError(f"tilex.torch.op: no kernel named '{kernel}' (this module has: {', '.join(module.specs)})")
    if "::" not in name:
        raise ValueError(f"tilex.torch.op: name: expected 'namespace::opname', got {name!r}")
    spec = module.specs[kernel]
    mutates = tuple(mutates_args)
    names = [p.name for p in spec.params if p.kind == ParamKind.TENSOR]
    for m in mutates:
        if m not in names:
            raise ValueError(f"tilex.torch.op: mutates_args: '{m}' is not a tensor parameter of {kernel} "
                             f"({', '.join(names) or 'none'})")
    # an `out` parameter named in mutates_args is an input written in place (a cache), not a new output
    inputs = [p for p in spec.params if not p.is_out or p.name in mutates]
    outs = [p for p in spec.params if p.is_out and p.name not in mutates]
    _out_dims(spec, inputs, outs)

    def shapes(symbols):
        return [tuple(symbols[d] if isinstance(d, str) else d for d in p.dims) for p in outs]

    def values_of(args, kwargs):
        """The inputs in parameter order (the dispatcher may pass some by name, or leave defaults out)."""
        vals = list(args) + [kwargs.get(p.name, p.default) for p in inputs[len(args):]]
        missing = [p.name for p, v in zip(inputs, vals) if v is None]
        if missing:
            raise TypeError(f"{name}: missing argument(s) {', '.join(missing)}")
        return vals

    def impl(*args, **kwargs):
        values = values_of(args, kwargs)
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
        results = [torch.empty(s, dtype=_torch_dtype(p.dtype), device=device)
                   for p, s in zip(outs, shapes(_symbols(inputs, values)))]
        by_name = dict(zip([p.name for p in inputs], values))
        by_name.update(zip([p.name for p in outs], results))
        ordered = [by_name[p.name] for p in spec.params]
        if device.type == "cpu":
            module.interp(kernel, *[to_numpy(v) if isinstance(v, torch.Tensor) else v for v in ordered])
        else:
            module.kernel(kernel)(*ordered)
        return _ret(results)

    def fake(*args, **kwargs):
        values = values_of(args, kwargs)
        symbols = _bind_fake(spec, inputs, values)
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        like = tensors[0]
        return _ret([like.new_empty(s, dtype=_torch_dtype(p.dtype)) for p, s in zip(outs, shapes(symbols))])

    custom = torch.library.custom_op(name, impl, mutates_args=mutates, schema=_schema(spec, inputs, outs, mutates))
    custom.register_fake(fake)
    if mutates:
        ns, opname = name.split("::")
        _LIBS.append(torch.library.Library(ns, "FRAGMENT"))  # kept alive: dropping it unregisters the kernel
        forbid_grad_in_place(_LIBS[-1], name, opname)
    else:
        backward, setup = _no_backward(name)
        custom.register_autograd(backward, setup_context=setup)
    return custom


_LIBS: list = []


def _ret(results):
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


