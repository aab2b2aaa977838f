#!/usr/bin/env bash
# Session 17's device calls. Logs and JSON under $LOG, tarred into $OUT/logs.tgz after every step (a call returns
# at most 8 files, and one cut short still returns what ran).
#   OUT=out bash benchmarks/gpu_session17.sh probe        # baseline grid at this commit + a profile of the backend
#   OUT=out bash benchmarks/gpu_session17.sh sweeps DIRS  # helpers' sweeps: DIR/benchmarks/sweep_*.py of each checkout
#   OUT=out bash benchmarks/gpu_session17.sh tests        # every GPU test in 8 shards, the quick grid, eager costs
#   OUT=out bash benchmarks/gpu_session17.sh bench        # the backend vs eager/Inductor, matmul.tile as shipped
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  probe)
    t bench_shapes 300 python3 benchmarks/bench_shapes.py --grid quick --budget-s 270 --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    t backend_prof 200 python3 -m cProfile -o "$LOG/backend.prof" benchmarks/bench_backend.py --layers 2 --only tilex \
        --json "$LOG/backend.json"
    tail -20 "$LOG/backend_prof.log"
    python3 -c "import pstats; pstats.Stats('$LOG/backend.prof').sort_stats('cumulative').print_stats(45)" \
        > "$LOG/backend_prof_top.txt" 2>&1; head -80 "$LOG/backend_prof_top.txt" | tail -60
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  sweeps)  # each DIR a checkout (untracked copy of a branch) with its own sweep command in DIR/.sweep_cmd
    shift
    for d in "$@"; do
      name=$(basename "$d")
      ( cd "$d" && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
        TILEX_CACHE_DIR=$PWD/.tilex-cache t "sweep_$name" "$(cat .sweep_secs)" bash -c "$(cat .sweep_cmd)"
        tail -30 "$LOG/sweep_$name.log" )
    done
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  tests)
    SHARD_TIMEOUT=${SHARD_TIMEOUT:-200} OUT=$LOG bash benchmarks/gpu_tests_parallel.sh 8 "gpu and not slow" tests 2>&1 | tee "$LOG/gpu_tests.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" .
    t bench_shapes 230 python3 benchmarks/bench_shapes.py --grid quick --budget-s 200 --json "$LOG/bench_shapes.json"
    grep -A16 "^family" "$LOG/bench_shapes.log" | head -20
    t bench_eager 80 python3 benchmarks/bench_eager.py --reps 100 --engine-reps 5 --json "$LOG/bench_eager.json"
    tail -30 "$LOG/bench_eager.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  diag)  # which eager library call writes outside its outputs, then a short backend comparison
    t diag_writes 120 python3 benchmarks/diag_eager_writes.py --reps 20
    grep -E "WRITE|wrote" "$LOG/diag_writes.log"; tail -3 "$LOG/diag_writes.log"
    t bench_backend 170 python3 benchmarks/bench_backend.py --layers 2 --budget 35 --steps 8 --only eager,inductor,tilex,tilex-cg --json "$LOG/backend.json"
    tail -30 "$LOG/bench_backend.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  bench)  # the backend against eager and Inductor, then examples/matmul.tile as shipped
    t bench_backend 270 python3 benchmarks/bench_backend.py --layers 2 --budget 50 --steps 16 --json "$LOG/backend.json"
    tail -30 "$LOG/bench_backend.log"
    t bench_auto_matmul 70 python3 benchmarks/bench_auto_matmul.py --json "$LOG/auto_matmul.json"
    tail -16 "$LOG/bench_auto_matmul.log"
    tar czf "$OUT/logs.tgz" -C "$LOG" . ;;
  *) echo "usage: gpu_session17.sh probe|sweeps|tests" >&2; exit 2 ;;
esac
