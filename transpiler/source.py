"""The one reader of "a .tile file path or .tile source text": `read_source` (tilex.compile, tilex tune, tuned
lookups) and `read_file` (the CLI, whose FILE is always a path; `pipeline.compile_file`, `translate.translate_file`).

A str with no newline and no '{' (or an os.PathLike) is a path; anything else is source text. A file that
cannot be read raises the built-in error of its kind (FileNotFoundError, IsADirectoryError, ValueError for
text that is not UTF-8, OSError) whose message names the caller and the path; `.path` and `.reason` carry the
two parts separately (the CLI prints `PATH: REASON`).
"""
from __future__ import annotations

import os

# why a file cannot be read: (error class, the caller's message after "WHO(): ", the short reason).
# {path} is the path's repr in messages; {detail} what the OS or the decoder said.
_UNREADABLE = {
    "missing": (FileNotFoundError, "no such .tile file: {path} (source text is recognised by its newlines or braces)",
                "No such file"),
    "directory": (IsADirectoryError, "{path} is a directory, not a .tile file", "is a directory, not a .tile file"),
    "not_utf8": (ValueError, "{path} is not UTF-8 text ({detail})", "not a UTF-8 text file"),
    "os": (OSError, "cannot read {path}: {detail}", "{detail}"),
}


def is_source_text(path_or_source: str) -> bool:
    """Whether a str is .tile source text rather than a path (it has a newline or a '{')."""
    return "\n" in path_or_source or "{" in path_or_source


def _unreadable(kind: str, path: str, who: str, detail: str = "", errno: int | None = None) -> Exception:
    cls, message, reason = _UNREADABLE[kind]
    text = f"{who}: " + message.format(path=repr(path), detail=detail)
    e = cls(errno, text) if cls is OSError else cls(text)
    e.path, e.reason = path, reason.format(detail=detail)
    return e


def read_file(path: str | os.PathLike, who: str = "tilex.compile()") -> tuple[str, str]:
    """(source text, file name) of a .tile file; the errors of the module docstring."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise _unreadable("missing", path, who)
    if os.path.isdir(path):
        raise _unreadable("directory", path, who)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except UnicodeDecodeError as e:
        raise _unreadable("not_utf8", path, who, f"{e.reason} at byte {e.start}") from None
    except OSError as e:
        raise _unreadable("os", path, who, e.strerror or str(e), e.errno) from None


def read_source(path_or_source, who: str = "tilex.compile()") -> tuple[str, str]:
    """(source text, file name) of a path or of source text ("<string>"); TypeError for anything but a str or
    an os.PathLike, else the errors of `read_file`."""
    if isinstance(path_or_source, os.PathLike):
        return read_file(path_or_source, who)
    if not isinstance(path_or_source, str):
        raise TypeError(f"{who} takes a .tile file path or .tile source text (str or os.PathLike), "
                        f"got {type(path_or_source).__name__}")
    if is_source_text(path_or_source):
        return path_or_source, "<string>"
    return read_file(path_or_source, who)
