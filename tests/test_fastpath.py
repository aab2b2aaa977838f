"""The stdlib's per-call fast path (`tilex.stdlib._launch.fastpath`) on the CPU, with stand-ins for torch, CuPy
and the driver (tests/fastpath_stand_ins.py): a repeated call of a wrapper launches exactly what the full
wrapper launches for the same arguments (kernel, grid, block, shared memory, stream, every parameter: pointers
named by where they point), skips the checks and the configuration work, and any call of another layout still
gets the full path's errors. Every test runs twice: on the Python fast path ("python": tilex.cfast off) and on
the C replay ("c": `_cfast`, built here with the system compiler when not installed, its driver functions the
same stand-in made C-callable). GPU results of the same path: tests/test_fastpath_gpu.py.
"""
from __future__ import annotations

import cProfile
import pstats
import statistics
import time

import pytest

import fastpath_stand_ins as S
from tilex.stdlib import _launch as L


@pytest.fixture(params=["python", "c", "c-strided"], ids=["pypath", "cpath", "cpath-strided"])
def fp(request, monkeypatch, tmp_cache_dir):
    from tilex import cfast

    ns = S.install(monkeypatch)
    ns.mode = "c" if request.param.startswith("c") else request.param
    monkeypatch.setattr(cfast, "ALLOC", "empty_strided" if request.param == "c-strided" else "empty")
    monkeypatch.setattr(L, "FASTPATH", True)
    monkeypatch.setattr(L, "POISON", False)
    monkeypatch.setattr(L, "CFAST", ns.mode == "c")
    mod = cfast.module()
    if ns.mode == "c":
        if cfast.disabled_by_env():
            pytest.skip("TILEX_NO_CFAST is set")
        assert mod is not None, cfast.why()  # the CI machine has a compiler: the C path must build
        launch, ctx, ns.keep = cfast.stand_in_driver(ns.driver, lambda: 0xC7000 + 16 * ns.state["device"])
        mod.set_driver(launch, ctx)
        monkeypatch.setattr(L, "_CFAST_LAUNCHER", driver_module().launcher)  # the stand-in's: the C path may run
    L.clear_fastpath()  # entries of earlier tests name other stand-in drivers
    yield ns
    L.clear_fastpath()
    if mod is not None:
        mod.set_driver(0, 0)
    L._torch_dtypes.cache_clear()


def lib():
    import tilex.stdlib as lib

    return lib


def outcome(ns, fn, args, kwargs):
    """("error", type, message) or ("ok", named launches, result shapes) of one call."""
    n0 = len(ns.driver.launches)
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the outcome compared
        return ("error", type(e), str(e))
    launches = S.named_launches(ns.driver.launches[n0:], [*args, *kwargs.values()], r)
    shapes = [(tuple(t.shape), str(t.dtype)) for t in S.flatten(r)]
    return ("ok", launches, shapes)


def compare(ns, fn, make, memoized=True, **kwargs):
    """Record with one set of arguments, then call again with fresh ones (new addresses, new data): the fast
    path's launches and result equal the full wrapper's on those arguments. `make` gives the positional
    arguments, or (with `kwargs` holding `make_kwargs`) the keyword arguments too."""
    make_kw = kwargs.pop("make_kwargs", lambda: dict(kwargs))
    fn(*make(), **make_kw())
    args, kw = make(), make_kw()
    hits, chits = L.STATS["hit"], c_hits()
    fast = outcome(ns, fn, args, kw)
    assert L.STATS["hit"] == hits + (1 if memoized else 0), fn.__name__
    assert c_hits() == chits + (1 if memoized and ns.mode == "c" else 0), fn.__name__  # replayed by C
    full = outcome(ns, fn.full, args, kw)
    assert fast[0] == "ok" and fast == full, fn.__name__
    return fast


def driver_module():
    from tilex.runtime import driver

    return driver


def c_hits() -> int:
    """Calls the C path replayed in this process."""
    from tilex import cfast

    mod = cfast.module()
    return mod.hits() if mod is not None else 0


def T(ns, *shape, dtype="bfloat16", **kw):
    return ns.tensor(shape, dtype, **kw)


CASES = {
    "rms_norm": lambda ns: ("rms_norm", lambda: (T(ns, 7, 640), T(ns, 640)), dict(eps=1e-5)),
    "rms_norm_f16": lambda ns: ("rms_norm", lambda: (T(ns, 3, 5, 96, dtype="float16"), T(ns, 96, dtype="float16")), {}),
    "fused_add_rms_norm": lambda ns: ("fused_add_rms_norm", lambda: (T(ns, 9, 640), T(ns, 9, 640), T(ns, 640)), {}),
    "fused_add_rms_norm_inplace": lambda ns: ("fused_add_rms_norm", lambda: (T(ns, 9, 640), T(ns, 9, 640),
                                                                             T(ns, 640)), dict(inplace=True)),
    "layer_norm": lambda ns: ("layer_norm", lambda: (T(ns, 5, 200), T(ns, 200), T(ns, 200)), {}),
    "linear_m1": lambda ns: ("linear", lambda: (T(ns, 1, 256), T(ns, 320, 256)), {}),
    "linear_m40": lambda ns: ("linear", lambda: (T(ns, 40, 512), T(ns, 384, 512)), {}),
    "linear_m300_bias": lambda ns: ("linear", lambda: (T(ns, 3, 100, 128), T(ns, 192, 128), T(ns, 192)), {}),
    "linear_odd_k": lambda ns: ("linear", lambda: (T(ns, 20, 100), T(ns, 64, 100)), {}),
    "linear_qkv": lambda ns: ("linear_qkv", lambda: (T(ns, 100, 128), T(ns, 384, 128), 256, 64), {}),
    "gated_mlp": lambda ns: ("gated_mlp", lambda: (T(ns, 100, 128), T(ns, 256, 128), T(ns, 256, 128)), {}),
    "silu_and_mul": lambda ns: ("silu_and_mul", lambda: (T(ns, 13, 2 * 300),), {}),
    "gelu_and_mul": lambda ns: ("gelu_and_mul", lambda: (T(ns, 13, 2 * 300),), dict(approximate="tanh")),
    "softmax": lambda ns: ("softmax", lambda: (T(ns, 6, 1000, dtype="float32"),), {}),
    "softmax_split": lambda ns: ("softmax", lambda: (T(ns, 1, 40000),), {}),
    "rope": lambda ns: ("rope", lambda: (T(ns, 11, 4, 64), T(ns, 11, 2, 64),
                                         T(ns, 11, dtype="int64", low=0, high=100)), dict(theta=1e6)),
    "rope_partial_inplace": lambda ns: ("rope", lambda: (T(ns, 11, 4, 64), T(ns, 11, 2, 64),
                                                         T(ns, 11, dtype="int32", low=0, high=100)),
                                        dict(rotary_dim=32, inplace=True)),
    "embedding": lambda ns: ("embedding", lambda: (T(ns, 2, 9, dtype="int32", low=0, high=50), T(ns, 50, 96)), {}),
    "kv_cache_write": lambda ns: ("kv_cache_write", lambda: (T(ns, 5, 2, 64), T(ns, 5, 2, 64), T(ns, 8, 16, 2, 64),
                                                             T(ns, 8, 16, 2, 64),
                                                             T(ns, 5, dtype="int32", low=-1, high=128)), {}),
    "attention_prefill": lambda ns: ("attention_prefill", lambda: (T(ns, 1, 4, 70, 64), T(ns, 1, 2, 70, 64),
                                                                   T(ns, 1, 2, 70, 64)), {}),
    "attention_prefill_bshd_out": lambda ns: ("attention_prefill", lambda: (
        T(ns, 1, 70, 4, 64), T(ns, 1, 70, 2, 64), T(ns, 1, 70, 2, 64)),
        dict(causal=True, scale=0.1, out=T(ns, 1, 70, 4, 64), layout="bshd")),
    "attention_decode": lambda ns: ("attention_decode", lambda: (
        T(ns, 3, 4, 64), T(ns, 20, 16, 2, 64), T(ns, 20, 16, 2, 64), T(ns, 3, 6, dtype="int32", low=0, high=20),
        T(ns, 3, dtype="int32", low=1, high=96)), {}),
    "argmax": lambda ns: ("argmax", lambda: (T(ns, 3, 5000),), {}),
    "linear_add_rms_norm": lambda ns: ("linear_add_rms_norm", lambda: (T(ns, 4, 256), T(ns, 320, 256),
                                                                       T(ns, 4, 320), T(ns, 320)), {}),
    "linear_qkv_rope_cache": lambda ns: ("linear_qkv_rope_cache", lambda: (
        T(ns, 3, 128), T(ns, 256, 128), 128, 64, T(ns, 3, dtype="int32", low=0, high=50), T(ns, 8, 16, 1, 64),
        T(ns, 8, 16, 1, 64), T(ns, 3, dtype="int32", low=0, high=128)), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_launches_what_the_full_wrapper_launches(fp, case):
    name, make, kwargs = CASES[case](fp)
    if "out" in kwargs:  # a fresh `out` with each set of arguments
        shape, given = tuple(kwargs["out"].shape), dict(kwargs)
        kwargs = dict(make_kwargs=lambda: {**given, "out": T(fp, *shape)})
    fast = compare(fp, getattr(lib(), name), make, **kwargs)
    assert fast[1], "no launch at all"


def test_cached_call_skips_checks_binding_and_the_configuration(fp):
    from tilex.stdlib import linear, rms_norm

    x, w = T(fp, 16, 512), T(fp, 384, 512)
    linear(x, w)
    counts = call_counts(lambda: linear(x, w))
    for name in ("args.py:bind_arguments", "_arrays.py:check_float", "_arrays.py:check_rank", "linear.py:_tuned",
                 "linear.py:_model_config", "_kernels.py:_load", "plan.py:signature", "_arrays.py:kind_of",
                 "linear.py:linear", "launch.py:replay"):
        assert name not in counts, name
    launches = len(lib().linear.memo[next(iter(lib().linear.memo))].launches)
    assert launches >= 1
    if fp.mode == "python":
        assert counts["plan.py:fire"] == launches
    else:  # one C call: no Python frame of tilex at all, the stand-in driver called once per launch
        assert not [k for k in counts if k.split(":")[0] in ("_launch.py", "plan.py", "driver.py")], counts
        assert counts["fastpath_stand_ins.py:__call__"] == launches
    xr, wr = T(fp, 8, 640), T(fp, 640)
    rms_norm(xr, wr)
    counts = call_counts(lambda: rms_norm(xr, wr))
    assert "rows.py:plan" not in counts and "norms.py:rms_norm" not in counts
    assert counts.get("plan.py:fire", 0) == (1 if fp.mode == "python" else 0)


def call_counts(fn) -> dict:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out: dict = {}
    for (file, _line, name), (_cc, ncalls, *_rest) in pstats.Stats(prof).stats.items():
        key = f"{file.rsplit('/', 1)[-1]}:{name}" if file != "~" else name
        out[key] = out.get(key, 0) + ncalls
    return out


def test_every_error_after_a_cached_call(fp):
    """After a layout is memoized, a call that changes a shape, dtype, device, stride, alignment or option gets
    the full path's outcome (the same error, or the same launches) as if nothing were memoized."""
    from tilex.stdlib import attention_prefill, kv_cache_write, linear, rms_norm

    Dev = fp.Device
    x, w = T(fp, 8, 640), T(fp, 640)
    rms_norm(x, w)
    rms_norm(x, w)
    bad = [
        ((x, T(fp, 640, dtype="float16")), {}),  # dtype
        ((x, T(fp, 639)), {}),  # shape
        ((x, T(fp, 640, device=Dev("cpu", None))), {}),  # device
        ((T(fp, 8, 640, device=Dev("cpu", None)), w), {}),  # the first tensor's: never recorded, the full path's error
        ((T(fp, 8, 640, device=Dev("cuda", 1)), w), {}),  # another GPU than the weight's
        ((x, w), dict(eps=float("nan"))),  # an option
        ((x, w), dict(eps="1e-6")),
        ((T(fp, 8, 640, dtype="int32", low=0, high=3), w), {}),
    ]
    for args, kw in bad:
        got = outcome(fp, rms_norm, args, kw)
        assert got[0] == "error" and got == outcome(fp, rms_norm.full, args, kw), (got, args, kw)
    xl, wl = T(fp, 16, 512), T(fp, 384, 512)
    linear(xl, wl)
    linear(xl, wl)
    for args in ((xl, T(fp, 384, 256)), (T(fp, 16, 1024)[:, 1:513], wl), (T(fp, 16, 1024)[:, ::2], wl),
                 (xl, T(fp, 384, 512, dtype="float16")), (xl, wl, T(fp, 385))):
        got = outcome(fp, linear, args, {})
        assert got == outcome(fp, linear.full, args, {}), (got, [a.shape for a in args])
    kc = T(fp, 8, 16, 2, 64)
    args = (T(fp, 5, 2, 64), T(fp, 5, 2, 64), kc, T(fp, 8, 16, 2, 64), T(fp, 5, dtype="int32", low=0, high=128))
    kv_cache_write(*args)
    kv_cache_write(*args)
    strided = T(fp, 8, 16, 4, 64)[:, :, :2]
    got = outcome(fp, kv_cache_write, (*args[:2], strided, *args[3:]), {})
    assert got[0] == "error" and "contiguous" in got[2]
    # alignment: k at an address 2 bytes off a 16-byte boundary (prefill copies it; its TMA needs 16)
    q, k, v = T(fp, 1, 4, 70, 64), T(fp, 1, 2, 70, 64), T(fp, 1, 2, 70, 64)
    attention_prefill(q, k, v)
    attention_prefill(q, k, v)
    k_odd = T(fp, 1 * 2 * 70 * 64 + 1).reshape((-1,))[1:].reshape((1, 2, 70, 64))
    assert k_odd.data_ptr() % 16 != 0
    got = outcome(fp, attention_prefill, (q, k_odd, v), {})
    assert got == outcome(fp, attention_prefill.full, (q, k_odd, v), {})
    assert attention_prefill.memo.get(L._call_key((q, k_odd, v), {})[0]) is L._NOT_MEMOIZED  # it copied k


def test_stream_and_device_are_honoured(fp):
    from tilex.stdlib import rms_norm

    x, w = T(fp, 8, 640), T(fp, 640)
    rms_norm(x, w)
    rms_norm(x, w)
    assert fp.driver.launches[-1]["stream"] == 0x5000
    fp.state["stream"] = 0x7000  # torch's current stream changed (a side stream, a graph capture)
    hits = L.STATS["hit"]
    rms_norm(x, w)
    rms_norm(x, w)
    assert [launch["stream"] for launch in fp.driver.launches[-2:]] == [0x7000, 0x7000]
    assert L.STATS["hit"] == hits + 2  # the stream is asked on every call, not keyed: both replayed on the new one
    fp.state["stream"] = 0x5000
    rms_norm(x, w)
    assert fp.driver.launches[-1]["stream"] == 0x5000 and L.STATS["hit"] == hits + 3
    fp.state["device"] = 1  # another device is current: no direct launch on device 0's plan
    n = len(fp.driver.launches)
    rms_norm(x, w)
    assert len(fp.driver.launches) == n and fp.full[-1].startswith("rms_norm")


def test_refused_launch_takes_the_full_path(fp):
    from tilex.stdlib import rms_norm

    x, w = T(fp, 8, 640), T(fp, 640)
    rms_norm(x, w)
    fp.driver.result = 700
    n = len(fp.full)
    rms_norm(x, w)
    assert len(fp.full) == n + 1  # the plan's replay is refused too: CuPy's launch (stubbed) says why


def test_calls_that_cannot_be_replayed_take_the_full_path(fp):
    from tilex.stdlib import attention_prefill, linear, softmax

    cases = [
        (softmax, lambda: (T(fp, 30, 6, dtype="float32"),), dict(dim=0)),  # transposed copies
        (linear, lambda: (T(fp, 16, 1024)[:, ::2], T(fp, 64, 512)), {}),  # a contiguous copy of x
        (linear, lambda: (T(fp, 16, 0), T(fp, 64, 0)), {}),  # k == 0: a filled output
        (attention_prefill, lambda: (T(fp, 1, 4, 70, 64), T(fp, 1, 2, 70, 64), T(fp, 1, 2, 70, 64)),
         dict(config=dict(BM=64, BN=64, WARPS=4))),  # an option that is not a scalar
    ]
    for fn, make, kw in cases:
        compare(fp, fn, make, memoized=False, **kw)


def test_aliased_arguments(fp):
    from tilex.stdlib import fused_add_rms_norm

    x, w = T(fp, 9, 640), T(fp, 640)
    fused_add_rms_norm(x, x, w)  # residual is x: its pointers lie in two arguments, nothing is remembered
    assert not fused_add_rms_norm.memo
    a, b = T(fp, 9, 640), T(fp, 9, 640)
    fused_add_rms_norm(a, b, w)
    assert len(fused_add_rms_norm.memo) == 1
    c = T(fp, 9, 640)
    got = outcome(fp, fused_add_rms_norm, (c, c, w), {})  # replayed: both pointers are c's
    assert got == outcome(fp, fused_add_rms_norm.full, (c, c, w), {})


def test_entries_expire_and_poison_bypasses(fp, monkeypatch):
    from tilex.stdlib import rms_norm

    x, w = T(fp, 8, 640), T(fp, 640)
    rms_norm(x, w)
    monkeypatch.setattr(L, "RECHECK_S", 0.0)
    rec = L.STATS["record"]
    rms_norm(x, w)
    rms_norm(x, w)
    assert L.STATS["record"] == rec + 2
    monkeypatch.setattr(L, "RECHECK_S", 60.0)
    monkeypatch.setattr(L, "POISON", True)
    hits = L.STATS["hit"]
    y = rms_norm(x, w)
    assert L.STATS["hit"] == hits and (y._a != y._a).all()  # poisoned (NaN), never written by the stub
    monkeypatch.setattr(L, "POISON", False)
    monkeypatch.setattr(L, "FASTPATH", False)
    rms_norm(x, w)
    assert L.STATS["hit"] == hits


def test_cached_path_time(fp, monkeypatch):
    """A loose bound (a shared CI machine): the cached call costs well under the full wrapper's, with the
    launch itself a no-op."""
    from tilex.runtime import driver
    from tilex.stdlib import linear, rms_norm

    monkeypatch.setattr(driver, "launcher", lambda: (lambda *a: 0))
    if fp.mode == "c":  # the C side's launch a no-op too (not the decoding stand-in, called back through ctypes)
        from tilex import cfast

        cfast.module().set_driver(*cfast.module().noop_driver())
        monkeypatch.setattr(L, "_CFAST_LAUNCHER", driver.launcher)
    x, w = T(fp, 16, 512), T(fp, 384, 512)
    xr, wr = T(fp, 8, 640), T(fp, 640)
    for fn, args in ((linear, (x, w)), (rms_norm, (xr, wr))):
        fast = per_call_us(lambda: fn(*args))
        full = per_call_us(lambda: fn.full(*args))
        assert fast < 0.6 * full and fast < 80, (fn.__name__, fast, full)


def per_call_us(fn, reps: int = 600) -> float:
    for _ in range(30):
        fn()
    best = []
    for _ in range(3):
        times = []
        for _ in range(reps // 3):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        best.append(statistics.median(times))
    return min(best) * 1e6


def _tiny_model(fp, layers=2):
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from llm.config import ModelConfig
    from llm.model import Model, Ops

    cfg = ModelConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_layers=layers, num_heads=4,
                      num_kv_heads=2, head_dim=64, qkv_bias=True, model_type="qwen2")

    class Backend:  # the two calls Model makes of its backend, on stand-in tensors
        def cat(self, arrays, axis=0):
            return S.AddrTensor(np.concatenate([a._a for a in arrays], axis), arrays[0].dtype, arrays[0].device)

        def empty_like(self, x):
            return fp.torch.empty(tuple(x.shape), x.dtype, x.device)

    weights = {n: T(fp, *shape) for n, shape in cfg.weight_shapes().items()}
    return cfg, Model(cfg, weights, Backend(), Ops())


def test_engine_forward_is_all_fast_path(fp, monkeypatch):
    """examples/llm's forward (prefill of 100 tokens, dense attention; a decode step of 3 sequences): from the
    second forward of a shape on, every stdlib call replays (no call records or takes the full path)."""
    monkeypatch.setattr(L, "RECHECK_S", 1e9)  # the first forward compiles for seconds: no expiry in between
    cfg, model = _tiny_model(fp)
    from llm.model import Batch

    nb, bs = 16, 16
    kc, vc = T(fp, cfg.num_layers, nb, bs, 2, 64), T(fp, cfg.num_layers, nb, bs, 2, 64)

    def prefill_batch(t=100):
        i32 = dict(dtype="int32")
        return Batch(ids=T(fp, t, low=0, high=1000, **i32), positions=T(fp, t, low=0, high=t, **i32),
                     slot_mapping=T(fp, t, low=0, high=nb * bs, **i32),
                     block_table=T(fp, t, 8, low=0, high=nb, **i32), seq_lens=T(fp, t, low=1, high=t, **i32),
                     last_idx=T(fp, 1, low=t - 1, high=t, **i32), seq_ranges=((0, t),))

    def decode_batch(b=3):
        i32 = dict(dtype="int32")
        return Batch(ids=T(fp, b, low=0, high=1000, **i32), positions=T(fp, b, low=0, high=90, **i32),
                     slot_mapping=T(fp, b, low=0, high=nb * bs, **i32), block_table=T(fp, b, 8, low=0, high=nb, **i32),
                     seq_lens=T(fp, b, low=1, high=90, **i32))

    # stdlib calls per forward: prefill (> 64 tokens): embedding, rms_norm, per layer linear_qkv, rope,
    # kv_cache_write, attention_prefill, linear + fused_add_rms_norm (o_proj), gated_mlp, linear +
    # fused_add_rms_norm (down_proj), then embedding (last token) and linear (lm_head); decode (3 tokens):
    # embedding, rms_norm, per layer linear_qkv_rope_cache, attention_decode, linear_add_rms_norm, linear
    # (gate | up) + silu_and_mul, linear_add_rms_norm, then linear (lm_head)
    for make, prefill, calls in ((prefill_batch, True, 4 + 9 * cfg.num_layers),
                                 (decode_batch, False, 3 + 6 * cfg.num_layers)):
        model.forward(make(), kc, vc, prefill=prefill)
        before = dict(L.STATS)
        n0 = len(fp.driver.launches)
        logits = model.forward(make(), kc, vc, prefill=prefill)
        delta = {k: L.STATS[k] - before[k] for k in before}
        assert delta == {"hit": calls, "record": 0, "full": 0, "c_unregistered": 0}, delta
        assert len(fp.driver.launches) > n0 and tuple(logits.shape)[-1] == cfg.vocab_size


def test_an_argument_read_on_the_host_is_never_memoized(fp):
    """A wrapper that reads an array's values on the host (here a 0-dim tensor used as eps) decides from data,
    which the key does not hold: such a call (an array argument no kernel reads) is never replayed."""
    import numpy as np

    from tilex.stdlib import rms_norm

    @L.fastpath
    def host_eps(x, w, eps_t):
        return rms_norm.full(x, w, eps=float(eps_t._a))

    x, w = T(fp, 8, 640), T(fp, 640)
    eps = [S.AddrTensor(np.array(v, np.float32), fp.torch.float32, fp.Device("cuda", 0)) for v in (0.5, 0.25)]
    for e in eps:
        host_eps(x, w, e)
        assert fp.driver.launches[-1]["values"][3] == ("scalar", float(e._a))
    assert list(host_eps.memo.values()) == [L._NOT_MEMOIZED]


def test_a_negative_zero_option_is_its_own_key(fp):
    """-0.0 == 0.0 (and hashes alike), but a kernel given -0.0 may compute another sign: a -0.0 option after a
    memoized 0.0 is a new key, launched with -0.0 (it replayed the 0.0 entry's launch before)."""
    import math

    from tilex.stdlib import rms_norm

    x, w = T(fp, 8, 640), T(fp, 640)
    for eps in (0.0, 0.0, -0.0, -0.0, 0.0):
        rms_norm(x, w, eps=eps)
        got = fp.driver.launches[-1]["values"][3][1]
        assert got == 0.0 and math.copysign(1.0, got) == math.copysign(1.0, eps), eps
    assert len(rms_norm.memo) == 2
    hits = L.STATS["hit"]
    rms_norm(x, w, eps=-0.0)
    assert L.STATS["hit"] == hits + 1
