# The shared settings of the reproduction study (python -m lab.repro): every variant trains this model on the
# same data for the same tokens, with the same learning-rate schedule; only the flags that lab/variants.py names
# for each variant differ, and the seed (python -m lab.repro train ... --seeds=N: 1337, 1338, ...), which changes
# the initialisation and the data order.
# 8 layers, 512 wide, 8 heads (~25M non-embedding parameters), T=512, 128 x 512 = 65,536 tokens per step,
# 1,600 steps = 105M tokens: 301-332 s a run on one H100 with two runs side by side (2026-11-25,
# results/study-h100-2026-11-25/commands.jsonl).
# As the papers' models (Qwen3's architecture): QK-norm, and a beginning-of-sequence token at position 0 of
# every window (bos, train.py's default), on which the attention sink forms.
dataset = "pysrc"  # python -m lab.repro prepare: the .py files of the installed Python packages
n_layer = 8
n_head = 8
n_embd = 512
block_size = 512
qk_norm = True
bos = True
batch_size = 64
gradient_accumulation_steps = 2
max_iters = 1600
lr_decay_iters = 1600
warmup_iters = 100
learning_rate = 3e-3
min_lr = 3e-4
weight_decay = 0.1
eval_interval = 200
eval_iters = 32  # 32 x 64 = 2,048 validation windows (1.05M tokens), the same for every run and every eval
log_interval = 50
always_save_checkpoint = True
compile = True
loss_chunk = 0  # the loss over all the logits at once, as the GPU runs were measured (train.py's default chunks)
seed = 1337
