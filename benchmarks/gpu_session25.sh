#!/usr/bin/env bash
# Session 25's device call: the -65504 mask cutoff (38d9e12) on the GPU, then the compiled model against Inductor
# at decode and prefill with kernel profiles. Logs under $LOG, tarred into $OUT/logs.tgz after every step.
#   OUT=out bash benchmarks/gpu_session25.sh mask   # ~450 s: the backend's GPU tests (TESTS_S), bench_backend
#                                                   # decode b1/b4/b16 (DECODE_S), prefill 1x512/16x512 (PREFILL_S)
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  mask)
    t tests "${TESTS_S:-150}" python3 -m pytest -q -n 8 -rfE -p no:cacheprovider -m gpu tests/test_backend*.py tests/test_remat.py tests/test_swap_split_gpu.py tests/test_llm_tp_gpu.py
    tail -6 "$LOG/tests.log"
    t decode "${DECODE_S:-170}" python3 benchmarks/bench_backend.py --layers 2 --batches "" --decode-batches 1,4,16 --only inductor-ro,tilex-cg,tilex-cg-borrow --time-failing --total $(( ${DECODE_S:-170} - 15 )) --json "$LOG/decode.json"
    grep -A12 "^## summary" "$LOG/decode.log"
    t prefill "${PREFILL_S:-150}" python3 benchmarks/bench_backend.py --layers 2 --batches 1,16 --decode-batches "" --skip-decode --only inductor-ro,tilex-cg,tilex-cg-borrow --time-failing --total $(( ${PREFILL_S:-150} - 15 )) --json "$LOG/prefill.json"
    grep -A12 "^## summary" "$LOG/prefill.log" ;;
  *) sed -n 2,5p "$0"; exit 2 ;;
esac
