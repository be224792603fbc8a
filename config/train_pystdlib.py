# The default run, written out: a small G1-gated GPT on the Python standard library's own source.
# A few minutes on a 2-core laptop CPU; data/pystdlib is prepared on first use.
#   python train.py config/train_pystdlib.py
#   python train.py config/train_pystdlib.py --gate=none --out_dir=out-nogate   # the baseline to compare with
out_dir = "out"
dataset = "pystdlib"
batch_size = 8
block_size = 128
n_layer = 4
n_head = 4
n_embd = 128
gate = "g1"
gate_granularity = "elementwise"
learning_rate = 2e-3
min_lr = 2e-4
max_iters = 300
lr_decay_iters = 300
warmup_iters = 30
eval_interval = 50
eval_iters = 20
