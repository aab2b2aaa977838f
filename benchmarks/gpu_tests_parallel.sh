#!/usr/bin/env bash
# The GPU tests in N parallel pytest processes on one GPU (NVRTC compiles are CPU-bound: shards cut the wall time
# of a cold cache roughly N-fold). Node ids are collected once and dealt round-robin, so each file's tests spread.
#   OUT=out bash benchmarks/gpu_tests_parallel.sh [N=6] [MARK="gpu and not slow"] [pytest paths...]
# Logs: $OUT/pytest_shard_<i>.log; a summary of every shard's last line and the failures at the end.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
N=${1:-6}; MARK=${2:-gpu and not slow}; shift 2 2>/dev/null || shift $#
PATHS=("$@"); [ ${#PATHS[@]} -eq 0 ] && PATHS=(tests)
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
python3 -m pytest -q --collect-only -p no:cacheprovider -m "$MARK" "${PATHS[@]}" 2>/dev/null | grep '::' > "$OUT/gpu_ids.txt"
echo "$(wc -l < "$OUT/gpu_ids.txt") GPU tests in $N shards"
for i in $(seq 0 $((N - 1))); do
  awk -v n="$N" -v i="$i" 'NR % n == i' "$OUT/gpu_ids.txt" > "$OUT/gpu_ids_$i.txt"
  mapfile -t ids < "$OUT/gpu_ids_$i.txt"  # one id per line (parametrized ids may hold spaces)
  [ ${#ids[@]} -eq 0 ] && continue
  timeout -s ABRT "${SHARD_TIMEOUT:-500}" python3 -m pytest -q -rfEx -p no:cacheprovider -o faulthandler_timeout=240 \
      "${ids[@]}" > "$OUT/pytest_shard_$i.log" 2>&1 &
done
wait
for i in $(seq 0 $((N - 1))); do echo "shard $i: $(tail -1 "$OUT/pytest_shard_$i.log")"; done
grep -h "^FAILED\|^ERROR\|^XFAIL" "$OUT"/pytest_shard_*.log | head -40
