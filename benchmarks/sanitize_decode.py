"""attention_decode under compute-sanitizer: every kind of plan at odd sizes, CuPy arrays (no torch start-up).

    compute-sanitizer --tool memcheck python benchmarks/sanitize_decode.py

Each case builds a shuffled paged cache with junk table entries (some outside the cache) past each sequence, runs
the wrapper with its own plan and with fixed split counts / tiles (one share walking the whole table (STATIC), the
2-stage ring, in-order loads, 128 keys by 8 warps, several shares and the combine), and checks the result against a
float64 NumPy reference (max |err| / max |ref| <= 2e-2), printing PASS/FAIL; exit 1 on a failure. The sanitizer
reports any out-of-bounds or misaligned access itself.
"""
from __future__ import annotations

import sys

import numpy as np

CASES = [  # (lens, Hq, Hkv, D, block size, num_splits, config)
    ([1, 77, 0, 128], 32, 8, 128, 16, None, None),                 # the plan: one share, STATIC
    ([129, 5, 300], 12, 2, 128, 32, None, None),
    ([1000, 999], 28, 4, 128, 16, 7, None),                        # shares + combine
    ([333], 8, 4, 256, 16, 5, dict(STAGES=1)),                      # D = 256, in order
    ([200, 31], 14, 2, 64, 16, 1, dict(BN=128, WARPS=8, STAGES=2)),  # 128 keys by 8 warps
    ([65, 1, 17], 64, 8, 128, 16, 1, dict(STAGES=1, STATIC=False)),  # in order, walked to seq_len
]


def reference(q, kc, vc, table, lens, scale):
    b, hq, d = q.shape
    hkv, bs = kc.shape[2], kc.shape[1]
    g = hq // hkv
    out = np.zeros((b, hq, d))
    for i, n in enumerate(lens):
        if n == 0:
            continue
        t = np.arange(n)
        blk = table[i, t // bs]
        k = kc[blk, t % bs].astype(np.float64)          # [n, Hkv, D]
        v = vc[blk, t % bs].astype(np.float64)
        for h in range(hq):
            s = k[:, h // g] @ q[i, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[i, h] = p @ v[:, h // g] / p.sum()
    return out


def main() -> int:
    import cupy as cp
    import ml_dtypes

    import tilex.stdlib as S

    rng = np.random.default_rng(0)
    failed = 0
    for lens, hq, hkv, d, bs, ns, cfg in CASES:
        need = [-(-n // bs) for n in lens]
        maxb, nb = max(need) + 2, sum(need) + 3
        kc = rng.standard_normal((nb, bs, hkv, d)).astype(ml_dtypes.bfloat16)
        vc = rng.standard_normal((nb, bs, hkv, d)).astype(ml_dtypes.bfloat16)
        table = rng.integers(-4, 2 * nb, (len(lens), maxb)).astype(np.int32)   # junk, some outside the cache
        perm, at = rng.permutation(nb), 0
        for i, n in enumerate(need):
            table[i, :n] = perm[at:at + n]
            at += n
        q = rng.standard_normal((len(lens), hq, d)).astype(ml_dtypes.bfloat16)
        o = S.attention_decode(cp.asarray(q), cp.asarray(kc), cp.asarray(vc), cp.asarray(table),
                               cp.asarray(np.array(lens, np.int32)), num_splits=ns, config=cfg)
        got = cp.asnumpy(o).astype(np.float64)
        ref = reference(q, kc, vc, table, lens, d ** -0.5)
        err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
        ok = err <= 2e-2 and np.isfinite(got).all()
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} lens={lens} Hq={hq} Hkv={hkv} D={d} BS={bs} splits={ns} config={cfg} "
              f"err {err:.2e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
