#!/usr/bin/env bash
# GPU call: sampling tests (GPU vs interpreter hash), the Qwen2.5-14B check with the transformers
# bf16 baseline, and a per-kernel profile of a 512-token prefill and one decode step.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
( timeout -s ABRT 150 python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/test_stdlib_gpu.py -k "sample or argmax" \
    > "$OUT/pytest_sample.log" 2>&1; echo "rc=$?" >> "$OUT/pytest_sample.log" ) &
timeout -s ABRT 200 python3 examples/llm/check_hf.py --config qwen2.5-14b --json > "$OUT/check_qwen14b.json" 2> "$OUT/check_qwen14b.err"; echo "qwen rc=$?"
IDS=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(150000)) for _ in range(512)))")
timeout -s ABRT 200 python3 examples/llm/run.py --config qwen2.5-14b --random-weights --prompt-ids "$IDS" \
    --max-new-tokens 4 --no-eos --profile > "$OUT/profile_qwen14b.txt" 2>&1; echo "profile rc=$?"
wait
tail -3 "$OUT/pytest_sample.log"; python3 -c "
import json; d = json.load(open('$OUT/check_qwen14b.json')); print({k: v for k, v in d.items() if 'err' in k or 'greedy_match' in k or k == 'pass'})"
tail -3 "$OUT/check_qwen14b.err"; grep -v "^\[0\]" "$OUT/profile_qwen14b.txt" | tail -60
