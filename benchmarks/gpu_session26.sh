#!/usr/bin/env bash
# Session 26's device calls. Logs under $LOG, tarred into $OUT/logs.tgz after every step.
#   OUT=out bash benchmarks/gpu_session26.sh epilogue   # ~400 s: the GEMM-epilogue GPU tests, then bench_epilogue.py
#   OUT=out bash benchmarks/gpu_session26.sh bench      # ~400 s: the HF GELU-model GPU tests, bench_epilogue.py,
#                                                       # the 32-wide tile sweep, the per-kernel profile of the
#                                                       # 7B-shaped prefill 1x512 (tilex vs Inductor)
#   OUT=out bash benchmarks/gpu_session26.sh tests      # ~300 s: every GPU test of the files this session wrote or
#                                                       # changed after call 3 (epilogues, matmul/bmm, backend)
source "$(dirname "$0")/device_steps.sh"
case "${1:-}" in
  epilogue)
    t tests "${TESTS_S:-200}" python3 -m pytest -q -n 8 -rfE -p no:cacheprovider -m gpu tests/test_backend_epilogue.py
    tail -15 "$LOG/tests.log"
    t bench "${BENCH_S:-200}" python3 benchmarks/bench_epilogue.py --total $(( ${BENCH_S:-200} - 60 )) --json "$LOG/epilogue.json"
    grep -A12 "^## summary" "$LOG/bench.log"; tail -3 "$LOG/bench.log" ;;
  bench)
    t hf "${HF_S:-90}" python3 -m pytest -q -n 2 -rfE -p no:cacheprovider -m gpu tests/test_backend_epilogue.py -k hf_gelu
    tail -4 "$LOG/hf.log"
    t bench "${BENCH_S:-200}" python3 benchmarks/bench_epilogue.py --total $(( ${BENCH_S:-200} - 60 )) --json "$LOG/epilogue.json"
    grep -A12 "^## summary" "$LOG/bench.log"
    t sweep "${SWEEP_S:-60}" python3 benchmarks/sweep_gemm.py --only linear --shapes linear:512x3584x512,linear:100x896x9728,linear:4096x2048x2560 --budget-s $(( ${SWEEP_S:-60} - 15 )) --json "$LOG/sweep_bn32.json"
    tail -6 "$LOG/sweep.log"
    t prof "${PROF_S:-150}" python3 benchmarks/prof_backend_kernels.py --layers 2 --shapes 1x512 --budget $(( ${PROF_S:-150} - 20 )) --json "$LOG/prof.json"
    grep -B2 -A30 "^## " "$LOG/prof.log" | head -120 ;;
  tests)
    t tests "${TESTS_S:-280}" python3 -m pytest -q -n 8 -rfE -p no:cacheprovider -m gpu tests/test_backend_epilogue.py tests/test_stdlib_matmul.py tests/test_backend*.py tests/test_torch_ops_gpu.py
    tail -15 "$LOG/tests.log" ;;
  *) sed -n 2,10p "$0"; exit 2 ;;
esac
