"""Registering tilex ops: the `_op` decorator (custom op + inference-only backward), the in-place autograd guard.

No `from __future__ import annotations` here: torch.library reads the annotations as the schema.
"""
import functools
import operator

import torch
from torch import Tensor

from . import _checks as C

NAMESPACE = "tilex"
OPS: dict = {}  # name -> the custom op (torch.ops.tilex.NAME is its OpOverloadPacket)
shown, _shown = C.shown, C._shown  # sizes as messages show them


@torch.library.custom_op(f"{NAMESPACE}::inference_only", mutates_args=())
def inference_only(op: str, grad: Tensor, shape: list[int], dtype: torch.dtype) -> Tensor:
    """The gradient a tilex op's backward returns: raises when it runs (eager, or a compiled backward)."""
    raise RuntimeError(f"{op} is inference-only: no backward")


@inference_only.register_fake
def _(op, grad, shape, dtype):
    return grad.new_empty(shape, dtype=dtype)


def _no_backward(name: str):
    """register_autograd arguments for the op named `name` ("tilex::linear"): the backward of the first input that needs a gradient
    is tilex::inference_only, which raises only when it runs (so a forward with parameters that require
    grad still runs, and still compiles)."""
    def setup_context(ctx, inputs, output):
        ctx.tilex_inputs = [(i, tuple(x.shape), x.dtype) for i, x in enumerate(inputs)
                            if isinstance(x, Tensor)]

    def backward(ctx, *grads):
        out = [None] * len(ctx.needs_input_grad)
        grad = next(g for g in grads if isinstance(g, Tensor))
        for i, shape, dtype in ctx.tilex_inputs:
            if ctx.needs_input_grad[i]:
                out[i] = torch.ops.tilex.inference_only(name, grad, list(shape), dtype)
                break
        return tuple(out)

    return backward, setup_context


_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")  # the autograd kernels of the in-place ops
_AUTOGRAD_KEYS = ("AutogradCPU", "AutogradCUDA")


def forbid_grad_in_place(lib, qualname: str, opname: str) -> None:
    """An autograd kernel for an op that writes its inputs (torch takes no backward formula for those, and
    without one gradients would flow through it as if it were the identity): with grad enabled and a tensor
    argument that requires grad it raises the inference-only error at once; otherwise it runs the op."""
    overload = None

    def autograd(keyset, *args, **kwargs):
        nonlocal overload
        if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                           for a in (*args, *kwargs.values())):
            raise RuntimeError(f"{qualname} is inference-only: no backward (it writes its inputs in place; "
                               "call it under torch.no_grad() or on tensors that do not require grad)")
        if overload is None:
            ns, name = qualname.split("::")
            overload = getattr(getattr(torch.ops, ns), name).default
        with torch._C._AutoDispatchBelowAutograd():
            return overload.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)

    for key in _AUTOGRAD_KEYS:
        lib.impl(opname, autograd, key, with_keyset=True)


def _op(name: str, mutates: tuple = ()):
    """Decorator: define tilex::name from its eager function (signature = schema), record it in OPS."""
    def wrap(fn):
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates)
        if mutates:  # torch takes autograd formulas for functional ops only
            forbid_grad_in_place(_LIB, f"{NAMESPACE}::{name}", name)
        else:
            backward, setup = _no_backward(f"{NAMESPACE}::{name}")
            op.register_autograd(backward, setup_context=setup)
        OPS[name] = op
        return op
    return wrap


def sym_or(*conds):
    """`or` of bools and SymBools without converting a SymBool to bool (which would guard on it)."""
    return functools.reduce(operator.or_, conds)


def _one_of(v, allowed):
    """v (an int or SymInt) equals one of `allowed`, as a (Sym)Bool."""
    return sym_or(*(v == a for a in allowed))
