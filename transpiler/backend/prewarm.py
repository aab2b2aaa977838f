"""The library GEMMs and prefill attention a lowered program will launch, resolved before its first call so that their
binaries compile in parallel with the generated kernels' (kernels.build_all) instead of one after
another inside the first forward.

Best effort and CUDA only: for each `linear` / `gated_mlp` step with static shapes this replays
tilex.stdlib.linear's own choice of kernel and tiles (its private helpers: `_use_swap`, `_model_config`,
...; for `attention_prefill`, tilex.stdlib.attention's `prefill_config`), loads that module and resolves the variant the launch will pick (a Specializer's choice for the
operand shapes with 16-byte aligned addresses, what torch's allocator gives). A choice that differs from
the one the wrapper makes at run time only costs an unused binary: the wrapper still decides, and any
error here skips the step (logged at DEBUG). The stdlib owners could replace this replay by a public
"which kernel and tiles for this shape" function (see docs/backend.md).
"""
from __future__ import annotations

import logging
import sys

from .fusion import tensor_meta
from .ops import DTYPES

log = logging.getLogger("tilex.backend")


class _Arg:
    """What a Specializer reads of an array argument to pick its variant: the shape and the address."""

    def __init__(self, shape):
        self.shape = tuple(int(d) for d in shape)

    def data_ptr(self) -> int:
        return 0  # aligned


def _linear_module():
    import tilex.stdlib  # noqa: F401

    return sys.modules["tilex.stdlib.linear"]


def _linear_jobs(Lm, L, dt, m, n, k, bias: bool, sms: int) -> list:
    x2, w, y, b = _Arg((m, k)), _Arg((n, k)), _Arg((m, n)), _Arg((n,))
    if Lm._use_split_kernels(m, n, k):
        part = _Arg((max(1, Lm._splits(m, n, k)), m, n))
        mod = L.load("linear", T=dt, **Lm._SPLITK)
        jobs = [(mod, "linear_splitk", (x2, w, part))]
        return jobs + [(mod, "splitk_sum_bias", (part, b, y)) if bias else (mod, "splitk_sum", (part, y))]
    if Lm._use_swap(m, k, True):
        kernel = "linear_swap_bias" if bias else "linear_swap"
        cfg = Lm._tuned(kernel, dt, m, n, k, Lm._swap_config(n))
    elif k % 8 == 0:
        kernel = "linear_bias" if bias else "linear"
        cfg = Lm._tuned(kernel, dt, m, n, k, Lm._model_config(kernel, dt, m, n, k, Lm._SPACE,
                                                              Lm._config(m, Lm._SKINNY, Lm._MEDIUM, Lm._LARGE)))
        if kernel == "linear" and cfg == Lm._LARGE and m > 64 and Lm._PERSISTENT:
            kernel, cfg = "linear_persistent", dict(cfg, PROGRAMS=sms)
    else:
        return []
    mod = L.load("linear", kernel=kernel, T=dt, **cfg)
    return [(mod, kernel, (x2, w, b, y) if bias else (x2, w, y))]


def _epilogue_jobs(Lm, L, dt, m, n, k, sms: int) -> list:
    """The GEMM of tilex.stdlib.fused.linear_add_rms_norm (its norm kernel is a row kernel: not prewarmed)."""
    F = sys.modules["tilex.stdlib.fused"]
    if not (0 < m <= F.MAX_ROWS and k and k % 8 == 0 and n <= F.MAX_NORM_COLS):
        return _linear_jobs(Lm, L, dt, m, n, k, False, sms)
    x2, w = _Arg((m, k)), _Arg((n, k))
    if Lm._use_swap(m, k, True):
        cfg = Lm._tuned("linear_swap_splitk", dt, m, n, k, Lm._swap_config(n), S=1)
        return [(L.load("linear", kernel="linear_swap_splitk", T=dt, **cfg), "linear_swap_splitk",
                 (x2, w, _Arg((1, m, n))))]
    part = _Arg((max(1, Lm._splits(m, n, k)), m, n))
    return [(L.load("linear", T=dt, **Lm._SPLITK), "linear_splitk", (x2, w, part))]


def _product_jobs(L, kind: str, a: list, seen: set) -> list:
    """The kernel tilex.stdlib.matmul / bmm will launch for a static `matmul` (a, b, bias) or `bmm` (a, b) step:
    matmul.py's choice (the model's tiles for the TMA kernels; bmm_nt where b's layout is a transposed [B, N, K])."""
    MM = sys.modules["tilex.stdlib.matmul"]
    x, b = _static(a[0]), _static(a[1])
    if x is None or b is None or 0 in x or 0 in b:
        return []
    dt = DTYPES[tensor_meta(a[0]).dtype]
    if kind == "matmul":
        m = 1
        for d in x[:-1]:
            m *= d
        k, n = x[-1], b[1]
        bias = len(a) > 2 and a[2] is not None
        kernel, cfg = MM.matmul_plan(dt, m, n, k, bias, True)
        shapes = ((m, k), (k, n), *(((n,),) if bias else ()), (m, n))
    else:
        (bb, m, k), n = x, b[2]
        kernel, cfg = MM.bmm_plan(dt, bb, m, n, k, MM._transposed_in_place(tensor_meta(a[1])), True)
        shapes = ((bb, m, k), (bb, n, k) if kernel == "bmm_nt" else (bb, k, n), (bb, m, n))
    key = (kernel, dt, tuple(sorted(cfg.items())), shapes)
    if key in seen:
        return []
    seen.add(key)
    return [(L.load("matmul", kernel=kernel, T=dt, **cfg), kernel, tuple(_Arg(sh) for sh in shapes))]


def _gated_jobs(Lm, L, dt, m, n, k, sms: int) -> list:
    if k % 8 or not (m and n and k):
        return []
    kernel = "gated_mlp"
    cfg = Lm._tuned(kernel, dt, m, n, k, Lm._model_config(kernel, dt, m, n, k, Lm._GATED_SPACE,
                                                          Lm._config(m, Lm._GATED_SKINNY, Lm._GATED, Lm._GATED)))
    if m > 64 and cfg == Lm._GATED and Lm._PERSISTENT:
        kernel, cfg = "gated_mlp_persistent", dict(cfg, PROGRAMS=sms)
    mod = L.load("linear", kernel=kernel, T=dt, **cfg)
    return [(mod, kernel, (_Arg((m, k)), _Arg((n, k)), _Arg((n, k)), _Arg((m, n))))]


def _static(node) -> tuple | None:
    m = tensor_meta(node)
    if m is None or not all(isinstance(d, int) for d in m.shape):
        return None
    return tuple(m.shape)


def library_jobs(steps, sms: int) -> list:
    """(label, resolve) per library GEMM of `steps` with static shapes: resolve() translates and returns
    the runtime Kernel whose binary the launch will load (call it serially: translation is Python)."""
    from tilex.stdlib import _launch as L

    Lm = _linear_module()
    seen: set = set()
    jobs = []
    for s in steps:
        if s.kind != "library" or s.match.kernel not in ("linear", "gated_mlp", "attention_prefill",
                                                          "linear_add_rms_norm", "matmul", "bmm"):
            continue
        try:
            a = s.match.args
            if s.match.kernel in ("matmul", "bmm"):
                found = _product_jobs(L, s.match.kernel, a, seen)
                for mod, kernel, args in found:
                    jobs.append((f"{kernel} {'x'.join(str(int(d)) for d in args[-1].shape)}",
                                 _resolver(mod, kernel, args)))
                continue
            if s.match.kernel == "attention_prefill":
                q = _static(a[0])
                if q is None:
                    continue
                key = ("attention_prefill", DTYPES[tensor_meta(a[0]).dtype], q[2], q[3])
                if key not in seen:
                    seen.add(key)
                    jobs.append((f"attention_prefill S={q[2]} D={q[3]}", _prefill_resolver(*key[1:])))
                continue
            x, w = _static(a[0]), _static(a[1])
            if x is None or w is None or len(w) != 2:
                continue
            dt = DTYPES[tensor_meta(a[0]).dtype]
            m = 1
            for d in x[:-1]:
                m *= d
            k, n = x[-1], w[0]
            if s.match.kernel == "linear_add_rms_norm":
                key = ("epilogue", dt, m, n, k)
                found = [] if key in seen else _epilogue_jobs(Lm, L, dt, m, n, k, sms)
            elif s.match.kernel == "linear":
                bias = len(a) > 2 and a[2] is not None
                key = ("linear", dt, m, n, k, bias)
                found = [] if key in seen else _linear_jobs(Lm, L, dt, m, n, k, bias, sms)
            else:
                key = ("gated", dt, m, n, k)
                found = [] if key in seen else _gated_jobs(Lm, L, dt, m, n, k, sms)
            seen.add(key)
        except Exception as e:  # noqa: BLE001 - a replay that no longer fits the stdlib: skip it
            log.debug("tilex backend: no prewarm for %s: %s", s.label, e)
            continue
        for mod, kernel, args in found:
            jobs.append((f"{kernel} {m}x{n}x{k}", _resolver(mod, kernel, args)))
    return jobs


def _prefill_resolver(dt: str, s: int, d: int):
    def resolve():
        import tilex.stdlib  # noqa: F401

        A = sys.modules["tilex.stdlib.attention"]
        return A._prefill_module(dict(A.prefill_config(d, s)), {}, T=dt, D=d, CAUSAL=True).kernel("attention_prefill")
    return resolve


def _resolver(mod, kernel, args):
    def resolve():
        k = mod.kernel(kernel)
        return k.variant_for(*args) if hasattr(k, "variant_for") else k
    return resolve
