"""Error messages: a corpus of bad programs, each with its expected diagnostic.

`tests/error_corpus/<name>.tile` is compiled with `file=<name>.tile`; the first line of
`CompileError.render()` must equal the first line of `<name>.expected`, and the
`  note: ...` lines of the `.expected` file must be the rendered notes. Refresh the
`.expected` files with `make golden` (pytest --update-golden) and review the diff.

A corpus file may start with a directive comment giving compile options:
    # tilex-test: -D NAME=VALUE --arch sm_80
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tilex.diagnostics import CompileError
from tilex.pipeline import Options, compile_program
from tilex.translate import translate

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "error_corpus"
CASES = sorted(CORPUS.glob("*.tile"))

HEAD = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")
HEAD_NOLOC = re.compile(r"^(?P<file>[^\s:]+): error: (?P<msg>.+)$")
FORBIDDEN = (".py", "transpiler/", "traceback", "lark")


def options_of(src: str) -> Options:
    """Options from a leading `# tilex-test: ...` directive (-D NAME=VALUE, --arch ARCH)."""
    defines, arch = {}, "sm_90a"
    for line in src.splitlines():
        if not line.startswith("# tilex-test:"):
            continue
        words = shlex.split(line.split(":", 1)[1])
        it = iter(words)
        for w in it:
            if w == "-D":
                k, v = next(it).split("=", 1)
                defines[k] = v
            elif w == "--arch":
                arch = next(it)
            else:
                raise ValueError(f"unknown directive word {w!r}")
    return Options(defines=defines, arch=arch)


def compile_error(path: Path) -> CompileError:
    src = path.read_text(encoding="utf-8")
    try:
        translate(src, path.name, options_of(src), host=True)
    except CompileError as e:
        return e
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{path.name}: expected a CompileError, got {type(e).__name__}: {e}")
    pytest.fail(f"{path.name}: compiled without an error")


def expected_text(e: CompileError) -> str:
    lines = e.render().splitlines()
    return "\n".join([lines[0]] + [ln for ln in lines[1:] if ln.startswith("  note: ")]) + "\n"


def check_render(e: CompileError, name: str, source: str) -> None:
    """The rendered shape: head line, then (with a location) source line and caret line, then notes."""
    text = e.render()
    lines = text.splitlines()
    low = text.lower()
    for bad in FORBIDDEN:
        assert bad not in low, f"message leaks {bad!r}:\n{text}"
    m = HEAD.match(lines[0])
    if m is None:
        m = HEAD_NOLOC.match(lines[0])
        assert m is not None, f"bad head line: {lines[0]!r}"
        assert m["file"] == name
        assert all(ln.startswith("  note: ") for ln in lines[1:])
        return
    assert m["file"] == name
    line, col = int(m["line"]), int(m["col"])
    src_lines = source.splitlines()
    assert 1 <= line <= len(src_lines), f"line {line} outside the file"
    assert 1 <= col <= len(src_lines[line - 1].expandtabs(1)) + 1, f"column {col} outside line {line}"
    gutter = f"{line:>4} | "
    assert lines[1] == gutter + src_lines[line - 1].expandtabs(1)
    caret = lines[2]
    assert re.fullmatch(r" +\| +\^~*", caret), f"bad caret line {caret!r}"
    assert caret.index("|") == gutter.index("|")
    assert caret.index("^") == len(gutter) + col - 1, "caret is not under the reported column"
    assert len(caret) <= len(gutter) + max(len(src_lines[line - 1].expandtabs(1)), col), "caret runs past the line"
    assert all(ln.startswith("  note: ") for ln in lines[3:])


def test_corpus_is_big_enough():
    assert len(CASES) >= 25


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_corpus(path, update_golden):
    e = compile_error(path)
    got = expected_text(e)
    exp_file = path.with_suffix(".expected")
    if update_golden:
        exp_file.write_text(got, encoding="utf-8")
        return
    if not exp_file.exists():
        pytest.fail(f"{exp_file.relative_to(ROOT)} is missing: run `make golden` (pytest --update-golden), "
                    f"then review it")
    expected = exp_file.read_text(encoding="utf-8")
    assert got.splitlines()[0] == expected.splitlines()[0]
    assert got == expected
    check_render(e, path.name, path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_corpus_error_is_the_same_without_codegen(path):
    """compile_program (check=True) reports the same first error as translate."""
    src = path.read_text(encoding="utf-8")
    with pytest.raises(CompileError) as ei:
        compile_program(src, path.name, options_of(src), check=True)
    assert ei.value.render().splitlines()[0] == compile_error(path).render().splitlines()[0]


def test_no_stray_expected_files():
    stray = [p.name for p in CORPUS.glob("*.expected") if not p.with_suffix(".tile").exists()]
    assert not stray


# ---------------------------------------------------------------- rendering details
def test_render_without_source_has_no_caret():
    e = CompileError("boom", None)
    assert e.render() == "<unknown>: error: boom"


def test_render_multi_line_span_underlines_to_end_of_line():
    from tilex.diagnostics import Span

    src = "abc\n  defgh  \nxyz\n"
    e = CompileError("m", Span("f.tile", 2, 3, 3, 2), ("n1",), src)
    assert e.render().splitlines() == ["f.tile:2:3: error: m", "   2 |   defgh  ", "     |   ^~~~~", "  note: n1"]


def test_str_is_render():
    with pytest.raises(CompileError) as ei:
        compile_program("kernel f(y: out f32[N]) grid (N,) { y[0] = zz }", "s.tile")
    assert str(ei.value) == ei.value.render()
    assert ei.value.render().startswith("s.tile:1:44: error: unknown name 'zz'")


# ---------------------------------------------------------------- compiler bugs (expected to fail until fixed)
def _expect_error(src: str, head: str, **options):
    try:
        translate(src, "bug.tile", Options(**options), host=True)
    except CompileError as e:
        first = e.render().splitlines()[0]
        assert first.startswith(head), first
        check_render(e, "bug.tile", src)
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected a CompileError, got {type(e).__name__}: {e}") from e
    raise AssertionError("compiled without an error")


def test_bug_store_into_input_param():
    _expect_error("kernel f(x: f32[N], y: out f32[N])\n    grid (1,)\n{\n    x[0 : 256] = x[0 : 256] + 1.0\n}\n",
                  "bug.tile:4:5: error: ")


def test_bug_param_default_unknown_name():
    _expect_error("kernel f(x: f32[N], y: out f32[N], eps: f32 = epsilon)\n    grid (1,)\n{\n}\n",
                  "bug.tile:1:47: error: ")


def test_bug_param_default_cparam():
    _expect_error("kernel f<B: int = 4>(x: f32[N], y: out f32[N], k: i32 = B)\n    grid (1,)\n{\n}\n",
                  "bug.tile:1:")


def test_bug_param_default_not_literal():
    _expect_error("kernel f(y: out f32[N], e: f32 = 2 * 3)\n    grid (N,)\n{\n}\n", "bug.tile:1:")


@pytest.mark.parametrize("header", [
    "    where N % 8\n    grid (N,)\n",
    "    grid (1.5,)\n",
    "    grid (arange(0, 4),)\n",
    "    where arange(0, 4) > 1\n    grid (N,)\n",
])
def test_bug_header_type_errors(header):
    _expect_error("kernel f(y: out f32[N])\n" + header + "{\n}\n", "bug.tile:2:")


@pytest.mark.parametrize("call", ["range(4)", "pipeline(0, 4, 1)"])
def test_bug_range_as_expression(call):
    _expect_error(f"kernel f(y: out f32[N])\n    grid (1,)\n{{\n    r = {call}\n}}\n", "bug.tile:4:9: error: ")


def test_bug_program_id_in_grid():
    _expect_error("kernel f(y: out f32[N])\n    grid (program_id(0),)\n{\n    y[0] = 1.0\n}\n", "bug.tile:2:")


def test_bug_transposed_tile_type():
    src = "kernel f(y: out f32[N])\n    grid (1,)\n{\n    t = zeros(f32[4, 4].T)\n}\n"
    with pytest.raises(CompileError) as ei:
        compile_program(src, "bug.tile", check=True)
    assert ei.value.message == ".T transposes tiles and tensors, not the tile type 'f32[4, 4]'"
    assert (ei.value.span.line, ei.value.span.col) == (4, 15)
