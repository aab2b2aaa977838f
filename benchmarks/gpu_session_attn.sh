#!/usr/bin/env bash
# GPU call: attention GPU tests, sanitizer on the prefill, attention benchmark (after the tensor-core `@` changes).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
timeout 80 python3 -m pytest -q -m gpu tests/test_stdlib_attention_gpu.py 2>&1 | tee "$OUT/pytest_attn.log" | tail -4
timeout 40 compute-sanitizer --tool memcheck python3 -m pytest -q -m gpu tests/test_stdlib_attention_gpu.py -k "prefill" -x 2>&1 | tee "$OUT/sanitizer_attn.log" | tail -2
timeout 70 python3 benchmarks/bench_attention.py --quick --no-sweep --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" | tail -12
