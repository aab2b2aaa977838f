#!/usr/bin/env bash
# One GPU session: the GPU-marked tests, every example through
# `tilex run --backend cuda` at odd sizes, compute-sanitizer memcheck, and the example
# benchmark. Logs go to ${OUT:-out}/. Run from the repository root on a machine with a GPU.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
nvidia-smi -L
git rev-parse --short HEAD 2>/dev/null || true
python3 -m pytest -q -m gpu tests 2>&1 | tee "$OUT/pytest.log" | tail -15
for spec in "vector_add M=0,N=1000" "vector_add N=1" "rmsnorm M=1,N=1000" "rmsnorm M=3,N=5120" \
            "swiglu M=1,N=1000" "swiglu M=5,N=4097" "softmax M=1,N=1" "softmax M=7,N=3000" \
            "matmul M=1,N=1000,K=70" "matmul M=37,N=45,K=70"; do
  set -- $spec
  shape=$(echo "$2" | sed 's/M=0,//')
  python3 -m tilex run "examples/$1.tile" --shape "$shape" --backend cuda --json 2>>"$OUT/run.err" | tee -a "$OUT/run.jsonl" \
    | python3 -c "import json,sys; d=json.load(sys.stdin); print('$1', '$shape', 'ok' if d['ok'] else 'FAIL', {k: v.get('rel_err') for k, v in d.get('outputs', {}).items()})"
done
compute-sanitizer --tool memcheck python3 benchmarks/sanitize_examples.py 2>&1 | tee "$OUT/sanitizer.log" | tail -3
python3 benchmarks/bench_examples.py --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
