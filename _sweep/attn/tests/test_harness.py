"""tilex.source (the one reader of "path or source"), tilex.harness (inputs, reference, comparison, work) and
tilex.version (the bottom floor): checked on the CPU against NumPy float64 and the file system."""
from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest

import tilex
from tilex import harness as H
from tilex import tune as T
from tilex.inputs import InputError
from tilex.launchspec import make_spec
from tilex.pipeline import Options, compile_program
from tilex.source import is_source_text, read_file, read_source

ROOT = Path(__file__).resolve().parents[1]
VECTOR_ADD = ROOT / "examples" / "vector_add.tile"
RMSNORM = ROOT / "examples" / "rmsnorm.tile"
MATMUL = ROOT / "examples" / "matmul.tile"


# ---------------------------------------------------------------- source
def test_read_source_text_path_and_pathlike():
    text = VECTOR_ADD.read_text(encoding="utf-8")
    assert read_source(text) == (text, "<string>")
    assert read_source(str(VECTOR_ADD)) == (text, str(VECTOR_ADD))
    assert read_source(VECTOR_ADD) == (text, str(VECTOR_ADD))
    assert read_file(VECTOR_ADD) == (text, str(VECTOR_ADD))
    assert is_source_text("kernel k() grid (1,) {}") and is_source_text("a\nb") and not is_source_text("a.tile")


@pytest.mark.parametrize("make, cls, message, reason", [
    (lambda d: str(d / "missing.tile"), FileNotFoundError,
     "no such .tile file: {p!r} (source text is recognised by its newlines or braces)", "No such file"),
    (lambda d: str(d), IsADirectoryError, "{p!r} is a directory, not a .tile file", "is a directory, not a .tile file"),
    (lambda d: (d / "bad.tile").write_bytes(b"\xff\xfe") and str(d / "bad.tile"), ValueError,
     "{p!r} is not UTF-8 text (invalid start byte at byte 0)", "not a UTF-8 text file"),
])
def test_unreadable_files_name_the_caller_the_path_and_the_reason(tmp_path, make, cls, message, reason):
    p = make(tmp_path)
    for who in ("tilex.compile()", "tilex tune"):
        with pytest.raises(cls) as e:
            read_source(p, who)
        assert str(e.value) == f"{who}: " + message.format(p=p)
        assert e.value.path == p and e.value.reason == reason
    with pytest.raises(cls, match=r"^tilex\.compile\(\): "):
        tilex.compile(p)


def test_unreadable_file_keeps_the_os_error(tmp_path, monkeypatch):
    import errno

    import tilex.source as S

    p = tmp_path / "locked.tile"
    p.write_text("x", encoding="utf-8")

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(S, "open", denied, raising=False)  # the same on any machine, root included
    with pytest.raises(PermissionError) as e:
        read_file(p, "tilex")
    assert str(e.value) == f"[Errno 13] tilex: cannot read {str(p)!r}: Permission denied"
    assert e.value.reason == "Permission denied" and e.value.errno == errno.EACCES and e.value.path == str(p)


def test_read_source_rejects_other_types():
    with pytest.raises(TypeError, match=r"^tilex\.compile\(\) takes a \.tile file path or \.tile source text "
                                        r"\(str or os\.PathLike\), got bytes$"):
        read_source(b"kernel")


def test_tune_reads_paths_as_compile_does(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^tilex\.tune\.tune\(\): no such \.tile file"):
        T.tune(str(tmp_path / "nope.tile"), None, {"N": 4}, runner=object())


# ---------------------------------------------------------------- harness
def _spec(path, defines=None):
    source, file = read_source(path)
    program = compile_program(source, file, Options(defines=dict(defines or {})))
    kernel = program.kernels[0]
    return program, kernel, make_spec(kernel, source)


def test_problem_inputs_and_interpreter_reference_match_numpy():
    program, kernel, spec = _spec(RMSNORM)
    prob = H.problem(spec, {"M": 5, "N": 1500}, seed=3)
    assert prob.symbols == {"M": 5, "N": 1500} and list(prob.outputs) == ["y"] and prob.outputs["y"] == "bf16"
    assert prob.arrays["x"].shape == (5, 1500) and prob.scalars["eps"] == pytest.approx(1e-6)
    assert prob.elements == 5 * 1500 * 2 + 1500
    before = {k: v.copy() for k, v in prob.arrays.items()}
    got = H.reference(program, kernel.name, prob)
    for k, v in prob.arrays.items():  # the interpreter ran on copies
        assert np.array_equal(v.view(np.uint8), before[k].view(np.uint8))
    x, w = prob.arrays["x"].astype(np.float64), prob.arrays["w"].astype(np.float64)
    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    assert np.allclose(got["y"].astype(np.float64), want, rtol=2e-2, atol=2e-2)
    ok = H.compare_outputs(got, {"y": want}, prob)["y"]
    assert ok["ok"] and ok["tol"] == 1e-2
    bad = H.compare_outputs({"y": got["y"] * 1.5}, {"y": want}, prob)["y"]
    assert not bad["ok"] and bad["rel_err"] > 0.1


def test_problem_is_seeded_and_loaded_inputs_give_sizes(tmp_path):
    program, kernel, spec = _spec(VECTOR_ADD)
    a, b = H.problem(spec, {"N": 100}, seed=1), H.problem(spec, {"N": 100}, seed=1)
    assert all(np.array_equal(a.arrays[n], b.arrays[n]) for n in a.arrays)
    assert not np.array_equal(a.arrays["x"], H.problem(spec, {"N": 100}, seed=2).arrays["x"])
    x = np.random.default_rng(0).standard_normal(37).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    loaded = H.load_inputs(spec, {"x": str(tmp_path / "x.npy")})
    prob = H.problem(spec, {}, loaded=loaded)
    assert prob.symbols == {"N": 37} and np.array_equal(prob.arrays["x"], x)
    got = H.reference(program, kernel.name, prob)
    assert np.allclose(got["z"], x.astype(np.float64) + prob.arrays["y"].astype(np.float64), rtol=1e-6)
    with pytest.raises(InputError, match="kernel vector_add has no parameter 'q'"):
        H.load_inputs(spec, {"q": "q.npy"})


def test_work_counts_bytes_and_matmul_flop():
    _, kernel, spec = _spec(VECTOR_ADD)
    assert H.work(kernel, spec, {"N": 1000}) == (3 * 1000 * 4, None)
    _, kernel, spec = _spec(MATMUL)
    nbytes, flop = H.work(kernel, spec, {"M": 64, "N": 32, "K": 16})
    assert flop == 2.0 * 64 * 32 * 16
    assert nbytes == sum(int(np.prod([{"M": 64, "N": 32, "K": 16}.get(str(d), d) for d in p.dims]))
                         * H.np.dtype(tilex.inputs.np_dtype(p.dtype)).itemsize
                         for p in spec.params if p.kind == "tensor")


# ---------------------------------------------------------------- version
def test_version_module_is_the_bottom_floor():
    from tilex import version

    tree = ast.parse(Path(version.__file__).read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert tilex.__version__ == version.__version__ == meta["project"]["version"]


def test_pick_kernel():
    assert H.pick_kernel(["a"], "f.tile") == "a" and H.pick_kernel(["a", "b"], "f.tile", "b") == "b"
    with pytest.raises(T.TuneError, match=r"^f\.tile has 2 kernels \(a, b\): choose one with --kernel NAME$"):
        H.pick_kernel(["a", "b"], "f.tile", error=T.TuneError)
    with pytest.raises(tilex.diagnostics.TilexError, match=r"^f\.tile: no kernels$"):
        H.pick_kernel([], "f.tile")


def test_best_reads_a_pathlike_as_its_file(tmp_path):
    shapes = {"N": 5000}
    store = T.TuneStore(tmp_path)
    digest = T.source_sha256(VECTOR_ADD.read_text(encoding="utf-8"))
    store.put(T.store_key(digest, "vector_add", shapes, "sm_90a"), {"defines": {"BLOCK": 512}})
    assert T.best(VECTOR_ADD, "vector_add", shapes, "sm_90a", cache_dir=tmp_path) == {"BLOCK": 512}
    assert T.best(str(VECTOR_ADD), "vector_add", shapes, "sm_90a", cache_dir=tmp_path) == {"BLOCK": 512}
    assert T.best(str(tmp_path / "none.tile"), "vector_add", shapes, "sm_90a", cache_dir=tmp_path) is None
