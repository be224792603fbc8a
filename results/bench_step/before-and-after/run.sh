#!/bin/bash
# The default run and the sink lab, before the lean CPU step (commit 2d8468a, checked out with
#   git worktree add /tmp/old 2d8468a   and the prepared data/pystdlib and data/bigram_backcopy copied in)
# and after it (this checkout, at /work/main), alternating, three rounds, on one idle 2-core machine.
out=/tmp/sbs; mkdir -p $out
for r in 1 2 3; do
  for which in old new; do
    dir=$([ $which = old ] && echo /tmp/old || echo /work/main)
    cd $dir
    s=$(date +%s.%N); python train.py --out_dir=/tmp/sbs-run-$which --overwrite=True > $out/default-$which-$r.txt 2>&1; e=$(date +%s.%N)
    echo "round $r default $which $(echo "$e - $s" | bc) s: $(grep '^done' $out/default-$which-$r.txt | cut -c1-200)"
  done
  for which in old new; do
    dir=$([ $which = old ] && echo /tmp/old || echo /work/main)
    cd $dir
    s=$(date +%s.%N); python train.py config/sink_lab.py --out_dir=/tmp/sbs-lab-$which --overwrite=True > $out/lab-$which-$r.txt 2>&1; e=$(date +%s.%N)
    echo "round $r sinklab $which $(echo "$e - $s" | bc) s: $(grep '^done' $out/lab-$which-$r.txt | cut -c1-120)"
  done
done
