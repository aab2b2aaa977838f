"""Autotuning (`tilex tune`, tilex.tune): search spaces, shape buckets, the tuned-config store,
skipping configurations that do not compile, checking and ranking candidates, the CLI.

The search runs on the CPU with a fake `Runner` (deterministic times, injectable wrong
outputs and failures); one `gpu` test tunes vector_add end to end with CuPy.
"""
from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import tilex
from tilex import cli_common  # gpu_status, which the run and tune commands read
from tilex import tune as T
from tilex.cli import app
from tilex.inputs import InputError
from tilex.pipeline import Options, compile_program
from tilex.runtime.cache import CacheWarning

ROOT = Path(__file__).resolve().parents[1]
VECTOR_ADD = str(ROOT / "examples" / "vector_add.tile")
MATMUL = str(ROOT / "examples" / "matmul.tile")

WARPED = """\
kernel scale<BLOCK: int = 256, WARPS: int = 4, STAGES: int = 2, ALPHA: float = 2.0, FAST: bool = True>(
    x: f32[N], y: out f32[N])
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    y[i : i + BLOCK] = x[i : i + BLOCK] * ALPHA
}
"""

NO_DEFAULT = """\
kernel copy<BLOCK: int>(x: f32[N], y: out f32[N])
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    y[i : i + BLOCK] = x[i : i + BLOCK]
}
"""


def cparams(source: str, kernel: str | None = None):
    prog = compile_program(source, "<t>", Options(kernel=kernel), stop_after="parse")
    return prog.kernels[0].cparams


def read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


# ---------------------------------------------------------------- fake device
class FakeRunner:
    """Stands in for CupyRunner: `times` maps a config (as a sorted tuple) or a callable to ms."""

    arch = "sm_90a"

    def __init__(self, timing, wrong=lambda cfg: False, build_fails=lambda cfg: False,
                 launch_fails=lambda cfg: False, compute=None):
        self.timing = timing
        self.wrong = wrong
        self.build_fails = build_fails
        self.launch_fails = launch_fails
        self.compute = compute
        self.setups = 0
        self.timed = []

    def setup(self, arrays, scalars, out_names):
        self.setups += 1
        self.arrays, self.scalars, self.out_names = dict(arrays), dict(scalars), list(out_names)

    def build(self, spec, cuda):
        assert "extern" in cuda  # real generated CUDA arrives here
        cfg = dict(spec.defines)
        if self.build_fails(cfg):
            raise RuntimeError("nvrtc: error: something broke\nsecond line")
        return cfg

    def run(self, cfg):
        if self.launch_fails(cfg):
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
        outs = self.compute(self.arrays) if self.compute else {n: self.arrays[n].copy() for n in self.out_names}
        if self.wrong(cfg):
            outs = {n: v + np.asarray(100, v.dtype) for n, v in outs.items()}
        return outs

    def time(self, cfg):
        self.timed.append(cfg)
        return self.timing(cfg)


def vadd(arrays):
    return {"z": arrays["x"] + arrays["y"]}


# ---------------------------------------------------------------- spaces
def test_default_candidates():
    assert T.default_candidates("BM", "int", 64) == [32, 64, 128]
    assert T.default_candidates("BLOCK", "int", 1) == [1, 2]
    assert T.default_candidates("BLOCK", "int", 4096) == [2048, 4096]  # upper bound
    assert T.default_candidates("BN", "int", 48) == [48]  # not a power of two: kept
    assert T.default_candidates("STAGES", "int", 2) == [1, 2, 3]
    assert T.default_candidates("NUM_STAGES", "int", 1) == [1, 2]
    assert T.default_candidates("STAGES", "int", 8) == [7, 8]
    assert T.default_candidates("WARPS", "int", 4) == [2, 4, 8]
    assert T.default_candidates("WARPS", "int", 32) == [16, 32]
    assert T.default_candidates("ALPHA", "float", 0.5) == [0.5]
    assert T.default_candidates("FAST", "bool", True) == [True]
    assert T.default_candidates("BLOCK", "int", None) == []


def test_search_space_defaults_space_and_fixed():
    cps = cparams(WARPED)
    sp = T.search_space(cps)
    assert sp == {"BLOCK": [128, 256, 512], "WARPS": [2, 4, 8], "STAGES": [1, 2, 3], "ALPHA": [2.0], "FAST": [True]}
    sp = T.search_space(cps, space={"BLOCK": [64, 1024], "FAST": [True, False]}, fixed={"WARPS": 8})
    assert sp["BLOCK"] == [64, 1024] and sp["WARPS"] == [8] and sp["FAST"] == [True, False]
    # examples/matmul.tile leaves its tiles to tilex: the spaces their roles imply
    prog = compile_program(read(MATMUL), "<t>", Options(), stop_after="parse")
    assert T.search_space(prog.kernels[0].cparams, kernel=prog.kernels[0]) == {
        "BM": [16, 32, 64, 128, 256], "BN": [16, 32, 64, 128, 256], "BK": [32, 64, 128], "STAGES": [2, 3, 4]}


@pytest.mark.parametrize("kw, msg", [
    (dict(space={"BLOK": [1]}), "'BLOK' is not a compile-time parameter of this kernel (it has: BLOCK, WARPS"),
    (dict(fixed={"NOPE": 1}), "'NOPE' is not a compile-time parameter"),
    (dict(space={"BLOCK": [64]}, fixed={"BLOCK": 64}), "'BLOCK' is given both with -D and with --space"),
    (dict(space={"BLOCK": [64.5]}), "BLOCK=64.5: 'BLOCK' is declared int"),
    (dict(space={"FAST": [1]}), "FAST=1: 'FAST' is declared bool"),
])
def test_search_space_errors(kw, msg):
    with pytest.raises(T.TuneError) as ei:
        T.search_space(cparams(WARPED), **kw)
    assert msg in str(ei.value)


def test_search_space_needs_a_value_without_default():
    with pytest.raises(T.TuneError, match="'BLOCK' has no default: pass -D BLOCK=VALUE or --space BLOCK=V1,V2"):
        T.search_space(cparams(NO_DEFAULT))
    assert T.search_space(cparams(NO_DEFAULT), space={"BLOCK": [128, 256]}) == {"BLOCK": [128, 256]}


def test_parse_space():
    assert T.parse_space(["BM=64,128", "STAGES=3,4,3", "FAST=True,False", "A=0.5"]) == {
        "BM": [64, 128], "STAGES": [3, 4], "FAST": [True, False], "A": [0.5]}
    assert T.parse_space(None) == {}
    with pytest.raises(T.TuneError, match="--space BM=64,x"):
        T.parse_space(["BM=64,x"])
    with pytest.raises(T.TuneError, match="no values"):
        T.parse_space(["BM=,"])
    from tilex.inputs import InputError

    with pytest.raises(InputError, match="expected NAME=VALUE"):
        T.parse_space(["BM"])


def test_configurations_product_with_defaults_first():
    space = {"BM": [32, 64, 128], "BN": [32, 64], "STAGES": [1, 2]}
    configs = T.configurations(space, {"BM": 64, "BN": 64, "STAGES": 2})
    assert len(configs) == 12 and len({tuple(c.items()) for c in configs}) == 12
    assert configs[0] == {"BM": 64, "BN": 64, "STAGES": 2}
    # defaults outside the space: plain product order
    assert T.configurations(space, {"BM": 256})[0] == {"BM": 32, "BN": 32, "STAGES": 1}
    assert T.configurations({}, {}) == [{}]


# ---------------------------------------------------------------- shape buckets
def test_bucket_rounds_each_symbol_up_to_a_power_of_two():
    assert T.bucket({"M": 4096, "N": 13824, "K": 5120}) == {"K": 8192, "M": 4096, "N": 16384}
    assert T.bucket({"M": 1, "N": 152064, "K": 5120}) == {"K": 8192, "M": 1, "N": 262144}
    assert T.bucket({"N": 0}) == {"N": 0}
    assert T.bucket({"M": 3, "N": 5, "K": 9}) == {"K": 16, "M": 4, "N": 8}
    assert T.bucket_text({"N": 13824, "M": 16, "K": 5120}) == "K=8192,M=16,N=16384"
    # same bucket -> same key; M=16 and M=17 differ
    k1 = T.store_key("ab", "linear", {"M": 9, "N": 13824, "K": 5120}, "sm_90a")
    assert k1 == T.store_key("ab", "linear", {"M": 16, "N": 16000, "K": 8000}, "sm_90a")
    assert k1 == f"linear|ab|K=8192,M=16,N=16384|sm_90a|{T.toolkit()}"
    # the CUDA toolkit is part of the key: a winner timed with another toolkit does not apply
    assert T.store_key("ab", "linear", {"M": 9, "N": 1, "K": 1}, "sm_90a", "nvrtc-12.8") \
        != T.store_key("ab", "linear", {"M": 9, "N": 1, "K": 1}, "sm_90a", "nvrtc-13.0")
    assert k1 != T.store_key("ab", "linear", {"M": 17, "N": 13824, "K": 5120}, "sm_90a")


# ---------------------------------------------------------------- the store
def record(defines, **extra):
    return {"kernel": "matmul", "defines": defines, "time_ms": 1.0, **extra}


def test_store_round_trip_and_best(tmp_path):
    src = read(MATMUL)
    digest = T.source_sha256(src)
    shapes = {"M": 4096, "N": 13824, "K": 5120}
    store = T.TuneStore(tmp_path)
    assert store.load() == {} and T.best(MATMUL, "matmul", shapes, "sm_90a", cache_dir=tmp_path) is None
    store.put(T.store_key(digest, "matmul", shapes, "sm_90a"), record({"BM": 128, "BN": 256, "STAGES": 3}))
    store.put(T.store_key(digest, "matmul", {"M": 1, "N": 13824, "K": 5120}, "sm_90a"), record({"BM": 16}))
    data = json.loads((tmp_path / "tuned.json").read_text())
    assert data["format"] == "tilex-tuned-configs" and data["version"] == 1 and len(data["entries"]) == 2
    # by path and by source text; another shape in the same bucket hits, another arch or source misses
    assert T.best(MATMUL, "matmul", shapes, "sm_90a", cache_dir=tmp_path) == {"BM": 128, "BN": 256, "STAGES": 3}
    assert T.best(src, "matmul", {"M": 4000, "N": 16384, "K": 8192}, "sm_90a", cache_dir=tmp_path)["BN"] == 256
    assert T.best(MATMUL, "matmul", {"M": 1, "N": 13824, "K": 5120}, "sm_90a", cache_dir=tmp_path) == {"BM": 16}
    assert T.best(MATMUL, "matmul", shapes, "sm_100a", cache_dir=tmp_path) is None
    assert T.best(src + "\n# edited\n", "matmul", shapes, "sm_90a", cache_dir=tmp_path) is None
    assert T.best(MATMUL, "other", shapes, "sm_90a", cache_dir=tmp_path) is None
    # tilex.tuned_defines: the same lookup, {} when nothing was tuned
    assert tilex.tuned_defines(MATMUL, "matmul", shapes, arch="sm_90a", cache_dir=tmp_path)["STAGES"] == 3
    assert tilex.tuned_defines(MATMUL, "matmul", {"M": 2, "N": 2, "K": 2}, arch="sm_90a", cache_dir=tmp_path) == {}
    # replacing an entry
    store.put(T.store_key(digest, "matmul", shapes, "sm_90a"), record({"BM": 64}))
    assert T.best(MATMUL, "matmul", shapes, "sm_90a", cache_dir=tmp_path) == {"BM": 64}


def test_store_default_dir_is_tilex_cache_dir(tmp_cache_dir):
    assert T.TuneStore().path == tmp_cache_dir / "tuned.json"


def test_tuned_defines_without_gpu_is_empty(monkeypatch, tmp_path):
    import tilex.runtime.nvrtc as nvrtc

    def no_gpu():
        raise ImportError("no cupy")

    monkeypatch.setattr(nvrtc, "default_arch", no_gpu)
    assert tilex.tuned_defines(MATMUL, "matmul", {"M": 1, "N": 1, "K": 1}, cache_dir=tmp_path) == {}


@pytest.mark.parametrize("content, what", [
    (b"{not json", "corrupt tuned-configuration file"),
    (b'{"format": "something-else", "entries": {}}', "is not a tilex tuned-configuration file"),
    (b'{"format": "tilex-tuned-configs", "version": 99, "entries": {}}', "format version 99"),
    (b"\xff\xfe\x00garbage", "cannot read tuned configurations"),
])
def test_store_corrupt_file_warns_and_is_ignored(tmp_path, content, what):
    (tmp_path / "tuned.json").write_bytes(content)
    with pytest.warns(CacheWarning, match=what):
        assert T.TuneStore(tmp_path).load() == {}
    with pytest.warns(CacheWarning):
        assert T.best(MATMUL, "matmul", {"M": 1}, "sm_90a", cache_dir=tmp_path) is None
    # the next put replaces the damaged file (quietly: it was reported on read)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T.TuneStore(tmp_path).put("k", record({"BM": 32}))
        assert T.TuneStore(tmp_path).get("k")["defines"] == {"BM": 32}


def test_store_malformed_entry_ignored(tmp_path):
    data = {"format": "tilex-tuned-configs", "version": 1,
            "entries": {"good": record({"BM": 32}), "bad": {"defines": {"BM": [1, 2]}}, "worse": 3}}
    (tmp_path / "tuned.json").write_text(json.dumps(data))
    with pytest.warns(CacheWarning) as caught:
        entries = T.TuneStore(tmp_path).load()
    assert sorted(str(w.message).split("'")[1] for w in caught) == ["bad", "worse"]
    assert list(entries) == ["good"]
    with pytest.raises(ValueError):
        T.TuneStore(tmp_path).put("x", {"defines": {"BM": None}})


def test_store_write_is_atomic(tmp_path, monkeypatch):
    store = T.TuneStore(tmp_path)
    store.put("a", record({"BM": 32}))
    before = store.path.read_bytes()

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        store.put("b", record({"BM": 64}))
    monkeypatch.undo()
    assert store.path.read_bytes() == before  # old file intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuned.json", "tuned.json.lock"]  # no temp left


def test_store_concurrent_puts_keep_every_entry(tmp_path):
    errors = []

    def put(i):
        try:
            T.TuneStore(tmp_path).put(f"k{i}", record({"BM": i}))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(T.TuneStore(tmp_path).load()) == sorted(f"k{i}" for i in range(16))


# ---------------------------------------------------------------- the search (fake device)
def test_tune_ranks_by_time_rejects_wrong_and_stores_best(tmp_path):
    times = {256: 3.0, 512: 1.0, 1024: 2.0, 2048: 0.5}
    runner = FakeRunner(lambda c: times[c["BLOCK"]], wrong=lambda c: c["BLOCK"] == 2048, compute=vadd)
    progress = []
    res = T.tune(VECTOR_ADD, None, {"N": 5000}, space={"BLOCK": [256, 512, 1024, 2048]}, runner=runner,
                 reference="interp", cache_dir=tmp_path, progress=progress.append)
    assert [c.defines["BLOCK"] for c in res.candidates] == [512, 1024, 256, 2048]
    assert [c.status for c in res.candidates] == ["ok", "ok", "ok", "wrong"]
    assert "output 'z' differs from the interpreter" in res.candidates[-1].reason
    assert res.best.defines == {"BLOCK": 512} and res.best.time_ms == 1.0
    assert res.kernel == "vector_add" and res.reference == "interp" and res.shapes == {"N": 5000}
    assert res.nbytes == 3 * 4 * 5000 and res.flop is None
    assert runner.setups == 1 and {c["BLOCK"] for c in runner.timed} == {256, 512, 1024}  # wrong ones not timed
    assert progress[0].startswith("tuning vector_add") and "4 configurations" in progress[0]
    assert progress[1] == "running the interpreter for the reference output ..."
    assert progress[2].startswith("[1/4] BLOCK=1024: 2.0000 ms")  # the declared default first
    assert any("[3/4] BLOCK=512: 1.0000 ms" in p for p in progress)
    assert any("WRONG" in p for p in progress)
    # stored and found again, for this bucket and arch only
    assert res.stored == str(tmp_path / "tuned.json")
    assert T.best(VECTOR_ADD, "vector_add", {"N": 8000}, "sm_90a", cache_dir=tmp_path) == {"BLOCK": 512}
    assert T.best(VECTOR_ADD, "vector_add", {"N": 9000}, "sm_90a", cache_dir=tmp_path) is None
    rec = T.TuneStore(tmp_path).get(T.store_key(T.source_sha256(read(VECTOR_ADD)), "vector_add", {"N": 5000}, "sm_90a"))
    assert rec["bucket"] == {"N": 8192} and rec["shapes"] == {"N": 5000} and rec["default_time_ms"] == 2.0
    assert rec["arch"] == "sm_90a" and rec["time_ms"] == 1.0 and rec["tilex_version"] == tilex.__version__
    # as_dict is JSON-clean
    d = res.as_dict()
    json.dumps(d, allow_nan=False)
    assert d["best"]["defines"] == {"BLOCK": 512} and d["default_time_ms"] == 2.0 and d["ok"] is True


def test_tune_first_candidate_is_the_reference(tmp_path):
    # default BLOCK=1024 goes first and is the reference; a config that disagrees is wrong
    runner = FakeRunner(lambda c: 1.0, wrong=lambda c: c["BLOCK"] == 512, compute=vadd)
    res = T.tune(VECTOR_ADD, "vector_add", {"N": 100}, runner=runner, reference="first", store=False,
                 cache_dir=tmp_path)
    by = {c.defines["BLOCK"]: c for c in res.candidates}
    assert by[1024].reference and by[1024].status == "ok"
    assert by[512].status == "wrong" and "differs from the reference" in by[512].reason
    assert by[2048].status == "ok" and by[2048].rel_err == 0.0
    assert res.stored is None and not (tmp_path / "tuned.json").exists()


def test_tune_auto_reference_uses_interp_for_small_shapes(tmp_path):
    runner = FakeRunner(lambda c: 1.0, wrong=lambda c: c["BLOCK"] == 1024, compute=vadd)
    res = T.tune(VECTOR_ADD, "vector_add", {"N": 300}, runner=runner, store=False)
    assert res.reference == "interp"
    assert {c.defines["BLOCK"]: c.status for c in res.candidates}[1024] == "wrong"  # the default, caught by interp


def test_tune_skips_configs_that_do_not_compile(tmp_path):
    # BK=1024 with BM=BN=64 stages 2 x 64x1024 bf16 operands: more shared memory than sm_90a allows
    runner = FakeRunner(lambda c: {32: 2.0, 64: 1.5}[c["BK"]])
    progress = []
    res = T.tune(MATMUL, "matmul", {"M": 64, "N": 64, "K": 64},
                 space={"BK": [32, 64, 1024]}, defines={"BM": 64, "BN": 64, "STAGES": 2},
                 runner=runner, reference="first", cache_dir=tmp_path, progress=progress.append)
    assert [(c.defines["BK"], c.status) for c in res.candidates] == [(64, "ok"), (32, "ok"), (1024, "skipped")]
    skipped = res.candidates[-1]
    assert "bytes of shared memory; the target allows" in skipped.reason
    assert "\n" not in skipped.reason and skipped.time_ms is None
    assert any("BK=1024 STAGES=2: skipped: " in p and "shared memory" in p for p in progress)
    assert res.flop == 2.0 * 64 ** 3 and res.best.defines == {"BM": 64, "BN": 64, "BK": 64, "STAGES": 2}
    assert res.candidates[0].smem_bytes > 0 and res.candidates[0].threads > 0


def test_tune_build_and_launch_failures_are_reported(tmp_path):
    runner = FakeRunner(lambda c: 1.0, build_fails=lambda c: c["BLOCK"] == 512,
                        launch_fails=lambda c: c["BLOCK"] == 2048, compute=vadd)
    res = T.tune(VECTOR_ADD, "vector_add", {"N": 100}, runner=runner, reference="interp", store=False)
    by = {c.defines["BLOCK"]: c for c in res.candidates}
    assert by[512].status == "skipped" and by[512].reason == "build failed: nvrtc: error: something broke"
    assert by[2048].status == "failed" and by[2048].reason == "launch failed: CUDA_ERROR_ILLEGAL_ADDRESS"
    assert [c.status for c in res.candidates] == ["ok", "failed", "skipped"]


def test_tune_nothing_correct_stores_nothing(tmp_path):
    runner = FakeRunner(lambda c: 1.0, wrong=lambda c: True, compute=vadd)
    res = T.tune(VECTOR_ADD, "vector_add", {"N": 100}, runner=runner, reference="interp", cache_dir=tmp_path)
    assert res.best is None and res.stored is None and not (tmp_path / "tuned.json").exists()
    assert res.as_dict()["ok"] is False


def test_tune_errors(tmp_path):
    runner = FakeRunner(lambda c: 1.0)
    two = read(VECTOR_ADD) + "\n" + WARPED
    with pytest.raises(T.TuneError, match="has 2 kernels"):
        T.tune(two, None, {"N": 10}, runner=runner)
    from tilex.diagnostics import CompileError
    from tilex.inputs import InputError

    with pytest.raises(CompileError, match="no kernel named 'nope'"):
        T.tune(VECTOR_ADD, "nope", {"N": 10}, runner=runner)
    with pytest.raises(InputError, match="no size for symbol N"):
        T.tune(VECTOR_ADD, "vector_add", {}, runner=runner)
    with pytest.raises(T.TuneError, match="reference must be"):
        T.tune(VECTOR_ADD, "vector_add", {"N": 10}, runner=runner, reference="gpu")


def test_rank_orders_ok_by_time_then_failures():
    C = T.Candidate
    cands = [C({"i": 0}, "skipped"), C({"i": 1}, "ok", time_ms=2.0), C({"i": 2}, "wrong"),
             C({"i": 3}, "ok", time_ms=0.5), C({"i": 4}, "failed"), C({"i": 5}, "ok", time_ms=2.0)]
    assert [c.defines["i"] for c in T.rank(cands)] == [3, 1, 5, 2, 4, 0]


def test_render_table(tmp_path):
    from rich.console import Console

    times = {256: 3.0, 512: 1.0, 1024: 2.0, 2048: 0.5}
    runner = FakeRunner(lambda c: times[c["BLOCK"]], build_fails=lambda c: c["BLOCK"] == 2048, compute=vadd)
    res = T.tune(VECTOR_ADD, "vector_add", {"N": 1 << 20}, space={"BLOCK": [256, 512, 1024, 2048]},
                 runner=runner, reference="first", store=False)
    con = Console(record=True, width=200)
    con.print(T.render_table(res))
    text = con.export_text()
    lines = [ln for ln in text.splitlines() if "│" in ln and "BLOCK" not in ln]
    assert [ln.split("│")[2].strip() for ln in lines] == ["512", "1024", "256", "2048"]
    assert "2.00x" in lines[0] and "1.00x" in lines[1] and "GB/s" in text
    assert lines[0].split("│")[4].strip() == "13"  # GB/s: 3 x 4 MiB in 1 ms
    assert "skipped: build failed" in lines[-1] and "reference" in lines[1]


# ---------------------------------------------------------------- the command line
@pytest.fixture
def cli_runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def test_cli_without_gpu_exits_2_with_one_line(cli_runner, monkeypatch):
    monkeypatch.setattr(cli_common, "gpu_status", lambda: (False, "cannot import cupy (ModuleNotFoundError)"))
    r = cli_runner.invoke(app, ["tune", VECTOR_ADD, "--shape", "N=1000"])
    assert r.exit_code == 2
    assert r.stderr == "error: tilex tune needs a GPU with CuPy: cannot import cupy (ModuleNotFoundError)\n"
    assert r.stdout == ""
    r = cli_runner.invoke(app, ["tune", VECTOR_ADD, "--shape", "N=1000", "--json"])
    assert r.exit_code == 2 and json.loads(r.stdout) == {
        "ok": False, "error": "tilex tune needs a GPU with CuPy: cannot import cupy (ModuleNotFoundError)"}


def test_cli_bad_options_exit_2(cli_runner, monkeypatch):
    monkeypatch.setattr(cli_common, "gpu_status", lambda: (True, "fake"))
    for args, what in ((["--space", "BLOCK=1,x"], "--space"), (["--shape", "N=x"], "--shape"),
                       (["--rep", "0"], "--rep"), (["--reference", "gpu"], "--reference")):
        r = cli_runner.invoke(app, ["tune", VECTOR_ADD] + args)
        assert r.exit_code == 2, args
        assert what in r.stderr


def test_cli_tune_with_fake_device(cli_runner, monkeypatch, tmp_cache_dir):
    times = {512: 2.0, 1024: 1.0, 2048: 4.0}
    monkeypatch.setattr(cli_common, "gpu_status", lambda: (True, "fake"))
    monkeypatch.setattr(T, "CupyRunner", lambda arch, warmup_ms, rep: FakeRunner(lambda c: times[c["BLOCK"]],
                                                                                 compute=vadd))
    r = cli_runner.invoke(app, ["tune", VECTOR_ADD, "--shape", "N=3000", "--warmup", "1", "--rep", "5"])
    assert r.exit_code == 0, r.stderr + r.stdout
    assert "vector_add  N=3000  arch=sm_90a  bucket N=4096  reference=interp" in r.stdout
    assert f"best: BLOCK=1024  1.0000 ms  (stored in {tmp_cache_dir / 'tuned.json'})" in r.stdout
    assert "[1/3] BLOCK=1024" in r.stderr
    assert T.best(VECTOR_ADD, "vector_add", {"N": 4096}, "sm_90a") == {"BLOCK": 1024}
    r = cli_runner.invoke(app, ["tune", VECTOR_ADD, "-s", "N=3000", "--space", "BLOCK=512,2048", "--json",
                                "--no-store"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and d["best"]["defines"] == {"BLOCK": 512} and d["stored"] is None
    assert [c["defines"]["BLOCK"] for c in d["candidates"]] == [512, 2048] and d["bucket"] == {"N": 4096}
    # program errors are exit 1 with the usual rendering
    r = cli_runner.invoke(app, ["tune", VECTOR_ADD, "-s", "N=3000", "--space", "BLK=1,2"])
    assert r.exit_code == 1 and "error: 'BLK' is not a compile-time parameter" in r.stderr
    r = cli_runner.invoke(app, ["tune", str(Path(VECTOR_ADD).with_name("missing.tile"))])
    assert r.exit_code == 1 and "No such file" in r.stderr


# ---------------------------------------------------------------- on the GPU
@pytest.mark.gpu
def test_tune_vector_add_on_gpu(tmp_cache_dir):
    res = T.tune(VECTOR_ADD, "vector_add", {"N": 100_003}, space={"BLOCK": [256, 1024, 4096]},
                 warmup_ms=2, rep=10)
    assert res.arch.startswith("sm_") and res.reference == "interp"
    assert all(c.status == "ok" and c.time_ms > 0 for c in res.candidates), [c.as_dict() for c in res.candidates]
    assert res.stored == str(tmp_cache_dir / "tuned.json")
    assert tilex.tuned_defines(VECTOR_ADD, "vector_add", {"N": 100_003}) == res.best.defines
    # a tuned module works
    import cupy as cp

    mod = tilex.compile(VECTOR_ADD, **tilex.tuned_defines(VECTOR_ADD, "vector_add", {"N": 100_003}))
    x, y = cp.arange(100_003, dtype=cp.float32), cp.ones(100_003, cp.float32)
    z = cp.empty_like(x)
    mod.vector_add(x, y, z)
    assert float(cp.abs(z - (x + 1)).max()) == 0.0


SCALED = """kernel scaled<BLOCK: int = 256>(x: f32[N], y: out f32[N], alpha: f32)
    grid (cdiv(N, BLOCK),)
{
    i = program_id(0) * BLOCK
    y[i : i + BLOCK] = x[i : i + BLOCK] * alpha
}
"""


def test_tune_scalar_without_default_needs_arg(tmp_path):
    """A scalar parameter without a declared default takes its value from `args` (`--arg`)."""
    src = tmp_path / "scaled.tile"
    src.write_text(SCALED)
    with pytest.raises(InputError, match="--arg alpha=VALUE"):
        T.tune(str(src), None, {"N": 300}, runner=FakeRunner(lambda c: 1.0), store=False)
    runner = FakeRunner(lambda c: 1.0, compute=lambda a: {"y": a["x"] * np.float32(2.5)})
    res = T.tune(str(src), None, {"N": 300}, runner=runner, store=False, args={"alpha": "2.5"})
    assert runner.scalars == {"alpha": 2.5} and res.best is not None


def test_cli_tune_has_arg_option():
    out = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200"}).output
    assert "--arg" in out
