"""CPU-only tests of tilex.runtime.args: binding and checking launch arguments.

No GPU, CuPy or torch needed: NumPy arrays (allow_numpy=True) and small stand-ins that
look like CuPy arrays / torch tensors to the duck-typed checks.
"""
from __future__ import annotations

import types

import ml_dtypes
import numpy as np
import pytest

from tilex.diagnostics import LaunchError
from tilex.runtime import BoundArgs, bind_arguments
from tilex.runtime.args import cdiv, eval_expr
from tilex.runtime.launch import kernel_arguments
from tilex.spec import ConstraintSpec, KernelSpec, ParamSpec

RNG = np.random.default_rng()


def rmsnorm_spec(constraints=(), grid=("M",)) -> KernelSpec:
    return KernelSpec(
        name="rmsnorm",
        params=(ParamSpec("x", "tensor", "bf16", ("M", "N")),
                ParamSpec("w", "tensor", "bf16", ("N",)),
                ParamSpec("out", "tensor", "bf16", ("M", "N"), is_out=True),
                ParamSpec("eps", "scalar", "f32", default=1e-6)),
        symbols=("M", "N"),
        constraints=tuple(constraints),
        grid=tuple(grid),
        threads=256,
        smem_bytes=0,
        source_file="rmsnorm.tile",
        line=1,
    )


def bf16(*shape):
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


def dims():
    return int(RNG.integers(1, 50)), int(RNG.integers(1, 50))


# ---------------------------------------------------------------- stand-in arrays


class _Flags:
    def __init__(self, c):
        self.c_contiguous = c


class FakeCupy:
    """Looks like a cupy.ndarray to the runtime (type module 'cupy', CAI, device.id)."""

    def __init__(self, shape, dtype, device=0, contiguous=True, ptr=0x7F0000000000):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.flags = _Flags(contiguous)
        self.device = types.SimpleNamespace(id=device)
        self.data = types.SimpleNamespace(ptr=ptr)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "version": 3, "strides": None}


FakeCupy.__module__ = "cupy._core.core"


class _TorchDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class FakeTorch:
    """Looks like a torch.Tensor (type module 'torch', str(dtype) 'torch.bfloat16')."""

    def __init__(self, shape, dtype="torch.bfloat16", device="cuda", index=0, contiguous=True,
                 ptr=0x7F0000001000):
        self.shape, self.dtype = tuple(shape), _TorchDtype(dtype)
        self.device = types.SimpleNamespace(type=device, index=index if device == "cuda" else None)
        self._contiguous, self._ptr = contiguous, ptr

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._ptr


FakeTorch.__module__ = "torch"


# ---------------------------------------------------------------- binding


def test_positional_keyword_and_default():
    m, n = dims()
    x, w, out = bf16(m, n), bf16(n), bf16(m, n)
    b = bind_arguments(rmsnorm_spec(), (x, w), {"out": out}, allow_numpy=True)
    assert isinstance(b, BoundArgs)
    assert b.symbols == {"M": m, "N": n}
    assert b.arrays["x"] is x and b.arrays["w"] is w and b.arrays["out"] is out
    assert b.scalars == {"eps": 1e-6}
    assert b.grid == (m, 1, 1)
    assert not b.empty
    b2 = bind_arguments(rmsnorm_spec(), (), {"x": x, "w": w, "out": out, "eps": 0.5}, allow_numpy=True)
    assert b2.scalars["eps"] == 0.5


def test_missing_extra_duplicate_arguments():
    m, n = dims()
    x, w, out = bf16(m, n), bf16(n), bf16(m, n)
    spec = rmsnorm_spec()
    with pytest.raises(LaunchError, match=r"missing argument 'out' \(bf16\[M, N\]\)"):
        bind_arguments(spec, (x, w), {}, allow_numpy=True)
    with pytest.raises(LaunchError, match=r"takes 4 argument\(s\) \(x, w, out, eps\) but 5 were given"):
        bind_arguments(spec, (x, w, out, 1.0, 2.0), {}, allow_numpy=True)
    with pytest.raises(LaunchError, match="unexpected argument 'bias'"):
        bind_arguments(spec, (x, w, out), {"bias": w}, allow_numpy=True)
    with pytest.raises(LaunchError, match="multiple values for argument 'w'"):
        bind_arguments(spec, (x, w, out), {"w": w}, allow_numpy=True)


def test_scalar_without_default_is_required():
    spec = KernelSpec("scale", (ParamSpec("x", "tensor", "f32", ("N",)),
                                ParamSpec("alpha", "scalar", "f32")),
                      ("N",), (), ("cdiv(N, 128)",), 128, 0)
    x = RNG.standard_normal(7).astype(np.float32)
    with pytest.raises(LaunchError, match=r"missing argument 'alpha' \(f32\)"):
        bind_arguments(spec, (x,), {}, allow_numpy=True)


# ---------------------------------------------------------------- tensor checks


def test_dtype_mismatch_names_param_expected_and_got():
    m, n = dims()
    x = RNG.standard_normal((m, n)).astype(np.float32)
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (x, bf16(n), bf16(m, n)), {}, allow_numpy=True)
    assert str(e.value) == "argument 'x': expected dtype bf16, got float32"


def test_rank_mismatch():
    m, n = dims()
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (bf16(m, n), bf16(n, 1), bf16(m, n)), {}, allow_numpy=True)
    assert str(e.value) == (f"argument 'w': expected rank 1 (bf16[N]), got rank 2 with shape ({n}, 1)")


def test_inconsistent_symbol_names_both_params_and_values():
    m, n = dims()
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (bf16(m, n), bf16(n + 3), bf16(m, n)), {}, allow_numpy=True)
    assert str(e.value) == (f"inconsistent size for symbol N: 'x' has N = {n} (x.shape[1]) "
                            f"but 'w' has N = {n + 3} (w.shape[0])")


def test_fixed_dimension():
    spec = KernelSpec("f", (ParamSpec("x", "tensor", "f32", ("M", 64)),), ("M",), (), ("M",), 64, 0)
    m = int(RNG.integers(1, 20))
    ok = bind_arguments(spec, (np.zeros((m, 64), np.float32),), {}, allow_numpy=True)
    assert ok.symbols == {"M": m}
    with pytest.raises(LaunchError) as e:
        bind_arguments(spec, (np.zeros((m, 32), np.float32),), {}, allow_numpy=True)
    assert str(e.value) == f"argument 'x': dimension 1 must be 64 (f32[M, 64]), got 32 (shape ({m}, 32))"


def test_non_contiguous_rejected():
    m, n = dims()
    n = max(n, 2)  # a 1-column strided view is still C-contiguous to NumPy
    x = bf16(m, 2 * n + 2)[:, ::2][:, :n]
    assert x.shape == (m, n) and not x.flags.c_contiguous
    with pytest.raises(LaunchError, match=r"argument 'x': expected a C-contiguous \(row-major\) tensor"):
        bind_arguments(rmsnorm_spec(), (x, bf16(n), bf16(m, n)), {}, allow_numpy=True)
    t = bf16(n + 1, m + 1).T  # transposed: contiguous in Fortran order only
    with pytest.raises(LaunchError, match="argument 'out': expected a C-contiguous"):
        bind_arguments(rmsnorm_spec(), (bf16(m + 1, n + 1), bf16(n + 1), t), {}, allow_numpy=True)


def test_numpy_needs_allow_numpy():
    m, n = dims()
    with pytest.raises(LaunchError, match="argument 'x': expected a CUDA array .* got a NumPy array"):
        bind_arguments(rmsnorm_spec(), (bf16(m, n), bf16(n), bf16(m, n)), {})


def test_not_an_array():
    n = dims()[1]
    with pytest.raises(LaunchError, match=r"argument 'x': expected a CuPy array or PyTorch CUDA tensor "
                                          r"of bf16\[M, N\], got builtins.list"):
        bind_arguments(rmsnorm_spec(), ([[1.0]], FakeCupy((n,), ml_dtypes.bfloat16),
                                        FakeCupy((1, n), ml_dtypes.bfloat16)), {})


def test_cupy_like_arrays_and_device_mismatch():
    m, n = dims()
    x = FakeCupy((m, n), ml_dtypes.bfloat16, device=1)
    w = FakeCupy((n,), ml_dtypes.bfloat16, device=1)
    out = FakeCupy((m, n), ml_dtypes.bfloat16, device=1)
    b = bind_arguments(rmsnorm_spec(), (x, w, out), {})
    assert b.device == "cuda:1" and b.kinds == {"x": "cupy", "w": "cupy", "out": "cupy"}
    assert not b.uses_torch
    w0 = FakeCupy((n,), ml_dtypes.bfloat16, device=0)
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (x, w0, out), {})
    assert str(e.value) == "all tensors must be on the same device: 'x' is on cuda:1 but 'w' is on cuda:0"
    with pytest.raises(LaunchError, match="'x' is on cpu but 'w' is on cuda:1"):
        bind_arguments(rmsnorm_spec(), (bf16(m, n), w, out), {}, allow_numpy=True)


def test_torch_like_tensors():
    m, n = dims()
    x, w, out = FakeTorch((m, n)), FakeTorch((n,)), FakeTorch((m, n))
    b = bind_arguments(rmsnorm_spec(), (x, w, out), {"eps": 1e-5})
    assert b.uses_torch and b.device == "cuda:0" and b.symbols == {"M": m, "N": n}
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (FakeTorch((m, n), "torch.float16"), w, out), {})
    assert str(e.value) == "argument 'x': expected dtype bf16, got torch.float16"
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (x, FakeTorch((n,), device="cpu"), out), {})
    assert str(e.value) == "argument 'w': expected a CUDA tensor, got a tensor on cpu"
    with pytest.raises(LaunchError, match="argument 'out': expected a C-contiguous"):
        bind_arguments(rmsnorm_spec(), (x, w, FakeTorch((m, n), contiguous=False)), {})
    with pytest.raises(LaunchError, match="'x' is on cuda:0 but 'w' is on cuda:2"):
        bind_arguments(rmsnorm_spec(), (x, FakeTorch((n,), index=2), out), {})


def test_symbol_must_fit_int32():
    n = dims()[1]
    x = FakeCupy((2**31, n), ml_dtypes.bfloat16)
    with pytest.raises(LaunchError) as e:
        bind_arguments(rmsnorm_spec(), (x, FakeCupy((n,), ml_dtypes.bfloat16), x), {})
    assert str(e.value) == ("symbol M = 2147483648 (from x.shape[0]) does not fit in a 32-bit int "
                            "(must be < 2**31)")


# ---------------------------------------------------------------- zero sizes


def test_zero_size_allowed_only_for_empty_grid():
    n = dims()[1]
    spec = rmsnorm_spec(grid=("cdiv(M, 4)",))
    b = bind_arguments(spec, (bf16(0, n), bf16(n), bf16(0, n)), {}, allow_numpy=True)
    assert b.grid == (0, 1, 1) and b.empty
    m = int(RNG.integers(1, 40))
    with pytest.raises(LaunchError) as e:
        bind_arguments(spec, (bf16(m, 0), bf16(0), bf16(m, 0)), {}, allow_numpy=True)
    assert str(e.value).startswith(
        f"zero-size tensor dimension (x.shape[1] = 0, w.shape[0] = 0, out.shape[1] = 0) but the grid "
        f"({cdiv(m, 4)}, 1, 1) is not empty")


# ---------------------------------------------------------------- constraints and grid


def test_constraint_failure_message():
    spec = rmsnorm_spec(constraints=(ConstraintSpec("N % 8 == 0", "N % 8 == 0", 3),))
    m = int(RNG.integers(1, 30))
    n = 8 * int(RNG.integers(1, 20))
    bind_arguments(spec, (bf16(m, n), bf16(n), bf16(m, n)), {}, allow_numpy=True)
    with pytest.raises(LaunchError) as e:
        bind_arguments(spec, (bf16(m, n + 1), bf16(n + 1), bf16(m, n + 1)), {}, allow_numpy=True)
    assert str(e.value) == f"constraint `N % 8 == 0` (rmsnorm.tile:3) failed: N = {n + 1}"


def test_constraint_with_several_symbols_and_functions():
    c = ConstraintSpec("cdiv(N, 4) <= M and max(M, N) < 100", "cdiv(N, 4) <= M && max(M, N) < 100", 7)
    spec = rmsnorm_spec(constraints=(c,))
    with pytest.raises(LaunchError) as e:
        bind_arguments(spec, (bf16(2, 40), bf16(40), bf16(2, 40)), {}, allow_numpy=True)
    assert str(e.value) == ("constraint `cdiv(N, 4) <= M && max(M, N) < 100` (rmsnorm.tile:7) "
                            "failed: N = 40, M = 2")


@pytest.mark.parametrize("expr", ["__import__('os').getcwd()", "N.__class__", "open('x')",
                                  "[N for N in range(3)]", "'a' * N", "lambda: 1"])
def test_eval_expr_rejects_unsafe(expr):
    with pytest.raises(LaunchError, match="internal error: launch expression"):
        eval_expr(expr, {"N": 3})


def test_eval_expr_arithmetic():
    a, b = int(RNG.integers(1, 10**6)), int(RNG.integers(1, 1000))
    assert eval_expr("cdiv(A, B)", {"A": a, "B": b}) == (a + b - 1) // b
    assert eval_expr("min(A, B) + max(A, B)", {"A": a, "B": b}) == a + b
    assert eval_expr("A % B == 0 or A > B", {"A": a, "B": b}) == (a % b == 0 or a > b)


def test_grid_limits():
    n = int(RNG.integers(65536, 70000))
    spec = KernelSpec("g", (ParamSpec("x", "tensor", "f32", ("M", "N")),), ("M", "N"), (),
                      ("M", "N"), 32, 0)
    x = np.zeros((2, n), np.float32)
    with pytest.raises(LaunchError) as e:
        bind_arguments(spec, (x,), {}, allow_numpy=True)
    assert str(e.value) == f"grid y = `N` = {n} exceeds the CUDA limit of 65535 blocks (N = {n})"
    spec_x = KernelSpec("g", (ParamSpec("x", "tensor", "f32", ("M",)),), ("M",), (), ("M * 4",), 32, 0)
    big = FakeCupy((2**30,), np.float32)
    with pytest.raises(LaunchError, match=r"grid x = `M \* 4` = 4294967296 exceeds the CUDA limit "
                                          r"of 2147483647 blocks \(M = 1073741824\)"):
        bind_arguments(spec_x, (big,), {})
    spec_neg = KernelSpec("g", (ParamSpec("x", "tensor", "f32", ("M",)),), ("M",), (), ("M - 10",), 32, 0)
    with pytest.raises(LaunchError, match=r"grid x = `M - 10` is negative: -7 \(M = 3\)"):
        bind_arguments(spec_neg, (np.zeros(3, np.float32),), {}, allow_numpy=True)
    spec3 = KernelSpec("g", (ParamSpec("x", "tensor", "f32", ("M", "N")),), ("M", "N"), (),
                       ("cdiv(N, 64)", "M", "2"), 32, 0)
    m, k = dims()
    assert bind_arguments(spec3, (np.zeros((m, k), np.float32),), {}, allow_numpy=True).grid == \
        (cdiv(k, 64), m, 2)


# ---------------------------------------------------------------- scalars


def test_scalar_checks():
    spec = KernelSpec("s", (ParamSpec("x", "tensor", "f32", ("N",)),
                            ParamSpec("k", "scalar", "i32"),
                            ParamSpec("flag", "scalar", "bool", default=False),
                            ParamSpec("alpha", "scalar", "f16", default=1.0)),
                      ("N",), (), ("N",), 32, 0)
    x = np.zeros(int(RNG.integers(1, 9)), np.float32)
    k = int(RNG.integers(-1000, 1000))
    b = bind_arguments(spec, (x, np.int64(k)), {"alpha": 2}, allow_numpy=True)
    assert b.scalars == {"k": k, "flag": False, "alpha": 2.0}
    assert type(b.scalars["k"]) is int and type(b.scalars["alpha"]) is float
    with pytest.raises(LaunchError, match=r"argument 'k': expected an integer \(i32\), got float 1.5"):
        bind_arguments(spec, (x, 1.5), {}, allow_numpy=True)
    with pytest.raises(LaunchError, match="argument 'k': 2147483648 does not fit in i32"):
        bind_arguments(spec, (x, 2**31), {}, allow_numpy=True)
    with pytest.raises(LaunchError, match="argument 'flag': expected a bool scalar, got int 1"):
        bind_arguments(spec, (x, 1, 1), {}, allow_numpy=True)
    with pytest.raises(LaunchError, match=r"argument 'alpha': expected a number \(f16\), got str 'a'"):
        bind_arguments(spec, (x, 1), {"alpha": "a"}, allow_numpy=True)
    with pytest.raises(LaunchError, match="argument 'k': expected a i32 scalar, got an array"):
        bind_arguments(spec, (x, x), {}, allow_numpy=True)


# ---------------------------------------------------------------- launch argument list


def test_kernel_argument_order_and_types():
    spec = KernelSpec("k", (ParamSpec("a", "tensor", "f16", ("M", "N")),
                            ParamSpec("s", "scalar", "bf16"),
                            ParamSpec("b", "tensor", "i32", ("N",)),
                            ParamSpec("i", "scalar", "i64"),
                            ParamSpec("f", "scalar", "bool")),
                      ("M", "N"), (), ("M",), 64, 0)
    m, n = dims()
    pa, pb = (int(p) for p in RNG.integers(1, 2**40, size=2))
    a = FakeCupy((m, n), np.float16, ptr=pa)
    b = FakeTorch((n,), "torch.int32", ptr=pb)
    bound = bind_arguments(spec, (a, 0.5, b, 2**40, True), {})
    args = kernel_arguments(spec, bound)
    # the declared order, as the kernel's signature takes them (tests/test_launch_order.py)
    assert [type(v) for v in args] == [np.uint64, np.float32, np.uint64, np.int64, np.bool_,
                                       np.int32, np.int32]
    assert [v.item() for v in args] == [pa, 0.5, pb, 2**40, True, m, n]
