#!/usr/bin/env bash
# The reproduction study on one GPU, in commands that each fit a remote runner's 10-minute limit:
#   bash gpu/study.sh start TRAIN... [-- EVALUATE...]
#        prepare the corpus if needed, then in the background (setsid, so it outlives this command):
#        repro.py train TRAIN..., repro.py evaluate EVALUATE..., repro.py report. TRAIN as for repro.py train,
#        e.g. `baseline:2 g1_elementwise:2 g1_headwise --parallel=2 --budget_min=18` (the runs that fit in 18
#        minutes, in the order named) or `models --seeds=2 --parallel=2`; EVALUATE: evaluate.py's keys, e.g.
#        `--windows=32`
#        The job packs its results itself the moment it ends, into $WORK/study.tar.gz (below)
#   bash gpu/study.sh wait [SECONDS]
#        until the job ends or SECONDS pass (default 540), a line of progress a minute; exit 0 when the job
#        succeeded, 1 when it failed, 3 while it still runs (call it again at once: a rented machine may go back
#        when idle, and the runs with it; on the same machine, `start` again resumes each run from its checkpoint).
#        When the job has ended, its tarball is copied to $OUT/study.tar.gz: the results come back in the call
#        that sees the end
#   bash gpu/study.sh pack
#        -> $OUT/study.tar.gz: the report folder (REPORT.md, summary.json, plots, evaluate/), commands.jsonl,
#        every run's log.jsonl and output, and the job's output. Once the job has ended, the tarball it made then
#        (a runner that copies a fresh working tree before each command can delete the report folder, which git
#        does not ignore, between two commands: on 2026-11-25 that lost a whole study's report); while it runs,
#        what there is so far
# TOY=1: repro.py --tiny on a CPU, everything under $WORK; DATA_DIR=<folder of a prepared toy dataset> trains on it.
source "$(dirname "$0")/lib.sh"
ROOT=out-repro; REPORT=results/repro; REPRO=()
if [ "$TOY" = 1 ]; then
    ROOT=$WORK/repro-tiny; REPORT=$ROOT/report; REPRO=(--tiny --root="$ROOT")
fi
DATA=()
[ "$TOY" = 1 ] && [ -n "${DATA_DIR:-}" ] && DATA=(--dataset=toy --data_dir="$DATA_DIR" --block_size=32)
JOB=$WORK/study-job  # the background job: its pid, command, output and exit code

PACKED=$WORK/study.tar.gz  # what the job packed when it ended
running() { [ -f "$JOB/pid" ] && kill -0 "$(cat "$JOB/pid")" 2>/dev/null; }
bring_back() {  # the job's own tarball to $OUT
    mkdir -p "$OUT"
    [ "$PACKED" -ef "$OUT/study.tar.gz" ] || cp "$PACKED" "$OUT/study.tar.gz"
    echo "== the job's results, packed when it ended: $OUT/study.tar.gz"
}

case "${1:-}" in
start)
    shift
    TRAIN=(); EVALUATE=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do TRAIN+=("$1"); shift; done
    [ $# -gt 0 ] && shift && EVALUATE=("$@")
    if running; then echo "a study is already running (pid $(cat "$JOB/pid")): bash gpu/study.sh wait"; exit 1; fi
    start_log study
    rm -rf "$JOB" "$PACKED" && mkdir -p "$JOB"
    [ "$TOY" = 1 ] || compgen -G "data/pysrc/*_val_*.bin" > /dev/null || step prepare "$PYTHON" repro.py prepare
    [ "$STATUS" -eq 0 ] || exit "$STATUS"
    # each stage only when the one before it succeeded; the job's exit code is the first failure's
    { printf '%q ' "$PYTHON" repro.py train "${TRAIN[@]}" "${REPRO[@]}" "${DATA[@]}"; printf '&& '
      printf '%q ' "$PYTHON" repro.py evaluate "${EVALUATE[@]}" "${REPRO[@]}"; printf '&& '
      printf '%q ' "$PYTHON" repro.py report "${REPRO[@]}"; } > "$JOB/command"
    # then, success or not, the job packs what it made, into a folder git ignores ($WORK), before anything can
    # delete it
    setsid bash -c "$(cat "$JOB/command"); echo \$? > $(printf '%q' "$JOB/exit"); OUT=$(printf '%q' "$WORK") bash $(
        printf '%q' "$PWD/gpu/study.sh") pack" > "$JOB/output.txt" 2>&1 < /dev/null &
    echo $! > "$JOB/pid"
    echo "started (pid $(cat "$JOB/pid")): $(cat "$JOB/command")"
    sleep 3
    head -c 2000 "$JOB/output.txt"
    ;;
wait)
    limit=${2:-540}
    while running && [ "$SECONDS" -lt "$limit" ]; do
        sleep 2
        if [ $((SECONDS % 60)) -lt 2 ]; then
            echo "[$SECONDS s] $(grep -c . "$ROOT/commands.jsonl" 2>/dev/null || echo 0) runs ended;" \
                 "$(tail -n 1 "$JOB/output.txt" 2>/dev/null | cut -c1-160)"
        fi
    done
    if running; then echo "still running after $SECONDS s: bash gpu/study.sh wait"; exit 3; fi
    tail -n 30 "$JOB/output.txt" 2>/dev/null
    code=$(cat "$JOB/exit" 2>/dev/null || echo "unknown (no job, or it was killed)")
    echo "the study's job ended: exit $code"
    [ -f "$PACKED" ] && bring_back
    [ "$code" = 0 ] || exit 1
    ;;
pack)
    if ! running && [ -f "$PACKED" ]; then bring_back; exit 0; fi
    LOG=$WORK/study
    mkdir -p "$LOG" "$OUT" && cp -r "$JOB" "$LOG/" 2>/dev/null
    [ -f "$LOG/steps.tsv" ] || printf 'step\texit\tseconds\n' > "$LOG/steps.tsv"
    mapfile -t RUNLOGS < <(find "$ROOT" -name log.jsonl 2>/dev/null | sort)
    pack study "$REPORT" "$ROOT/commands.jsonl" "$ROOT/logs" "${RUNLOGS[@]}"
    ;;
*)
    awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
