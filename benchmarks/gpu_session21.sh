#!/usr/bin/env bash
# Session 21's device calls. Logs and JSON under $LOG, tarred into $OUT/logs.tgz after every step (a call returns
# at most 8 files, and one cut short still returns what ran).
#   OUT=out bash benchmarks/gpu_session21.sh requests DIRS # helpers' GPU requests: DIR/.req_cmd (bash), DIR/.req_secs
#   OUT=out bash benchmarks/gpu_session21.sh tests         # every GPU test in 8 shards, TP=1 through NCCL, the grid
#                                                          # families session 19 left out
#   OUT=out bash benchmarks/gpu_session21.sh final20       # the merged tree: GPU tests, the quick grid, the backend
#                                                          # against Inductor, eager costs (limits: SHARD_TIMEOUT,
#                                                          # GRID_S, GRID_FAMILIES, BACKEND_S, DIAG_S, EAGER_S;
#                                                          # SHARDS=8 processes over TEST_PATHS=tests)
#   OUT=out bash benchmarks/gpu_session21.sh bench21       # final20's benchmarks alone (GRID_S, BACKEND_S, EAGER_S)
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  requests)  # each DIR a checkout (untracked copy of a branch) with its request in DIR/.req_cmd
    shift
    for d in "$@"; do
      name=$(basename "$d")
      ( cd "$d" && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
        TILEX_CACHE_DIR=$PWD/.tilex-cache t "req_$name" "$(cat .req_secs)" bash -c "$(cat .req_cmd)"
        tail -40 "$LOG/req_$name.log" )
    done
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  tests)  # every GPU test in 8 shards, TP=1 through NCCL, then the grid families session 19 left out
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-290} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh "${SHARDS:-8}" "gpu and not slow" ${TEST_PATHS:-tests} 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t tp1 "${TP1_S:-60}" python3 -m pytest -q -s -rfEx -p no:cacheprovider tests/test_llm_tp_gpu.py -k tp1
    tail -8 "$LOG/tp1.log"
    if [ "${GRID_S:-120}" -gt 0 ]; then
      t bench_shapes "${GRID_S:-120}" python3 benchmarks/bench_shapes.py --grid quick --families ${GRID_FAMILIES:-softmax,argmax,rope,embedding,attention_prefill,attention_decode} --budget-s $(( ${GRID_S:-120} - 20 )) --json "$LOG/bench_shapes.json"
      grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    fi
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  final20)  # the merged tree in one call: GPU tests, the quick grid, the backend against Inductor, eager costs
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-280} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh "${SHARDS:-8}" "gpu and not slow" ${TEST_PATHS:-tests} 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t bench_shapes "${GRID_S:-170}" python3 benchmarks/bench_shapes.py --grid quick ${GRID_FAMILIES:+--families $GRID_FAMILIES} --budget-s $(( ${GRID_S:-170} - 25 )) --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t bench_backend "${BACKEND_S:-110}" python3 benchmarks/bench_backend.py --layers 2 --total $(( ${BACKEND_S:-110} - 10 )) --json "$LOG/backend.json"
    grep -v '^{' "$LOG/bench_backend.log" | tail -30
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    [ "${DIAG_S:-25}" -gt 0 ] && t diag_prefill "${DIAG_S:-25}" bash -c "cd tests && python3 diag_prefill_gpu.py" && tail -30 "$LOG/diag_prefill.log"
    [ "${EAGER_S:-40}" -gt 0 ] && t bench_eager "${EAGER_S:-40}" python3 benchmarks/bench_eager.py --reps 60 --engine-reps 3 --json "$LOG/bench_eager.json" && tail -8 "$LOG/bench_eager.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  bench21)  # the benchmarks of final20 without the GPU tests (run `tests` in the call before)
    t bench_shapes "${GRID_S:-170}" python3 benchmarks/bench_shapes.py --grid quick ${GRID_FAMILIES:+--families $GRID_FAMILIES} --budget-s $(( ${GRID_S:-170} - 25 )) --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t bench_backend "${BACKEND_S:-110}" python3 benchmarks/bench_backend.py --layers 2 --total $(( ${BACKEND_S:-110} - 10 )) --json "$LOG/backend.json"
    grep -v '^{' "$LOG/bench_backend.log" | tail -30
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    [ "${EAGER_S:-40}" -gt 0 ] && t bench_eager "${EAGER_S:-40}" python3 benchmarks/bench_eager.py --reps 60 --engine-reps 3 --json "$LOG/bench_eager.json" && tail -8 "$LOG/bench_eager.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  *) echo "usage: gpu_session21.sh requests DIRS|tests|final20|bench21" >&2; exit 2 ;;
esac
