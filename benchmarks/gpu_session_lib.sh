#!/usr/bin/env bash
# GPU call: matmul split-K tests, library/attention/LLM GPU tests, library benchmarks (skinny matmul rows).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
timeout 120 python3 -m pytest -q -m gpu tests/test_matmul_gpu.py -k "split_k or stdlib_linear" 2>&1 | tail -4
timeout 150 python3 benchmarks/bench_matmul.py --shapes 1x5120x13824,16x5120x13824,1x5120x152064,16x5120x152064 --json "$OUT/bench_skinny.json" 2>&1 | tail -8
timeout 200 python3 -m pytest -q -m gpu tests/test_stdlib_gpu.py 2>&1 | tee "$OUT/pytest_stdlib.log" | tail -8
timeout 200 python3 -m pytest -q -m gpu tests/test_stdlib_attention_gpu.py 2>&1 | tee "$OUT/pytest_attn.log" | tail -8
