"""Diagnostics: one error type carrying a source span, rendered rustc/clang style.

Passes raise `CompileError(message, span)`; helpers deep inside a pass may raise plain
`SemanticError(message)` and the pass driver attaches the span of the node being
visited. `render()` gives `file:line:col: error: message`, the source line and a caret.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A region of source text: 1-based line and column, end exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    # code inlined from a fn: the calls it was inlined at, innermost first (each as (fn name, call span))
    called_from: tuple = ()

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NO_SPAN = Span("<unknown>", 0, 0, 0, 0)


class TilexError(Exception):
    """Base class of every error tilex reports to users."""


class SemanticError(TilexError):
    """An error without a location yet; the pass driver attaches the current node's span."""

    def __init__(self, message: str, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.notes = tuple(notes)


class CompileError(TilexError):
    """An error in a .tile program, at a source span."""

    def __init__(self, message: str, span: Span | None = None, notes: tuple[str, ...] = (), source: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span or NO_SPAN
        self.notes = tuple(notes)
        self.source = source

    def with_source(self, source: str) -> "CompileError":
        if self.source is None:
            self.source = source
        return self

    def render(self) -> str:
        return render(self.message, self.span, self.source, self.notes)

    def __str__(self) -> str:
        return self.render()


class LaunchError(TilexError, ValueError):
    """Bad arguments at launch: wrong dtype, shape, device, contiguity or a failed constraint."""


class CacheError(TilexError):
    """A kernel cache entry that cannot be used (the runtime rebuilds it)."""


# the text of every imported .tile file read by this process (tilex.imports), by file name: an error inside
# an inlined fn points into that file, whose text the error's `source` (the importing program's) is not
_IMPORTED: dict[str, str] = {}


def remember_source(file: str, text: str) -> None:
    """Record an imported file's text for rendering errors that point into it."""
    _IMPORTED[file] = text


def call_notes(span: Span) -> tuple[str, ...]:
    """One note per call a span's code was inlined at: `in fn 'f', inlined at FILE:LINE:COL`."""
    return tuple(f"in fn '{name}', inlined at {site}" for name, site in span.called_from)


def render(message: str, span: Span, source: str | None, notes: tuple[str, ...] = (), level: str = "error") -> str:
    notes = tuple(notes) + call_notes(span)
    if span.file in _IMPORTED and span.line >= 1:
        source = _IMPORTED[span.file]
    if span.line < 1:  # a whole-file or command-line problem
        return "\n".join([f"{span.file}: {level}: {message}"] + [f"  note: {n}" for n in notes])
    head = f"{span.file}:{span.line}:{span.col}: {level}: {message}"
    lines = [head]
    if source is not None and span.line >= 1:
        src_lines = source.splitlines()
        if span.line <= len(src_lines):
            text = src_lines[span.line - 1].expandtabs(1)
            gutter = f"{span.line:>4} | "
            lines.append(gutter + text)
            start = max(span.col, 1)
            if span.end_line == span.line and span.end_col > start:
                width = span.end_col - start
            else:
                width = max(1, len(text.rstrip()) - start + 1)
            lines.append(" " * (len(gutter) - 2) + "| " + " " * (start - 1) + "^" + "~" * max(0, width - 1))
    for note in notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
