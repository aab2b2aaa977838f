"""GEMM epilogues: a fusion group that reads a `linear` match's product (and tiles, rows or columns of other
values) becomes that GEMM's epilogue, one generated `.tile` kernel per way the product may run.

Rules (docs/backend.md, "GEMM epilogues"), checked at lowering:
* the product (mm / addmm of a weight [N, K] viewed transposed, K static and a multiple of 8) reaches the group
  only through same-last-dim views, and nothing else reads it or those views;
* the group has no row reduction and no cat, iterates over the product's own shape, and reads every other value
  as rows of that shape, a [..., 1] column, or a vector over the last dim (a bias-like weight) — no gather;
* every group output is stored contiguously with the product's last dim; its leading dims are static, or rank 2,
  or those of a rows input or of the product's input before it was flattened (read at each call).

The product is rounded to its dtype before the epilogue reads it (as eager stores it), so folding changes no
value. The kernels (one source each, named `fused_<hash>` after their text, so kernel_kinds counts them as
generated; tilex.stdlib.linear_epilogue picks one per shape):
  tc     `tile_xwt` (linear.tile's main loop, TMA + wgmma) in linear's tile order, the epilogue on the accumulator
  swap   decode rows: linear_swap's product w @ x.T, the epilogue on its transpose
  sum    the f32 partial products of linear's split-K paths summed, then the epilogue
  apply  the epilogue over the product linear() stored (where the model says a fold would lose)
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass

import torch
from torch.fx import Node

from . import ops
from .fusion import Group, cat_parts, reduction, same_dim, scalar_inputs, tensor_meta
from .match import VIEW_OPS, Match, _is
from .tilegen import _classify, _kdtype, _out_rows, _scalar_dtype, member_expr, scalar_parameters

PATHS = ("tc", "swap", "sum", "apply")


@dataclass(frozen=True)
class Epilogue:
    """A GEMM with its epilogue group: what lowering found (`find`), the kernel sources, and how outputs are
    shaped."""
    x: Node                # the product's [M, K] input
    w: Node                # the weight [N, K]
    bias: Node | None      # addmm's bias [N]
    product: Node          # the mm / addmm node (never stored)
    read_as: Node          # the value the group reads (the product or its last view)
    group: Group
    inputs: tuple          # tilegen Operands: the group's other inputs ("rows" / "vec", last "N" or "1")
    outputs: tuple         # the members stored (graph values others read)
    scalars: tuple         # (node, parameter name, dtype)
    lead_from: int | None  # index of the rows input whose leading dims the outputs take; None: static / rank 2
    sources: dict          # path -> (kernel name, .tile text)
    row_major: bool = False  # w is a plain [K, N] operand (a matmul match: x @ w), not a weight [N, K] viewed .T
    shape_of: Node | None = None  # symbolic leading dims and no rows input: x's source before it was flattened


def _views_to_group(product: Node, owner: dict, reads: set):
    """(group, the node it reads) when `product` reaches exactly one group through same-last-dim views that
    nothing else reads, else None."""
    node = product
    last = tensor_meta(product).shape[-1]
    while True:
        if node in reads:
            return None
        users = list(node.users)
        if users and all(u in owner for u in users) and len({owner[u].id for u in users}) == 1:
            return owner[users[0]], node
        if len(users) != 1 or not _is(users[0], *VIEW_OPS) or not same_dim(tensor_meta(users[0]).shape[-1], last):
            return None
        node = users[0]


def find(mt: Match, owner: dict, reads: set, used_outside) -> Epilogue | None:
    """The epilogue of linear match `mt` (rules above), else None."""
    from .patterns_gemm import _linear_parts

    parts = _linear_parts(mt.root)
    if parts is None or (parts[1] is None) != (mt.kernel == "matmul"):
        return None
    x, w, bias, plain = parts
    row_major = w is None
    if row_major:  # x @ plain [K, N]: the tc kernel only, whose TMA loads want 16-byte rows of it too
        w = plain
        n_ = tensor_meta(w).shape[-1]
        if tensor_meta(w).dim() != 2 or not isinstance(n_, int) or n_ % 8:
            return None
    xm, pm = tensor_meta(x), tensor_meta(mt.root)
    if xm is None or pm is None or xm.dim() != 2 or not isinstance(xm.shape[1], int) or xm.shape[1] % 8 or \
            xm.shape[1] == 0 or \
            xm.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return None
    got = _views_to_group(mt.root, owner, reads)
    if got is None:
        return None
    g, read_as = got
    if g.has_reduction or any(cat_parts(n) is not None or reduction(n) is not None for n in g.nodes):
        return None
    shape = tuple(tensor_meta(read_as).shape)
    if len(shape) != len(g.shape) or not all(map(same_dim, shape, g.shape)):
        return None
    members = set(g.nodes)
    scalar_params = scalar_parameters(g.nodes)
    host = {a for a, _ in scalar_params}
    inputs, seen = [], {read_as}
    for n in g.nodes:
        for a in n.all_input_nodes:
            if a in members or a in seen or a in host:
                continue
            seen.add(a)
            op = _classify(a, g.shape)
            if op.rows not in ("rows", "vec") or op.last not in ("N", "1"):
                return None
            inputs.append(op)
    outputs = tuple(n for n in g.nodes if used_outside(n))
    if not outputs or any(_out_rows(n, len(g.shape)) != "rows" or _classify(n, g.shape).last != "N"
                          for n in outputs):
        return None
    lead_from, shape_of = None, None
    if not (len(g.shape) == 2 or all(isinstance(d, int) for d in g.shape)):
        lead_from = next((i for i, op in enumerate(inputs) if op.rows == "rows" and op.last == "N"
                          and tensor_meta(op.node).dim() == len(g.shape)), None)
        src = x.args[0] if _is(x, *VIEW_OPS) else None  # HF's hidden states [B, T, K] before the [B T, K] view
        sm = tensor_meta(src) if src is not None else None
        if lead_from is None and sm is not None and sm.dim() == len(g.shape) and \
                all(map(same_dim, sm.shape[:-1], g.shape[:-1])):
            shape_of = src
        if lead_from is None and shape_of is None:
            return None  # symbolic leading dims nothing at run time shows
    scalars = tuple((a, p, dt) for (a, dt), p in scalar_params.items())
    epi = Epilogue(x, w, bias, mt.root, read_as, g, tuple(inputs), outputs, scalars, lead_from, {}, row_major,
                   shape_of)
    epi.sources.update(sources(epi))
    return epi


# ------------------------------------------------------------------------------------------- sources

def _read(i: int, op) -> str:
    text = {("rows", "N"): "m : m + BM, n : n + BN", ("rows", "1"): "m : m + BM, 0 : 1",
            ("vec", "N"): "n : n + BN", ("vec", "1"): "0 : 1"}[(op.rows, op.last)]
    dt = tensor_meta(op.node).dtype
    return f"x{i}[{text}]" + (".to(f32)" if dt in ops.FLOAT_DTYPES and dt != torch.float32 else "")


def _body(epi: Epilogue, product: str) -> list:
    """The epilogue's lines: the product (f32, rounded to its dtype as eager stores it), the inputs' tiles, the
    members, the stores."""
    t = ops.DTYPES[tensor_meta(epi.product).dtype]
    lines = [f"    p = ({product}).to({t}).to(f32)" if t != "f32" else f"    p = {product}"]
    names = {epi.read_as: "p"}
    for i, op in enumerate(epi.inputs):  # read where used: the load lands in its consumer's (the accumulator's)
        names[op.node] = _read(i, op)     # layout, where a variable would be converted through shared memory
    params = {(a, dt): p for a, p, dt in epi.scalars}

    def operand(a, member):  # a scalar parameter by the dtype this member reads it as (tilegen's rule)
        if isinstance(a, Node) and a in scalar_inputs(member):
            return params[(a, _scalar_dtype(member, a))]
        return names[a] if isinstance(a, Node) else ops.literal(a)
    for k, n in enumerate(epi.group.nodes):
        lines.append(f"    t{k} = {member_expr(n, names, operand)}")
        names[n] = f"t{k}"
    for k, n in enumerate(epi.outputs):
        dt = ops.DTYPES[tensor_meta(n).dtype]
        val = names[n] + (f".to({dt})" if dt != _kdtype(n) else "")
        lines.append(f"    y{k}[m : m + BM, n : n + BN] = {val}")
    return lines


def _params(epi: Epilogue) -> list:
    out = []
    for i, op in enumerate(epi.inputs):
        dt = ops.DTYPES[tensor_meta(op.node).dtype]
        last = "N" if op.last == "N" else "1"
        out.append(f"x{i}: {dt}[M, {last}]" if op.rows == "rows" else f"x{i}: {dt}[{last}]")
    out += [f"y{k}: out {ops.DTYPES[tensor_meta(n).dtype]}[M, N]" for k, n in enumerate(epi.outputs)]
    return out + [f"{p}: {dt}" for _, p, dt in epi.scalars]


_GEMM_PARAMS = "BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 4, GROUP: int = 8"
_ROW_PARAMS = "BM: int = 16, BN: int = 256"


def sources(epi: Epilogue) -> dict:
    """path -> (kernel name, `.tile` text) for the four ways the product may run."""
    t = ops.DTYPES[tensor_meta(epi.product).dtype]
    bias = epi.bias is not None
    b_param = [f"b: {t}[N]"] if bias else []
    b_tile = "b[n : n + BN][None, :]" + (".to(f32)" if t != "f32" else "")
    rest = _params(epi)
    grid2 = "    grid (cdiv(M, BM) * cdiv(N, BN),)"
    tile_mn = ["    m = (program_id(0) // cdiv(N, BN)) * BM", "    n = (program_id(0) % cdiv(N, BN)) * BN"]
    plus_b = f" + {b_tile}" if bias else ""
    tile_main = "tile_xw" if epi.row_major else "tile_xwt"
    kernels = {
        "tc": ([f"x: {t}[M, K]", f"w: {t}[K, N]" if epi.row_major else f"w: {t}[N, K]", *b_param], _GEMM_PARAMS,
               "    where K % 8 == 0, N % 8 == 0" if epi.row_major else "    where K % 8 == 0", grid2, [
            "    m, n = group_tile(program_id(0), cdiv(M, BM), GROUP * cdiv(N, BN), GROUP=GROUP, BM=BM, BN=BN)",
            f"    acc = {tile_main}(x, w, m, n, 0, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES)"], f"acc{plus_b}"),
        "swap": ([f"x: {t}[M, K]", f"w: {t}[N, K]", *b_param], _GEMM_PARAMS, "    where K % 8 == 0 and M <= BM",
                 "    grid (cdiv(N, BN),)", [
                     "    m = 0", "    n = program_id(0) * BN", "    acc = zeros(f32[BN, BM])",
                     "    for k in pipeline(0, K, BK, stages = STAGES) {",
                     "        acc += w[n : n + BN, k : k + BK] @ x[0 : BM, k : k + BK].T", "    }"],
                 f"acc.T{plus_b}"),
        "sum": (["part: f32[S, M, N]", *b_param], _ROW_PARAMS, None, grid2, [
            *tile_mn, "    acc = zeros(f32[BM, BN])", "    for s in range(0, S) {",
            "        acc += part[s, m : m + BM, n : n + BN]", "    }"], f"acc{plus_b}"),
        "apply": ([f"prod: {t}[M, N]"], _ROW_PARAMS, None, grid2, tile_mn, "prod[m : m + BM, n : n + BN].to(f32)"),
    }
    ops_list = ", ".join(str(n.target).removeprefix("aten.") for n in epi.group.nodes)
    if epi.row_major:  # (linear's decode paths do not apply to a [K, N] operand)
        kernels = {"tc": kernels["tc"]}
    what = {"tc": (f"one pass of {'matmul' if epi.row_major else 'linear'}.tile's {tile_main} (TMA + wgmma), the "
                   "epilogue on the accumulator"),
            "swap": "decode rows, y.T = w @ x.T as linear_swap, the epilogue on its transpose",
            "sum": "the sum of the f32 partial products of a split K, then the epilogue",
            "apply": "the epilogue over the product tilex.stdlib.linear stored"}
    out = {}
    for path, (head, cparams, where, grid, main, product) in kernels.items():
        sig = ",\n    ".join(head + rest)
        body = main + _body(epi, product)

        def text(name, sig=sig, cparams=cparams, where=where, grid=grid, body=body):
            return "\n".join([f"kernel {name}<{cparams}>(\n    {sig})", *([where] if where else []), grid,
                              "{", *body, "}", ""])
        name = "fused_" + hashlib.sha256(text("fused").encode()).hexdigest()[:10]
        header = [f"# {name}: generated by tilex.backend: x @ w{'' if epi.row_major else '.T'}{' + b' if bias else ''} "
                  "with the epilogue of "
                  f"{len(epi.group.nodes)} ATen op(s):", f"#   {ops_list}", f"# path {path}: {what[path]}"]
        lib = "matmul" if epi.row_major else "linear"
        imports = [f'from "{lib}.tile" import {tile_main}', 'import "helpers.tile"'] if path == "tc" else []
        out[path] = (name, "\n".join(header + imports) + "\n" + text(name))
    return out


# ------------------------------------------------------------------------------------------- running

class FusedGemm:
    """A fused GEMM's call on torch tensors (CUDA, or CPU through the interpreter): (x, w, bias, *inputs,
    *scalars) -> (first output, *the others); `launched` collects the kernels for the graph cache's record."""

    def __init__(self, epi: Epilogue):
        self.epi = epi
        self.launched: set | None = None
        self.paths: dict = {}  # path -> calls, for reports and tests
        self.copies = 0        # operands copied because they were not contiguous

    def __call__(self, x, w, bias, *rest):
        from ..stdlib import linear_epilogue as LE
        from . import kernels
        from .generated import _HOST_VALUE

        e = self.epi
        ins, scal = rest[:len(e.inputs)], rest[len(e.inputs):len(e.inputs) + len(e.scalars)]
        like = rest[-1] if e.shape_of is not None else None
        self.copies += sum(not t.is_contiguous() for t in (x, w, *ins))  # Step.copies (Program._run)
        x, w = x.contiguous(), w.contiguous()
        m, k = int(x.shape[0]), int(x.shape[1])
        n = int(w.shape[1] if e.row_major else w.shape[0])
        dt = ops.DTYPES[x.dtype]
        gpu = x.is_cuda
        path, params = _path(e, x if gpu else None, dt, m, n, k, bias is not None)
        self.paths[path] = self.paths.get(path, 0) + 1
        arrays = []
        for op, t in zip(e.inputs, ins):
            t = t.contiguous()
            arrays.append(t.reshape(-1) if op.rows == "vec" else t.reshape(-1, 1 if op.last == "1" else n))
        # outputs first: in the memory plan's regions (arena.providing), before any workspace of the product
        outs = [_alloc(x, (m, n), tensor_meta(o).dtype) for o in e.outputs]
        scalars = {p: _HOST_VALUE[dt_](v.item() if isinstance(v, torch.Tensor) else v)
                   for (_, p, dt_), v in zip(e.scalars, scal)}
        b = [bias.contiguous()] if bias is not None else []
        if path in ("tc", "swap"):
            head = [x, w, *b]
        elif path == "sum":
            head = [LE.partials(x, w, dt, m, n, k, params), *b]
        else:
            head = [LE.product(x, w, bias)]
        name, source = e.sources[path]
        kernels.launch_generated(source, name, _defines(path, params), [*head, *arrays, *outs], scalars,
                                 self.launched)
        lead = _lead(e, ins, like)
        res = tuple(o.reshape(*lead, n) for o in outs)
        return res if len(res) > 1 else res[0]


def _path(e: Epilogue, x2, dt: str, m: int, n: int, k: int, bias: bool) -> tuple[str, dict]:
    """(path, compile-time parameters) for this call: linear_epilogue.choose, or for a row-major operand the tc
    kernel with matmul's tiles (x2 None: the interpreter)."""
    from ..stdlib import linear_epilogue as LE

    if e.row_major:  # (the module: the package's `matmul` is its function; imported with the package)
        _, tiles = sys.modules["tilex.stdlib.matmul"].matmul_plan(dt, m, n, k, bias, x2 is not None)
        return "tc", dict(tiles, GROUP=tiles.get("GROUP", 8))
    path, params, _ = LE.choose(x2, dt, m, n, k, bias)
    return path, params


def _defines(path: str, params: dict) -> dict:
    """The compile-time parameters of `path`'s kernel among `_path`'s (the sum kernel's tiles; the rest tell
    linear_epilogue.partials how to split K)."""
    return {"BM": params["BM"], "BN": params["BN"]} if path == "sum" else params


def _alloc(x: torch.Tensor, shape: tuple, dtype) -> torch.Tensor:
    """An output like x's: on CUDA the stdlib's allocation, on CPU torch's; both in the memory plan's region
    when one is planned (arena.providing)."""
    from ..stdlib import _launch as L
    from .kernels import from_numpy

    if x.is_cuda:
        return L.empty(x, shape, ops.DTYPES[dtype])
    got = L.OUTPUT.fn("numpy", shape, ops.DTYPES[dtype]) if L.OUTPUT.fn is not None else None
    return from_numpy(got) if got is not None else torch.empty(shape, dtype=dtype)


def _lead(e: Epilogue, ins, like) -> tuple:
    """The outputs' leading dims at this call."""
    if e.lead_from is not None:
        return tuple(ins[e.lead_from].shape[:-1])
    if like is not None:
        return tuple(like.shape[:-1])
    shape = e.group.shape
    return (-1,) if len(shape) == 2 else tuple(int(d) for d in shape[:-1])


def prewarm_jobs(steps, like) -> list:
    """(label, resolve) per distinct kernel the fused GEMMs of `steps` with static shapes will launch on `like`'s
    device (the path linear_epilogue.choose picks there), for Program.prepare's build pool: resolve() translates and
    returns the variant the launch will pick (prewarm.py's way). The sum and apply paths' library kernels are left to
    their first launch."""
    from .prewarm import _Arg, _static

    jobs, seen = [], set()
    for s in steps:
        if s.kind != "library" or not isinstance(s.match.call, FusedGemm):
            continue
        e = s.match.call.epi
        x, w = _static(e.x), _static(e.w)
        if x is None or w is None:
            continue
        (m, k), n = x, (w[1] if e.row_major else w[0])
        dt = ops.DTYPES[tensor_meta(e.x).dtype]
        path, params = _path(e, like, dt, m, n, k, e.bias is not None)
        params = _defines(path, params)
        if path == "sum":
            head = [_Arg((1, m, n))]  # (the number of shares is not part of the variant)
        else:
            head = [_Arg((m, n))] if path == "apply" else [_Arg((m, k)), _Arg((k, n) if e.row_major else (n, k))]
        if e.bias is not None and path != "apply":
            head.append(_Arg((n,)))
        ins = [_Arg((n,) if op.last == "N" else (1,)) if op.rows == "vec" else
               _Arg((m, n if op.last == "N" else 1)) for op in e.inputs]
        name, source = e.sources[path]
        items = tuple(sorted(params.items()))
        if (source, items, m, n, k) in seen:
            continue
        seen.add((source, items, m, n, k))
        args = (*head, *ins, *(_Arg((m, n)) for _ in e.outputs))
        scalars = {p: 0.0 if dt_ == "f32" else 0 for _, p, dt_ in e.scalars}
        jobs.append((f"{name} ({path}) {m}x{n}x{k}", _resolver_of(source, items, name, args, scalars)))
    return jobs


def _resolver_of(source: str, items: tuple, name: str, args: tuple, scalars: dict):
    def resolve():
        from . import kernels

        k = kernels.module(source, items).kernel(name)
        return k.variant_for(*args, **scalars) if hasattr(k, "variant_for") else k
    return resolve


def fold(matches: list, groups: list) -> tuple[list, list]:
    """Replace each linear match whose product feeds a fusible group (rules above) and that group by one match of
    the fused GEMM: (matches, groups) after folding. A member is a group output when a library kernel or a node
    outside its group reads it (Program.lower's rule for generated groups)."""
    owner = {n: g for g in groups for n in g.nodes}
    reads = {a for m in matches for a in m.args if isinstance(a, Node)}

    def used_outside(n) -> bool:
        return n in reads or any(owner.get(u) is not owner[n] for u in n.users)
    out, gone = [], set()
    for mt in matches:
        epi = find(mt, owner, reads, used_outside) if mt.kernel in ("linear", "matmul") else None
        if epi is None or epi.group.id in gone:
            out.append(mt)
            continue
        gone.add(epi.group.id)
        inside = set(epi.group.nodes) - set(epi.outputs)
        views, v = set(), epi.read_as
        while v is not epi.product:
            views.add(v)
            v = v.args[0]
        args = [epi.x, epi.w, epi.bias, *(op.node for op in epi.inputs), *(a for a, _, _ in epi.scalars),
                *([epi.shape_of] if epi.shape_of is not None else [])]
        out.append(Match(f"{mt.kernel} + epilogue ({epi.sources['tc'][0]})", epi.outputs[0], args, FusedGemm(epi),
                         mt.interior | {mt.root} | views | inside, native=True, extra=list(epi.outputs[1:]),
                         sources=tuple(epi.sources[p] for p in PATHS if p in epi.sources)))
    return out, [g for g in groups if g.id not in gone]
