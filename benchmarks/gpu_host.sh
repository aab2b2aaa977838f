#!/usr/bin/env bash
# One device call for the eager launch path (session 19, branch host): correctness of the direct launch
# (cuLaunchKernelEx) and of the fast path against torch, then the host's floor, then bench_eager.
#   OUT=out bash benchmarks/gpu_host.sh        (about 150 s on a fresh machine; each step has its own limit)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
step() {  # name, seconds, command
  echo "== $1"; timeout "$2" bash -c "$3" > "$OUT/$1.log" 2>&1; echo "rc=$?"; tail -"${TAIL:-25}" "$OUT/$1.log"
}
step tests 60 "python -m pytest -q -x -p no:cacheprovider tests/test_runtime_launch_gpu.py tests/test_fastpath_gpu.py"
step floor 40 "python benchmarks/host_floor.py --reps 300 --json $OUT/floor.json"
TAIL=60 step eager 75 "python benchmarks/bench_eager.py --reps 200 --no-engine --json $OUT/eager.json"
