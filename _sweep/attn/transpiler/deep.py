"""Run the compiler's recursive tree walks on a thread with a large stack and recursion budget.

The parser, the passes, codegen and the interpreter walk the AST recursively; a deeply nested
program (hundreds of chained `+`, unary minuses or nested `if`s) would exceed Python's default
recursion limit of 1000. `@deep` runs an entry point on a worker thread whose C stack is
`STACK_BYTES` and raises the recursion limit to `RECURSION_LIMIT` while any such call runs (then
restores it), with the cyclic garbage collector paused: the compiler makes no reference cycles worth
collecting, and full collections over a large program's growing heap made a 10,000-kernel file
quadratic (the time per kernel grew with the file). The parser bounds the nesting (`parser.MAX_NESTING`) far below what this budget
can walk, so a deeper program gets a CompileError, never a RecursionError or a crash.
Calls made from inside a deep call run directly.
"""
from __future__ import annotations

import functools
import gc
import sys
import threading

STACK_BYTES = 512 * 1024 * 1024  # address space reserved per call; pages are touched only as used
RECURSION_LIMIT = 400_000

_local = threading.local()
_lock = threading.Lock()
_active = 0  # deep calls in flight (the recursion limit is per interpreter)
_saved_limit = 0
_gc_was_enabled = True


def _enter() -> None:
    global _active, _saved_limit, _gc_was_enabled
    with _lock:
        if _active == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _active += 1


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            sys.setrecursionlimit(_saved_limit)
            if _gc_was_enabled:
                gc.enable()


def deep(fn):
    """Decorator: run `fn` on a big-stack worker thread (directly when already on one)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(_local, "inside", False):
            return fn(*args, **kwargs)
        box: dict = {}

        def target():
            _local.inside = True
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
                box["error"] = e

        _enter()
        try:
            with _lock:
                old = threading.stack_size(STACK_BYTES)
                try:
                    t = threading.Thread(target=target, name=f"tilex-{fn.__name__}", daemon=True)
                    t.start()
                finally:
                    threading.stack_size(old)
            t.join()
        finally:
            _leave()
        if "error" in box:
            raise box.pop("error")
        return box["value"]

    return wrapper
