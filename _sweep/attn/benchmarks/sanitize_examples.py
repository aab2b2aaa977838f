"""Launch every example once at odd sizes (for `compute-sanitizer --tool memcheck`)."""
import numpy as np

import cupy as cp

import tilex
from tilex.types import DType, numpy_dtype

BF16 = numpy_dtype(DType.BF16)
rng = np.random.default_rng(0)


def bf(*shape):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(BF16))


def f32(*shape):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32))


def main():
    mod = tilex.compile("examples/vector_add.tile")
    for n in (1, 1000, 1025):
        mod.vector_add(f32(n), f32(n), cp.empty(n, cp.float32))
    mod = tilex.compile("examples/rmsnorm.tile")
    for m, n in ((1, 8), (3, 1000), (2, 1032)):
        mod.rmsnorm(bf(m, n), bf(n), cp.empty((m, n), BF16), eps=1e-6)
    mod = tilex.compile("examples/swiglu.tile")
    for m, n in ((1, 1), (3, 1000), (2, 1025)):
        mod.swiglu(bf(m, n), bf(m, n), cp.empty((m, n), BF16))
    mod = tilex.compile("examples/softmax.tile")
    for m, n in ((1, 1), (3, 1000), (2, 1025)):
        mod.softmax(bf(m, n), cp.empty((m, n), BF16))
    mod = tilex.compile("examples/matmul.tile")
    for m, n, k in ((1, 1, 1), (37, 45, 70), (65, 3, 33)):
        mod.matmul(bf(m, k), bf(k, n), cp.empty((m, n), BF16))
    cp.cuda.Device().synchronize()
    print("sanitize_examples: all launches done")


if __name__ == "__main__":
    main()
