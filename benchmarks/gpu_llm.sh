#!/usr/bin/env bash
# GPU call: the library tests that depend on argmax, then the LLM checks against transformers
# (Qwen2.5-14B and Llama-3-8B shapes, random weights) and the tilex side of the LLM benchmark.
# A stuck step dumps every thread's stack (SIGABRT + PYTHONFAULTHANDLER). Logs under ${OUT:-out}/.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
( timeout -s ABRT 200 python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_gather.py tests/test_stdlib_gpu.py \
    -k "argmax or sample or cupy or errors or graph or gather" > "$OUT/pytest_argmax.log" 2>&1; echo "rc=$?" >> "$OUT/pytest_argmax.log" ) &
timeout -s ABRT ${Q_S:-240} python3 examples/llm/check_hf.py --config qwen2.5-14b --json > "$OUT/check_qwen14b.json" 2> "$OUT/check_qwen14b.err"; echo "qwen rc=$?"
timeout -s ABRT ${L_S:-150} python3 examples/llm/check_hf.py --config llama3-8b --json > "$OUT/check_llama8b.json" 2> "$OUT/check_llama8b.err"; echo "llama rc=$?"
timeout -s ABRT ${B_S:-140} python3 examples/llm/bench.py --config qwen2.5-14b --no-hf --decode-batches 1,16 --decode-steps 32 --reps 3 \
    --json "$OUT/bench_qwen14b.json" > "$OUT/bench_llm.log" 2>&1; echo "bench rc=$?"
wait
tail -4 "$OUT/pytest_argmax.log"; for f in check_qwen14b check_llama8b; do tail -c 1500 "$OUT/$f.json"; echo; tail -3 "$OUT/$f.err"; done; tail -25 "$OUT/bench_llm.log"
