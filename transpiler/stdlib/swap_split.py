"""How many K shares a swapped-operand decode GEMM (linear_swap_splitk, M <= 16) takes: a time model fitted to
benchmarks/sweep_gemm.py on the H200 (session 25, tests/data/sweep_decode_h200.json).

A decode GEMM with few weight-row tiles (N / BN well under the SM count: a k or v projection, N = 512) leaves most
SMs idle; one program streams its weight rows at about PROGRAM_BW, so splitting K over S programs per tile
multiplies the bandwidth until the HBM binds, at the cost of a second launch summing the f32 partials. So

    t(S) = FIXED_US + weight bytes / min(tiles * S * PROGRAM_BW, HBM_BW) + (SUM_US if S > 1)

and the choice is the S in SHARES with the least t, each share keeping at least MIN_SHARE_K columns of K and the
programs fitting one wave (tiles * S <= SMs); where the HBM term binds, several S tie in the model while the
measured time still falls with more programs (K=4096 N=1024: 6.3 us at S = 4, 5.9 at S = 8), so a tie (within
TIE) goes to the larger S.
Measured (us, M = 1): K=3584 N=512 7.9 unsplit -> 5.5 at S = 8; K=4096 N=1024 8.8 -> 5.8 at S = 8; K=18944
N=3584 40.1 -> 38.7 at S = 2; K=3584 N=3584 8.4 unsplit stays best (the sum costs more than the split gains)."""
from __future__ import annotations

PROGRAM_BW = 60e9    # bytes/s one linear_swap program streams (M=1, K=18944, N=3584: 135.8 MB, 56 programs, 40.1 us)
HBM_BW = 3.7e12      # bytes/s the split decode GEMMs reach (K=18944 N=3584 at S=2, 112 programs: 38.7 us)
FIXED_US = 2.0       # launch and pipeline fill of one program
SUM_US = 1.7         # splitk_sum(_bias) of S partials at decode sizes (a second launch)
SHARES = (1, 2, 4, 8, 16)
MIN_SHARE_K = 448    # columns of K per share (the best measured splits keep 3.5+ 128-deep stages)
TIE = 0.01           # predicted times this close count as a tie


def predict_us(n: int, k: int, bn: int, s: int, sms: int, itemsize: int = 2) -> float:
    tiles = -(-n // bn)
    bw = min(min(tiles * s, sms) * PROGRAM_BW, HBM_BW)
    return FIXED_US + n * k * itemsize / bw * 1e6 + (SUM_US if s > 1 else 0.0)


def shares(n: int, k: int, bn: int, sms: int, itemsize: int = 2) -> int:
    """The number of K shares for a swapped decode GEMM of weight [n, k] in BN-row tiles on `sms` SMs."""
    tiles = -(-n // bn)
    ok = [s for s in SHARES if s == 1 or (k // s >= MIN_SHARE_K and tiles * s <= sms)]
    t = {s: predict_us(n, k, bn, s, sms, itemsize) for s in ok}
    best = min(t.values())
    return max(s for s in ok if t[s] <= best * (1 + TIE))
