# What gpu/*.sh share (sourced, not run). Each GPU step of the project is one command that runs end to end on
# a fresh GPU machine, keeps going when a step fails (the next steps still say something), and leaves one
# tarball: a session on a lent GPU gets back at most a few files, and a fresh machine costs minutes.
#
#   step NAME CMD...   run CMD, its output shown and kept in $LOG/NAME.txt; its exit code and seconds are
#                      appended to $LOG/steps.tsv (the script's exit code is the worst step's)
#   pack NAME PATH...  tar the PATHs that exist, with $LOG, into $OUT/NAME.tar.gz
#
# OUT: where the tarball goes (the device tool sets it; default out-gpu/). WORK: the scripts' own folder (logs,
# background jobs; default out-gpu/). TOY=1: every step at toy size on a CPU, to test the script; it measures
# nothing.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOY=${TOY:-0}
OUT=${OUT:-out-gpu}
WORK=${WORK:-out-gpu}
PYTHON=${PYTHON:-python3}
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
    local name=$1 t0=$SECONDS rc
    shift
    echo "== $name: $*" | tee "$LOG/$name.txt"
    "$@" 2>&1 | tee -a "$LOG/$name.txt"
    rc=${PIPESTATUS[0]}
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
