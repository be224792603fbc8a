#!/usr/bin/env bash
# The fused Triton kernel on one GPU: its benchmark and its GPU test tier. The kernel is opt-in
# (attn_backend="triton"; the default "auto" uses PyTorch's SDPA) until this tier passes on an H100.
#
# usage: bash lab/gpu/kernels.sh [configs]        (--help: this text)
#
#   bash lab/gpu/kernels.sh       -> results/bench_kernels.{json,md}, $WORK/kernels/, $OUT/kernels.tar.gz
#     bench       python -m lab.bench --kernels --gqa=4 -> results/bench_kernels.{json,md}: SDPA, SDPA + gate and the
#                 fused kernel with each dQ mode; its first table gives the speed ratios the kernel's targets are
#                 stated in (first, so that the measurement is made whatever the tests do)
#     tier        the GPU test tier: tests/test_kernels.py and tests/test_model.py with one config per kernel
#                 (tests/conftest.py sets GATED_ATTENTION_CONFIGS=first on a GPU), in parallel when pytest-xdist is
#                 installed; each test's result on its own line, so a tier stopped early still names the failures
#                 it saw
#     bench-cudnn the same bench with cuDNN's SDPA kernels first (--sdpa_backend=cudnn), into $WORK/kernels/
#                 bench-cudnn/: the fused kernel against the fastest SDPA on Hopper, if cuDNN is that
#   bash lab/gpu/kernels.sh configs -> $WORK/kernels-configs/, $OUT/kernels-configs.tar.gz
#     configs     every row of the autotuner's lists alone, then the autotuner's own first call, against float64,
#                 with each way the backward gets dQ (kernels.choose_backward: recompute, atomic)
#     autotune    the kernel sweep again with the autotuner on, in parallel (the atomic dQ's sweep included): the
#                 sweep in which an H100 showed first-call failures (2026-11-22)
# Where the fused kernel cannot run (no Triton, or one older than kernels.MIN_TRITON), both commands refuse in one
# line (exit 2): every kernel test would skip, and the tier would look like a pass.
# Each part's output is in $WORK/<name>/<part>.txt, its exit code and seconds in $WORK/<name>/steps.tsv; the
# tarball holds that folder (and results/bench_kernels.*). Run again, the command skips the parts that succeeded
# (FRESH=1 runs them all). With BUDGET_S set (lab/gpu/lib.sh), the bench and the tier each stop after their share of it;
# a bench stopped part-way leaves the shapes it measured in results/bench_kernels.partial.{json,md}, and a tier
# stopped part-way each test it ran, with its seconds, in $WORK/kernels/tier-durations.tsv.
# Measured on one H200 (results/kernels-h200-2026-11-26/steps.tsv, tier.txt): lab.bench --kernels --gqa=4 took
# 173 s; the tier, stopped at 220 s, ran 447 of its 458 tests with 8 workers.
# While the study's job (lab/gpu/study.sh) runs under the same $WORK, the command refuses to start (one line, exit
# 75): its timings and tests would share the GPU with the training. BESIDE_STUDY=1 runs it anyway.
# TOY=1 bash lab/gpu/kernels.sh [configs]: the same parts at toy size on a CPU (Triton's interpreter), to test this
# script.
source "$(dirname "$0")/lib.sh"
one_part "$@"
PYTEST=("$PYTHON" -m pytest -p no:cacheprovider -rfE)
VERBOSE=(-v)  # one line per test as it ends (with xdist too)
PARALLEL=()
"$PYTHON" -c "import xdist" 2>/dev/null && PARALLEL=(-n 8)
CONFIGS=(-k "each_config or autotuned_first_call or choose_configs"); SELECT=(); BENCH=(--gqa=4)
SWEEP=(-k matches_float64); CUDNN=(--gqa=4)
if [ "$TOY" = 1 ]; then  # the interpreter: one quick test per pytest step, lab.bench's smoke test
    CONFIGS=(-k choose_configs); SELECT=(-k choose_configs); SWEEP=(-k choose_configs); PARALLEL=()
    CUDNN=(--tiny)
fi

# Where the fused kernel cannot run (no Triton, or one too old: kernels.triton_unavailable), every kernel test would
# skip and the tier would look like a pass: one line instead, exit 2. A Python that cannot even answer runs the parts,
# which then fail and are recorded as such.
case "${1:-}" in
""|configs)
    WHY=$("$PYTHON" -c "import os, torch; torch.cuda.is_available() or os.environ.setdefault('TRITON_INTERPRET', '1')
import kernels; print(kernels.triton_unavailable() or '')" 2>/dev/null) || WHY=""
    [ -n "$WHY" ] && { echo "error: $WHY: lab/gpu/kernels.sh tests and times the fused kernel" >&2; exit 2; }
    ;;
esac

case "${1:-}" in
"")
    start_log kernels results/bench_kernels{,.partial}.{json,md}
    [ "$TOY" = 1 ] && BENCH=(--gqa=2 --tiny --out_dir="$LOG/bench")
    SHARE=41 step bench "$PYTHON" -m lab.bench --kernels "${BENCH[@]}"
    done_before tier || rm -f "$LOG/tier-durations.tsv"  # each test's seconds as it ends (tests/conftest.py)
    TEST_DURATIONS="$LOG/tier-durations.tsv" SHARE=44 step tier "${PYTEST[@]}" "${VERBOSE[@]}" "${PARALLEL[@]}" \
        --durations=15 tests/test_kernels.py tests/test_model.py "${SELECT[@]}"
    step bench-cudnn "$PYTHON" -m lab.bench --kernels "${CUDNN[@]}" --sdpa_backend=cudnn --out_dir="$LOG/bench-cudnn"
    pack
    ;;
configs)
    start_log kernels-configs
    SHARE=50 step configs "${PYTEST[@]}" "${VERBOSE[@]}" tests/test_kernels.py "${CONFIGS[@]}"
    step autotune env GATED_ATTENTION_CONFIGS=autotune "${PYTEST[@]}" "${VERBOSE[@]}" "${PARALLEL[@]}" \
        tests/test_kernels.py "${SWEEP[@]}"
    pack kernels-configs
    ;;
*)
    usage
    exit 2
    ;;
esac
exit $STATUS
