#!/usr/bin/env bash
# Session 17's device calls. Logs and JSON under $LOG, tarred into $OUT/logs.tgz after every step (a call returns
# at most 8 files, and one cut short still returns what ran).
#   OUT=out bash benchmarks/gpu_session17.sh probe        # baseline grid at this commit + a profile of the backend
#   OUT=out bash benchmarks/gpu_session17.sh sweeps DIRS  # helpers' sweeps: DIR/benchmarks/sweep_*.py of each checkout
#   OUT=out bash benchmarks/gpu_session17.sh tests        # every GPU test in 8 shards, compute-sanitizer, grid, eager
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
LOG=${LOG:-$(mktemp -d)}; mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
t() { local name=$1 secs=$2; shift 2; echo "== $name"; OUT="$LOG" timeout -s ABRT "$secs" "$@" > "$LOG/$name.log" 2>&1
      echo "rc=$?" >> "$LOG/$name.log"; tar czf "$OUT/logs.tgz" -C "$LOG" .; }
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
  *) echo "usage: gpu_session17.sh probe|sweeps|tests" >&2; exit 2 ;;
esac
