#!/usr/bin/env bash
# Session 25's device call, also what the next one should re-run first (the tests revised after the device ran out):
# the backend's GPU tests with the split decode GEMMs' and the TP=1 engine's, then the compiled model against
# Inductor reduce-overhead at decode and prefill with kernel profiles. Logs under $LOG, tarred into $OUT/logs.tgz
# after every step.
#   OUT=out bash benchmarks/gpu_session25.sh mask   # ~450 s: the GPU tests (TESTS_S), bench_backend decode
#                                                   # b1/b4/b16 (DECODE_S), prefill 1x512/16x512 (PREFILL_S)
#   OUT=out bash benchmarks/gpu_session25.sh gemm512  # ~200 s: the prefill GEMM shapes with stream-K candidates
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  mask)
    t tests "${TESTS_S:-150}" python3 -m pytest -q -n 8 -rfE -p no:cacheprovider -m gpu tests/test_backend*.py tests/test_remat.py tests/test_swap_split_gpu.py tests/test_llm_tp_gpu.py
    tail -6 "$LOG/tests.log"
    t decode "${DECODE_S:-170}" python3 benchmarks/bench_backend.py --layers 2 --batches "" --decode-batches 1,4,16 --only inductor-ro,tilex-cg,tilex-cg-borrow --time-failing --total $(( ${DECODE_S:-170} - 15 )) --json "$LOG/decode.json"
    grep -A12 "^## summary" "$LOG/decode.log"
    t prefill "${PREFILL_S:-150}" python3 benchmarks/bench_backend.py --layers 2 --batches 1,16 --decode-batches "" --skip-decode --only inductor-ro,tilex-cg,tilex-cg-borrow --time-failing --total $(( ${PREFILL_S:-150} - 15 )) --json "$LOG/prefill.json"
    grep -A12 "^## summary" "$LOG/prefill.log" ;;
  gemm512)
    # the prefill GEMMs of the 7B shape at M=512 with the stream-K candidates (the down projection's 112 tiles fill
    # 85% of a wave; session 25 measured 0.883x cuBLAS there) and M=8192 (16x512)
    t sweep "${SWEEP_S:-200}" python3 benchmarks/sweep_gemm.py --only linear --shapes linear:512x18944x3584,linear:512x3584x3584,linear:512x3584x512,linear:8192x18944x3584,linear:8192x3584x512 --budget-s $(( ${SWEEP_S:-200} - 20 )) --json "$LOG/sweep_gemm512.json"
    tail -8 "$LOG/sweep.log" ;;
  *) sed -n 2,8p "$0"; exit 2 ;;
esac
