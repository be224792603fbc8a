"""The lab: the study tooling around the core (model.py, train.py, probe.py). Each tool runs from the repository's root
as a module, e.g. python -m lab.repro --help:

  repro     the study: train the variants over seeds, restore kept runs, evaluate, report
  analyze   what a trained checkpoint does: sinks, gate scores, massive activations, plots
  outlier   what the massive activation on BOS does: the prediction after BOS without it (GN's rescaling)
  evaluate  long-context and attention-sink evaluations of trained checkpoints
  report    the report's tables, plots and words; stats its statistics (decisions over seeds)
  variants  the named variants of the two papers and the flags that make each
  bench     speed: the kernels, a training step, a whole model
  gpu/      the shell scripts that run the study and the benchmarks on one GPU: bash lab/gpu/study.sh --help

Nothing in the core imports this package.
"""
