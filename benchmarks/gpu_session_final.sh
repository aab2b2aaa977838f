#!/usr/bin/env bash
# GPU call: attention and matmul GPU tests, sanitizer on the mma.sync attention, attention and matmul benchmarks.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
git rev-parse --short HEAD 2>/dev/null
timeout 90 python3 -m pytest -q -m gpu tests/test_stdlib_attention_gpu.py 2>&1 | tee "$OUT/pytest_attn.log" | tail -4
timeout 60 python3 -m pytest -q -m gpu tests/test_matmul_gpu.py 2>&1 | tee "$OUT/pytest_matmul.log" | tail -3
timeout 60 compute-sanitizer --tool memcheck python3 -m pytest -q -m gpu tests/test_stdlib_attention_gpu.py -k "prefill" -x 2>&1 | tee "$OUT/sanitizer_attn.log" | tail -3
timeout 80 python3 benchmarks/bench_attention.py --quick --no-sweep --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" | tail -12
timeout 140 python3 benchmarks/bench_matmul.py --json "$OUT/bench_matmul.json" 2>&1 | tee "$OUT/bench_matmul.log" | tail -13
