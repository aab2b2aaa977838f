"""The parser's errors: a Lark syntax error as a CompileError at the offending token with what was expected, and
the bound on how deeply a program may nest (a CompileError, never a RecursionError)."""
from __future__ import annotations

import lark
from lark import Token

from .diagnostics import CompileError, Span

# what users should read instead of Lark's terminal names
_TOKEN_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "DTYPE": "a dtype",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "LBRACE": "'{'",
    "RBRACE": "'}'", "COMMA": "','", "COLON": "':'", "EQUAL": "'='", "SEMICOLON": "';'",
    "MORETHAN": "'>'", "LESSTHAN": "'<'", "DOT": "'.'", "AUGOP": "'+=' or similar",
    "COMPOP": "a comparison", "ADDOP": "'+' or '-'", "MULOP": "'*', '/', '%' or '@'",
    "MINUS": "'-'", "PLUS": "'+'", "OUT": "'out'", "TRUE": "True", "FALSE": "False",
    "GRID": "'grid'", "WHERE": "'where'", "KERNEL": "'kernel'", "FOR": "'for'", "IN": "'in'",
    "IF": "'if'", "ELSE": "'else'", "ELIF": "'elif'", "$END": "end of file",
    "FN": "'fn'", "RETURN": "'return'", "IMPORT": "'import'", "FROM": "'from'", "STRING": "a quoted file name",
}

# How deeply a program may nest, in parse-tree levels: a chained binary operator or a unary minus adds
# one level, a nested block (`if`, `for`) or call two. The recursive walks run under `deep`'s budget,
# which covers far more than this; beyond it the program gets a CompileError.
MAX_NESTING = 10_000


def check_nesting(tree: lark.Tree, source: str, file: str) -> None:
    """CompileError at the first subtree deeper than MAX_NESTING (an iterative walk)."""
    todo = [(tree, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_NESTING:
            meta = node.meta
            span = Span(file, meta.line, meta.column, meta.line, meta.column + 1) if not getattr(meta, "empty", True) \
                else Span(file, 0, 0, 0, 0)
            raise CompileError(f"the program nests too deeply here (more than {MAX_NESTING} levels of "
                               "expressions and blocks)", span,
                               ("split long chains of operators and deeply nested blocks into named steps",), source)
        todo.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))


def syntax_error(e: lark.exceptions.UnexpectedInput, source: str, file: str) -> CompileError:
    line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
    if line < 1:  # Lark reports end of input as -1
        lines = source.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        ch = source[e.pos_in_stream] if 0 <= e.pos_in_stream < len(source) else "?"
        msg = f"unexpected character {ch!r}"
        width = 1
    else:
        tok = getattr(e, "token", None)
        if tok is None or tok.type == "$END":
            msg, width = "unexpected end of file", 1
            # Lark's $END token borrows the position of the last real token; the caret goes
            # just past that token (where more text was expected), not under it
            if tok is not None and (getattr(tok, "end_line", None) or 0) >= 1 and tok.end_column:
                line, col = tok.end_line, tok.end_column
        else:
            msg, width = f"unexpected {_describe(tok)}", max(1, len(str(tok)))
    expected = sorted({_TOKEN_WORDS.get(t, repr(t).strip("'").lower()) for t in (getattr(e, "expected", None) or getattr(e, "allowed", None) or ())})
    notes = ()
    if expected and len(expected) <= 8:
        notes = ("expected " + ", ".join(expected),)
    span = Span(file, line, col, line, col + width)
    return CompileError(msg, span, notes, source)


def _describe(tok: Token) -> str:
    if tok.type == "NAME":
        return f"name '{tok}'"
    if tok.type in ("INT", "FLOAT"):
        return f"number {tok}"
    return f"'{tok}'"
