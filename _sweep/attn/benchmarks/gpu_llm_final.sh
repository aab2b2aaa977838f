#!/usr/bin/env bash
# GPU call: the LLM GPU tests (small configs vs transformers, f32 and bf16, graph vs eager, CLI)
# in the background, then the Qwen2.5-14B check, the LLM
# benchmark against transformers eager, and the Llama-3-8B checks (bf16, and the engine in f32).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
( timeout -s ABRT 240 python3 -m pytest -q -rf -p no:cacheprovider -m "gpu and not slow" tests/test_llm_gpu.py \
    > "$OUT/pytest_final.log" 2>&1; echo "rc=$?" >> "$OUT/pytest_final.log" ) &
timeout -s ABRT 100 python3 examples/llm/check_hf.py --config qwen2.5-14b --json > "$OUT/check_qwen14b.json" 2> "$OUT/check_qwen14b.err"; echo "qwen rc=$?"
wait  # the tests share the GPU: let them finish before timing
timeout -s ABRT 200 python3 examples/llm/bench.py --config qwen2.5-14b --reps 5 --json "$OUT/bench_qwen14b.json" > "$OUT/bench_llm.log" 2>&1; echo "bench rc=$?"
timeout -s ABRT 60 python3 examples/llm/check_hf.py --config llama3-8b --json > "$OUT/check_llama8b.json" 2> "$OUT/check_llama8b.err"; echo "llama rc=$?"
timeout -s ABRT 90 python3 examples/llm/check_hf.py --config llama3-8b --dtype f32 --json > "$OUT/check_llama8b_f32.json" 2> "$OUT/check_llama8b_f32.err"; echo "llama f32 rc=$?"
tail -6 "$OUT/pytest_final.log"
for f in check_qwen14b check_llama8b check_llama8b_f32; do python3 -c "
import json; d = json.load(open('$OUT/$f.json')); print('$f', {k: v for k, v in d.items() if 'err' in k or 'greedy_match' in k or k in ('pass', 'bound', 'mlp', 'divergence_step')})" || tail -3 "$OUT/$f.err"; done
grep -E "prefill|decode|peak|rc=" "$OUT/bench_llm.log" | head -20
