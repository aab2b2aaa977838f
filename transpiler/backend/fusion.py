"""Fusion grouping: partition the fusible nodes of an ATen FX graph (elementwise ops, broadcasts,
casts, last-axis row reductions) into groups, each of which becomes one generated kernel.

Rules (docs/backend.md, "Fusion rules"):
* a member's shape has the group's rank and leading dims, and its last dim is the group's or 1
  (a `keepdim=True` row reduction); inputs may broadcast in any dim;
* a row reduction needs the whole row in one tile: a last dim of at most MAX_ROW (a symbolic one is
  checked at each launch: a longer row runs that call in eager, counted in `Step.fallbacks`);
* a host scalar that is a graph value (a SymInt / SymFloat input or size expression: StaticCache's
  `counter.add_(kv_length)`) is a scalar kernel parameter, read at each call;
* a node joins the group of one of its producers unless that would make a cycle (an input of the
  node outside the group depends on the group); otherwise it starts a group.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.fx import Node

from . import ops

MAX_ROW = 16384


def tensor_meta(node) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def iter_shape(v: torch.Tensor) -> tuple:
    """The shape a value has in a fusion group: its own, and (1,) for a 0-d tensor on a device (HF
    StaticCache's `cumulative_length` counter; a 0-d CPU tensor is host work, not a kernel's)."""
    shape = tuple(v.shape)
    return shape if shape or v.device.type == "cpu" else (1,)


def same_dim(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(a) == str(b)


def _node_args(node: Node) -> list:
    return list(node.args) + list(node.kwargs.values())


def _scalar_ok(v) -> bool:
    return isinstance(v, (int, float, bool)) and not isinstance(v, torch.SymInt)


def scalar_node(a, device=None) -> bool:
    """A graph node whose value is a host number: a SymInt or SymFloat (a size input, `sym_size`, host
    arithmetic on sizes, `sym_float`), or, next to tensors on a device (`device` not CPU), a 0-d CPU tensor
    of a number (a folded host constant; a float Dynamo passes as a tensor). A generated kernel reads it as
    a scalar parameter at each call: its value is not part of the kernel (one kernel serves every value)
    and nothing is copied to the device."""
    if not isinstance(a, Node):
        return False
    v = a.meta.get("val")
    if isinstance(v, torch.Tensor):
        return (device is not None and torch.device(device).type != "cpu" and v.dim() == 0
                and v.device.type == "cpu" and v.dtype in ops.DTYPES and v.dtype is not torch.bool)
    return isinstance(v, (torch.SymInt, torch.SymFloat, int, float)) and not isinstance(v, (bool, torch.SymBool))


def scalar_inputs(node: Node) -> list:
    """The operands of fusible member `node` that are scalar parameters (scalar_node), in argument order."""
    val = tensor_meta(node)
    device = val.device if val is not None else None
    return list(dict.fromkeys(a for a in _node_args(node) if scalar_node(a, device)))


def row_ok(last) -> bool:
    """A last dim a row reduction (the whole row in one tile) accepts at lowering: static <= MAX_ROW, or
    symbolic (the launch checks the bound: generated.py)."""
    return not isinstance(last, int) or last <= MAX_ROW


def template(node: Node) -> str | None:
    """The `.tile` template of a fusible elementwise or cast node (None: not fusible)."""
    t = node.target
    val = tensor_meta(node)
    if val is None or val.dtype not in ops.DTYPES:
        return None
    if t in ops.CASTS:  # _to_copy(x, dtype=...) or convert_element_type(x, dtype)
        src = tensor_meta(node.args[0]) if isinstance(node.args[0], Node) else None
        if src is None or src.dtype not in ops.DTYPES or src.device != val.device:
            return None
        if set(node.kwargs) - {"dtype", "device", "layout"} or (t is ops.aten._to_copy.default and len(node.args) > 1):
            return None
        return "cast"
    has_tensor = False
    for a in node.args:
        if scalar_node(a, val.device):
            if t not in ops.ELEMENTWISE:  # only arithmetic and comparisons take a scalar parameter
                return None
        elif isinstance(a, Node):
            has_tensor = True
            m = tensor_meta(a)
            if m is None or m.dtype not in ops.DTYPES or m.device != val.device:
                return None
        elif not _scalar_ok(a):
            return None
    if not has_tensor:
        return None
    if t is torch.ops.aten.clone.default:  # a dense copy (the math SDPA path's contiguous k, v, scores)
        fmt = node.kwargs.get("memory_format")
        if set(node.kwargs) - {"memory_format"} or not (fmt is torch.contiguous_format or val.is_contiguous()):
            return None  # preserve_format of a strided value keeps its strides: not a generated kernel's layout
        return "{0}"
    if t is torch.ops.aten.bmm.default:  # bmm(a [B, M, 1], b [B, 1, N]): an outer product, a * b broadcast
        return "({0} * {1})" if is_outer_product(node) else None
    if t is torch.ops.aten.pow.Tensor_Scalar:
        return ops.pow_template(node.args[1])
    if t is torch.ops.aten.gelu.default:
        return ops.gelu_template(node.kwargs.get("approximate", "none"))
    if t in ops.ELEMENTWISE:
        if node.kwargs.get("alpha", 1) != 1 or set(node.kwargs) - {"alpha"}:
            return None
        return ops.ELEMENTWISE[t]
    return None


def is_outer_product(node: Node) -> bool:
    """bmm(a, b) with a static inner size of 1 (HF's rotary table: inv_freq[None, :, None] @ positions[:, None, :]):
    each output element is one product, so it is elementwise (no GEMM kernel, fused with its neighbours)."""
    if not (node.op == "call_function" and node.target is torch.ops.aten.bmm.default and len(node.args) == 2
            and all(isinstance(a, Node) for a in node.args)):
        return False
    a, b = tensor_meta(node.args[0]), tensor_meta(node.args[1])
    return a is not None and b is not None and a.dim() == 3 and b.dim() == 3 and a.shape[-1] == 1 and b.shape[1] == 1


_SAME_SHAPE_VIEWS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default}


def transpose_outer_products(graph: torch.fx.Graph) -> int:
    """Rewrite transpose(bmm(a, b), 1, 2) of an outer product (HF's rotary table: `(inv_freq[None, :, None] @
    positions[:, None, :]).transpose(1, 2)`) as bmm(b.transpose(1, 2), a.transpose(1, 2)): the same products
    (bit for bit), written in the transposed layout, so the rotary cat reads its `freqs` contiguous instead of
    copying it first (a generated kernel reads a last dim that is not contiguous only after a copy). Only a
    transpose whose every reader is a cat is rewritten: a transpose that reaches a graph output, directly or
    through views, keeps the strides the caller sees. Returns how many were rewritten."""
    done = 0
    aten = torch.ops.aten
    for node in list(graph.nodes):
        if not (node.op == "call_function" and node.target is aten.transpose.int and len(node.args) == 3):
            continue
        src = node.args[0]
        while (isinstance(src, Node) and src.op == "call_function" and src.target in _SAME_SHAPE_VIEWS
               and isinstance(src.args[0], Node) and tensor_meta(src) is not None
               and tensor_meta(src.args[0]) is not None
               and [str(d) for d in tensor_meta(src).shape] == [str(d) for d in tensor_meta(src.args[0]).shape]):
            src = src.args[0]   # matmul's view of its bmm back to the same shape
        if not (isinstance(src, Node) and is_outer_product(src)) or \
                any(u.target is not aten.cat.default for u in node.users):
            continue  # only where every reader is a cat (HF's rotary): a view reaching the output keeps its strides
        if sorted(int(d) % 3 for d in node.args[1:]) != [1, 2]:
            continue
        a, b = src.args
        with graph.inserting_before(node):
            bt = graph.call_function(aten.transpose.int, (b, 1, 2))
            at = graph.call_function(aten.transpose.int, (a, 1, 2))
            prod = graph.call_function(aten.bmm.default, (bt, at))
        bt.meta["val"] = aten.transpose.int(b.meta["val"], 1, 2)
        at.meta["val"] = aten.transpose.int(a.meta["val"], 1, 2)
        prod.meta["val"] = aten.bmm.default(bt.meta["val"], at.meta["val"])
        for n in (bt, at, prod):
            if "stack_trace" in src.meta:
                n.meta["stack_trace"] = src.meta["stack_trace"]
        view = node.args[0]
        node.replace_all_uses_with(prod)
        graph.erase_node(node)
        while isinstance(view, Node) and not view.users:  # the old product and its views, when nothing else reads them
            nxt = view.args[0] if view is not src else None
            graph.erase_node(view)
            view = nxt
        done += 1
    return done


def reduction(node: Node) -> tuple[str, str] | None:
    """(tile reduction, pad) for a last-axis keepdim row reduction over a row of at most MAX_ROW (a symbolic
    length: checked at each launch)."""
    spec = ops.REDUCTIONS.get(node.target)
    val = tensor_meta(node)
    if spec is None or val is None or not node.args or not isinstance(node.args[0], Node):
        return None
    src = tensor_meta(node.args[0])
    if src is None or src.dtype not in ops.FLOAT_DTYPES or val.dtype not in ops.FLOAT_DTYPES:
        return None
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if set(node.kwargs) - {"dim", "keepdim"}:
        return None
    nd = src.dim()
    if nd == 0 or not keep or list(dims or []) not in ([-1], [nd - 1]):
        return None
    if not row_ok(src.shape[-1]):
        return None
    return spec


@dataclass(frozen=True)
class CatPart:
    """Columns [lo, hi) of a last-axis cat are (-)src[..., col + shift] (src read from memory)."""
    src: Node
    lo: int
    hi: int
    shift: int
    negate: bool = False


def _full_slice(node, lo, hi) -> Node | None:
    """x when node = x[..., lo:hi] (aten.slice on the last dim), else None."""
    if not (isinstance(node, Node) and node.op == "call_function" and node.target is torch.ops.aten.slice.Tensor):
        return None
    x = node.args[0]
    m = tensor_meta(x)
    if m is None or m.dim() == 0 or int(node.args[1]) % m.dim() != m.dim() - 1:
        return None
    start = node.args[2] if len(node.args) > 2 else 0
    end = node.args[3] if len(node.args) > 3 else 2 ** 63 - 1
    n = m.shape[-1]
    if not isinstance(n, int) or start != lo or not isinstance(end, int) or min(end, n) != hi:
        return None
    return x


def cat_parts(node: Node) -> tuple[list, set] | None:
    """(parts, absorbed nodes) for a fusible cat along the last dim: HF's rotate_half
    cat([-x[..., h:], x[..., :h]]) (parts read x shifted by +-h; the slices and neg are absorbed)
    or a cat of tensors with static last dims (each read shifted by its offset)."""
    if not (node.op == "call_function" and node.target is torch.ops.aten.cat.default):
        return None
    val = tensor_meta(node)
    if val is None or val.dtype not in ops.DTYPES or val.dim() == 0:
        return None
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if int(dim) % val.dim() != val.dim() - 1 or not isinstance(val.shape[-1], int) or val.shape[-1] > MAX_ROW:
        return None
    parts_in = list(node.args[0])
    if len(parts_in) == 2 and isinstance(parts_in[0], Node) and parts_in[0].op == "call_function" and \
            parts_in[0].target is torch.ops.aten.neg.default:
        n = val.shape[-1]
        h = n // 2
        hi_src = _full_slice(parts_in[0].args[0], h, n)
        lo_src = _full_slice(parts_in[1], 0, h)
        if n % 2 == 0 and hi_src is not None and hi_src is lo_src and tensor_meta(hi_src).shape[-1] == n:
            absorbed = {parts_in[0], parts_in[0].args[0], parts_in[1]}
            return [CatPart(hi_src, 0, h, h, True), CatPart(hi_src, h, n, -h)], absorbed
    parts, off = [], 0
    for a in parts_in:
        m = tensor_meta(a)
        if m is None or m.dtype != val.dtype or m.dim() != val.dim() or not isinstance(m.shape[-1], int):
            return None
        parts.append(CatPart(a, off, off + m.shape[-1], -off))
        off += m.shape[-1]
    return parts, set()


def member_inputs(node: Node) -> list:
    """The values a member reads: a cat's sources (read from memory), else the node's inputs."""
    spec = cat_parts(node)
    if spec is not None:
        return list(dict.fromkeys(p.src for p in spec[0]))
    return list(node.all_input_nodes)


def absorbed_nodes(graph: torch.fx.Graph, excluded: set) -> set:
    """Nodes (rotate_half's slices and neg) that only feed a fusible cat, which reads their source itself."""
    out: set = set()
    for node in graph.nodes:
        if node in excluded:
            continue
        spec = cat_parts(node)
        if spec is None:
            continue
        absorbed = spec[1]
        inside = absorbed | {node}
        if all(all(u in inside for u in a.users) for a in absorbed):
            out |= absorbed
    return out


@dataclass
class Group:
    id: int
    shape: tuple                      # the iteration shape (meta sizes, ints or SymInts)
    nodes: list = field(default_factory=list)
    has_reduction: bool = False

    def fits(self, node: Node, is_reduction: bool) -> bool:
        shape = iter_shape(tensor_meta(node))
        if len(shape) != len(self.shape) or not all(map(same_dim, shape[:-1], self.shape[:-1])):
            return False
        if not (same_dim(shape[-1], self.shape[-1]) or same_dim(shape[-1], 1)):
            return False
        if is_reduction:
            src = tuple(tensor_meta(node.args[0]).shape)
            return len(src) == len(self.shape) and same_dim(src[-1], self.shape[-1])
        return True


def group_nodes(graph: torch.fx.Graph, excluded: set) -> list[Group]:
    """Fusion groups over `graph`'s fusible nodes not in `excluded`, members in graph order.

    A node joins the first producer group it fits without a cycle; the other producer groups
    it fits are merged into that one when no node outside both lies on a path between them
    (so `q * cos + rotate_half(q) * sin` is one kernel, not three).
    """
    group_of: dict[Node, Group] = {}
    deps: dict[Node, frozenset] = {}   # ids of the groups a node depends on (transitively)
    groups: dict[int, Group] = {}
    alias: dict[int, int] = {}         # merged group id -> the group it went into

    def find(i: int) -> int:
        while i in alias:
            i = alias[i]
        return i

    def closure(m: Node) -> set:
        d = {find(i) for i in deps.get(m, ())}
        if m in group_of:
            d.add(group_of[m].id)
        return d

    def outside_inputs(g: Group, other: Group):
        for n in g.nodes:
            for o in member_inputs(n):
                if group_of.get(o) is not g and group_of.get(o) is not other:
                    yield o

    def can_merge(a: Group, b: Group) -> bool:
        if not all(a.fits(n, reduction(n) is not None) for n in b.nodes):
            return False
        if (a.has_reduction or b.has_reduction) and not row_ok(a.shape[-1]):
            return False
        for x, y in ((a, b), (b, a)):  # a cat's sources are read from memory: not from the other group
            if any(group_of.get(p) is y for n in x.nodes if cat_parts(n) for p in member_inputs(n)):
                return False
        return not any(a.id in closure(o) for o in outside_inputs(b, a)) and \
            not any(b.id in closure(o) for o in outside_inputs(a, b))

    for node in graph.nodes:
        inputs = list(node.all_input_nodes)
        deps[node] = frozenset().union(*(closure(m) for m in inputs)) if inputs else frozenset()
        if node.op != "call_function" or node in excluded:
            continue
        red = reduction(node)
        cat = cat_parts(node)
        if red is None and cat is None and template(node) is None:
            continue
        if cat is not None:  # reads its sources from memory: they may not be in its group
            inputs = member_inputs(node)
            red = ("cat", "")  # like a reduction, it needs the whole row in one tile
        chosen = None
        # producer groups over whole rows first, so that a [..., 1] group merges into them
        candidates = sorted(inputs, key=lambda m: m in group_of and same_dim(group_of[m].shape[-1], 1))
        for m in candidates:
            g = group_of.get(m)
            if g is None or g is chosen:
                continue
            if cat is not None:
                continue  # a cat starts its group (its sources are read from memory)
            if chosen is None:
                if not g.fits(node, red is not None) or (red is not None and not row_ok(g.shape[-1])):
                    continue
                if any(group_of.get(o) is not g and g.id in closure(o) for o in inputs):
                    continue
                chosen = g
            elif can_merge(chosen, g) and not any(
                    group_of.get(o) not in (g, chosen) and (g.id in closure(o) or chosen.id in closure(o))
                    for o in inputs):
                for n in g.nodes:
                    group_of[n] = chosen
                chosen.nodes = sorted(chosen.nodes + g.nodes, key=_position(graph))
                chosen.has_reduction |= g.has_reduction
                alias[g.id] = chosen.id
                del groups[g.id]
        if chosen is None:
            shape = iter_shape(tensor_meta(node.args[0] if red is not None and cat is None else node))
            if len(shape) == 0:
                continue
            chosen = Group(len(groups) + len(alias), shape)
            if not chosen.fits(node, red is not None and cat is None):
                continue
            groups[chosen.id] = chosen
        chosen.nodes.append(node)
        chosen.has_reduction |= red is not None
        group_of[node] = chosen
    out = list(groups.values())
    for i, g in enumerate(out):
        g.id = i
    return out


def _position(graph: torch.fx.Graph):
    order = {n: i for i, n in enumerate(graph.nodes)}
    return order.__getitem__
