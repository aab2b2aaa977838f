"""Run each library kernel once inside a profiler range, for `ncu --profile-from-start off`.

Warm-up calls (compilation, autotuning, torch.compile) happen outside the range, so ncu sees one
launch of each tilex kernel and of its torch.compile counterpart:
    ncu --profile-from-start off --set detailed -o prof python3 benchmarks/prof_kernels.py silu rms_norm
"""
import sys

import torch
import torch.nn.functional as F

import tilex.stdlib as S

DEV, BF16 = "cuda", torch.bfloat16
g = torch.Generator(device=DEV).manual_seed(0)


def randn(*shape):
    return torch.randn(shape, generator=g, device=DEV).to(BF16)


def cases():
    x, w, b = randn(16384, 4096), randn(4096), randn(4096)
    gu = randn(4096, 2 * 14336)
    xs = randn(4096, 32000)
    q, k = randn(16384, 32, 128), randn(16384, 8, 128)
    pos = torch.randint(0, 8192, (16384,), device=DEV)
    a, wt = randn(4096, 5120), randn(5120, 5120)
    return {
        "rms_norm": (lambda: S.rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (4096,), w, 1e-6)),
        "layer_norm": (lambda: S.layer_norm(x, w, b, 1e-5), lambda: F.layer_norm(x, (4096,), w, b, 1e-5)),
        "silu": (lambda: S.silu_and_mul(gu), lambda: F.silu(gu[:, :14336]) * gu[:, 14336:]),
        "softmax": (lambda: S.softmax(xs), lambda: torch.softmax(xs, -1)),
        "rope": (lambda: S.rope(q, k, pos, 500000.0), None),
        "matmul": (lambda: S.linear(a, wt), None),
    }


def main(names):
    table = cases()
    runs = []
    for n in names:
        ours, ref = table[n]
        runs.append(ours)
        if ref is not None:
            runs.append(torch.compile(ref))
    for _ in range(3):
        for f in runs:
            f()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for f in runs:
        f()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or list(cases()))
