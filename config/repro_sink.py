# The study with the known levers of the attention sink pulled (python -m lab.repro train all
# --config=config/repro_sink.py), applied after config/repro.py. Gu et al. (ICLR 2025, "When Attention Sink
# Emerges in Language Models") found the share of sink heads (F-Attn > 0.3) grows with training tokens
# (60M model: under 1% at 50M tokens, ~4% at 500M, 18% at 5B), with the learning rate, and most steeply with
# weight decay (41% at weight decay 0.5). At 105M tokens config/repro.py's baseline grows only a faint sink
# (F-Attn 0.038 and 0.033 over layers, two seeds on one H100, 2026-11-25: results/study-h100-2026-11-25/), so
# this setting trains twice the tokens with five times the weight decay. Every variant gets the same levers, so
# the comparisons stay fair.
weight_decay = 0.5
max_iters = 3200
lr_decay_iters = 3200
