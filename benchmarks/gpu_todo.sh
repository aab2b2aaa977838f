#!/usr/bin/env bash
# The GPU work still open after 2026-11-29 (issues 3-5), as device calls of < 10 minutes each:
#   OUT=out bash benchmarks/gpu_todo.sh llm       # LLM engine GPU tests (small configs) vs transformers, then the 8B shape
#   OUT=out bash benchmarks/gpu_todo.sh qwen14b   # check_hf.py (128-token prefill + 32 decode steps) and bench.py, Qwen2.5-14B shape
#   OUT=out bash benchmarks/gpu_todo.sh stdlib    # every library GPU test, then every bench_stdlib row
#   OUT=out bash benchmarks/gpu_todo.sh profile   # ncu on the kernels that miss their targets
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-/tmp/tilex-cache}
case "${1:-}" in
  llm)
    timeout 420 python3 -m pytest -q -x -s -m "gpu and not slow" tests/test_llm_gpu.py 2>&1 | tee "$OUT/pytest_llm.log" | tail -30
    timeout 150 python3 examples/llm/check_hf.py --config llama3-8b --json 2>&1 | tee "$OUT/check_llama8b.json" | tail -5 ;;
  qwen14b)
    timeout 300 python3 examples/llm/check_hf.py --config qwen2.5-14b --json 2>&1 | tee "$OUT/check_qwen14b.json" | tail -5
    timeout 280 python3 examples/llm/bench.py --config qwen2.5-14b --json "$OUT/bench_qwen14b.json" 2>&1 | tee "$OUT/bench_llm.log" | tail -25 ;;
  stdlib)
    timeout 330 python3 -m pytest -q -m gpu tests/test_stdlib_gpu.py 2>&1 | tee "$OUT/pytest_stdlib.log" | tail -8
    timeout 250 python3 benchmarks/bench_stdlib.py --json "$OUT/bench_stdlib.json" 2>&1 | tee "$OUT/bench_stdlib.log" | tail -20 ;;
  profile)
    cat > /tmp/prof.py <<'PY'
import torch
from tilex.stdlib import attention_prefill, linear
x, w = torch.randn(4096, 5120, device="cuda", dtype=torch.bfloat16), torch.randn(5120, 5120, device="cuda", dtype=torch.bfloat16)
q = torch.randn(4, 40, 4096, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    linear(x, w); linear(x[:1], torch.randn(13824, 5120, device="cuda", dtype=torch.bfloat16)); attention_prefill(q, k, k)
torch.cuda.synchronize()
PY
    timeout 500 ncu --clock-control none --set detailed -k regex:"linear|attention" -c 6 -o "$OUT/prof" python3 /tmp/prof.py 2>&1 | tail -5
    ncu --import "$OUT/prof.ncu-rep" --page details 2>/dev/null | grep -E "linear|attention|Duration|Throughput|Registers|Achieved Occupancy|Warp Cycles" | head -80 ;;
  *) echo "usage: $0 llm|qwen14b|stdlib|profile"; exit 2 ;;
esac
