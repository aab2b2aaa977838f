#!/usr/bin/env bash
# Session 19, branch gemm: one GPU call, each step under its own `timeout` within one deadline (a hang costs only
# its step), logs in $OUT. Usage: OUT=/some/dir bash benchmarks/gpu_gemm19.sh [STEP ...]   (default: tma)
#   tma   the persistent GEMMs: GPU tests (BM=256 first, alone), bench_auto_matmul.py (examples/matmul.tile as
#         shipped) at issue 17's two shapes, bench_tma_store.py at the losing shapes, compute-sanitizer memcheck
#   more  the wrapper's defaults: GPU tests of its paths, memcheck, bench_shapes.py's linear grid (BUDGET_S=85)
set -u
OUT=${OUT:-/tmp/gemm19}
mkdir -p "$OUT"
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-145} ))
export PYTHONUNBUFFERED=1

step() {  # step NAME CAP_S CMD...: run CMD under min(CAP_S, time left), its log in $OUT/NAME.log
  local name=$1 cap=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  (( left < cap )) && cap=$left
  if (( cap < 5 )); then echo "== $name: skipped (deadline)" | tee -a "$OUT/summary.txt"; return; fi
  local t0=$(date +%s)
  timeout -s KILL "$cap" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s (cap $cap s)$( ((rc == 137)) && echo ' TIMED OUT / KILLED')" \
    | tee -a "$OUT/summary.txt"
  tail -n 4 "$OUT/$name.log" | sed 's/^/   /' | tee -a "$OUT/summary.txt"
}

run_tma() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
  # the configuration that hung in session 18 (four consumer warpgroups), alone and first
  step tests_bm256 35 python3 -m pytest -q -x -m gpu tests/test_tma_store_gpu.py -k "test_linear_persistent_tma and defines5"
  step tests_tma 55 python3 -m pytest -q -m gpu tests/test_tma_store_gpu.py -k "not defines5"
  step bench_auto 25 python3 benchmarks/bench_auto_matmul.py --json "$OUT/bench_auto_matmul.json" \
    --shapes 8192x8192x8192,4096x13824x5120
  step bench_tma 50 python3 benchmarks/bench_tma_store.py --json "$OUT/bench_tma_store.json" \
    --shapes 511x13824x5120,4096x2048x2304,256x5120x5120,256x5120x55296,4096x2048x2560,100x896x9728,4096x8192x8192
  step sanitize 40 compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/sanitize_tma_store.py
}

run_more() {  # the wrapper's new defaults (TMA stores, 128x192, 128x160): correctness, memcheck, the linear grid
  step tests_paths 30 python3 -m pytest -q -m gpu tests/test_gemm_gpu.py -k "model_paths"
  step sanitize 20 compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/sanitize_tma_store.py
  step grid 45 python3 benchmarks/bench_shapes.py --families linear --grid quick --no-compile --budget-s 30 \
    --json "$OUT/bench_shapes_linear.json"
}

for s in "${@:-tma}"; do "run_$s"; done
echo "total $(( $(date +%s) - DEADLINE + ${BUDGET_S:-145} )) s" | tee -a "$OUT/summary.txt"
