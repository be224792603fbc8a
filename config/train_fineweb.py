# GPT-2 small with the G1 gate on FineWeb-10B (modded-nanogpt's GPT-2-tokenized shards), one GPU or several.
# 0.5M tokens a step (16 x 1024 x 32); 5,000 steps = ~2.6B tokens, so fetch ~27 train shards of 100M tokens.
# Time and memory: not yet measured on a GPU.
#   python data/fineweb/prepare.py --shards 27
#   python train.py config/train_fineweb.py
#   torchrun --standalone --nproc_per_node=8 train.py config/train_fineweb.py
# The baseline: add --gate=none --out_dir=out-fineweb-nogate
out_dir = "out-fineweb"
dataset = "fineweb"
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 32
n_layer = 12
n_head = 12
n_embd = 768
learning_rate = 6e-4
min_lr = 6e-5
max_iters = 5000
lr_decay_iters = 5000
warmup_iters = 250
eval_interval = 250
eval_iters = 100
log_interval = 10
compile = True
loss_chunk = 0  # the loss over all the logits at once, as the GPU runs were measured (train.py's default chunks)
