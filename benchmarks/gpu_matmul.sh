#!/usr/bin/env bash
# One GPU session for the tensor-core matmul: GPU tests, compute-sanitizer at odd sizes, the benchmark.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
nvidia-smi -L
timeout 240 python3 -m pytest -q -x -m gpu tests/test_matmul_gpu.py 2>&1 | tee "$OUT/pytest_matmul.log" | tail -25
timeout 120 compute-sanitizer --tool memcheck python3 benchmarks/sanitize_matmul.py 2>&1 | tee "$OUT/sanitizer_matmul.log" | tail -4
timeout 300 python3 benchmarks/bench_matmul.py ${BENCH_ARGS:-} --json "$OUT/bench_matmul.json" 2>&1 | tee "$OUT/bench_matmul.log" | tail -30
