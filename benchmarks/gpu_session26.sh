#!/usr/bin/env bash
# Session 26's device calls. Logs under $LOG, tarred into $OUT/logs.tgz after every step.
#   OUT=out bash benchmarks/gpu_session26.sh epilogue   # ~400 s: the GEMM-epilogue GPU tests, then bench_epilogue.py
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  epilogue)
    t tests "${TESTS_S:-200}" python3 -m pytest -q -n 8 -rfE -p no:cacheprovider -m gpu tests/test_backend_epilogue.py
    tail -15 "$LOG/tests.log"
    t bench "${BENCH_S:-200}" python3 benchmarks/bench_epilogue.py --total $(( ${BENCH_S:-200} - 60 )) --json "$LOG/epilogue.json"
    grep -A12 "^## summary" "$LOG/bench.log"; tail -3 "$LOG/bench.log" ;;
  *) sed -n 2,4p "$0"; exit 2 ;;
esac
