# The shared settings of the reproduction study (repro.py): every variant trains this model on the same
# data in the same order (same seed), for the same tokens, with the same learning-rate schedule; only the
# flags that variants.py names for each variant differ.
# 8 layers, 512 wide, 8 heads (~25M non-embedding parameters), T=512, 128 x 512 = 65,536 tokens per step,
# 1,600 steps = 105M tokens. Not yet timed on a GPU: aim for about 4 minutes a run on one H100
# (scale max_iters down, or n_layer/n_embd, if a run takes longer there).
dataset = "pysrc"  # python repro.py prepare: the .py files of the installed Python packages
n_layer = 8
n_head = 8
n_embd = 512
block_size = 512
batch_size = 64
gradient_accumulation_steps = 2
max_iters = 1600
lr_decay_iters = 1600
warmup_iters = 100
learning_rate = 3e-3
min_lr = 3e-4
weight_decay = 0.1
eval_interval = 200
eval_iters = 20
log_interval = 50
always_save_checkpoint = True
compile = True
seed = 1337
