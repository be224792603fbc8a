# What lab/gpu/*.sh share (sourced, not run). Each GPU step of the project is one command: it runs its parts one after
# another, keeps going when a part fails (the parts after it still say something), writes its results where the
# project's scripts write them (results/..., out-repro/) and its logs under $WORK, and ends with one tarball of
# everything the step wrote, to copy off the machine. Every script runs from the repository's root, whatever the
# folder it was started in: the lab's tools as modules (python -m lab.bench), train.py and the tests by path.
#
#   start_log NAME [PATH...]
#                      $LOG is $WORK/NAME/: every part's output, steps.tsv, env.txt (the machine and software); NAME
#                      and the PATHs are what pack packs when given no arguments, and after every part that ran too
#                      A command run again picks up where it left off: a part that succeeded in its last run, with
#                      the same code, arguments and settings, is not run again (its output stays); FRESH=1 runs
#                      every part again. Refused (exit 75, one line) while the study's job (lab/gpu/study.sh) runs
#                      under the same $WORK: what kernels.sh and throughput.sh time and test would share the GPU with
#                      the study's training. BESIDE_STUDY=1 runs them anyway (the study on another GPU, say)
#   study_pid          the pid of the study's job under $WORK while it runs; fails when none runs
#   step NAME CMD...   run CMD, its output shown and kept in $LOG/NAME.txt; its exit code, seconds and time limit
#                      are appended to $LOG/steps.tsv (the script's exit code is the last failed part's, 124 for
#                      a skipped one).
#                      STEP_LIMIT=S step ... stops it after S seconds (exit 124), so that the parts after it still
#                      get their turn; STEP_LIMIT=S in the environment does that to every part
#   pack [NAME PATH...]  $OUT/NAME.tar.gz: $LOG and the PATHs that exist (none: start_log's). Each part that ran
#                      is packed as it ends, so that a command stopped before its own pack still leaves the parts
#                      done so far in $OUT; the tarball is written aside and moved into place, so one stopped while
#                      it packs leaves the last one whole
#
# BUDGET_S=S is for machines that stop commands after a fixed time; unset (the default), there is no deadline.
# Set, every part is stopped S seconds after the command started (exit 124), a part that would start later is
# skipped (exit 'skipped'), the tarball is still made, and SHARE=P step ... stops that part after P% of S.
#
# OUT: where the tarball goes (default out-gpu/). WORK: the logs and the study's background job (default
# out-gpu/). Both are git-ignored. TOY=1: every part at toy size on a CPU, to test the script; it measures nothing.
set -uo pipefail
SCRIPT=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
ARGS=("$@")  # the script's own arguments: part of what a rerun must match to pick up where it left off
cd "$(dirname "${BASH_SOURCE[0]}")/../.."  # the repository's root, two folders above lab/gpu/
TOY=${TOY:-0}
OUT=${OUT:-out-gpu}
WORK=${WORK:-out-gpu}
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-}
FRESH=${FRESH:-0}
STATUS=0
PACK=()  # start_log's NAME and PATHs: the tarball pack makes, after every part and at the end

usage() {  # the script's header comment, from its second line to the first line that is not a comment
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$SCRIPT"
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac  # every script's --help: its header
WHOLE='^(0|[1-9][0-9]*)$'  # a whole number of seconds as bash counts them (a leading 0 is octal to it, 08 an error)
whole_seconds() {  # whole_seconds NAME VALUE: refuse in one line (exit 2) a time limit bash cannot count with
    [ -z "$2" ] || [[ "$2" =~ $WHOLE ]] && return 0
    echo "error: $1=$2: a whole number of seconds (e.g. $1=3600), or unset for no limit" >&2
    exit 2
}
one_part() {  # one_part "$@": more words than one part, refused in one line, exit 2 (batch modes ran batch alone)
    [ $# -le 1 ] && return 0
    echo "error: $(basename "$SCRIPT") ${*}: one part a command (the usage: --help); run the others one after" \
         "another" >&2
    exit 2
}
whole_seconds BUDGET_S "$BUDGET_S"  # bash's arithmetic reads 1.5 as an error and abc as a variable's name: the parts
whole_seconds STEP_LIMIT "${STEP_LIMIT:-}"  # would be skipped, or the command end at once with exit status 0
if [ "${STEP_LIMIT:-}" = 0 ]; then  # timeout reads 0 as no limit at all: every part would run to its end
    echo "error: STEP_LIMIT=0 stops no part (timeout reads 0 as no limit): 1 or more seconds, or unset" >&2
    exit 2
fi

study_pid() {  # the job's pid file names a live process that is the job: not a pid reused since (a reboot, a kill)
    local pid cmd
    pid=$(cat "$WORK/study-job/pid" 2>/dev/null)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    if [ -r "/proc/$pid/cmdline" ]; then  # the job is a bash running lab.repro's commands, or the pack that ends
        cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline")  # it (bash execs its last command, under the same pid)
        case "$cmd" in *lab.repro*|*"lab/gpu/study.sh pack"*) ;; *) return 1 ;; esac
    fi
    echo "$pid"
}

start_log() {  # start_log NAME [PATH...]: $LOG is $WORK/NAME/, emptied unless its last run had the same key
    LOG=$WORK/$1
    PACK=("$@")
    local pid
    if [ "$TOY" != 1 ] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
        echo "error: no CUDA GPU is visible here, and $(basename "$SCRIPT") measures one (TOY=1: its parts at toy" \
             "size on a CPU, docs/gpu.md)" >&2
        exit 2
    fi
    if [ "${BESIDE_STUDY:-0}" != 1 ] && pid=$(study_pid); then  # (study.sh start has said so in its words already)
        echo "error: the study's job is running (pid $pid, $WORK/study-job/), and this command would share the GPU" \
             "with its training: bash lab/gpu/study.sh wait, then this command (BESIDE_STUDY=1: run it anyway)"
        exit 75
    fi
    local env=$WORK/.env-$1.txt key
    mkdir -p "$WORK" "$OUT"
    { date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null
      git status --short -- . ':!results' 2>/dev/null | head -20  # the code's changes first, never cut off by results/
      echo "$(git status --short -- results 2>/dev/null | wc -l) paths under results/ differ from the commit"
      nvidia-smi 2>&1 | head -20
      "$PYTHON" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
      "$PYTHON" -c "import triton; print('triton', triton.__version__)"
    } > "$env" 2>&1
    # what an earlier success depends on: the script and its arguments, the settings, the code, the software
    key=$(printf '%s\n' "$(basename "$SCRIPT") ${ARGS[*]}" "TOY=$TOY" "PYTHON=$PYTHON" "DATA_DIR=${DATA_DIR:-}"
          cat ./*.py lab/*.py config/*.py data/*.py data/*/*.py tests/*.py lab/gpu/*.sh 2>/dev/null | cksum
          grep -E '^(python|triton) ' "$env")
    if [ "$FRESH" != 1 ] && [ -f "$LOG/steps.tsv" ] && [ "$key" = "$(cat "$LOG/key" 2>/dev/null)" ]; then
        mv "$LOG/steps.tsv" "$LOG/steps.prev.tsv"
        echo "== picking up where the last run of this command left off in $LOG (FRESH=1 runs every part again)"
    else
        rm -rf "$LOG" && mkdir -p "$LOG"
        printf '%s\n' "$key" > "$LOG/key"
    fi
    mv "$env" "$LOG/env.txt"
    printf 'step\texit\tseconds\tlimit\tran\n' > "$LOG/steps.tsv"
}

done_before() {  # done_before NAME: true when part NAME succeeded in the run this one picks up from
    [ -f "$LOG/steps.prev.tsv" ] && awk -F'\t' -v n="$1" '$1 == n && $2 == "0" { found = 1 } END { exit !found }' \
        "$LOG/steps.prev.tsv"
}

step() {
    local name=$1 t0=$SECONDS rc limit="" part
    shift
    if done_before "$name"; then  # keep its output and its row
        awk -F'\t' -v OFS='\t' -v n="$name" '$1 == n { $5 = "before"; print; exit }' "$LOG/steps.prev.tsv" \
            >> "$LOG/steps.tsv"
        echo "== $name: done in the last run ($LOG/$name.txt), not run again"
        return 0
    fi
    if [ -n "$BUDGET_S" ]; then
        limit=$((BUDGET_S - SECONDS))
        if [ "$limit" -lt 5 ]; then  # the command's deadline has passed: say so, and leave the time to pack
            echo "== $name: skipped, the command's deadline (BUDGET_S=$BUDGET_S s) has passed" | tee "$LOG/$name.txt"
            printf '%s\tskipped\t0\t-\tnow\n' "$name" >> "$LOG/steps.tsv"
            STATUS=124
            return 0
        fi
        part=$((BUDGET_S * ${SHARE:-100} / 100))
        [ "$part" -lt "$limit" ] && limit=$part
    fi
    [ -n "${STEP_LIMIT:-}" ] && { [ -z "$limit" ] || [ "$STEP_LIMIT" -lt "$limit" ]; } && limit=$STEP_LIMIT
    if [ -z "$limit" ]; then
        echo "== $name: $*" | tee "$LOG/$name.txt"
        "$@" 2>&1 | tee -a "$LOG/$name.txt"
    else
        echo "== $name (stopped after $limit s): $*" | tee "$LOG/$name.txt"
        timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG/$name.txt"
    fi
    rc=${PIPESTATUS[0]}
    [ -n "$limit" ] && [ "$rc" -eq 124 ] && echo "== $name: stopped at its limit of $limit s" | tee -a "$LOG/$name.txt"
    printf '%s\t%s\t%s\t%s\tnow\n' "$name" "$rc" "$((SECONDS - t0))" "${limit:-none}" >> "$LOG/steps.tsv"
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    [ "$rc" -ne 0 ] && STATUS=$rc
    [ ${#PACK[@]} -eq 0 ] || tarball "${PACK[@]}" 2>/dev/null  # what there is so far, should the command stop here
    return 0
}

tarball() {  # tarball NAME PATH...: $OUT/NAME.tar.gz of $LOG and the PATHs that exist, written aside, then moved
    local name=$1 paths=() p rc part
    shift
    for p in "$LOG" "$@"; do [ -e "$p" ] && paths+=("$p"); done
    part=$OUT/.$name.tar.gz.$$.part  # this process's own: the study's job and its wait may pack at once
    tar -czf "$part" "${paths[@]}"
    rc=$?
    [ "$rc" -le 1 ] && mv -f "$part" "$OUT/$name.tar.gz" && return 0  # 1: a file changed as tar read it, still packed
    rm -f "$part"
    return "$rc"
}

pack() {
    [ $# -gt 0 ] || set -- "${PACK[@]}"
    tarball "$@"
    echo "== packed $OUT/$1.tar.gz (everything this command wrote, to copy off the machine):"
    column -t -s $'\t' "$LOG/steps.tsv" 2>/dev/null || cat "$LOG/steps.tsv"
}
