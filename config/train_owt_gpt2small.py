# GPT-2 small (12 layers, 12 heads, 768 wide: ~124M parameters plus the gate's 7M) with the G1 gate on
# OpenWebText, on one GPU. About 0.5M tokens a step: 16 sequences x 1024 tokens x 32 micro-steps = 524,288;
# 20,000 steps = ~10.5B tokens. Time and memory: not yet measured on a GPU (if 16 x 1024 does not fit,
# halve batch_size and double gradient_accumulation_steps and eval_iters: the same run).
#   python data/openwebtext/prepare.py
#   python train.py config/train_owt_gpt2small.py
#   torchrun --standalone --nproc_per_node=8 train.py config/train_owt_gpt2small.py   # 8 GPUs, 4 micro-steps each
# The baseline: add --gate=none --out_dir=out-owt-gpt2small-nogate
out_dir = "out-owt-gpt2small"
dataset = "openwebtext"
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 32
n_layer = 12
n_head = 12
n_embd = 768
learning_rate = 6e-4
min_lr = 6e-5
max_iters = 20000
lr_decay_iters = 20000
warmup_iters = 700
eval_interval = 500
eval_iters = 100
log_interval = 10
compile = True
loss_chunk = 0  # the loss over all the logits at once, as the GPU runs were measured (train.py's default chunks)
