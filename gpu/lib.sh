# What gpu/*.sh share (sourced, not run). Each GPU step of the project is one command that runs end to end on
# a fresh GPU machine, keeps going when a step fails (the next steps still say something), and leaves one
# tarball: a remote GPU machine may give back only a few files, and a fresh machine costs minutes.
#
#   step NAME CMD...   run CMD, its output shown and kept in $LOG/NAME.txt; its exit code and seconds are
#                      appended to $LOG/steps.tsv (the script's exit code is the worst step's). STEP_LIMIT=S step ...
#                      stops it after S seconds (exit 124), so that the steps after it still get their turn
#   pack NAME PATH...  tar the PATHs that exist, with $LOG, into $OUT/NAME.tar.gz
#
# A remote runner may kill a command at a fixed limit (the GPU machines this project was measured on: 10 minutes),
# and a killed command packs nothing. So each command has a deadline, BUDGET_S seconds (default 540) after it
# started: every step is stopped by it (exit 124), a step that would start after it is skipped (exit 'skipped'),
# and the tarball is still made.
#
# OUT: where the tarball goes (a remote runner may set it; default out-gpu/). WORK: the scripts' own folder (logs,
# background jobs; default out-gpu/). TOY=1: every step at toy size on a CPU, to test the script; it measures
# nothing.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOY=${TOY:-0}
OUT=${OUT:-out-gpu}
WORK=${WORK:-out-gpu}
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
STATUS=0

start_log() {  # start_log NAME: $LOG is $WORK/NAME/, emptied; env.txt says what machine and software ran
    LOG=$WORK/$1
    rm -rf "$LOG" && mkdir -p "$LOG" "$OUT"
    printf 'step\texit\tseconds\n' > "$LOG/steps.tsv"
    { date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head -20
      nvidia-smi 2>&1 | head -20
      "$PYTHON" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
      "$PYTHON" -c "import triton; print('triton', triton.__version__)"
    } > "$LOG/env.txt" 2>&1
}

step() {
    local name=$1 t0=$SECONDS rc limit=$((BUDGET_S - SECONDS))
    shift
    [ -n "${STEP_LIMIT:-}" ] && [ "$STEP_LIMIT" -lt "$limit" ] && limit=$STEP_LIMIT
    if [ "$limit" -lt 5 ]; then  # the command's deadline has passed: say so, and leave the time to pack
        echo "== $name: skipped, the command's deadline (BUDGET_S=$BUDGET_S s) has passed" | tee "$LOG/$name.txt"
        printf '%s\tskipped\t0\n' "$name" >> "$LOG/steps.tsv"
        STATUS=124
        return 0
    fi
    echo "== $name: $*" | tee "$LOG/$name.txt"
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG/$name.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 124 ] && echo "== $name: stopped at its limit of $limit s" | tee -a "$LOG/$name.txt"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$LOG/steps.tsv"
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    [ "$rc" -ne 0 ] && STATUS=$rc
    return 0
}

pack() {
    local name=$1 paths=() p
    shift
    for p in "$LOG" "$@"; do [ -e "$p" ] && paths+=("$p"); done
    tar -czf "$OUT/$name.tar.gz" "${paths[@]}"
    echo "== packed $OUT/$name.tar.gz:"
    column -t "$LOG/steps.tsv" 2>/dev/null || cat "$LOG/steps.tsv"
}
