#!/usr/bin/env bash
# GPU call: split-K decode matmul, LLM engine GPU tests, library and attention benchmarks.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
timeout 60 python3 -m pytest -q -m gpu tests/test_matmul_gpu.py -k "split_k or stdlib_linear" 2>&1 | tail -2
timeout 100 python3 benchmarks/bench_matmul.py --shapes 1x5120x13824,16x5120x13824,1x5120x152064,16x5120x152064,mlp --json "$OUT/bench_skinny.json" 2>&1 | tail -9
timeout 150 python3 -m pytest -q -x -m "gpu and not slow" tests/test_llm_gpu.py 2>&1 | tee "$OUT/pytest_llm.log" | tail -15
timeout 100 python3 benchmarks/bench_attention.py --quick --no-sweep --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" | tail -12
timeout 200 python3 benchmarks/bench_stdlib.py --json "$OUT/bench_stdlib.json" 2>&1 | tee "$OUT/bench_stdlib.log" | tail -25
