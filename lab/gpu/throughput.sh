#!/usr/bin/env bash
# Training throughput on one GPU: ms per step, tokens/s, MFU and peak memory, and the check that the training
# step never makes the host wait for the GPU.
#
# usage: bash lab/gpu/throughput.sh [batch|modes|align]        (--help: this text)
#
#   bash lab/gpu/throughput.sh          -> results/bench_train.{json,md}, $WORK/throughput/, $OUT/throughput.tar.gz
#     prepare the study corpus (python -m lab.repro prepare), when data/pysrc/ does not hold it yet
#     sync    the training step never makes the host wait for the GPU: tests/test_train.py's sync-debug-mode test
#             (bf16 and fp16) and the optimizer-step tests
#     bench   python -m lab.bench --train --compile=both -> results/bench_train.{json,md}: ms/step, tokens/s, MFU
#             and peak memory of GPT-2 small (B=16, T=1024, bf16, train.py's own optimizer step) with no gate,
#             G1 elementwise and G1 headwise, on the fused kernel and on PyTorch attention
#     train   train.py with the same model and batch on the study corpus, 120 steps, in $WORK/throughput-run/:
#             the tokens/s and MFU its log reports, to hold beside lab.bench's
#   bash lab/gpu/throughput.sh batch    -> $WORK/throughput-batch/, $OUT/throughput-batch.tar.gz
#     G1 elementwise on the fused kernel, compiled, at other micro-batch sizes and lengths than B=16, T=1024:
#     (B, T) = (8, 1024), (32, 1024), (8, 2048), each into $WORK/throughput-batch/<B>x<T>/
#   bash lab/gpu/throughput.sh modes    -> $WORK/throughput-modes/, $OUT/throughput-modes.tar.gz
#     one compiled lab.bench --train per torch.compile mode (reduce-overhead: CUDA graphs; max-autotune without
#     them), each into its own folder, beside the default mode's results/bench_train.*; then the default mode
#     again with the fused kernel's atomic dQ backward (GATED_ATTENTION_BACKWARD=atomic), into atomic-dq/, and
#     G1 elementwise on the fused kernel with its loss in chunks of 4096 rows of logits (loss_chunk), into
#     loss-chunk/;
#     then the three variants on PyTorch attention with cuDNN's SDPA kernels first (sdpa_backend=cudnn), into
#     sdpa-cudnn/
#   bash lab/gpu/throughput.sh align    -> $WORK/throughput-align/, $OUT/throughput-align.tar.gz
#     what padding c_attn's output rows is worth: GPT-2 small's 12 heads make a headwise gate's c_attn 3 x 768 + 12 =
#     2,316 wide, which puts every other token's q, k and v off 16-byte alignment; model.py pads the rows to a
#     multiple of 64 on a GPU (kernels.AlignedLinear: 2,368, the same parameters, results up to rounding). Compiled,
#     G1 headwise padded (lab.bench --pad_c_attn=64) on the fused kernel, then on PyTorch attention, into
#     compiled/padded/; then G1 headwise and the baseline unpadded (--pad_c_attn=1), PyTorch attention first, into
#     compiled/unpadded/; then the same two without torch.compile (whose Inductor may pad its own buffers), into
#     eager/; each row with 5 steps profiled once all the part's rows are timed (lab.bench --profile=5, 2 at toy size:
#     where the time goes, op by op, in the json's top_ops and in profile/; a process can stay slower on the host
#     after a profile, so no timing follows one)
# A lab.bench step stopped part-way leaves what it measured in its bench_*.partial.{json,md} (marked incomplete).
# Each part's output is in $WORK/<name>/<part>.txt, its exit code and seconds in $WORK/<name>/steps.tsv; the
# tarball holds that folder (and the run's log.jsonl, results/bench_train.*; not the run's checkpoints). Run
# again, the command skips the parts that succeeded (FRESH=1 runs them all).
# While the study's job (lab/gpu/study.sh) runs under the same $WORK, the command refuses to start (one line, exit
# 75): its timings and tests would share the GPU with the training. BESIDE_STUDY=1 runs it anyway.
# TOY=1 DATA_DIR=<a prepared folder>: the same parts at toy size on a CPU, to test this script.
source "$(dirname "$0")/lib.sh"
one_part "$@"
PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider)
case "${1:-}" in
    "")
        if [ "$TOY" = 1 ] && [ -z "${DATA_DIR:-}" ]; then  # the toy training run's data: say how to make it
            echo "error: TOY=1 needs DATA_DIR, a folder holding a prepared toy dataset: make one with python3" \
                 "data/textdir/prepare.py --src lab --name toy --out_dir /tmp/toyds, then DATA_DIR=/tmp/toyds" >&2
            exit 2
        fi
        RUN=$WORK/throughput-run  # apart from $LOG: its checkpoints are not packed, only its log
        start_log throughput results/bench_train{,.partial}.{json,md} "$RUN/log.jsonl"
        BENCH=(--compile=both)
        TRAIN=(--dataset=pysrc --max_iters=120 --eval_interval=100 --eval_iters=4 --log_interval=20 --compile=True)
        if [ "$TOY" = 1 ]; then
            BENCH=(--tiny --match_params --out_dir="$LOG/bench")  # the smoke test checks the param-matched models too
            TRAIN=(--dataset=toy --data_dir="$DATA_DIR"
                   --n_layer=2 --n_head=2 --n_embd=64 --block_size=32 --batch_size=4 --max_iters=6 --eval_interval=5
                   --eval_iters=1 --log_interval=2 --compile=False --bos=False)
        else
            compgen -G "data/pysrc/*_val_*.bin" > /dev/null || step prepare "$PYTHON" -m lab.repro prepare
        fi
        step sync "${PYTEST[@]}" tests/test_train.py -k "on_a_gpu or optimizer_step"
        step bench "$PYTHON" -m lab.bench --train "${BENCH[@]}"
        done_before train || rm -rf "$RUN"  # train.py starts no run over an old one
        step train "$PYTHON" train.py config/train_owt_gpt2small.py --batch_size=16 --gradient_accumulation_steps=1 \
            --out_dir="$RUN" "${TRAIN[@]}"
        pack
        ;;
    batch)
        start_log throughput-batch
        EXTRA=(--compile=true --variants=g1_elementwise --backends=triton)
        SHAPES="8x1024 32x1024 8x2048"
        [ "$TOY" = 1 ] && EXTRA=(--tiny --variants=g1_elementwise --backends=triton)  # B/8, T/32 (lab.bench --tiny)
        for shape in $SHAPES; do
            step "bench-$shape" "$PYTHON" -m lab.bench --train "${EXTRA[@]}" --batch_size="${shape%x*}" \
                --block_size="${shape#*x}" --out_dir="$LOG/$shape"
        done
        pack throughput-batch
        ;;
    modes)
        start_log throughput-modes
        EXTRA=(--compile=true); CHUNK=4096  # 4 chunks of B*T = 16k rows
        [ "$TOY" = 1 ] && EXTRA=(--tiny) && CHUNK=16  # the smoke test never compiles: this checks the script and keys
        for mode in reduce-overhead max-autotune-no-cudagraphs; do
            step "bench-$mode" "$PYTHON" -m lab.bench --train "${EXTRA[@]}" --compile_mode="$mode" \
                --out_dir="$LOG/$mode"
        done
        step bench-atomic-dq env GATED_ATTENTION_BACKWARD=atomic "$PYTHON" -m lab.bench --train "${EXTRA[@]}" \
            --backends=triton --out_dir="$LOG/atomic-dq"  # the torch backend has no dQ mode
        step bench-loss-chunk "$PYTHON" -m lab.bench --train "${EXTRA[@]}" --variants=g1_elementwise --backends=triton \
            --loss_chunk="$CHUNK" --out_dir="$LOG/loss-chunk"
        step bench-sdpa-cudnn "$PYTHON" -m lab.bench --train "${EXTRA[@]}" --backends=torch --sdpa_backend=cudnn \
            --out_dir="$LOG/sdpa-cudnn"  # the torch attention with cuDNN's SDPA kernels first
        pack throughput-modes
        ;;
    align)
        start_log throughput-align
        PROFILE=5; EXTRA=(); [ "$TOY" = 1 ] && { PROFILE=2; EXTRA=(--tiny); }  # toy: 2 heads of 32, no compile
        for mode in compiled eager; do  # compiled first: what the goal is about, and kept if the command is stopped
            COMPILE=true; [ "$mode" = eager ] && COMPILE=false
            step "$mode-padded" "$PYTHON" -m lab.bench --train "${EXTRA[@]}" --compile=$COMPILE --profile=$PROFILE \
                --variants=g1_headwise --backends=triton,torch --pad_c_attn=64 --out_dir="$LOG/$mode/padded"
            step "$mode-unpadded" "$PYTHON" -m lab.bench --train "${EXTRA[@]}" --compile=$COMPILE --profile=$PROFILE \
                --variants=g1_headwise,baseline --backends=torch,triton --pad_c_attn=1 --out_dir="$LOG/$mode/unpadded"
        done
        pack throughput-align
        ;;
    *)
        usage
        exit 2
        ;;
esac
exit $STATUS
