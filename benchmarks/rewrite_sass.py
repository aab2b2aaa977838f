"""Did a library rewrite change the machine code? Build a library file's golden CUDA before and after a commit.

    python benchmarks/rewrite_sass.py [COMMIT:FILE,FILE ...] [--out DIR] [--arch sm_90a]

For each COMMIT and FILE (a stdlib_kernels stem), the committed golden `tests/golden/stdlib/FILE.cu` of
COMMIT^ and of COMMIT (what `translate` generated at each, as tests/test_golden.py enforces) is built with
`nvcc -cubin` and the two cubins are compared byte for byte; where `cuobjdump` is on the PATH (the H200
machine), their `--dump-sass` listings are compared too and the count of SASS instructions is printed.
One line per (commit, file); exit 1 when any pair differs. The default pairs are issue 20's library
rewrites: the fn helpers (e7ce960), linear's shared main loop (921bba1) and the online-softmax fn (5a35cf3).
No GPU is needed; with --out the cubins are kept, and --reuse compares them again elsewhere (a machine with
cuobjdump but no git history).
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ("e7ce960:linear,rope,qkv_rope_cache", "921bba1:linear", "5a35cf3:attention_prefill,attention_prefill_gqa")


def golden(rev: str, stem: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:tests/golden/stdlib/{stem}.cu"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def build(src: str, out: Path, arch: str) -> bytes:
    cu = out.with_suffix(".cu")
    cu.write_text(src, encoding="utf-8")
    r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-o", str(out), str(cu)],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"nvcc failed on {cu}:\n{r.stderr[-2000:]}")
    return out.read_bytes()


def sass(cubin: Path) -> list[str] | None:
    """The SASS instructions of a cubin (addresses and encodings dropped), or None without cuobjdump."""
    if not shutil.which("cuobjdump"):
        return None
    text = subprocess.run(["cuobjdump", "--dump-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    return [line.split("*/", 1)[1].split("/*")[0].strip() for line in text.splitlines()
            if line.strip().startswith("/*") and "*/" in line and line.split("*/", 1)[1].strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="*", default=list(PAIRS), help="COMMIT:FILE,FILE (default: issue 20's rewrites)")
    ap.add_argument("--out", type=Path, help="keep the .cu and .cubin files here")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--reuse", action="store_true", help="compare the cubins already in --out (no git, no nvcc: "
                    "for a machine without the history)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rewrite_sass_"))
    out.mkdir(parents=True, exist_ok=True)
    differ = 0
    for pair in args.pairs:
        commit, _, stems = pair.partition(":")
        for stem in stems.split(","):
            paths, blobs = [], []
            for side, rev in (("old", f"{commit}^"), ("new", commit)):
                p = out / f"{commit}-{stem}-{side}.cubin"
                blobs.append(p.read_bytes() if args.reuse else build(golden(rev, stem), p, args.arch))
                paths.append(p)
            same = blobs[0] == blobs[1]
            line = (f"{commit} {stem}: cubin {hashlib.sha256(blobs[0]).hexdigest()[:12]} -> "
                    f"{hashlib.sha256(blobs[1]).hexdigest()[:12]} {'identical' if same else 'DIFFERENT'}")
            listings = [sass(p) for p in paths]
            if listings[0] is not None:
                same_sass = listings[0] == listings[1]
                line += f"; SASS {len(listings[0])} -> {len(listings[1])} instructions, " \
                        f"{'identical' if same_sass else 'DIFFERENT'}"
                same = same and same_sass
            differ += not same
            print(line, flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
