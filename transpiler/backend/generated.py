"""Running a generated step (a fusion group's `.tile` kernel): its operands viewed as the kernel reads them,
its outputs allocated (in the arena when planned), the launch.

What a launch derives from its inputs (the iteration shape, each operand's rows view or `gather` strides,
the launch scalars, the tile configuration, the output shapes, the kernel object) depends only on the inputs'
layouts, so it is worked out once per layout (shape, strides, dtype, device of every input) and kept on the
step as a launch plan (`Step.plans`, 8 layouts at most). A call then only makes the views (`as_strided`
with the plan's sizes and strides), allocates the outputs and launches. An input the kernel cannot read in
place (a last dim that is not contiguous, strides that are not whole rows) is copied first, and an input on
another device moved (a 0-d CPU number next to device tensors is a scalar parameter instead, below), on
every call; each counts in `Step.copies`.

Scalar parameters read from graph values (`GeneratedKernel.scalars`: a SymInt such as StaticCache's
`kv_length`, a `sym_float`, a 0-d CPU tensor next to device tensors) are not part of the plan: their values
are read from the environment at every call and passed with the plan's launch scalars. A group with a row
reduction over a symbolic last dim checks the row's length at each new layout: longer than
`fusion.MAX_ROW` (a whole row no longer fits one tile), that layout's calls run the group's ATen ops in
eager, counted in `Step.fallbacks`.
"""
from __future__ import annotations

import math

import torch

from . import kernels
from .cachegen import rows_view
from .eager import eager_nodes
from .fusion import MAX_ROW, tensor_meta
from .tilegen import GeneratedKernel, storage_order, tile_config

MAX_PLANS = 8


def run_generated(step, env: dict, launched: set | None = None, arena=None) -> int:
    """Launch `step`'s generated kernel on the values in `env`; the number of inputs it had to copy."""
    k = step.kernel
    ins = [env[op.node] for op in k.inputs]
    if k.perm is not None:  # the group iterates in its outputs' storage order: every operand seen in that order
        ins = [_in_order(t, k.rank, k.perm) for t in ins]
    key = tuple((t.shape, t.stride(), t.dtype, t.device) for t in ins)
    plan = step.plans.get(key)
    if plan is None:
        plan = _plan(k, ins, launched)
        if len(step.plans) >= MAX_PLANS:
            step.plans.clear()
        step.plans[key] = plan
    if plan is EAGER:
        step.fallbacks += 1
        _run_eager(step, env)
        return 0
    views, outs, launcher, scalars, device, copies = plan
    if k.scalars:  # values of graph scalars (SymInts, SymFloats): read at every call, never baked in
        scalars = dict(scalars)
        for node, pname, dt in k.scalars:
            v = env[node]
            if isinstance(v, torch.Tensor):  # a 0-d CPU tensor: a host read, no copy to the device
                v = v.item()
            scalars[pname] = _HOST_VALUE[dt](v)
    arrays = [(t if prep == 0 else t.contiguous() if prep == 1 else t.to(device)).as_strided(size, stride)
              for t, (prep, size, stride) in zip(ins, views)]
    for node, alloc, dtype, flat, final, back in outs:
        y = (torch.empty(alloc, dtype=dtype, device=device) if arena is None else
             arena.tensor(node, alloc, dtype, device))
        arrays.append(y.view(flat))
        env[node] = y.permute(*back) if back is not None else y if final is None else y.reshape(final)
    launcher(arrays, scalars)
    return copies


# a scalar parameter's value per dtype; i32 (next to an int32 tensor) wraps as torch's int32 arithmetic does with
# a Python int
_HOST_VALUE = {"f32": float, "i64": int, "i32": lambda v: (int(v) + 2**31) % 2**32 - 2**31}

EAGER = "eager"  # a launch plan meaning: this layout's calls run the group in eager (a row too long for a tile)


def _run_eager(step, env: dict) -> None:
    """The group's ATen ops in torch eager, in graph order, from the values in `env`; its outputs into env."""
    local = eager_nodes(step.nodes, env)
    for op in step.kernel.outputs:
        env[op.node] = local[op.node]


def _plan(k: GeneratedKernel, ins: list, launched: set | None):
    """The launch plan for inputs laid out as `ins`: (per input (prep, size, stride): its view, after `prep`
    0 none, 1 a contiguous copy (a layout the kernel cannot read), 2 a move to the device (a 0-d CPU scalar
    next to CUDA tensors); per output (node, the shape allocated, dtype, flat view, final shape or None, the
    permutation back to the value's dims or None: allocated in eager's storage order); the launcher; the
    launch scalars; the device; how many inputs each call copies or moves), or EAGER: a row reduction whose
    symbolic row is longer than MAX_ROW at this layout."""
    device = next((t.device for t in ins if t.is_cuda), ins[0].device if ins else torch.device("cpu"))
    preps = [2 if t.device != device else 0 for t in ins]
    ins = [t.to(device) for t in ins]
    shape = list(outs_shape(k, ins))
    n, m = shape[-1], math.prod(shape[:-1])
    if k.has_reduction and n > MAX_ROW:  # only a symbolic last dim gets here (fusion.row_ok)
        return EAGER
    views, scalars = [], {}
    for i, (op, t) in enumerate(zip(k.inputs, ins)):
        width = 1 if op.last == "1" else (t.shape[-1] if t.dim() else 1)
        if op.rows == "gather":
            got = rows_view(t, k.rank, width)
            if got is None:
                preps[i] = preps[i] or 1
                t = t.contiguous()
                got = rows_view(t, k.rank, width)
            v, rs = got
            for j, r in enumerate(rs):
                scalars[f"s{i}_{j}"] = r
        else:
            if not t.is_contiguous():
                preps[i] = preps[i] or 1
                t = t.contiguous()
            v = t.reshape(width) if op.rows == "vec" else t.reshape(-1, width)
        assert v.storage_offset() == t.storage_offset()  # a view of t's own elements, from where t starts
        views.append((preps[i], tuple(v.shape), tuple(v.stride())))
    if any(op.rows == "gather" for op in k.inputs) or any(op.rows == "scatter" for op in k.outputs):
        p = 1
        for j in range(k.rank - 2, -1, -1):
            scalars[f"d{j}"], scalars[f"p{j}"] = shape[j], p
            p *= shape[j]
    outs = []
    for o, op in enumerate(k.outputs):
        meta = tensor_meta(op.node)
        oshape = shape[:-1] + [n if op.last == "N" else 1]
        alloc, final, back = oshape, None, None
        if k.perm is not None:  # iterated in storage order: plain rows, seen through the inverse permutation
            back = _inverse(k.perm)
        elif op.rows == "scatter":  # allocated in eager's storage order; the row strides of that layout
            perm = storage_order(meta)
            alloc, back = [oshape[j] for j in perm], _inverse(perm)
            y = torch.empty(alloc, device="meta").permute(*back)
            for j in range(k.rank - 1):
                scalars[f"o{o}_{j}"] = 0 if oshape[j] == 1 else y.stride(j) // oshape[-1]   # 0 for a size-1 dim
        elif len(oshape) != meta.dim():  # the group's rank differs from the value's: reshaped after the launch
            want = [int(d) if isinstance(d, int) else -1 for d in meta.shape]
            final = list(torch.empty(oshape, device="meta").reshape(want).shape)
        outs.append((op.node, alloc, meta.dtype, (m, oshape[-1]), final, back))
    launcher = kernels.generated_launcher(k.source, k.name, tile_config(m, n, k.has_reduction), launched,
                                          device.type == "cuda")
    return views, outs, launcher, scalars, device, sum(p != 0 for p in preps)


def _in_order(t: torch.Tensor, rank: int, perm: tuple) -> torch.Tensor:
    """t (broadcast to `rank` dims by leading size-1 dims) with its dims in the group's iteration order."""
    if t.dim() < rank:
        t = t[(None,) * (rank - t.dim())]
    return t.permute(*perm)


def _inverse(perm: list) -> list:
    inv = [0] * len(perm)
    for i, j in enumerate(perm):
        inv[j] = i
    return inv


def outs_shape(k: GeneratedKernel, ins: list) -> tuple:
    """The iteration shape at run time: the inputs broadcast, a cat's sources counted by the cat's width."""
    shapes = []
    for op, t in zip(k.inputs, ins):
        s = list(t.shape)
        if op.last not in ("N", "1") and s:
            s[-1] = 1  # a cat source: its width is not the group's
        shapes.append(tuple(s))
    shape = list(torch.broadcast_shapes(*shapes))
    shape = [1] * (k.rank - len(shape)) + shape
    if k.cat_width is not None:
        shape[-1] = k.cat_width
    return tuple(shape)
