#!/usr/bin/env bash
# The device call session 23 could not make (its device time ran out): the gated MLP's new picks and the opt-in swap
# path timed, their GPU tests, and the compiled decode against Inductor again. Logs under $LOG, tarred into
# $OUT/logs.tgz after every step.
#   OUT=out bash benchmarks/gpu_session24.sh gated   # ~250 s: sweep_gated at held-out shapes (new picks + swap path),
#                                                    # tests/test_gated_swap.py and the gated GPU tests, bench_backend
#                                                    # decode b1/b4/b16 (limits: SWEEP_S, TESTS_S, BACKEND_S)
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  gated)
    # swept in session 23 (the picks' times there are measured) and held out (never swept)
    SHAPES=${SHAPES:-1x3584x18944,16x3584x18944,1x2048x11008,1x1536x8960,1x3072x8192,8x4096x14336,32x3584x18944,4x2560x9728,1x8192x28672,2x5120x25600}
    t sweep_gated "${SWEEP_S:-120}" python3 benchmarks/sweep_gated.py --shapes "$SHAPES" --budget-s $(( ${SWEEP_S:-120} - 20 )) --json "$LOG/sweep_gated.json"
    tail -14 "$LOG/sweep_gated.log"
    t gated_tests "${TESTS_S:-90}" python3 -m pytest -q -n 8 -rfE -p no:cacheprovider -m gpu tests -k "gated"
    tail -4 "$LOG/gated_tests.log"
    t backend "${BACKEND_S:-150}" python3 benchmarks/bench_backend.py --layers 2 --batches "" --decode-batches 1,4,16 --only inductor-ro,tilex-cg,tilex-cg-borrow --time-failing --total $(( ${BACKEND_S:-150} - 10 )) --json "$LOG/backend.json"
    grep -A10 "^## summary" "$LOG/backend.log" ;;
  *) sed -n 2,7p "$0"; exit 2 ;;
esac
