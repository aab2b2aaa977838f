#!/usr/bin/env bash
# GPU call: matmul tests, full matmul benchmark, tuning sweeps for the skinny (decode) shapes.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
timeout 200 python3 -m pytest -q -x -m gpu tests/test_matmul_gpu.py 2>&1 | tee "$OUT/pytest_matmul.log" | tail -6
timeout 100 compute-sanitizer --tool memcheck python3 benchmarks/sanitize_matmul.py 2>&1 | tee "$OUT/sanitizer_matmul.log" | tail -3
for shape in M=16,N=13824,K=5120 M=1,N=13824,K=5120; do
  timeout 100 python3 -m tilex tune stdlib_kernels/linear.tile --kernel linear --shape $shape \
    --space BM=16 --space BN=32,64,128 --space BK=64,128 --space STAGES=4,6,8 --rep 50 --no-store 2>&1 | tee -a "$OUT/tune.log" | tail -12
done
timeout 200 python3 benchmarks/bench_matmul.py --json "$OUT/bench_matmul.json" 2>&1 | tee "$OUT/bench_matmul.log" | tail -14
