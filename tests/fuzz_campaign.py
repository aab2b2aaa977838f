"""The front end's fuzz campaign: seeded, reproducible, with counts.

Inputs, in a fixed rotation (input i's kind is KINDS[i % len(KINDS)], its randomness is
random.Random(f"{seed}:{i}"), so any single input can be regenerated from (seed, i)):
  mutate   a .tile file of the repository (examples/, stdlib_kernels/, tests/error_corpus/,
           in rotation), 1-4 token or character edits: delete, duplicate, swap, insert a
           grammar token, replace a number by an edge value (0, huge, 08, 1e30, ...);
  generate a kernel built from the grammar's constructs (parameters of every dtype, compile-time
           parameters, slices, arithmetic, math calls, casts, reductions, where, if/for,
           integer literals of edge sizes, grid expressions), mostly well-typed;
  soup     a soup of the grammar's tokens, half of them inside a well-formed kernel header;
  bytes    random bytes (decoded with replacement).

Each input goes through `compile_program(check=True)` (every pass, then the IR verifier) and
then the translation of the checked program (launch specs and codegen, with the --host
launcher: what `translate` does after compiling). Outcome per input:
  ok         checked and translated;
  diagnosed  a CompileError, rendered in the `file:line:col: error: ...` (or `file: error:`) form
             with no Python internals in it;
  crash      any other exception, a badly formed diagnostic, or a translation failure after a
             passing check;
  hang       no answer after --timeout seconds of the worker's CPU time (wall time where /proc is
             missing; a worker starved on a loaded machine is not hung): it is killed and restarted.
A sample of the ok inputs is also built with `nvcc -cubin -arch=sm_90a` (nvcc-ok / nvcc-failure)
and run by the NumPy interpreter on small random inputs (interp-ok, interp-refused for a
LaunchError/InterpError such as a failed `where`, interp-crash for anything else).

    python tests/fuzz_campaign.py --count 100000 --seed 1 --nvcc-every 400 --interp-every 50
prints the counts as JSON (and the first inputs of each failing category, with their index).
tests/test_fuzz_campaign.py runs a bounded slice in CI; docs/internals.md records the long run.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE = "fuzz.tile"
HEAD = re.compile(r"^fuzz\.tile(:\d+:\d+)?: error: \S")
LEAKS = ("traceback", "transpiler/", ".py\"", ".py:", "lark")
KINDS = ("mutate", "generate", "soup", "bytes", "mutate", "generate")
FAILURES = ("crash", "hang", "nvcc-failure", "interp-crash")


def corpus() -> list[tuple[str, str]]:
    """(repo-relative path, text) of every .tile file of the repository, sorted."""
    files = [p for d in ("examples", "stdlib_kernels", "tests/error_corpus") for p in sorted((ROOT / d).rglob("*.tile"))]
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in files]


# ---------------------------------------------------------------- input generators
def _vocabulary() -> list[str]:
    grammar = (ROOT / "grammar" / "tile.lark").read_text(encoding="utf-8")
    words = set(re.findall(r'"([^"\s]+)"', grammar))
    words |= {"+=", "-=", "*=", "/=", "max=", "min=", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "//", "/",
              "%", "@", "**", "&", "|", "f16", "bf16", "f32", "f64", "i32", "i64", "bool", "f8e4m3", "u8", "x", "y",
              "N", "M", "BLOCK", "i", "t", "acc", "inf", "program_id", "range", "pipeline", "zeros", "full", "sum",
              "max", "exp", "where", "arange", "cdiv", "to", "T", "axis", "keepdims", "other", "stages", "out",
              "0", "1", "2", "16", "1024", "1.0", "1e-6", "0x10", "-1", "08", "99999999999999999999", "#", "\n",
              ";", ","}
    return sorted(words)


VOCAB = _vocabulary()
_TOKEN = re.compile(r"\s+|#[^\n]*|0x[0-9a-fA-F]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+|\w+|\*\*|//|[+\-*/<>=!]=|.", re.S)
_NUMBER = re.compile(r"^(0x[0-9a-fA-F]+|\d+\.?\d*(e[+-]?\d+)?)$")
EDGE_NUMBERS = ("0", "1", "2", "3", "7", "64", "100", "4096", "65536", "2147483648", "9223372036854775807",
                "9223372036854775808", "99999999999999999999", "0x0", "0xffffffffffffffff", "08", "1.5", "0.0",
                "1e30", "1e-30", "1e400")
HEADER = "kernel fz<BLOCK: int = 64>(x: f32[N], y: out f32[N], s: f32)\n    grid (cdiv(N, BLOCK),)\n{\n"


def mutate(rng: random.Random, files: list[tuple[str, str]], i: int) -> str:
    _, src = files[i % len(files)]
    toks = _TOKEN.findall(src)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(("del_tok", "dup_tok", "swap_tok", "insert_tok", "number", "number", "del_chr", "dup_chr"))
        if not toks:
            break
        if op.endswith("_chr"):
            text = "".join(toks)
            k = rng.randrange(len(text))
            text = text[:k] + text[k + 1:] if op == "del_chr" else text[:k] + text[k] + text[k:]
            toks = _TOKEN.findall(text)
            continue
        k = rng.randrange(len(toks))
        if op == "del_tok":
            del toks[k]
        elif op == "dup_tok":
            toks.insert(k, toks[k])
        elif op == "insert_tok":
            toks.insert(k, " " + rng.choice(VOCAB) + " ")
        elif op == "swap_tok":
            j = rng.randrange(len(toks))
            toks[k], toks[j] = toks[j], toks[k]
        else:
            nums = [n for n, t in enumerate(toks) if _NUMBER.match(t)]
            if nums:
                toks[rng.choice(nums)] = rng.choice(EDGE_NUMBERS)
    return "".join(toks)


def soup(rng: random.Random) -> str:
    words = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(0, 40)))
    return HEADER + words + "\n}\n" if rng.random() < 0.5 else words


def random_bytes(rng: random.Random) -> str:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))).decode("utf-8", errors="replace")


FLOATS = ("f32", "f16", "bf16", "f8e4m3")
MATH = ("exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "sin", "cos",
        "erf", "floor", "ceil", "abs")


class _Gen:
    """One random kernel over 1-D tiles of BLOCK elements (sometimes 2-D, sometimes ill-typed)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.block = rng.choice((16, 32, 64, 128, 256))
        self.ins = [(f"x{k}", rng.choice(FLOATS + ("f32", "f32", "i32", "bool"))) for k in range(rng.randint(1, 3))]
        self.out = ("y", rng.choice(("f32", "f32", "f16", "bf16", "i32", "f8e4m3", "bool")))
        self.scalars = [(f"s{k}", rng.choice(("f32", "i32", "bool", "f16", "f8e4m3"))) for k in range(rng.randint(0, 2))]
        self.locals: list[str] = []

    def tile(self, depth: int = 0) -> str:
        r, rng = self.rng.random(), self.rng
        if depth > 3 or r < 0.3:
            name, _ = rng.choice(self.ins)
            return f"{name}[i : i + BLOCK]" if rng.random() < 0.9 else f"{name}[i : i + {rng.choice((1, 7, self.block))}]"
        if r < 0.4 and self.locals:
            return rng.choice(self.locals)
        if r < 0.55:
            return f"{rng.choice(MATH)}({self.tile(depth + 1)}.to(f32))"
        if r < 0.7:
            op = rng.choice(("+", "-", "*", "/", "max", "min"))
            a, b = self.tile(depth + 1), self.operand(depth + 1)
            return f"{op}({a}, {b})" if op in ("max", "min") else f"({a} {op} {b})"
        if r < 0.78:
            return f"({self.tile(depth + 1)}).to({rng.choice(FLOATS + ('i32', 'bool'))})"
        if r < 0.84:
            return f"where({self.tile(depth + 1)} > {self.scalar()}, {self.tile(depth + 1)}, {self.operand(depth + 1)})"
        if r < 0.9:
            return f"full({rng.choice(FLOATS + ('i32',))}[BLOCK], {self.scalar()})"
        if r < 0.95:
            return f"(-{self.tile(depth + 1)})"
        return f"arange(0, BLOCK).to(f32)"

    def operand(self, depth: int) -> str:
        return self.tile(depth) if self.rng.random() < 0.7 else self.scalar()

    def scalar(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.3 and self.scalars:
            return rng.choice(self.scalars)[0]
        if r < 0.5:
            return f"sum({self.tile(3)}.to(f32))"
        if r < 0.6:
            return rng.choice(("inf", "pi", "1e30", "-0.0", "2", "0x7f", "9223372036854775807", "3000000000"))
        return repr(round(rng.uniform(-4, 4), 3))

    def stmt(self, depth: int) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.45 or depth > 2:
            name = f"t{len(self.locals)}"
            line = f"{name} = {self.tile()}"
            self.locals.append(name)
            return line
        if r < 0.6:
            v = rng.choice(self.scalars)[0] if self.scalars else "N"
            return f"if {v} > {rng.choice(('0', '1', '0.5'))} {{\n" + self.stmt(depth + 1) + "\n}"
        if r < 0.7:
            return (f"for j in range(0, {rng.choice(('2', '3', 'N', 'cdiv(N, BLOCK)'))}) {{\n"
                    f"    y[i : i + BLOCK] = ({self.tile()}).to({self.out[1]})\n}}")
        return f"y[i : i + BLOCK] = ({self.tile()}).to({self.out[1]})"

    def kernel(self) -> str:
        rng = self.rng
        params = [f"{n}: {d}[N]" for n, d in self.ins] + [f"y: out {self.out[1]}[N]"] + \
            [f"{n}: {d}" for n, d in self.scalars]
        where = rng.choice(("", "", "    where N % 4 == 0\n", "    where N >= BLOCK\n"))
        grid = rng.choice(("cdiv(N, BLOCK)", "cdiv(N, BLOCK)", "N // BLOCK + 1", "1", "cdiv(N, BLOCK), 2"))
        body = [self.stmt(0) for _ in range(rng.randint(1, 5))]
        body.append(f"y[i : i + BLOCK] = ({self.tile()}).to({self.out[1]})")
        return (f"kernel gen<BLOCK: int = {self.block}>({', '.join(params)})\n{where}    grid ({grid},)\n{{\n"
                "    i = program_id(0) * BLOCK\n" + "\n".join("    " + s.replace("\n", "\n    ") for s in body) + "\n}\n")


def make_input(seed: int, i: int, files: list[tuple[str, str]]) -> tuple[str, str]:
    """(kind, source text) of input i of the campaign with `seed`."""
    rng = random.Random(f"{seed}:{i}")
    kind = KINDS[i % len(KINDS)]
    if kind == "mutate":
        return kind, mutate(rng, files, i // len(KINDS))
    if kind == "generate":
        return kind, _Gen(rng).kernel()
    if kind == "soup":
        return kind, soup(rng)
    return kind, random_bytes(rng)


# ---------------------------------------------------------------- the oracle (runs in a worker process)
def examine(src: str, nvcc: bool, interp: bool, seed: int) -> list[tuple[str, str]]:
    """The outcomes of one input: [(category, detail)], the first is ok/diagnosed/crash."""
    from tilex.codegen import generate
    from tilex.deep import deep
    from tilex.diagnostics import CompileError
    from tilex.launchspec import make_spec
    from tilex.pipeline import Options, compile_program

    @deep
    def check_and_translate():
        program = compile_program(src, FILE, check=True)
        try:
            specs = {k.name: make_spec(k, src) for k in program.kernels}
            cuda, _ = generate(program, Options(), specs, host=True)
        except Exception as e:  # noqa: BLE001
            raise _AfterCheck(e) from e
        return program, cuda

    try:
        program, cuda = check_and_translate()
    except CompileError as e:
        text = e.render()
        low = text.lower()
        if not HEAD.match(text) or any(leak in low for leak in LEAKS):
            return [("crash", f"badly formed diagnostic: {text[:300]!r}")]
        return [("diagnosed", text.splitlines()[0])]
    except _AfterCheck as e:
        return [("crash", f"translation failed after a passing check: {type(e.orig).__name__}: {e.orig}"[:400])]
    except Exception as e:  # noqa: BLE001
        return [("crash", f"{type(e).__name__}: {e}"[:400])]
    out = [("ok", "")]
    if nvcc:
        out.append(_nvcc(cuda))
    if interp:
        out.append(_interp(program, seed))
    return out


class _AfterCheck(Exception):
    def __init__(self, orig: BaseException):
        super().__init__(str(orig))
        self.orig = orig


def _nvcc(cuda: str) -> tuple[str, str]:
    exe = shutil.which("nvcc")
    if exe is None:
        return ("nvcc-skipped", "no nvcc on PATH")
    with tempfile.TemporaryDirectory() as d:
        cu = Path(d) / "k.cu"
        cu.write_text(cuda, encoding="utf-8")
        try:
            r = subprocess.run([exe, "-cubin", "-arch=sm_90a", "-o", str(Path(d) / "k.cubin"), str(cu)],
                               capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return ("nvcc-timeout", "nvcc ran over 900 s (a loaded machine?)")
    if r.returncode != 0:
        return ("nvcc-failure", (r.stderr or r.stdout)[:400])
    return ("nvcc-ok", "")


def _interp(program, seed: int) -> tuple[str, str]:
    import numpy as np

    from tilex.diagnostics import LaunchError
    from tilex.interp import InterpError, launch
    from tilex.launchspec import make_spec
    from tilex.runtime.arrays import numpy_dtype

    rng = np.random.default_rng(seed)
    for k in program.kernels:
        spec = make_spec(k, program.source)
        sizes = {s: int(rng.choice([1, 5, 16, 33, 64, 100])) for s in spec.symbols}
        args = []
        try:
            for p in spec.params:
                if p.kind == "scalar":
                    args.append(p.default if p.default is not None else
                                {"bool": True, "i32": 3, "i64": 3}.get(p.dtype, 1.5))
                    continue
                shape = tuple(d if isinstance(d, int) else sizes[d] for d in p.dims)
                if math.prod(shape) > 1 << 16:  # Python ints: np.prod wraps around for huge fixed dims
                    return ("interp-skipped", "large tensor")
                args.append((rng.standard_normal(shape) * 3).astype(numpy_dtype(p.dtype)))
            launch(program, k.name, *args)
        except (LaunchError, InterpError) as e:
            return ("interp-refused", str(e)[:200])
        except Exception as e:  # noqa: BLE001
            return ("interp-crash", f"{type(e).__name__}: {e}"[:400])
    return ("interp-ok", "")


def _worker(conn) -> None:
    import warnings

    warnings.simplefilter("ignore")
    while True:
        job = conn.recv()
        if job is None:
            return
        i, src, nvcc, interp, seed = job
        try:
            res = examine(src, nvcc, interp, seed)
        except BaseException as e:  # noqa: BLE001 - the oracle itself failed: report, keep serving
            res = [("crash", f"fuzz worker: {type(e).__name__}: {e}"[:400])]
        conn.send((i, res))


# ---------------------------------------------------------------- the driver
class _Pool:
    """One worker process; restarted after a hang."""

    def __init__(self):
        self.ctx = mp.get_context("spawn")
        self.start()

    def start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()

    def _cpu_seconds(self) -> float | None:
        """The worker's CPU time (user + system) from /proc, None where that is unavailable."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def run(self, job, timeout: float):
        """The worker's answer, or None after `timeout` seconds of the worker's CPU time (wall time where
        /proc is missing): a starved worker on a loaded machine is not a hang. Children (nvcc) are not
        counted; a wall-clock cap of 20x bounds the wait."""
        self.conn.send(job)
        start_cpu, t0 = self._cpu_seconds(), time.monotonic()
        while not self.conn.poll(1.0):
            cpu = self._cpu_seconds()
            used = cpu - start_cpu if cpu is not None and start_cpu is not None else time.monotonic() - t0
            if used > timeout or time.monotonic() - t0 > 20 * timeout:
                self.proc.kill()
                self.proc.join()
                self.start()
                return None
        return self.conn.recv()[1]

    def close(self):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()


def campaign(count: int, seed: int = 0, start: int = 0, nvcc_every: int = 0, interp_every: int = 0,
             timeout: float = 30.0, progress: bool = False, keep: int = 5) -> dict:
    """Run inputs start..start+count-1; returns {"counts": {...}, "examples": {category: [...]}, ...}."""
    files = corpus()
    counts: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    examples: dict[str, list] = {}
    ok_seen = 0
    pool = _Pool()
    t0 = time.time()
    try:
        for i in range(start, start + count):
            kind, src = make_input(seed, i, files)
            # sample the ok inputs by position: every n-th input of the generated kind (mostly ok ones)
            nvcc = bool(nvcc_every) and kind == "generate" and (i // len(KINDS)) % nvcc_every == 0
            interp = bool(interp_every) and (i // len(KINDS)) % interp_every == 0
            res = pool.run((i, src, nvcc, interp, seed + i), timeout + (60 if interp else 0))
            if res is None:
                res = [("hang", f"no answer after {timeout} s of CPU time")]
            for cat, detail in res:
                counts[cat] = counts.get(cat, 0) + 1
                if cat in FAILURES:
                    if progress:  # at once: a long run's failures are known before it ends
                        print(f"{cat} at input {i} ({kind}): {detail[:300]}", file=sys.stderr, flush=True)
                    if len(examples.setdefault(cat, [])) < keep:
                        examples[cat].append({"index": i, "kind": kind, "detail": detail, "input": src[:2000]})
            first = res[0][0]
            by_kind.setdefault(kind, {})[first] = by_kind.setdefault(kind, {}).get(first, 0) + 1
            ok_seen += first == "ok"
            if progress and (i - start + 1) % 1000 == 0:
                print(f"[{i - start + 1}/{count}] {time.time() - t0:.0f}s {json.dumps(counts)}", file=sys.stderr,
                      flush=True)
    finally:
        pool.close()
    return {"seed": seed, "start": start, "count": count, "seconds": round(time.time() - t0, 1),
            "counts": counts, "by_kind": by_kind, "examples": examples}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=3000, help="number of inputs (default 3000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first input index (to resume or to replay one input)")
    ap.add_argument("--nvcc-every", type=int, default=0, metavar="N",
                    help="build every N-th generated kernel that checks with nvcc -cubin -arch=sm_90a (0: none)")
    ap.add_argument("--interp-every", type=int, default=0, metavar="N",
                    help="run every N-th input that checks in the NumPy interpreter (0: none)")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="CPU seconds of the worker before an input counts as a hang (default 30)")
    ap.add_argument("--show", type=int, metavar="I", help="print input I of --seed and exit")
    ap.add_argument("--out", help="also write the JSON result to this file")
    a = ap.parse_args(argv)
    if a.show is not None:
        print(make_input(a.seed, a.show, corpus())[1])
        return 0
    result = campaign(a.count, a.seed, a.start, a.nvcc_every, a.interp_every, a.timeout, progress=True)
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    return 1 if any(result["counts"].get(c) for c in FAILURES) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
