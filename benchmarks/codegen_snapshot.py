"""Snapshot and compare the generated CUDA of every example and library kernel, for a refactor of codegen.

    python benchmarks/codegen_snapshot.py write DIR [CORPUS]  # translate everything, one file per case, into DIR
    python benchmarks/codegen_snapshot.py compare A B   # byte-compare two snapshots; exit 1 on any difference
    python benchmarks/codegen_snapshot.py record CORPUS TESTS...  # run pytest on TESTS, keep every program compiled

A CORPUS (from `record`: every (source, options) the given test files compile, e.g. tests/test_gather.py's
kernels) adds one case per program to `write`, host launcher included. To compare against an older commit, run
`write` with that commit's package first on PYTHONPATH (a directory `tilex/` laid out as pyproject's
package-dir says: transpiler/ with templates/, grammar/ and stdlib_kernels/ inside).

The cases: every examples/*.tile (kernel and host launcher) and stdlib_kernels/*.tile, for each arch of ARCHES,
at its defaults and at a few define sets derived from its compile-time parameters (each power-of-two int
parameter halved, and doubled, one at a time; all halved together). A case that does not compile records its
error message instead, so a change of which configurations compile (or of their messages) shows too. Runs on
a CPU; no GPU needed. Used for issue 21's "byte-identical before and after" (run it on both commits).
"""
from __future__ import annotations

import hashlib
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90a")


def files() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.tile")) + sorted((ROOT / "stdlib_kernels").glob("*.tile"))


def define_sets(path: Path) -> list[dict]:
    """{} and the variations of the file's power-of-two int compile-time parameters (at most 5 sets)."""
    from tilex.parser import parse

    prog = parse(path.read_text(encoding="utf-8"), str(path))
    ints = {}
    for k in prog.kernels:
        for c in k.cparams:
            if c.kind == "int" and not c.auto and isinstance(c.default, int) and c.default >= 2 \
                    and c.default & (c.default - 1) == 0 and c.name not in ints:
                ints[c.name] = c.default
    sets = [{}]
    names = sorted(ints)[:2]
    for n in names:
        sets.append({n: ints[n] // 2})
        sets.append({n: ints[n] * 2})
    if len(ints) > 1:
        sets.append({n: v // 2 for n, v in sorted(ints.items())})
    return sets[:6]


def cases():
    for path in files():
        for defines in define_sets(path):
            for arch in ARCHES:
                yield path, arch, defines


def render(path: Path, arch: str, defines: dict) -> str:
    from tilex.diagnostics import CompileError
    from tilex.pipeline import Options
    from tilex.translate import translate

    rel = str(path.relative_to(ROOT))
    host = path.parent.name == "examples"
    try:
        t = translate(path.read_text(encoding="utf-8"), rel, Options(defines=defines, arch=arch), host=host)
    except CompileError as e:
        return "COMPILE ERROR\n" + e.render()
    out = t.cuda
    if host:
        out += "\n// ==== host ====\n" + t.host
    out += "\n// ==== specs ====\n" + "\n".join(repr(t.specs[k]) for k in sorted(t.specs))
    return out


def case_name(path: Path, arch: str, defines: dict) -> str:
    d = "_".join(f"{k}{v}" for k, v in sorted(defines.items())) or "default"
    return f"{path.parent.name}__{path.stem}__{arch}__{d}.cu"


def render_program(source: str, file: str, options) -> str:
    from tilex.diagnostics import CompileError
    from tilex.translate import translate

    try:
        t = translate(source, file, options, host=True)
    except CompileError as e:
        return "COMPILE ERROR\n" + e.render()
    except Exception as e:  # noqa: BLE001 - recorded, so both sides must fail alike
        return f"EXCEPTION {type(e).__name__}: {e}"
    return (t.cuda + "\n// ==== host ====\n" + (t.host or "") + "\n// ==== specs ====\n"
            + "\n".join(repr(t.specs[k]) for k in sorted(t.specs)))


def write(out: Path, corpus: Path | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for path, arch, defines in cases():
        (out / case_name(path, arch, defines)).write_text(render(path, arch, defines), encoding="utf-8")
        n += 1
    if corpus is not None:
        from tilex.pipeline import Options

        for i, (source, file, opts) in enumerate(pickle.loads(corpus.read_bytes())):
            (out / f"corpus__{i:05d}.cu").write_text(render_program(source, file, Options(**opts)), encoding="utf-8")
            n += 1
    print(f"{n} cases written to {out}")


# ---- record: a pytest plugin (`-p codegen_snapshot`) that keeps every program the tests compile
_RECORDED: dict = {}
_CORPUS_ENV = "TILEX_SNAPSHOT_CORPUS"


def _recording(original):
    def compile_program(source, file="<string>", options=None, *args, **kw):
        o = options
        opts = {} if o is None else dict(defines=dict(o.defines), arch=o.arch, kernel=o.kernel, assume=o.assume, auto=o.auto)
        _RECORDED.setdefault((source, repr(sorted(opts.items(), key=str))), (source, file, opts))
        return original(source, file, options, *args, **kw)
    compile_program.recording = True
    return compile_program


def pytest_collection_finish(session):
    import tilex.pipeline as pipeline

    original = pipeline.compile_program
    if getattr(original, "recording", False):
        return
    wrapped = _recording(original)
    for mod in list(sys.modules.values()):  # every `from .pipeline import compile_program` binding
        if getattr(mod, "compile_program", None) is original:
            mod.compile_program = wrapped


def pytest_unconfigure(config):
    import os

    path = os.environ.get(_CORPUS_ENV)
    if path:
        Path(path).write_bytes(pickle.dumps(list(_RECORDED.values())))
        print(f"\n{len(_RECORDED)} programs recorded in {path}")


def record(corpus: Path, tests: list[str]) -> int:
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent), **{_CORPUS_ENV: str(corpus.resolve())})
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "codegen_snapshot", "-p", "no:cacheprovider",
                            "-m", "not gpu", *tests], cwd=ROOT, env=env)


def compare(a: Path, b: Path) -> int:
    na, nb = {p.name for p in a.glob("*.cu")}, {p.name for p in b.glob("*.cu")}
    bad = sorted(na ^ nb)
    for name in sorted(na & nb):
        if (a / name).read_bytes() != (b / name).read_bytes():
            bad.append(name)
    errors = sum(1 for name in na & nb if (a / name).read_text().startswith("COMPILE ERROR"))
    digest = hashlib.sha256(b"".join((a / n).read_bytes() for n in sorted(na))).hexdigest()[:16]
    print(f"{len(na & nb)} cases in both ({errors} of them compile errors), sha256 of {a.name}: {digest}")
    for name in bad:
        print("DIFFERS:", name)
    print("identical" if not bad else f"{len(bad)} cases differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "write":
        write(Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) == 4 else None)
    elif len(sys.argv) >= 4 and sys.argv[1] == "record":
        sys.exit(record(Path(sys.argv[2]), sys.argv[3:]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
