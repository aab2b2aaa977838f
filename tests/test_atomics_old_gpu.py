"""GPU: atomics that return the old values, under heavy collision, checked with what holds for any valid order
(tests/atomic_old_programs.py): a ticket counter of a million lanes on one element, a compare-and-swap loop max
of f32 bits, a split-K whose last program of each tile sums the partials (fence()), a lock-free hash-set slot
claim, every op and dtype's olds, and examples/v1/compact.tile. Run: pytest -m gpu tests/test_atomics_old_gpu.py.
Each test runs in a fresh process (a kernel fault must fail that test only)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tilex

from atomic_old_programs import (CAS_MAX, LAST_DONE, OPS_OLD, SLOT_CLAIM, TICKET, check_cas_max, check_claim,
                                 check_ops_olds, check_ticket)

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent


def isolated(body, *args) -> None:
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_atomics_old_gpu as t; t.{body.__name__}(*{args!r})"
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


def gpu(src, name, defines=None, **args):
    """Run kernel `name` on the GPU from NumPy arguments; the arrays after it, as NumPy."""
    cp = pytest.importorskip("cupy")
    mod = tilex.compile(src, **(defines or {}))
    dev = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    getattr(mod, name)(**dev)
    cp.cuda.Device().synchronize()
    return {k: cp.asnumpy(v) for k, v in dev.items() if not np.isscalar(v)}


def _ticket(n):
    g = gpu(TICKET, "ticket", counter=np.zeros(1, np.int32), slots=np.full(n, -5, np.int32),
            big=np.zeros(1, np.int64), bigslots=np.full(n, -5, np.int64))
    check_ticket(g["counter"], g["slots"], g["big"], g["bigslots"], n)


def _cas_max(n):
    r = np.random.default_rng()
    xb = r.standard_normal(n).astype(np.float32).view(np.int32)
    xb[r.integers(0, n, 50)] = np.float32(-0.0).view(np.int32)  # signed zeros and negatives ordered by key()
    g = gpu(CAS_MAX, "cas_max", {"ROUNDS": 512}, xb=xb, best=np.array([-np.inf], np.float32).view(np.int32).copy(),
            left=np.full(-(-n // 128), 7, np.int32))
    check_cas_max(xb, g["best"], g["left"])


def _last_done():
    r = np.random.default_rng()
    m, n, k = 300, 200, 1000  # edge tiles in m and n; 4 splits of 256, the last short
    a, b = r.standard_normal((m, k)).astype(np.float32), r.standard_normal((k, n)).astype(np.float32)
    tiles = -(-m // 32) * -(-n // 32)
    outs = []
    for _ in range(3):  # the counts reset themselves: the same arrays serve every launch
        g = gpu(LAST_DONE, "splitk_last", {"BK": 256}, a=a, b=b, ws=np.zeros((4, m, n), np.float32),
                count=np.zeros(tiles, np.int32), c=np.full((m, n), np.nan, np.float32))
        assert not g["count"].any()
        outs.append(g["c"])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-3)
    for o in outs[1:]:  # the partials are summed in split order by whichever program is last: bit-identical
        np.testing.assert_array_equal(o, outs[0])


def _claim(n):
    r = np.random.default_rng()
    keys = r.integers(0, n // 2, n).astype(np.int32)  # each key about twice
    t = 1 << int(np.ceil(np.log2(n)) + 1)
    g = gpu(SLOT_CLAIM, "claim", {"ROUNDS": 256}, keys=keys, table=np.full(t, -1, np.int32),
            where_=np.zeros(n, np.int32), left=np.full(-(-n // 128), 7, np.int32))
    check_claim(keys, g["table"], g["where_"], g["left"])


def _ops_old():
    from test_atomics_old import ops_inputs

    ids, x, start, outs = ops_inputs(np.random.default_rng(), n=50_003, k=5)  # ~8000 lanes per bin
    g = gpu(OPS_OLD, "ops_old", ids=ids, x=x, **start, **outs)
    check_ops_olds(ids, x, start, g, serial=False)


def _compact(n):
    r = np.random.default_rng()
    x = r.standard_normal(n).astype(np.float32)
    m = tilex.compile(str(HERE.parent / "examples" / "v1" / "compact.tile"))
    cp = pytest.importorskip("cupy")
    y, count = cp.full(n, np.nan, np.float32), cp.zeros(1, np.int32)
    m.compact(cp.asarray(x), y, count, lim=0.5)
    y, count = cp.asnumpy(y), int(cp.asnumpy(count)[0])
    want = x[x > 0.5]
    assert count == want.size and np.isnan(y[count:]).all()
    np.testing.assert_array_equal(np.sort(y[:count]), np.sort(want))


@pytest.mark.parametrize("n", [1, 1003, 1 << 20])
def test_ticket_counter_gpu(n):
    isolated(_ticket, n)


@pytest.mark.parametrize("n", [129, 100_003])
def test_cas_loop_max_gpu(n):
    isolated(_cas_max, n)


def test_last_program_done_split_k_gpu():
    isolated(_last_done)


@pytest.mark.parametrize("n", [1000, 200_003])
def test_lock_free_slot_claim_gpu(n):
    isolated(_claim, n)


def test_every_op_returns_olds_gpu():
    isolated(_ops_old)


@pytest.mark.parametrize("n", [5, 100_003, (1 << 22) + 7])
def test_compaction_example_gpu(n):
    isolated(_compact, n)
