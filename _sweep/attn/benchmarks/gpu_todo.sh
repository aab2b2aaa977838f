#!/usr/bin/env bash
# GPU work as device calls of < 10 minutes each (tests, benchmarks, LLM checks, profiles, tuning sweeps).
# Run from the repository root; logs and JSON under ${OUT:-out}/.
#   OUT=out bash benchmarks/gpu_todo.sh tests     # every GPU test but the LLM ones, stack dumps on a hang
#   OUT=out bash benchmarks/gpu_todo.sh bench     # decode GEMM paths, attention, library (argmax/sample rows), matmul
#   OUT=out bash benchmarks/gpu_todo.sh llm       # LLM GPU tests, Qwen2.5-14B check, LLM benchmark vs transformers, 8B checks
#   OUT=out bash benchmarks/gpu_todo.sh profile   # ncu on the kernels that miss their targets (prof_next.py)
#   OUT=out bash benchmarks/gpu_todo.sh profile-compile  # ncu of tilex vs torch.compile where compile is faster
#   OUT=out bash benchmarks/gpu_todo.sh tune      # `tilex tune` over the memory-bound library kernels' tile parameters
#   OUT=out bash benchmarks/gpu_todo.sh fuse      # the decode fusions' GPU tests, then decode with and without them
#   OUT=out bash benchmarks/gpu_todo.sh next      # A/B of the prepared row-kernel branches, then profile-compile
#   OUT=out bash benchmarks/gpu_todo.sh ab-rows   # prepared library branches against this tree (bench_stdlib rows)
#                                                 # (first, here: bash benchmarks/ab_branches.sh prepare BRANCH...;
#                                                 #  carry .whl and .ab-patches)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
case "${1:-}" in
  tests)  # the LLM GPU tests run in `llm`
    timeout -s ABRT 540 python3 -m pytest -q -rf -p no:cacheprovider -m "gpu and not slow" tests --durations=15 \
        --ignore=tests/test_llm_gpu.py -o faulthandler_timeout=200 > "$OUT/pytest_gpu.log" 2>&1
    echo "rc=$?" >> "$OUT/pytest_gpu.log"
    tail -25 "$OUT/pytest_gpu.log" ;;
  bench)
    timeout 120 python3 benchmarks/bench_decode_paths.py --json "$OUT/decode_paths.json" 2>&1 | tee "$OUT/decode_paths.log"
    timeout 100 python3 benchmarks/bench_attention.py --quick --no-sweep --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" | tail -8
    timeout 200 python3 benchmarks/bench_stdlib.py --json "$OUT/bench_stdlib.json" 2>&1 | tee "$OUT/bench_stdlib.log" | tail -20
    timeout 140 python3 benchmarks/bench_matmul.py --json "$OUT/bench_matmul.json" 2>&1 | tee "$OUT/bench_matmul.log" | tail -13 ;;
  llm)
    OUT=$OUT bash benchmarks/gpu_llm_final.sh ;;
  profile)  # ncu of the kernels that miss their targets (benchmarks/prof_next.py: one launch each after warm-up)
    timeout 500 ncu --clock-control none --set detailed -k regex:"attention|layer_norm|rope|softmax" -c 6 \
        -o "$OUT/prof" python3 benchmarks/prof_next.py 2>&1 | tail -3
    ncu --import "$OUT/prof.ncu-rep" --page details 2>/dev/null | grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy" | head -80
    ncu --import "$OUT/prof.ncu-rep" --page raw --csv --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio 2>/dev/null | cut -c1-400 | head -12 ;;
  profile-compile)  # ncu of tilex and torch.compile side by side on the rows where compile is faster
                    # (benchmarks/prof_vs_compile.py: bench_stdlib's inputs, one launch each after warm-up)
    timeout 500 ncu --profile-from-start off --clock-control none --set detailed \
        -o "$OUT/prof_compile" python3 benchmarks/prof_vs_compile.py 2>&1 | tail -3
    ncu --import "$OUT/prof_compile.ncu-rep" --page details 2>/dev/null | grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Block Size|Grid Size|Executed Ipc A|Warp Cycles Per Issued" | head -120
    ncu --import "$OUT/prof_compile.ncu-rep" --page raw --csv --metrics smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio 2>/dev/null | cut -c1-400 | head -20 ;;
  tune)  # bf16, the bench_stdlib.py shapes; tables in $OUT/tune_*.log. MIN_BLOCKS = 2048 / threads: full occupancy
    t() { local name=$1; shift; timeout 150 tilex tune --no-store --rep 50 --reference first "$@" \
            > "$OUT/tune_$name.log" 2>&1; echo "== $name rc=$?"; tail -${TAIL:-14} "$OUT/tune_$name.log"; }
    # the row kernels (rms_norm, fused_add_rms_norm, layer_norm, softmax) have persistent grids whose PROGRAMS follows
    # MIN_BLOCKS: benchmarks/sweep_rows.py sweeps them (tilex tune would search the two independently)
    timeout 330 python3 benchmarks/sweep_rows.py --json "$OUT/sweep_rows.json" > "$OUT/tune_rows.log" 2>&1; echo "== rows rc=$?"
    TAIL=7 t silu stdlib_kernels/silu_and_mul.tile -s M=4096,D=14336 -D ROWS=1 --space BLOCK=1024,2048 -D WARPS=4 --space MIN_BLOCKS=0,12,16
    TAIL=6 t silu8 stdlib_kernels/silu_and_mul.tile -s M=4096,D=14336 -D ROWS=1 -D BLOCK=2048 -D WARPS=8 --space MIN_BLOCKS=0,6,8
    TAIL=6 t gelu stdlib_kernels/gelu_and_mul.tile -s M=4096,D=14336 -D ROWS=1 -D TANH=True -D BLOCK=2048 -D WARPS=8 --space MIN_BLOCKS=0,6,8
    # rope: cos/sin are evaluated once per thread for all the heads it handles, so fewer warps per token do less of it
    TAIL=12 t rope stdlib_kernels/rope.tile -k rope -s S=16384,HQ=32,HK=8,HALF=64 -D HALFB=64 --arg nlog2=-0.8304820237 \
        -D HB=8 -D WARPS=2 --space MIN_BLOCKS=0,16,20,24,32
    TAIL=8 t rope_inplace stdlib_kernels/rope.tile -k rope_inplace -s S=16384,HQ=32,HK=8,HALF=64 -D HALFB=64 --arg nlog2=-0.8304820237 \
        --space HB=8,16 --space WARPS=2,4 ;;
  fuse)  # decode-fuse: kernel tests, LLM tests vs transformers, then tilex-only decode A/B (same weights, one process each)
    timeout 240 python3 -m pytest -q -rf -p no:cacheprovider -m "gpu and not slow" tests/test_stdlib_gpu.py tests/test_llm_gpu.py \
        -k "qkv_rope_cache or add_rms_norm or vs_transformers or graph" -o faulthandler_timeout=200 > "$OUT/pytest_fuse.log" 2>&1
    echo "rc=$?" >> "$OUT/pytest_fuse.log"; tail -6 "$OUT/pytest_fuse.log"
    P=$(python3 -c "print(','.join(str(i) for i in range(1, 129)))")
    for f in "" "--no-fuse-qkv --no-fuse-norm"; do
      timeout 150 python3 examples/llm/bench.py --config qwen2.5-14b --no-hf --prefill 1x512 --decode-batches 1,16 $f \
          > "$OUT/bench_fuse${f// /}.log" 2>&1; echo "== fusions off: '$f' rc=$?"; grep -E "prefill|decode" "$OUT/bench_fuse${f// /}.log" | head -6
    done
    timeout 120 python3 examples/llm/run.py --config qwen2.5-14b --random-weights --prompt-ids "$P" --max-new-tokens 4 --profile \
        > "$OUT/run_profile_fuse.log" 2>&1; grep -A14 "^decode:" "$OUT/run_profile_fuse.log" ;;
  next)  # a session's first call (~9 min): the prepared row-kernel branches (.ab-patches, here first:
         # bash benchmarks/ab_branches.sh prepare BRANCH...; AB_ONLY names them) against this tree, then ncu of
         # tilex vs torch.compile. Write each branch's prediction into RESULTS.md before the call.
    AB_ONLY="${AB_ONLY:-}" AB_KERNELS=softmax,rms_norm,fused_add_rms_norm,layer_norm \
      OUT=$OUT bash benchmarks/gpu_todo.sh ab-rows
    OUT=$OUT bash benchmarks/gpu_todo.sh profile-compile ;;
  ab-attn)  # prepared attention branches (AB_ONLY, default prefill-tma-overlap: 373.9 vs main's 464.9 in session 15):
            # each branch's attention GPU tests first (a wrong ring order shows as wrong values, a phase bug as the
            # timeout), then prefill
    export AB_ROOT=$PWD
    AB_ONLY="${AB_ONLY:-prefill-tma-overlap}" AB_TIMEOUT=330 AB_TAIL=5 bash benchmarks/ab_branches.sh run \
      "if [ \"\$PWD\" != \"\$AB_ROOT\" ]; then timeout -s ABRT 220 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_stdlib_attention_gpu.py -o faulthandler_timeout=150 2>&1 | tail -2; fi; python3 benchmarks/bench_attention.py --quick --no-sweep --only prefill 2>&1 | grep -E 'tilex|flash  '" ;;
  ab-rows)  # prepared library branches against this tree (here first: bash benchmarks/ab_branches.sh prepare BRANCH...;
            # carry .whl and .ab-patches); each branch's prediction is in its commit message and RESULTS.md
    AB_TIMEOUT=150 AB_TAIL=22 bash benchmarks/ab_branches.sh run \
      "python3 benchmarks/bench_stdlib.py --no-compile --only '${AB_KERNELS:-softmax,rms_norm,fused_add_rms_norm,layer_norm,rope,silu_and_mul,gelu_and_mul(tanh),embedding,kv_cache_write}' 2>&1 | grep -E '^\| [a-z]'; python3 benchmarks/bench_matmul.py --quick 2>&1 | grep -E '^\| [0-9a-z]'" ;;
  *) echo "usage: $0 tests|bench|llm|profile|profile-compile|tune|fuse|next|ab-rows"; exit 2 ;;
esac
