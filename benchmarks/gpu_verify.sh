#!/usr/bin/env bash
# GPU call: every GPU-marked test, the LLM engine's small configs against transformers in parallel
# (with a stack dump of every thread if one test runs past 150 s). Logs under ${OUT:-out}/.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
( timeout "${LLM_S:-330}" python3 -m pytest -x -s -q -p no:cacheprovider -o faulthandler_timeout=150 \
    -m "gpu and not slow" tests/test_llm_gpu.py ${LLM_K:+-k "$LLM_K"} > "$OUT/pytest_llm.log" 2>&1
  echo "llm rc=$?" >> "$OUT/pytest_llm.log" ) &
timeout "${TESTS_S:-500}" python3 -m pytest -q -p no:cacheprovider -m gpu tests --ignore=tests/test_llm_gpu.py \
    --durations=20 -o faulthandler_timeout=240 ${TESTS_K:+-k "$TESTS_K"} > "$OUT/pytest_gpu.log" 2>&1
echo "tests rc=$?" >> "$OUT/pytest_gpu.log"
wait
tail -30 "$OUT/pytest_gpu.log"; echo ----; grep -E "^\{|passed|failed|error|rc=|Timeout|File " "$OUT/pytest_llm.log" | tail -40
