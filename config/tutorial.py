# The runs of TUTORIAL.md: train.py's laptop-CPU default (4 layers x 128 wide, 300 steps of 8 windows of 128
# tokens on Python's stdlib source), evaluated on more windows so that two runs' numbers can be compared.
#   python train.py config/tutorial.py --gate=none --out_dir=out/tutorial/baseline
# TUTORIAL_TOY=1 shrinks every run to seconds: tests/test_tutorial.py runs each command of the tutorial that way
# in CI, so the tutorial cannot fall out of step with the code. Numbers measured at toy size mean nothing.
import os

eval_interval = 50
eval_iters = 40  # 320 validation windows (41k tokens), the same every time
if os.environ.get("TUTORIAL_TOY"):
    n_layer, n_head, n_embd, block_size, batch_size = 2, 2, 64, 64, 4
    max_iters = lr_decay_iters = 12
    warmup_iters, eval_interval, eval_iters, log_interval = 2, 6, 2, 6
