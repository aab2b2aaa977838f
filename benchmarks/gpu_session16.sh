#!/usr/bin/env bash
# Session 16's device calls (issues 17 and 18): correctness first, then the benchmarks behind RESULTS.md.
#   OUT=out bash benchmarks/gpu_session16.sh tests   # every GPU test in 8 shards, compute-sanitizer on the new paths,
#                                                    # then the shape grid and the eager costs
#   OUT=out bash benchmarks/gpu_session16.sh bench   # the benchmarks of the new paths (torch ops, bmm, auto matmul,
#                                                    # linear model, rows, backend, LLM eager vs graph)
source "$(dirname "$0")/device_steps.sh"
# logs and JSON are written under $LOG and come back as one archive, $OUT/logs.tgz (a device call returns 8 files)
# each step's log under $LOG, and the archive refreshed after it (a call cut short still returns what ran)
case "${1:-}" in
  tests)
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-240} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh 8 "gpu and not slow" tests 2>&1 | tee "$LOG/gpu_tests.log"
    t bench_eager 90 python3 benchmarks/bench_eager.py --json "$LOG/bench_eager.json"
    tail -25 "$LOG/bench_eager.log"
    t bench_shapes 150 python3 benchmarks/bench_shapes.py --grid quick --budget-s 110 --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log"
    t sanitize_bmm 50 compute-sanitizer --tool memcheck --error-exitcode 9 python3 benchmarks/sanitize_bmm.py
    t sanitize_new 80 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider \
        tests/test_runtime_launch_gpu.py tests/test_stdlib_rows_gpu.py -k "5120 or split or linear or rms"
    for f in sanitize_bmm sanitize_new; do echo "$f: $(grep -E 'ERROR SUMMARY|rc=|passed|failed' "$LOG/$f.log" | tr '\n' ' ')"; done
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  bench)  # every GPU test again (the later merges), then the benchmarks, most needed first
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-150} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh 8 "gpu and not slow" tests 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t bench_torch_ops 70 python3 benchmarks/bench_torch_ops.py --tokens 1,16 --reps 200
    tail -14 "$LOG/bench_torch_ops.log"
    t bench_auto_matmul 70 python3 benchmarks/bench_auto_matmul.py --json "$LOG/auto_matmul.json"
    tail -14 "$LOG/bench_auto_matmul.log"
    t bench_rows 80 python3 benchmarks/bench_stdlib.py --rows --json "$LOG/bench_rows.json"
    tail -24 "$LOG/bench_rows.log"
    t bench_linear_model 60 python3 benchmarks/bench_linear_model.py --json "$LOG/linear_model.json"
    tail -16 "$LOG/bench_linear_model.log"
    t bench_backend 90 python3 benchmarks/bench_backend.py --layers 4 --json "$LOG/backend.json"
    tail -14 "$LOG/bench_backend.log"
    t bench_bmm 45 python3 benchmarks/bench_bmm.py --quick
    tail -10 "$LOG/bench_bmm.log" ;;
  *) echo "usage: gpu_session16.sh tests|bench" >&2; exit 2 ;;
esac
