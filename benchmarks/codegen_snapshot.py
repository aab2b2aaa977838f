"""Snapshot and compare the generated CUDA of every example and library kernel, for a refactor of codegen.

    python benchmarks/codegen_snapshot.py write DIR     # translate everything, one file per case, into DIR
    python benchmarks/codegen_snapshot.py compare A B   # byte-compare two snapshots; exit 1 on any difference

The cases: every examples/*.tile (kernel and host launcher) and stdlib_kernels/*.tile, for each arch of ARCHES,
at its defaults and at a few define sets derived from its compile-time parameters (each power-of-two int
parameter halved, and doubled, one at a time; all halved together). A case that does not compile records its
error message instead, so a change of which configurations compile (or of their messages) shows too. Runs on
a CPU; no GPU needed. Used for issue 21's "byte-identical before and after" (run it on both commits).
"""
from __future__ import annotations

import hashlib
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


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for path, arch, defines in cases():
        (out / case_name(path, arch, defines)).write_text(render(path, arch, defines), encoding="utf-8")
        n += 1
    print(f"{n} cases written to {out}")


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
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
