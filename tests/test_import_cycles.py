"""Import cycles in the `tilex` package (the directory transpiler/), found from the source, not by importing.

`python tests/test_import_cycles.py` lists them: cycles of module-level imports, and those that only
function-level imports (`def f(): from . import x`) hide. A module-level cycle makes the import order
matter; a hidden one is a layering mistake masked by a late import (issue 21: codegen/__init__ -> emit ->
matmul -> codegen/__init__). The tests keep codegen, the passes and the launch spec free of both kinds,
and the whole package free of module-level cycles.
"""
from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "transpiler"


def module_name(path: Path, root: Path = PKG) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["tilex"] + parts)


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom, files) -> list[str]:
    """The modules `from BASE import a, b` needs: BASE.a where that is a submodule, else BASE itself (a name
    its body defines: for a package the importer is in, a real dependency on the package's __init__)."""
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        if sub in files:
            if not _ancestor(sub, mod):  # `from .. import pkg` of the importer's own package: already loading
                out.append(sub)
        else:
            out.append(base)
    if node.module and not _ancestor(base, mod):
        out.append(base)  # `from .a.b import x` runs a (and a.b)
    return out


@lru_cache(maxsize=None)
def import_graph(local: bool, root: Path = PKG) -> dict[str, set[str]]:
    """Module -> the tilex modules it imports (at module level; with `local`, inside functions too).
    `if TYPE_CHECKING:` blocks are not imports at run time and are skipped."""
    files = {module_name(p, root): p for p in root.rglob("*.py") if ".venv" not in p.parts}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        todo = [(n, False) for n in tree.body]
        while todo:
            n, nested = todo.pop()
            if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                continue
            if isinstance(n, (ast.Import, ast.ImportFrom)) and (local or not nested):
                if isinstance(n, ast.Import):
                    names = [a.name for a in n.names if not _ancestor(a.name, mod)]
                else:
                    names = _resolve(mod, is_pkg, n, files)
                graph[mod] |= {x for x in names if x in files and x != mod}
            for child in ast.iter_child_nodes(n):
                inner = nested or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                todo.append((child, inner))
    # importing a submodule runs its package's __init__ first (unless that package is the importer's own:
    # it is initialized, or initializing, before the importer runs)
    for mod in list(graph):
        graph[mod] |= {p for m in list(graph[mod]) for p in [m.rsplit(".", 1)[0]]
                       if p in files and p != mod and not _ancestor(p, mod)}
    return graph


def _ancestor(pkg: str, mod: str) -> bool:
    """`pkg` is a package containing `mod` (`from .. import ast` names the package, which is already loading)."""
    return mod.startswith(pkg + ".")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


OWNED = ("tilex.codegen", "tilex.launchspec", "tilex.passes")


def _touches(comp: list[str]) -> bool:
    return any(m == o or m.startswith(o + ".") for m in comp for o in OWNED)


def test_no_module_level_import_cycles():
    assert cycles(import_graph(local=False)) == []


def test_codegen_passes_and_launchspec_have_no_hidden_cycles():
    """With function-level imports counted too, no cycle runs through codegen, the passes or the launch spec."""
    assert [c for c in cycles(import_graph(local=True)) if _touches(c)] == []


def test_launchspec_does_not_import_codegen():
    g = import_graph(local=True)
    assert not {m for m in g["tilex.launchspec"] if m.startswith("tilex.codegen")}


def test_a_cycle_hidden_by_a_function_level_import_is_found(tmp_path):
    """The shape issue 21 found: pkg/__init__ -> emit -> matmul, and matmul's function does `from . import _env`."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import generate\n")
    (pkg / "sub" / "__init__.py").write_text("from .emit import Emitter\ndef _env():\n    pass\ngenerate = 1\n")
    (pkg / "sub" / "emit.py").write_text("from .. import sub\nfrom .matmul import M\nclass Emitter: pass\n")
    (pkg / "sub" / "matmul.py").write_text("class M:\n    def f(self):\n        from . import _env\n")
    assert cycles(import_graph(local=False, root=pkg)) == []
    assert cycles(import_graph(local=True, root=pkg)) == [["tilex.sub", "tilex.sub.emit", "tilex.sub.matmul"]]


def test_the_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    g = import_graph(local=True)
    assert "tilex.codegen.emit" in g["tilex.codegen"] and "tilex.codegen.expr" in g["tilex.codegen.emit"]


if __name__ == "__main__":
    for local in (False, True):
        found = cycles(import_graph(local))
        print(f"{'with' if local else 'without'} function-level imports: {len(found)} cycle(s)")
        for c in found:
            print("  " + " <-> ".join(c))
