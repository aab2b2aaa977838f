"""Instruction counts of a kernel's loops in SASS: what one iteration issues per thread, on its fast path.

    python benchmarks/sass_loops.py stdlib_kernels/attention_prefill.tile [-k KERNEL] [-D BN=64 ...] [--arch sm_90a]

Translates the .tile file, builds a cubin with nvcc and disassembles it with nvdisasm (from $NVDISASM, the
PATH, or the `nvidia-cuda-nvdisasm` pip package: `pip install nvidia-cuda-nvdisasm`), then, for each loop
(a backward branch) of at least --min instructions, prints its static size and the instructions of one
iteration along its fast path, by kind. A memory-bound kernel on an H200 has about 32 thread-instructions
per bf16 element read and written (16 bytes per clock per SM at 4.27 TB/s against 128 instructions per
clock), so these counts say whether a kernel can reach the bandwidth at all. No GPU is needed.

The fast path is a heuristic: a predicated branch is followed when its target reaches a bulk memory
instruction (cp.async, TMA, a 128-bit load or store) before any convergence barrier or unconditional
branch, which is where the generated code keeps its whole-tile paths; the other edge-case branches are
not taken. Check the listing (--dump) when a count looks wrong.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAST = ("LDGSTS", "UTMALDG", "LDG.E.128", "LDG.E.ENL2.128", "STG.E.128", "LDG.E.CONSTANT.128")
KINDS = (("tensor", ("HGMMA", "HMMA")), ("float", ("FMUL", "FADD", "FFMA", "FMNMX", "FSEL", "MUFU", "F2FP", "HADD2", "HFMA2")),
         ("shuffle", ("SHFL",)), ("move", ("IMAD.MOV", "MOV", "UMOV", "CS2R")),
         ("memory", ("LDS", "STS", "LDSM", "LDGSTS", "LDG", "STG", "UTMALDG", "SYNCS")),
         ("integer/address", ("IMAD", "IADD", "LEA", "SHF", "LOP3", "SEL", "VIADD", "ISETP", "PRMT", "ULOP", "UIADD",
                              "USHF", "R2UR", "S2R", "S2UR", "LDC", "ULDC", "UMOV", "USEL", "UISETP", "UIMAD", "ULEA")))


def nvdisasm() -> str:
    found = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not found:
        for root in sys.path:
            hits = glob.glob(os.path.join(root, "nvidia", "cu*", "bin", "nvdisasm"))
            if hits:
                found = hits[0]
                break
    if not found:
        sys.exit("nvdisasm not found: set NVDISASM, put it on the PATH, or pip install nvidia-cuda-nvdisasm")
    return found


def parse(sass: str) -> tuple[list[str], dict[str, int]]:
    ins, labels = [], {}
    for line in sass.splitlines():
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            ins.append(m.group(1))
    return ins, labels


def opcode(s: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", s).split()[0]


def kind(op: str) -> str:
    for name, prefixes in KINDS:
        if op.startswith(prefixes):
            return name
    return "control"


def target(s: str) -> str | None:
    m = re.search(r"\bBRA\b[^`]*`\((\.L_x_\d+)\)", s)
    return m.group(1) if m else None


def reaches_fast(ins: list[str], at: int, window: int = 200) -> bool:
    for s in ins[at:at + window]:
        op = opcode(s)
        if op.startswith(FAST):
            return True
        if op.startswith("BSSY") or (op == "BRA" and not s.startswith("@")):
            return False
    return False


def hot_path(ins: list[str], labels: dict[str, int], head: int, end: int) -> collections.Counter:
    """Kinds of the instructions of one iteration from `head` to the back edge at `end`."""
    out: collections.Counter = collections.Counter()
    i, steps = head, 0
    while i != end and steps < 20000:
        s, steps = ins[i], steps + 1
        if s.startswith("@!PT"):  # never executed (padding)
            i += 1
            continue
        op = opcode(s)
        out[kind(op)] += 1
        t = target(s)
        if t is not None and labels[t] > end or t is not None and labels[t] < head:
            i += 1  # leaves the loop (or an inner back edge): fall through
        elif t is not None and (not s.startswith("@") or reaches_fast(ins, labels[t])):
            i = labels[t]
        else:
            i += 1
    out[kind(opcode(ins[end]))] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("-k", "--kernel")
    ap.add_argument("-D", "--define", action="append", default=[])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--min", type=int, default=40, help="smallest loop to report (instructions)")
    ap.add_argument("--dump", action="store_true", help="print the SASS listing too")
    ap.add_argument("--all", action="store_true",
                    help="also loops without a bulk copy or tensor-core instruction and a wait (edge-element and spin loops)")
    args = ap.parse_args()
    from tilex.inputs import parse_defines
    from tilex.pipeline import Options
    from tilex.translate import translate

    defines = parse_defines(args.define)
    with open(args.file, encoding="utf-8") as f:
        t = translate(f.read(), args.file, Options(arch=args.arch, defines=defines, kernel=args.kernel))
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.cubin")
        with open(cu, "w") as f:
            f.write(t.cuda)
        r = subprocess.run(["nvcc", "-cubin", f"-arch={args.arch}", "-Xptxas", "-v", cu, "-o", cubin],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr)
        for line in r.stderr.splitlines():
            if "registers" in line or "spill" in line:
                print(line.strip())
        sass = subprocess.run([nvdisasm(), "-c", cubin], capture_output=True, text=True, check=True).stdout
    if args.dump:
        print(sass)
    ins, labels = parse(sass)
    for end, s in enumerate(ins):
        t = target(s)
        if t is None or labels[t] > end or end - labels[t] < args.min:
            continue
        head = labels[t]
        ops = [opcode(x) for x in ins[head:end]]
        # a kernel's own loops copy, multiply and synchronize; ptxas's out-of-line edge loops do not wait
        if not args.all and not (any(o.startswith(FAST + ("HGMMA", "HMMA")) for o in ops)
                                 and any(o.startswith(("DEPBAR", "BAR", "SYNCS", "WARPGROUP")) for o in ops)):
            continue
        hot = hot_path(ins, labels, head, end)
        print(f"loop at instruction {head}: {end - head + 1} static, {sum(hot.values())} per iteration on the fast "
              f"path: " + ", ".join(f"{k} {v}" for k, v in hot.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
