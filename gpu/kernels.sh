#!/usr/bin/env bash
# The fused kernel on one GPU, in one command (issue 15):
#   configs   every row of the autotuner's lists alone, then the autotuner's own first call, against float64,
#             with each way the backward gets dQ (kernels.choose_backward: recompute, atomic)
#   tier      the GPU test tier: test_kernels.py and test_model.py with one config per kernel (conftest.py sets
#             GATED_ATTENTION_CONFIGS=first on a GPU), in parallel when pytest-xdist is installed
#   bench     python bench.py --kernels --gqa=4 -> results/bench_kernels.{json,md}: SDPA, SDPA + gate and the fused
#             kernel with each dQ mode; its first table gives the speed ratios the issue's targets are stated in
#   bench-cudnn  the same with cuDNN's SDPA kernels first (--sdpa_backend=cudnn), into the log folder: the fused
#             kernel against the fastest SDPA on Hopper, if cuDNN is that
#   autotune  the kernel sweep again with the autotuner on, in parallel (the atomic dQ's sweep included): how the
#             first-call failures of 2026-11-22 were seen (up to 4 minutes; last, so the rest is in hand whatever
#             it does)
# -> $OUT/kernels.tar.gz ($WORK/kernels/ with every step's output, and results/bench_kernels.*).
# TOY=1 bash gpu/kernels.sh: the same steps at toy size on a CPU (the interpreter), to test this script.
source "$(dirname "$0")/lib.sh"
start_log kernels
PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider)
PARALLEL=()
"$PYTHON" -c "import xdist" 2>/dev/null && PARALLEL=(-n 8)
CONFIGS=(-k "each_config or autotuned_first_call or choose_configs"); SELECT=(); BENCH=(--gqa=4)
SWEEP=(-k matches_float64); LIMIT=240; CUDNN=(--gqa=4)
if [ "$TOY" = 1 ]; then  # the interpreter: one quick test per pytest step, bench.py's smoke test
    CONFIGS=(-k choose_configs); SELECT=(-k choose_configs); SWEEP=(-k choose_configs); PARALLEL=(); LIMIT=60
    BENCH=(--gqa=2 --tiny --out_dir="$LOG/bench"); CUDNN=(--tiny)
fi

step configs "${PYTEST[@]}" test_kernels.py "${CONFIGS[@]}"
step tier "${PYTEST[@]}" "${PARALLEL[@]}" --durations=15 test_kernels.py test_model.py "${SELECT[@]}"
step bench "$PYTHON" bench.py --kernels "${BENCH[@]}"
step bench-cudnn "$PYTHON" bench.py --kernels "${CUDNN[@]}" --sdpa_backend=cudnn --out_dir="$LOG/bench-cudnn"
step autotune env GATED_ATTENTION_CONFIGS=autotune timeout "$LIMIT" \
    "${PYTEST[@]}" "${PARALLEL[@]}" test_kernels.py "${SWEEP[@]}"
pack kernels results/bench_kernels.json results/bench_kernels.md
exit $STATUS
