#!/usr/bin/env bash
# Session 19's device calls. Logs and JSON under $LOG, tarred into $OUT/logs.tgz after every step (a call returns
# at most 8 files, and one cut short still returns what ran).
#   OUT=out bash benchmarks/gpu_session19.sh requests DIRS # helpers' GPU requests: DIR/.req_cmd (bash), DIR/.req_secs
#   OUT=out bash benchmarks/gpu_session19.sh tests         # every GPU test in 8 shards, then eager costs
#   OUT=out bash benchmarks/gpu_session19.sh final         # the merged tree: GPU tests, sanitizer, TMA-store A/B
#   OUT=out bash benchmarks/gpu_session19.sh bench         # the quick grid, the backend vs eager/Inductor, matmul.tile
#   OUT=out bash benchmarks/gpu_session19.sh final19       # one call for the merged tree: GPU tests, eager costs, the
#                                                          # quick grid, the backend against Inductor reduce-overhead
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
  tests)
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-230} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh 8 "gpu and not slow" tests 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t bench_eager 90 python3 benchmarks/bench_eager.py --reps 100 --engine-reps 5 --json "$LOG/bench_eager.json"
    tail -30 "$LOG/bench_eager.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  final)  # every GPU test of the merged tree in 8 shards, then the sanitizer and the TMA-store A/B if time is left
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-280} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh 8 "gpu and not slow" tests 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t memcheck_masked 70 compute-sanitizer --tool memcheck python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_atomics_gpu.py -k "masked_store_load_gpu and 1001"
    tail -4 "$LOG/memcheck_masked.log"
    t bench_tma_store 100 python3 benchmarks/bench_tma_store.py --json "$LOG/bench_tma_store.json"
    tail -16 "$LOG/bench_tma_store.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  bench)
    t bench_shapes 230 python3 benchmarks/bench_shapes.py --grid quick ${GRID_FAMILIES:+--families $GRID_FAMILIES} --budget-s 200 --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    t bench_backend 230 python3 benchmarks/bench_backend.py --layers 2 --budget 45 --steps 16 --json "$LOG/backend.json"
    tail -30 "$LOG/bench_backend.log"
    t bench_auto_matmul 70 python3 benchmarks/bench_auto_matmul.py --json "$LOG/auto_matmul.json"
    tail -16 "$LOG/bench_auto_matmul.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  final19)  # every step capped so that the whole call stays under ~500 s
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-200} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh 8 "gpu and not slow" tests 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    [ "${EAGER_S:-45}" -gt 0 ] && t bench_eager "${EAGER_S:-45}" python3 benchmarks/bench_eager.py --reps 60 --engine-reps 3 --json "$LOG/bench_eager.json" && tail -8 "$LOG/bench_eager.log"
    t bench_shapes "${GRID_S:-140}" python3 benchmarks/bench_shapes.py --grid quick ${GRID_FAMILIES:+--families $GRID_FAMILIES} --budget-s $(( ${GRID_S:-140} - 25 )) --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    t bench_backend "${BACKEND_S:-95}" python3 benchmarks/bench_backend.py --layers 2 --only eager,inductor-ro,tilex-cg --budget $(( ${BACKEND_S:-95} / 3 )) --steps 8 --json "$LOG/backend.json"
    tail -30 "$LOG/bench_backend.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  *) echo "usage: gpu_session19.sh requests DIRS|tests|final|bench|final19" >&2; exit 2 ;;
esac
