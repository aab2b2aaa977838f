"""Resolve a program's `import` lines into the fn helpers each file sees (`scope_of`), and digest the files
a program imports (`import_digest`, part of the translation cache's key).

`import "f.tile"` makes every fn defined in f.tile visible; `from "f.tile" import a, b` only those. A path is
read relative to the importing file's directory ("<string>" source: the current directory), then relative to
the library's stdlib_kernels/ (so any program can `import "helpers.tile"`, the library's shared helpers).
A fn's own calls resolve in the scope of the file that defines it. A missing file, a missing name, two fns
of one name and an import cycle are CompileErrors at the import line.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import ast as A
from .diagnostics import CompileError, remember_source
from .source import read_file


@dataclass(eq=False)
class Helper:
    """One fn and the names visible in the file that defines it (a dict its file's other fns share)."""

    fn: A.Function
    scope: dict = field(repr=False)


def library_dir() -> Path:
    """The library's kernel sources: the installed tilex.stdlib_kernels package, else the source tree's."""
    try:
        import tilex.stdlib_kernels as pkg

        return Path(pkg.__file__).resolve().parent
    except ImportError:  # pragma: no cover - a source tree without the package mapping
        return Path(__file__).resolve().parent.parent / "stdlib_kernels"


def _candidates(imp: A.Import, importer: str) -> list[str]:
    base = os.path.dirname(importer) if not importer.startswith("<") else ""
    return [os.path.normpath(os.path.join(base, imp.path)), str(library_dir() / imp.path)]


def _locate(imp: A.Import, importer: str) -> str:
    tried = _candidates(imp, importer)
    for path in tried:
        if os.path.isfile(path):
            return path
    raise CompileError(f'cannot import "{imp.path}": no such file', imp.span,
                       (f"looked for {tried[0]} (next to the importing file) and in the library's stdlib_kernels/",))


def _load(imp: A.Import, importer: str) -> tuple[str, str]:
    """(file name, text) of the file `imp` names."""
    path = _locate(imp, importer)
    try:
        text, _ = read_file(path, "import")
    except (OSError, ValueError) as e:
        raise CompileError(f'cannot import "{imp.path}": {getattr(e, "reason", e)}', imp.span) from None
    remember_source(path, text)
    return path, text


class _Resolver:
    def __init__(self):
        self.own: dict[str, dict[str, Helper]] = {}  # real path -> the fns a file defines

    def module(self, functions, imports, file: str, stack: tuple[str, ...]) -> tuple[dict, dict]:
        """(the fns `file` defines, every name it sees) as Helpers."""
        from .parser import parse

        scope: dict[str, Helper] = {}
        own: dict[str, Helper] = {}
        for f in functions:
            if f.name in own:
                raise CompileError(f"fn '{f.name}' is defined twice", f.span)
            own[f.name] = scope[f.name] = Helper(f, scope)
        for imp in imports:
            path, text = _load(imp, file)
            real = os.path.realpath(path)
            if real in stack:
                chain = " -> ".join(os.path.basename(p) for p in stack[stack.index(real):] + (real,))
                raise CompileError(f'import cycle: {chain}', imp.span, ("a file cannot import itself, "
                                                                       "directly or through other files",))
            if real not in self.own:
                p = parse(text, path)
                self.own[real] = self.module(p.functions, p.imports, path, stack + (real,))[0]
            theirs = self.own[real]
            wanted = imp.names if imp.names is not None else tuple(theirs)
            spans = imp.name_spans or (imp.span,) * len(wanted)
            for name, span in zip(wanted, spans):
                if name not in theirs:
                    close = difflib.get_close_matches(name, sorted(theirs), n=1)
                    raise CompileError(f'"{imp.path}" has no fn \'{name}\'', span,
                                       (f"did you mean '{close[0]}'?",) if close else
                                       (f"it defines: {', '.join(sorted(theirs)) or 'no fn'}",))
                if name in scope and scope[name] is not theirs[name]:
                    raise CompileError(f"fn '{name}' is defined twice (here and at {scope[name].fn.span})", span)
                scope[name] = theirs[name]
        return own, scope


def scope_of(program: A.Program) -> dict[str, Helper]:
    """Every fn the program's kernels may call, by name."""
    if not program.functions and not program.imports:
        return {}
    real = os.path.realpath(program.file) if not program.file.startswith("<") else program.file
    return _Resolver().module(program.functions, program.imports, program.file, (real,))[1]


_IMPORT_LINE = re.compile(r'^[ \t;]*(?:import|from)[ \t]+"([^"\n]*)"', re.MULTILINE)


def import_digest(source: str, file: str) -> str:
    """sha256 over the name and text of every file `source` imports, transitively; "" when it imports none.

    Read from the import lines by a pattern, not the parser, so a warm translation-cache hit stays cheap; a
    file that cannot be found digests as missing (the translation then fails with the parser's error)."""
    if "import" not in source:
        return ""
    h = hashlib.sha256()
    seen: set[str] = set()
    todo = [(source, file)]
    while todo:
        text, importer = todo.pop()
        for path in _IMPORT_LINE.findall(text):
            found = next((c for c in _candidates(A.Import(path, None), importer) if os.path.isfile(c)), None)
            real = os.path.realpath(found) if found else f"missing:{path}"
            if real in seen:
                continue
            seen.add(real)
            try:
                body = Path(found).read_bytes() if found else b""
            except OSError:
                body = b""
            h.update(f"{found}\0{len(body)}\0".encode() + body)
            todo.append((body.decode("utf-8", "replace"), found or importer))
    return h.hexdigest() if seen else ""
