"""Fuzzing the front end: whatever the input, the compiler answers with a CompileError or a result.

Random bytes, random soups of the grammar's tokens, and mutations of the examples
(tokens or characters deleted, duplicated, swapped; numbers changed) go through
`compile_program(..., check=True)`; inputs that compile also go through codegen. The only
exception allowed out is `CompileError`, and its rendering must start with the file name
in one of the two formats (`file:line:col: error: ...` or `file: error: ...`).

Known compiler bugs (each with a strict-xfail test elsewhere) are recognised by
`known_bug()` and counted as hypothesis events instead of failing the fuzz run, so that
the fuzz tests keep guarding against new crashes. Remove an entry once its bug is fixed.
Derandomized: the same examples run every time.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tilex.diagnostics import CompileError, SemanticError
from tilex.pipeline import compile_program
from tilex.translate import translate
from tilex.verify import IRInvariantError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {p.stem: p.read_text(encoding="utf-8") for p in sorted((ROOT / "examples").glob("*.tile"))}
GRAMMAR = (ROOT / "grammar" / "tile.lark").read_text(encoding="utf-8")

HEAD = re.compile(r"^fuzz\.tile(:\d+:\d+)?: error: \S")

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


# ---------------------------------------------------------------- the oracle
def known_bug(exc: BaseException, src: str) -> str | None:
    """The name of a known, already-reported bug that `exc` is an instance of, else None.

    Empty since issue 22: the leading-zero literal, range()/pipeline() as an expression, names in
    parameter defaults, header SemanticErrors and axis= IntLits are all fixed (each has its test)."""
    return None


def _event(what: str) -> None:
    try:
        event(what)
    except Exception:  # noqa: BLE001 - outside a hypothesis test (the parametrized tests below)
        pass


def check(src: str) -> None:
    try:
        compile_program(src, "fuzz.tile", check=True)
        translate(src, "fuzz.tile", host=True)
    except CompileError as e:
        text = e.render()
        assert HEAD.match(text), f"badly formed diagnostic:\n{text}"
        low = text.lower()
        assert "traceback" not in low and "transpiler/" not in low and ".py" not in low, text
        _event("CompileError")
    except Exception as e:  # noqa: BLE001
        bug = known_bug(e, src)
        if bug is None:
            raise AssertionError(f"{type(e).__name__} escaped the compiler for input:\n{src!r}") from e
        _event(f"known bug: {bug}")
    else:
        _event("compiled")


# ---------------------------------------------------------------- strategies
def _vocabulary() -> list[str]:
    literals = set(re.findall(r'"([^"\s]+)"', GRAMMAR))
    literals |= {"+=", "-=", "*=", "/=", "max=", "min=", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "//",
                 "/", "%", "@", "**"}
    literals |= {"f16", "bf16", "f32", "f64", "i32", "i64", "bool", "f8e4m3", "u8"}
    literals |= {"x", "y", "N", "M", "BLOCK", "i", "t", "acc", "row", "c", "inf", "None",
                 "program_id", "range", "pipeline", "zeros", "sum", "max", "exp", "where", "arange", "cdiv", "to", "T",
                 "axis", "keepdims", "other", "stages", "out"}
    literals |= {"0", "1", "2", "16", "1024", "1.0", "1e-6", "0x10", "-1", "#", "\n", ";", ","}
    return sorted(literals)


VOCAB = _vocabulary()

KERNEL_PREFIX = "kernel fz<BLOCK: int = 64>(x: f32[N], y: out f32[N], s: f32)\n    grid (cdiv(N, BLOCK),)\n{\n"

token_soup = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=40).map(" ".join)
# soups inside a well-formed kernel header reach the semantic passes more often
body_soup = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=25).map(lambda ts: KERNEL_PREFIX + " ".join(ts) + "\n}\n")

_TOKEN = re.compile(r"\s+|#[^\n]*|0x[0-9a-fA-F]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+|\w+|\*\*|//|[+\-*/<>=!]=|max=|min=|.", re.S)
_NUMBER = re.compile(r"^(0x[0-9a-fA-F]+|\d+\.?\d*(e[+-]?\d+)?)$")


def tokens(src: str) -> list[str]:
    return _TOKEN.findall(src)


@st.composite
def mutated_example(draw):
    name = draw(st.sampled_from(sorted(EXAMPLES)))
    src = EXAMPLES[name]
    toks = tokens(src)
    assert "".join(toks) == src
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["del_tok", "dup_tok", "swap_tok", "del_chr", "dup_chr", "swap_chr", "number",
                                   "insert_tok"]))
        if op.endswith("_chr"):
            text = "".join(toks)
            if not text:
                continue
            i = draw(st.integers(0, len(text) - 1))
            if op == "del_chr":
                text = text[:i] + text[i + 1:]
            elif op == "dup_chr":
                text = text[:i] + text[i] + text[i:]
            else:
                j = draw(st.integers(0, len(text) - 1))
                a, b = sorted((i, j))
                if a != b:
                    text = text[:a] + text[b] + text[a + 1:b] + text[a] + text[b + 1:]
            toks = tokens(text)
            continue
        if not toks:
            continue
        i = draw(st.integers(0, len(toks) - 1))
        if op == "del_tok":
            del toks[i]
        elif op == "dup_tok":
            toks.insert(i, toks[i])
        elif op == "insert_tok":
            toks.insert(i, " " + draw(st.sampled_from(VOCAB)) + " ")
        elif op == "swap_tok":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        else:  # change a number
            nums = [k for k, t in enumerate(toks) if _NUMBER.match(t)]
            if nums:
                k = draw(st.sampled_from(nums))
                toks[k] = draw(st.sampled_from(["0", "1", "3", "7", "64", "100", "4096", "65536", "131072",
                                                "99999999999999999999", "0x0", "08", "1.5", "0.0", "1e30", "2"]))
    return "".join(toks)


# ---------------------------------------------------------------- tests
@settings(max_examples=60, **SETTINGS)
@given(st.binary(max_size=200))
def test_random_bytes(data):
    check(data.decode("utf-8", errors="replace"))


@settings(max_examples=40, **SETTINGS)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80))
def test_random_text(text):
    check(text)


@settings(max_examples=60, **SETTINGS)
@given(token_soup)
def test_token_soup(src):
    check(src)


@settings(max_examples=60, **SETTINGS)
@given(body_soup)
def test_token_soup_in_a_kernel(src):
    check(src)


@settings(max_examples=120, **SETTINGS)
@given(mutated_example())
def test_mutated_examples(src):
    check(src)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_pass_the_oracle(name):
    check(EXAMPLES[name])
    compile_program(EXAMPLES[name], "fuzz.tile", check=True)


@pytest.mark.parametrize("src", [
    "",
    "\x00",
    "kernel",
    "kernel f",
    "kernel f(",
    "kernel f() grid () { }",
    "kernel f() grid (1,) { }",
    "kernel f(x: f32[N]) grid (N,) { }" * 2,
    "kernel f(x: f32[N]) grid (N,) { x[0] = 1.0 }",
    KERNEL_PREFIX + "}",
    KERNEL_PREFIX + "y[0 : BLOCK] = x[0 : BLOCK] " * 3 + "}",
    "\ufeffkernel f(x: f32[N]) grid (N,) { }",
    "kernel f(x: f32[N]) grid (N,) { a = 1\r\n b = a }",
    "kernel f(x: f32[N]) grid (N,) { a = ééé }",
])
def test_edge_inputs(src):
    check(src)


def test_oracle_rejects_unknown_crashes():
    with pytest.raises(AssertionError, match="escaped the compiler"):
        try:
            raise ZeroDivisionError("boom")
        except ZeroDivisionError as e:
            if known_bug(e, "") is None:
                raise AssertionError("ZeroDivisionError escaped the compiler") from e
