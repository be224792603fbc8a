#!/usr/bin/env bash
# The fused kernel on one GPU, in commands that each end within 9 minutes (lib.sh's deadline):
#   bash gpu/kernels.sh           -> $OUT/kernels.tar.gz
#     bench       python bench.py --kernels --gqa=4 -> results/bench_kernels.{json,md}: SDPA, SDPA + gate and the
#                 fused kernel with each dQ mode; its first table gives the speed ratios the kernel's targets are
#                 stated in (first, so that the measurement comes back whatever the tests do)
#     tier        the GPU test tier: test_kernels.py and test_model.py with one config per kernel (conftest.py sets
#                 GATED_ATTENTION_CONFIGS=first on a GPU), in parallel when pytest-xdist is installed; each test's
#                 result on its own line, so a step stopped at its limit still names the failures it saw
#     bench-cudnn the same bench with cuDNN's SDPA kernels first (--sdpa_backend=cudnn), into the log folder: the
#                 fused kernel against the fastest SDPA on Hopper, if cuDNN is that
#   bash gpu/kernels.sh configs   -> $OUT/kernels-configs.tar.gz
#     configs     every row of the autotuner's lists alone, then the autotuner's own first call, against float64,
#                 with each way the backward gets dQ (kernels.choose_backward: recompute, atomic)
#     autotune    the kernel sweep again with the autotuner on, in parallel (the atomic dQ's sweep included): how the
#                 first-call failures of 2026-11-22 were seen
# The tarball holds $WORK/<name>/ with every step's output (and results/bench_kernels.*).
# Measured on one H100 (2026-11-25): bench.py --kernels --gqa=4 takes about 140 s; the tier ran about 60% of its
# tests in 170 s with 8 workers.
# TOY=1 bash gpu/kernels.sh [configs]: the same steps at toy size on a CPU (the interpreter), to test this script.
source "$(dirname "$0")/lib.sh"
PYTEST=("$PYTHON" -m pytest -p no:cacheprovider -rfE)
VERBOSE=(-v)  # one line per test as it ends (with xdist too)
PARALLEL=()
"$PYTHON" -c "import xdist" 2>/dev/null && PARALLEL=(-n 8)
CONFIGS=(-k "each_config or autotuned_first_call or choose_configs"); SELECT=(); BENCH=(--gqa=4)
SWEEP=(-k matches_float64); CUDNN=(--gqa=4)
if [ "$TOY" = 1 ]; then  # the interpreter: one quick test per pytest step, bench.py's smoke test
    CONFIGS=(-k choose_configs); SELECT=(-k choose_configs); SWEEP=(-k choose_configs); PARALLEL=()
    CUDNN=(--tiny)
fi

case "${1:-}" in
"")
    start_log kernels
    [ "$TOY" = 1 ] && BENCH=(--gqa=2 --tiny --out_dir="$LOG/bench")
    STEP_LIMIT=220 step bench "$PYTHON" bench.py --kernels "${BENCH[@]}"
    STEP_LIMIT=240 step tier "${PYTEST[@]}" "${VERBOSE[@]}" "${PARALLEL[@]}" --durations=15 test_kernels.py \
        test_model.py "${SELECT[@]}"
    step bench-cudnn "$PYTHON" bench.py --kernels "${CUDNN[@]}" --sdpa_backend=cudnn --out_dir="$LOG/bench-cudnn"
    pack kernels results/bench_kernels.json results/bench_kernels.md
    ;;
configs)
    start_log kernels-configs
    STEP_LIMIT=270 step configs "${PYTEST[@]}" "${VERBOSE[@]}" test_kernels.py "${CONFIGS[@]}"
    step autotune env GATED_ATTENTION_CONFIGS=autotune "${PYTEST[@]}" "${VERBOSE[@]}" "${PARALLEL[@]}" \
        test_kernels.py "${SWEEP[@]}"
    pack kernels-configs
    ;;
*)
    echo "usage: bash gpu/kernels.sh [configs]   (no argument: the kernel bench, the GPU test tier, the bench with" \
         "cuDNN first; configs: every kernel config alone and the autotuner's first call, then the autotuned sweep)"
    exit 2
    ;;
esac
exit $STATUS
