"""The backend's fingerprinted cache (cache.py) on CPU: two processes compile the same model under
one cache directory; the second finds the graph's record, loads every generated kernel's translation
from kernels/ and builds none (counted compiles, not timing). Fingerprints: stable across processes,
different for another shape, dtype or constant.

The model's GEMMs have ROWS = 40 rows: on the GPU, tilex.stdlib.linear runs M <= 16 on linear_swap with
measured tiles (no configuration-model choice: nothing goes to tuning/), which is why the GPU test failed at
759a752 with 5 rows (`warm["choices"]["loaded"] >= 1` with nothing stored; reproduced on a CPU by
test_script_gemms_take_a_stored_choice_on_the_gpu_too); at 40 rows both devices take the model's choice."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import tilex.backend  # noqa: E402,F401
from tilex.backend import cache as C  # noqa: E402

ROWS = 40  # > linear_swap's 16 rows: the GEMMs' tiles are the configuration model's choice on the GPU too

SCRIPT = textwrap.dedent('''
    import json, logging, sys, time
    t0 = time.perf_counter()
    import torch
    t_torch = time.perf_counter() - t0
    import torch._dynamo  # what any torch.compile imports (tilex.backend's registration would import it)
    t_dynamo = time.perf_counter() - t0
    import tilex.backend
    t_import = time.perf_counter() - t0
    from tilex.backend import cache as C
    import torch.nn.functional as F
    from tilex.runtime import nvrtc as N
    COMPILES = []  # every cubin this process compiles (generated and library kernels: nvrtc or nvcc)
    for _name in ("compile_with_nvrtc", "compile_with_nvcc"):
        _real = getattr(N, _name)
        setattr(N, _name, lambda *a, _real=_real, **kw: COMPILES.append(1) or _real(*a, **kw))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    g = torch.Generator().manual_seed(0)
    w1, w2 = torch.randn(48, 32, generator=g), torch.randn(32, 48, generator=g)
    def model(x):
        h = F.linear(x, w1)
        h = torch.sigmoid(h) * h * 0.5 + 1.0                 # a generated kernel
        y = F.linear(h, w2) - x.amax(-1, keepdim=True)        # another (with a row reduction)
        return torch.softmax(y, -1) * torch.tanh(y)           # library softmax, a third kernel
    progs = []
    cm = torch.compile(model, backend="tilex", options={"programs": progs})
    x = torch.randn(ROWS, 32, generator=g)
    t_call = time.perf_counter()
    with torch.no_grad():
        out = cm(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    t_done = time.perf_counter()
    first = t_done - t0
    ref = model(x)
    (p,) = progs
    from tilex import translation_cache as T, autoconfig as A
    from tilex.backend import choices as CH
    b = p.build_stats
    # the first forward from before `import torch`: the imports, then the compiled call: Dynamo's trace (before
    # the backend is entered), AOTAutograd's, the lowering (of which graph_load: the record, the choices and the
    # kernels' translations read back), the kernel builds, the program's first run, the record written after it
    split = {"import_s": t_import, "import_torch_s": t_torch, "import_dynamo_s": t_dynamo - t_torch,
             "import_tilex_s": t_import - t_dynamo, "before_call_s": t_call - t0 - t_import,
             "dynamo_s": b["backend_entered"] - t_call, "aot_s": b["aot_s"], "lower_s": b["lower_s"],
             "graph_load_s": p.cache["load_s"], "builds_s": b["seconds"], "first_run_s": b.get("first_run_s", 0.0),
             "record_s": b.get("after_first_call_s", 0.0)}
    split["rest_s"] = (t_done - t_call) - sum(split[k] for k in ("dynamo_s", "aot_s", "lower_s", "builds_s",
                                                                 "first_run_s", "record_s"))
    print(json.dumps({"cache": p.cache, "stats": C.STATS, "all": T.STATS, "err": float((out - ref).abs().max()),
                      "first_forward_s": first, "after_torch_imports_s": t_done - t0 - t_dynamo, "choices": CH.STATS, "candidates": len(A._PROGRAMS),
                      "cubins_compiled": len(COMPILES),
                      "split": {k: round(v, 4) for k, v in split.items()}}))
''').replace("ROWS", str(ROWS))


def _run(script, cache_dir, pycache: bool = False):
    """Run `script` in a fresh process with TILEX_CACHE_DIR=cache_dir; pycache: Python's bytecode cache under
    cache_dir too (PYTHONPYCACHEPREFIX), for hosts whose site-packages take no .pyc files (the H200 host's
    torch recompiled ~2400 modules from source in every process: 8.7 s of a 14.3 s warm start, session 18)."""
    env = dict(os.environ, TILEX_CACHE_DIR=str(cache_dir))
    if pycache:
        env["PYTHONPYCACHEPREFIX"] = str(cache_dir / "pycache")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_second_process_builds_no_kernel(tmp_path):
    cold, log1 = _run(SCRIPT, tmp_path)
    warm, log2 = _run(SCRIPT, tmp_path)
    for r in (cold, warm):
        assert r["err"] < 1e-5
    assert cold["cache"]["hit"] is False and cold["cache"]["stats"]["built"] == 3
    assert cold["stats"]["translated"] == 3
    assert warm["cache"]["fingerprint"] == cold["cache"]["fingerprint"]     # stable across processes
    assert warm["cache"]["hit"] is True and warm["cache"]["reused"] == 3
    assert warm["cache"]["stats"] == {"kernels": 3, "reused": 3, "built": 0, "cubins_built": 0}
    assert warm["stats"] == {"translated": 0, "loaded": 3}                  # no generated kernel translated
    assert cold["cubins_compiled"] == warm["cubins_compiled"] == 0          # the interpreter: no cubin
    assert cold["all"]["translated"] >= 5 and warm["all"]["translated"] == 0  # nor a library (stdlib) one
    _assert_choices_kept(cold, warm)
    fp = cold["cache"]["fingerprint"]
    assert f"tilex backend: graph {fp[:8]}.. not cached, 0 kernels reused, 3 built" in log1
    assert f"tilex backend: graph {fp[:8]}.. cached, 3 kernels reused, 0 built" in log2
    assert (tmp_path / "graphs" / f"{fp}.json").is_file()
    assert len(list((tmp_path / "kernels").glob("*.tlxc"))) == cold["all"]["translated"]
    rec = json.loads((tmp_path / "graphs" / f"{fp}.json").read_text())
    assert len(rec["kernels"]) == 3 and all("kernel fused_" in k["source"] for k in rec["kernels"])


def _assert_choices_kept(cold, warm):
    """The GEMM tile choices (tuning/): made and kept by the cold process, read back by the warm one, which
    translates no candidate configuration to choose again. The messages carry both processes' facts."""
    facts = f"cold {cold['choices']} candidates {cold['candidates']}; warm {warm['choices']} " \
            f"candidates {warm['candidates']}"
    assert cold["choices"]["stored"] >= 1 and cold["candidates"] > 0, f"the cold process chose nothing: {facts}"
    assert warm["choices"]["loaded"] == cold["choices"]["stored"], f"choices not read back: {facts}"
    assert warm["choices"]["stored"] == 0, f"the warm process made new choices: {facts}"
    assert warm["candidates"] == 0, f"the warm process translated candidate configurations: {facts}"


def test_script_gemms_take_a_stored_choice_on_the_gpu_too(monkeypatch):
    """The GPU test's cause, on a CPU: with linear()'s GPU decisions, the script's GEMMs (ROWS x 32 @ 48 x 32,
    ROWS x 48 @ 32 x 48) go through the configuration model (a choice tuning/ keeps); at 5 rows (the GPU test
    before) the GPU takes linear_swap's measured tiles and no choice is made, so the warm process had none to
    load. Fails if ROWS goes back under linear_swap's rows."""
    import sys

    import numpy as np
    import tilex.stdlib  # noqa: F401
    from tilex import autoconfig as A

    Lm = sys.modules["tilex.stdlib.linear"]
    monkeypatch.setattr(Lm, "_use_swap", lambda m, k, gpu: 0 < m <= Lm._SWAP_ROWS and k % 8 == 0)  # gpu=True
    asked = []
    real = A.choose
    monkeypatch.setattr(A, "choose", lambda *a, **kw: asked.append((a[2], kw.get("tuned"))) or real(*a, **kw))

    def chosen(rows):
        asked.clear()
        Lm._CHOSEN.clear()
        Lm._PATHS.clear()
        g = np.random.default_rng(0)
        for m, n, k in ((rows, 48, 32), (rows, 32, 48)):
            assert not Lm._use_split_kernels(m, n, k)  # the GPU's split-K path (no choice either) is not taken
            y = Lm.linear(g.standard_normal((m, k)).astype(np.float32), g.standard_normal((n, k)).astype(np.float32))
            assert y.shape == (m, n)
        return list(asked)
    assert chosen(ROWS) and all(tuned is False for _, tuned in chosen(ROWS))   # model choices: stored
    assert chosen(5) == []                                                      # linear_swap: nothing to store


def test_damaged_translation_is_rebuilt(tmp_path):
    cold, _ = _run(SCRIPT, tmp_path)
    for f in (tmp_path / "kernels").glob("*.tlxc"):
        f.write_bytes(f.read_bytes()[:-7])                                   # truncated entries
    again, err = _run(SCRIPT, tmp_path)
    assert again["err"] < 1e-5 and again["all"]["translated"] == cold["all"]["translated"] and "corrupt entry" in err


def _graph(fn, *args):
    from torch._functorch.aot_autograd import aot_function

    got = []

    def compiler(gm, inputs):
        got.append(gm)
        return gm
    aot_function(fn, fw_compiler=compiler)(*args)
    return got[0]


def test_fingerprint_covers_shapes_dtypes_constants():
    x = torch.randn(4, 8)
    f = lambda x: torch.sigmoid(x) * 2.0  # noqa: E731
    base = C.fingerprint(_graph(f, x), "sm_90a")
    assert base == C.fingerprint(_graph(f, torch.randn(4, 8)), "sm_90a")          # same graph, same key
    assert base != C.fingerprint(_graph(f, torch.randn(4, 9)), "sm_90a")          # another shape
    assert base != C.fingerprint(_graph(f, x.double()), "sm_90a")                 # another dtype
    assert base != C.fingerprint(_graph(lambda x: torch.sigmoid(x) * 3.0, x), "sm_90a")   # another constant
    assert base != C.fingerprint(_graph(f, x), "sm_100a")                         # another arch


class _Scaled(torch.nn.Module):
    def __init__(self, t):
        super().__init__()
        self.register_buffer("t", t)

    def forward(self, x):
        return x * self.t


def test_canonical_text_hashes_constants():
    g1 = C.canonical_text(torch.fx.symbolic_trace(_Scaled(torch.ones(8))))
    g2 = C.canonical_text(torch.fx.symbolic_trace(_Scaled(torch.full((8,), 2.0))))
    g3 = C.canonical_text(torch.fx.symbolic_trace(_Scaled(torch.ones(8))))
    assert "%0 = placeholder" in g1 and "get_attr" in g1 and g1 != g2 and g1 == g3   # constants' bytes hashed


@pytest.mark.gpu
def test_second_process_on_cuda_builds_no_kernel_and_starts_fast(tmp_path):
    """On the GPU: the second process translates nothing and compiles no cubin (generated or library kernels).
    Issue 19's target, a first forward within 5 s of import, is judged on the time after torch's own imports
    (`import torch` and `import torch._dynamo`, which any torch.compile user pays): tilex's import, the setup, and
    the first compiled call (Dynamo, AOTAutograd, lowering, loads, first run); the test xfails when that reaches
    5 s. The figure from before `import torch` is printed beside it with its split (H200, request 1 at 8614858:
    10.73 s from process start, of which imports 8.04 s)."""
    script = SCRIPT.replace(f"x = torch.randn({ROWS}, 32, generator=g)",
                            f"x = torch.randn({ROWS}, 32, generator=g).cuda()"
                            ).replace("w1, w2 = torch.randn(48, 32, generator=g), torch.randn(32, 48, generator=g)",
                                      "w1, w2 = torch.randn(48, 32, generator=g).cuda(), torch.randn(32, 48, generator=g).cuda()")
    assert script.count(".cuda()") == 3, "the script's tensors were not moved to the GPU"
    cold, _ = _run(script, tmp_path, pycache=True)
    warm, log2 = _run(script, tmp_path, pycache=True)
    assert cold["err"] < 1e-4 and warm["err"] < 1e-4
    assert cold["cache"]["stats"]["cubins_built"] >= 3
    keys = ("after_torch_imports_s", "split", "cache", "stats", "all", "choices", "candidates", "cubins_compiled")
    print(f"\nwarm first forward after torch's imports {warm['after_torch_imports_s']:.2f} s (target < 5 s; cold "
          f"{cold['after_torch_imports_s']:.2f} s); from before `import torch`: warm {warm['first_forward_s']:.2f} s, "
          f"cold {cold['first_forward_s']:.2f} s"
          f"\ncold: {json.dumps({k: cold[k] for k in keys})}\nwarm: {json.dumps({k: warm[k] for k in keys})}")
    assert warm["cache"]["stats"] == {"kernels": 3, "reused": 3, "built": 0, "cubins_built": 0}, warm["cache"]
    assert warm["stats"] == {"translated": 0, "loaded": 3}, warm["stats"]
    assert warm["all"]["translated"] == 0, warm["all"]              # nor a library kernel's translation
    assert cold["cubins_compiled"] >= 3 and warm["cubins_compiled"] == 0, (cold["cubins_compiled"],
                                                                           warm["cubins_compiled"])  # library too
    _assert_choices_kept(cold, warm)
    # H200, session 17: 11.9 s; session 18: 14.3 s, of which 8.7 s compiling torch's .py files (no .pyc written
    # on that host: now under the cache directory, as any installation with a writable bytecode cache has them)
    if warm["after_torch_imports_s"] >= 5.0:
        pytest.xfail(f"warm first forward {warm['after_torch_imports_s']:.1f} s after torch's imports "
                     f"({warm['first_forward_s']:.1f} s from process start), target < 5 s (issue 19)")


def test_profile_data_in_its_own_folder(tmp_cache_dir):
    progs = []
    cfn = torch.compile(lambda x: torch.exp(x) * 2.0, backend="tilex", options={"programs": progs, "profile": True})
    with torch.no_grad():
        cfn(torch.randn(4, 8))
    (p,) = progs
    rec = C.load_profile(p.cache["fingerprint"])
    assert rec is not None and [r["kind"] for r in rec["steps"]] == [s.kind for s in p.steps]
    assert rec["steps"][0]["calls"] == 1 and rec["steps"][0]["seconds"] > 0
    assert {d.name for d in tmp_cache_dir.iterdir()} >= {"graphs", "kernels", "profiles"}


def test_translation_cache_keys_on_the_compiler_itself(tmp_cache_dir, monkeypatch):
    from tilex import translation_cache as T
    from tilex.pipeline import Options

    src = "kernel k<B: int = 16>(x: f32[N], y: out f32[N]) grid (cdiv(N, B),) {\n" \
          "    i = program_id(0) * B\n    y[i : i + B] = x[i : i + B] * 2.0\n}\n"
    opts = Options(defines={"B": 32}, arch="sm_90a")
    t1, built1 = T.translate(src, "k.tile", opts)
    t2, built2 = T.translate(src, "k.tile", opts)
    assert built1 and not built2 and t1.cuda == t2.cuda                        # loaded, the same translation
    _, built3 = T.translate(src, "k.tile", Options(defines={"B": 64}, arch="sm_90a"))
    assert built3                                                              # other options: another entry
    monkeypatch.setattr(T, "compiler_hash", lambda: "another compiler")
    _, built4 = T.translate(src, "k.tile", opts)
    assert built4                                                              # a changed compiler rebuilds
    monkeypatch.setenv("TILEX_TRANSLATION_CACHE", "0")
    n = len(list((tmp_cache_dir / "kernels").glob("*.tlxc")))
    _, built5 = T.translate(src, "k.tile", Options(defines={"B": 128}, arch="sm_90a"))
    assert built5 and len(list((tmp_cache_dir / "kernels").glob("*.tlxc"))) == n   # off: nothing written
