"""The output of one kernel body: lines indented by scope, fresh names, the helper files and functions it needs."""
from __future__ import annotations

from contextlib import contextmanager


class Writer:
    """Lines of CUDA C++, indented two spaces per open scope (`block`, `indented`), never by hand.

    `helpers` collects the device helper files (`templates/*.cuh`) the lines use, `functions` the per-kernel
    device functions (the wgmma wrappers) by name; `fresh` makes names unique within the kernel."""

    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0
        self.tmp = 0
        self.helpers: set[str] = {"tilex_types.cuh"}
        self.functions: dict[str, str] = {}

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def text(self, text, strip: bool = True) -> None:
        """Each line of `text` (a rendered template or macro) at the current depth."""
        text = str(text)
        for line in (text.rstrip() if strip else text).splitlines():
            self.emit(line)

    @contextmanager
    def indented(self, levels: int = 1):
        self.depth += levels
        try:
            yield
        finally:
            self.depth -= levels

    @contextmanager
    def block(self, head: str = "{", tail: str | None = "}"):
        """`head`, the body one level deeper, then `tail` (None: the caller closes it, e.g. with `} else {`)."""
        self.emit(head)
        with self.indented():
            yield
        if tail is not None:
            self.emit(tail)

    def capture(self, fn, *args) -> str:
        """The lines `fn(*args)` emits, unindented, as text (for a template to place) instead of into `lines`.
        Fresh names, helpers and functions are recorded as usual, in the order the template calls."""
        lines, depth = self.lines, self.depth
        self.lines, self.depth = [], 0
        try:
            fn(*args)
            return "\n".join(self.lines)
        finally:
            self.lines, self.depth = lines, depth

    def fresh(self, prefix: str) -> str:
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def unrolled(self, n: int, body: str, var: str = "tx_s", step: int = 1) -> None:
        """`body` for every slot `var` in [0, n) by `step`: one unrolled loop (a plain block for one slot)."""
        if n == 1 and step == 1:
            self.emit("{ const int " + var + " = 0; " + body + " }")
            return
        inc = f"++{var}" if step == 1 else f"{var} += {step}"
        self.emit("#pragma unroll")
        self.emit(f"for (int {var} = 0; {var} < {n}; {inc}) {{ {body} }}")

    def need(self, *helpers: str) -> None:
        self.helpers.update(helpers)
