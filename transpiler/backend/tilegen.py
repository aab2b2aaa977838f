"""Emit a fusion group as `.tile` source: one kernel over the group's iteration shape viewed as
rows x columns ([M, N]: N the last dim, M the product of the others), RB rows and CB columns per
tile, every value computed in f32 (ints and bools as they are) and rounded once at the store.

A host number the graph computes (a SymInt / SymFloat node: StaticCache's `kv_length`, `sym_float(s)`) is a
scalar parameter `a{j}` read at each launch (generated.py), not a literal: one kernel serves every value.

Each input is read in one of six ways, fixed by which of its dims broadcast (docs/backend.md):
  rows  x[r : r + RB, c : c + CB]     same leading dims as the group
  col   x[r : r + RB, 0 : 1]          last dim 1
  vec   x[c : c + CB] / x[0 : 1]      all leading dims 1 (a weight, a bias, a scalar)
  gather x[g, c : c + CB]             some leading dims broadcast: row g of x computed from the
                                      group row by the dims d_j, their products p_j and x's
                                      row strides s{i}_{j} (0 where x broadcasts), launch scalars

Each output is stored as rows `y[r : r + RB, c : c + CB]` when eager gives it a contiguous layout, else (a
dense permutation of the dims with the last one innermost: an elementwise op over a transposed view, as HF's
rotary embedding of q and k is) through row offsets from its own row strides o{k}_{j}
(`y[go, c : c + CB, distinct = True]`), so the value has the strides eager's would have and the kernel that
reads it next (attention over token-major q, k) needs no copy. When every output has one such layout, the group
iterates its dims in that storage order instead (`GeneratedKernel.perm`): the outputs are stored as plain rows,
consecutive in memory, and every input that is not a `vec` is read as `gather` through its strides in that order.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch.fx import Node

from . import ops
from .fusion import (Group, cat_parts, member_inputs, reduction, same_dim, scalar_inputs, scalar_node, template,
                     tensor_meta)


@dataclass(frozen=True)
class Operand:
    node: Node
    rows: str   # "rows" | "vec" | "gather"
    last: str   # "N" | "1" | a static width (a cat's source)


@dataclass(frozen=True)
class GeneratedKernel:
    name: str
    source: str
    rank: int
    inputs: tuple        # Operand per kernel input, in parameter order
    outputs: tuple       # Operand per kernel output (rows "rows", or "scatter": eager's layout is permuted)
    has_reduction: bool  # whole rows in one tile (a row reduction or a cat)
    members: tuple       # the ATen targets, for reports
    perm: tuple | None = None  # the iteration order of the dims (the outputs' storage order) when not the logical one
    cat_width: int | None = None  # the static last dim when the group has a cat (not from its inputs)
    shape: tuple = ()    # the group's iteration shape (meta sizes: ints, or SymInts under dynamic=True)
    scalars: tuple = ()  # (node, parameter name, tilex dtype) per scalar parameter read from a graph value per call

    def static_launch(self) -> tuple[int, int] | None:
        """(m, n) of the launch when the shape is static (the kernel can be built before the first call)."""
        if not self.shape or not all(isinstance(d, int) for d in self.shape):
            return None
        n = self.cat_width if self.cat_width is not None else self.shape[-1]
        m = 1
        for d in self.shape[:-1]:
            m *= d
        return m, n


def _classify(node: Node, shape: tuple) -> Operand:
    s = tuple(tensor_meta(node).shape)
    s = (1,) * (len(shape) - len(s)) + s
    if same_dim(s[-1], shape[-1]) and not same_dim(s[-1], 1):
        last = "N"
    elif same_dim(s[-1], 1):
        last = "1"
    else:
        last = str(int(s[-1]))
    lead, glead = s[:-1], shape[:-1]
    if not _contiguous(node):
        rows = "gather"  # a strided view: rows found through its strides (no copy)
    elif all(same_dim(a, b) for a, b in zip(lead, glead)):
        rows = "rows"
    elif all(same_dim(a, 1) for a in lead):
        rows = "vec"
    else:
        rows = "gather"
    return Operand(node, rows, last)


def _out_rows(node: Node, rank: int) -> str:
    """"rows" when the value is stored contiguously, "scatter" when eager lays it out as a dense permutation of
    its dims with the last one innermost (static strides only: a symbolic layout stays contiguous)."""
    v = tensor_meta(node)
    sizes, strides = list(v.shape), list(v.stride())
    if v.dim() != rank or rank < 3 or not all(type(d) is int for d in sizes + strides):
        return "rows"   # (int() of a SymInt would specialize the graph to one size)
    if v.is_contiguous():
        return "rows"
    if sizes[-1] < 2 or strides[-1] != 1:
        return "rows"
    expect = 1  # dense: each dim's stride the product of the sizes inside it, in storage order
    for j in reversed(storage_order(v)):
        if sizes[j] != 1 and strides[j] != expect:
            return "rows"
        expect *= sizes[j]
    return "scatter"


def storage_order(t) -> list:
    """t's dims from outermost to innermost in memory (size-1 dims keep their place): the permutation a dense
    tensor of eager's layout is allocated in."""
    dims = list(range(t.dim()))
    big = sorted((j for j in dims if t.shape[j] != 1), key=lambda j: -int(t.stride()[j]))
    it = iter(big)
    return [j if t.shape[j] == 1 else next(it) for j in dims]


def _contiguous(node: Node) -> bool:
    try:
        return bool(tensor_meta(node).is_contiguous())
    except Exception:  # a symbolic layout it cannot decide: read through strides
        return False


def _scalar_dtype(member: Node, a: Node) -> str:
    """The dtype scalar operand `a` of `member` is passed as, following torch's rule for a number (or a 0-d
    tensor) next to a tensor (it takes the tensor's dtype within its kind): f32 for a float value or a float
    tensor operand, else the result's int dtype (a comparison: its widest int tensor operand's; bools: i64)."""
    v = a.meta.get("val")
    if isinstance(v, (float, torch.SymFloat)) or (isinstance(v, torch.Tensor) and v.dtype in ops.FLOAT_DTYPES):
        return "f32"
    device = tensor_meta(member).device
    tens = [tensor_meta(x) for x in member.args if isinstance(x, Node) and not scalar_node(x, device)]
    if any(t.dtype in ops.FLOAT_DTYPES for t in tens):
        return "f32"
    out = tensor_meta(member).dtype
    if out in (torch.int32, torch.int64):
        return ops.DTYPES[out]
    ints = [t.dtype for t in tens if t.dtype in (torch.int32, torch.int64)]
    return "i64" if not ints or torch.int64 in ints else "i32"


def _kdtype(node: Node) -> str:
    """The dtype a value has inside the kernel: f32 for floats, else its own."""
    dt = tensor_meta(node).dtype
    return "f32" if dt in ops.FLOAT_DTYPES else ops.DTYPES[dt]


def generate(group: Group, name: str | None, used_outside) -> GeneratedKernel:
    """The kernel for `group`; `used_outside(node)` tells which members are group outputs.

    name None: `fused_<hash>` of the kernel's text, so that the same group in every layer is one
    source (one translation, one binary); the header names the ATen ops, not the graph's nodes."""
    members = set(group.nodes)
    shape = group.shape
    rank = len(shape)
    inputs: list[Operand] = []
    seen: dict[Node, str] = {}
    plain_use: set = set()   # inputs read unshifted (everything but a cat's sources)
    scalar_params = scalar_parameters(group.nodes)  # (node, dtype) -> parameter name
    for n in group.nodes:
        host = set(scalar_inputs(n))
        if cat_parts(n) is None:
            plain_use |= set(n.all_input_nodes) - host
        for a in member_inputs(n):
            if a not in members and a not in seen and a not in host:
                seen[a] = f"x{len(inputs)}"
                inputs.append(_classify(a, shape))
    outputs = [Operand(n, _out_rows(n, rank), _classify(n, shape).last) for n in group.nodes if used_outside(n)]
    perm = None
    scattered = bool(outputs) and all(op.rows == "scatter" for op in outputs)  # (static layouts only)
    orders = {tuple(storage_order(tensor_meta(op.node))) for op in outputs} if scattered else set()
    if scattered and len(orders) == 1:
        # every output in one permuted layout: iterate in that order instead (rows consecutive in the outputs'
        # memory, stored as plain rows; the inputs read through their strides in the same order)
        perm = orders.pop()
        outputs = [Operand(op.node, "rows", op.last) for op in outputs]
        inputs = [Operand(op.node, "gather", op.last) if op.rows == "rows" else op for op in inputs]
    n_bound = any(op.last == "N" for op in (*inputs, *outputs))
    ncols = "N" if n_bound else "1"

    params, scalars, body = [], [], []
    gathers = [i for i, op in enumerate(inputs) if op.rows == "gather"]
    scatters = [k for k, op in enumerate(outputs) if op.rows == "scatter"]
    for i, op in enumerate(inputs):
        dt = ops.DTYPES[tensor_meta(op.node).dtype]
        last = ncols if op.last == "N" else op.last
        dims = {"rows": f"[M, {last}]", "vec": f"[{last}]", "gather": f"[M{i}, {last}]"}[op.rows]
        params.append(f"x{i}: {dt}{dims}")
    for k, op in enumerate(outputs):
        dt = ops.DTYPES[tensor_meta(op.node).dtype]
        params.append(f"y{k}: out {dt}[M, {ncols if op.last == 'N' else '1'}]")
    scalars += [f"{pname}: {dt}" for (_, dt), pname in scalar_params.items()]
    if gathers or scatters:
        for j in range(rank - 1):
            scalars += [f"d{j}: i32", f"p{j}: i32"]
        for i in gathers:
            scalars += [f"s{i}_{j}: i32" for j in range(rank - 1)]
        for k in scatters:
            scalars += [f"o{k}_{j}: i32" for j in range(rank - 1)]

    body.append("    r = program_id(0) * RB")
    if gathers or scatters:
        body.append("    rows = r + arange(0, RB)")
        for i in gathers:
            terms = " + ".join(f"((rows // p{j}) % d{j}) * s{i}_{j}" for j in range(rank - 1))
            body.append(f"    g{i} = {terms}")
        for k in scatters:  # the group's rows in order, stored where eager's layout puts them (rows past M: M,
            #                   outside the tensor, so the store skips them)
            terms = " + ".join(f"((rows // p{j}) % d{j}) * o{k}_{j}" for j in range(rank - 1))
            body.append(f"    go{k} = where(rows < M, {terms}, M)")
    body.append(f"    for c in range(0, {ncols}, CB) {{")
    if group.has_reduction:
        body.append("        cols = c + arange(0, CB)")
    names: dict[Node, str] = {}
    index = {op.node: i for i, op in enumerate(inputs)}

    def read(i: int, shift: int | None = None) -> str:
        op = inputs[i]
        if shift is not None:
            c0 = f"c + {shift}" if shift >= 0 else f"c - {-shift}"
            cs = f"{c0} : {c0} + CB"
        else:
            cs = "0 : 1" if op.last == "1" else "c : c + CB"
        text = {"rows": f"x{i}[r : r + RB, {cs}]", "vec": f"x{i}[{cs}]", "gather": f"x{i}[g{i}, {cs}]"}[op.rows]
        if tensor_meta(op.node).dtype in ops.FLOAT_DTYPES and tensor_meta(op.node).dtype != ops.torch.float32:
            text += ".to(f32)"
        return text

    for i, op in enumerate(inputs):
        if op.node in plain_use:
            body.append(f"        v{i} = {read(i)}")
        names[op.node] = f"v{i}"

    def operand(a, member: Node) -> str:
        if a in scalar_inputs(member):
            return scalar_params[(a, _scalar_dtype(member, a))]
        return names[a] if isinstance(a, Node) else ops.literal(a)

    for k, n in enumerate(group.nodes):
        red = reduction(n)
        cat = cat_parts(n)
        if cat is not None:
            parts = cat[0]
            vals = []
            for j, part in enumerate(parts):
                body.append(f"        t{k}_{j} = {read(index[part.src], part.shift)}")
                vals.append(f"(-t{k}_{j})" if part.negate else f"t{k}_{j}")
            expr = vals[-1]
            for part, v in zip(reversed(parts[:-1]), reversed(vals[:-1])):
                expr = f"where(cols < {part.hi}, {v}, {expr})"
        elif red is not None:
            fn, pad = red
            src = names[n.args[0]]
            masked = f"where(cols < {ncols}, {src}, {pad})"
            expr = (f"sum({masked}, axis=-1, keepdims=True) / {ncols}" if fn == "mean"
                    else f"{fn}({masked}, axis=-1, keepdims=True)")
        else:
            expr = member_expr(n, names, operand)
        names[n] = f"t{k}"
        body.append(f"        t{k} = {expr}")
    for k, op in enumerate(outputs):
        dt = ops.DTYPES[tensor_meta(op.node).dtype]
        val = names[op.node]
        if dt != _kdtype(op.node):
            val += f".to({dt})"
        cs = "c : c + CB" if op.last == "N" else "0 : 1"
        where = f"go{k}, {cs}, distinct = True" if op.rows == "scatter" else f"r : r + RB, {cs}"
        body.append(f"        y{k}[{where}] = {val}")
    body.append("    }")

    targets = tuple(str(n.target) for n in group.nodes)
    sig = ",\n    ".join(params + scalars)

    def text(kname: str) -> str:
        return "\n".join([f"kernel {kname}<RB: int = 1, CB: int = 8>(\n    {sig})",
                          "    grid (cdiv(M, RB),)", "{", *body, "}", ""])
    if name is None:
        name = "fused_" + hashlib.sha256(text("fused").encode()).hexdigest()[:10]
    header = [f"# {name}: generated by tilex.backend from {len(group.nodes)} ATen op(s):",
              "#   " + ", ".join(str(n.target).removeprefix("aten.") for n in group.nodes)]
    source = "\n".join(header) + "\n" + text(name)
    cat_width = int(shape[-1]) if any(cat_parts(n) is not None for n in group.nodes) else None
    return GeneratedKernel(name, source, rank, tuple(inputs), tuple(outputs), group.has_reduction, targets, perm,
                           cat_width, tuple(shape), tuple((a, p, dt) for (a, dt), p in scalar_params.items()))


def member_expr(n: Node, names: dict, operand) -> str:
    """The tile expression of elementwise or cast member `n` (not a reduction, not a cat), in f32 for floats:
    `names` maps the values it reads to their tile names, `operand(a, n)` names any other argument (a scalar
    parameter, a literal). A cast to bf16 / f16 rounds to that dtype and carries the value on in f32."""
    if template(n) == "cast":
        dt = ops.DTYPES[tensor_meta(n).dtype]
        expr = f"{names[n.args[0]]}.to({dt})"
        return expr + ".to(f32)" if dt in ("bf16", "f16") else expr
    return template(n).format(*(operand(a, n) for a in n.args))


def scalar_parameters(nodes) -> dict:
    """(graph value, dtype) -> parameter name `a{j}` for the scalar parameters members `nodes` read, in argument
    order (the names do not depend on hashing)."""
    params: dict = {}
    for n in nodes:
        for a in scalar_inputs(n):
            params.setdefault((a, _scalar_dtype(n, a)), f"a{len(params)}")
    return params


def tile_config(m: int, n: int, has_reduction: bool) -> dict:
    """RB and CB for a launch over [m, n]: whole rows (reductions) or 1024-column chunks, ~2048+ elements a tile."""
    def pow2(x):
        return 1 << max(0, int(x) - 1).bit_length()
    cb = max(8, pow2(n)) if has_reduction else max(8, min(pow2(n), 1024))
    rb = max(1, min(pow2(max(m, 1)), max(1, 4096 // cb)))
    return {"RB": rb, "CB": cb}
