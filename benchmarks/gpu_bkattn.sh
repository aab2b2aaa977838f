#!/bin/bash
# Session 19, branch bkattn: the backend's decode attention on the H200 (< 150 s in all; each part has its own limit,
# and every part writes its log to $OUT as it goes, so a part that runs out still reports what it did).
#   1. decodeattn vs masked_attention vs SDPA at Qwen2.5-7B heads (correctness, CUDA-graph replay, timing)  <= 25 s
#   2. the GPU tests of the backend's attention and static-cache decode (-s: they print eager nodes left)   <= 45 s
#   3. decode tok/s, 2 layers of Qwen2.5-7B, b1 and b16: eager, tilex, tilex-cg, inductor, inductor-ro      <= 78 s
OUT=${OUT:-/tmp/bkattn_out}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1   # a part cut by its timeout still leaves its lines (session 19: two empty logs)
cd "$(dirname "$0")/.." || exit 1
git log -1 --format='%H %s' > "$OUT/commit.txt"
timeout 25 python benchmarks/bench_backend_attention.py --json "$OUT/attention.json" > "$OUT/attention.log" 2>&1
echo "part 1 rc=$?" >> "$OUT/rc.txt"
# the static-cache generate tests first (their eager-node lines are item 2's evidence), then the kernel tests
timeout 45 python -m pytest -q -s -m gpu -p no:cacheprovider tests/test_backend_decode.py \
    tests/test_backend_decode_attention.py > "$OUT/gpu_tests.log" 2>&1
echo "part 2 rc=$?" >> "$OUT/rc.txt"
timeout 78 python benchmarks/bench_backend_decode.py --layers 2 --steps 20 --json "$OUT/decode.json" \
    > "$OUT/decode.log" 2>&1
echo "part 3 rc=$?" >> "$OUT/rc.txt"
cat "$OUT/rc.txt"
grep -h -E "PASS|FAIL|passed|failed|xfail|eager nodes|graph [0-9]|summary" "$OUT"/*.log | head -80
