#!/usr/bin/env bash
# The reproduction study on one GPU (lab/repro.py: train, evaluate, report), as a job in the background, so that a
# closed terminal or a dropped SSH session does not stop it.
#
# usage: bash lab/gpu/study.sh start TRAIN... [-- EVALUATE...] | wait [SECONDS] | pack        (--help: this text)
#
#   bash lab/gpu/study.sh start TRAIN... [-- EVALUATE...]
#        prepare the corpus if data/pysrc/ does not hold it yet, then in the background (setsid, so it outlives
#        this command and the terminal): python -m lab.repro train TRAIN..., then, when training succeeded or
#        only some of its runs failed (lab.repro's exit status 4: the others trained), evaluate EVALUATE... and
#        report (the report even when the evaluation failed: it keeps the new runs, and says which were not
#        evaluated; the job's exit code is then the training's, else the report's, else the evaluation's). TRAIN as
#        for lab.repro train, e.g. `models --seeds=2`, `all --seeds=3` or `baseline:2 g1_elementwise:2 g1_headwise
#        --budget_min=60` (only the runs that end within 60 minutes, in the order named; one run at a time: two side
#        by side on one GPU each took twice as long, docs/gpu.md), each with --config=config/repro_sink.py, the
#        settings the kept runs were trained with (without it lab.repro train refuses, exit status 1);
#        EVALUATE: lab/evaluate.py's keys, e.g. `--windows=32`. It runs the committed study only (--root,
#        --report_dir and --study are refused: a study of your own runs as lab.repro's steps, docs/study.md). The
#        runs go to out-repro/, the report to
#        $WORK/report/ (a copy of results/repro/ made at start: copy it back to commit it), the job's command,
#        output and exit code to $WORK/study-job/; when the job ends it packs its results into $OUT/study.tar.gz.
#        An interrupted study (a killed job, a reboot) is resumed by the same start command: lab.repro skips the
#        runs that reached their last step, continues each run that has a checkpoint, starts again each run stopped
#        before its first checkpoint, and starts the rest
#   bash lab/gpu/study.sh wait [SECONDS]
#        a line of progress a minute until the job ends (or SECONDS pass, when given, or BUDGET_S when that is
#        set: lab/gpu/lib.sh; past them only while the job packs, its command ended; both counted from this
#        command's start, not start's: `start ... && wait $((540 - SECONDS))` in one shell); exit 0 when the job
#        succeeded, 1 when it failed, 3 while it still runs (then it packs what there is so far, as pack does).
#        Stopping it (Ctrl-C) leaves the job running: call it again, or read $WORK/study-job/output.txt. When the
#        job has ended and $OUT holds no study.tar.gz packed since (another $OUT, one emptied since), it packs again
#   bash lab/gpu/study.sh pack
#        -> $OUT/study.tar.gz: the report folder (REPORT.md, summary.json, plots, evaluate/), commands.jsonl,
#        every run's log.jsonl and output, and the job's output (not the checkpoints): while the job runs, what
#        there is so far; the job itself runs this when it ends
# TOY=1: python -m lab.repro's steps with --tiny on a CPU, everything under $WORK; DATA_DIR=<folder of a prepared
# toy dataset> trains on it (without it, --tiny prepares the standard library's source once in data/pystdlib/).
source "$(dirname "$0")/lib.sh"
# The report is drawn into $WORK/report/, a copy of results/repro/ made at start: git-ignored, so that nothing that
# changes the checkout's tracked files while the job runs (a git checkout, a git pull) can undo it before it is
# packed. To commit it: rm -rf results/repro && cp -r out-gpu/report results/repro
ROOT=out-repro; REPORT=$WORK/report; REPRO=()
if [ "$TOY" = 1 ]; then
    ROOT=$WORK/repro-tiny; REPORT=$ROOT/report; REPRO=(--tiny --root="$ROOT")
fi
DATA=()
[ "$TOY" = 1 ] && [ -n "${DATA_DIR:-}" ] && DATA=(--dataset=toy --data_dir="$DATA_DIR" --block_size=32)
JOB=$WORK/study-job  # the background job: its pid, command, output, exit code and tarball
running() { study_pid > /dev/null; }  # lib.sh: the pid file names the live job

case "${1:-}" in
start)
    shift
    TRAIN=(); EVALUATE=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do TRAIN+=("$1"); shift; done
    [ $# -gt 0 ] && shift && EVALUATE=("$@")
    for word in ${TRAIN[@]+"${TRAIN[@]}"} ${EVALUATE[@]+"${EVALUATE[@]}"}; do  # the committed study's job only
        case "$word" in --root|--root=*|--report_dir|--report_dir=*|--study|--study=*)
            echo "error: $word: study.sh runs the committed study only (its runs in out-repro/, its report drawn" \
                 "over a copy of results/repro/); run a study of your own as python -m lab.repro's steps" \
                 "(docs/study.md, \"A study of your own\")" >&2
            exit 2;;
        esac
    done
    if running; then echo "a study is already running (pid $(cat "$JOB/pid")): bash lab/gpu/study.sh wait"; exit 1; fi
    start_log study
    rm -rf "$JOB" && mkdir -p "$JOB"
    if [ "$TOY" != 1 ]; then  # a report an earlier job drew here is kept beside, not lost
        [ -d "$REPORT" ] && rm -rf "$REPORT.before" && mv "$REPORT" "$REPORT.before" && \
            echo "the report an earlier job drew is now in $REPORT.before"
        cp -r results/repro "$REPORT" || exit 1
    fi
    [ "$TOY" = 1 ] || compgen -G "data/pysrc/*_val_*.bin" > /dev/null || step prepare "$PYTHON" -m lab.repro prepare
    [ "$STATUS" -eq 0 ] || { OUT="$OUT" bash "$SCRIPT" pack; exit "$STATUS"; }  # what it said, packed all the same
    # training first; the report after runs that failed beside others (exit 4: it keeps the runs trained) and even
    # when the evaluation failed; the exit code is the training's failure, else the report's, else the evaluation's
    { printf '%q ' "$PYTHON" -m lab.repro train "${TRAIN[@]}" "${REPRO[@]}" "${DATA[@]}" --report_dir="$REPORT"
      printf '; t=$?; if [ $t = 0 ] || [ $t = 4 ]; then '
      printf '%q ' "$PYTHON" -m lab.repro evaluate "${EVALUATE[@]}" "${REPRO[@]}" --report_dir="$REPORT"
      printf '; e=$?; '
      printf '%q ' "$PYTHON" -m lab.repro report "${REPRO[@]}" --report_dir="$REPORT"
      printf '&& (exit $e); r=$?; (exit $((t ? t : r))); else (exit $t); fi'
    } > "$JOB/command"
    echo "$OUT/study.tar.gz" > "$JOB/tarball"
    # then, success or not, the job packs what it made
    setsid bash -c "$(cat "$JOB/command"); echo \$? > $(printf '%q' "$JOB/exit"); OUT=$(printf '%q' "$OUT") bash $(
        printf '%q' "$PWD/lab/gpu/study.sh") pack" > "$JOB/output.txt" 2>&1 < /dev/null &
    echo $! > "$JOB/pid"
    echo "started (pid $(cat "$JOB/pid")): $(cat "$JOB/command")"
    echo "its output: $JOB/output.txt; bash lab/gpu/study.sh wait: a line of progress a minute until it ends"
    sleep 3
    head -c 2000 "$JOB/output.txt"
    ;;
wait)
    limit=${2:-$BUDGET_S}
    if [ $# -gt 2 ] || ! [[ "${2:-0}" =~ $WHOLE ]]; then  # (BUDGET_S: lib.sh checked it)
        echo "error: wait ${*:2}: SECONDS is one whole number of seconds (e.g. wait 3600), or none to wait until" \
             "the job ends" >&2
        exit 2
    fi
    # past the limit too while the job's command has ended (its exit written) and the job packs: a pack of ours
    # would write the same tarball and folder beside it
    while running && { [ -z "$limit" ] || [ "$SECONDS" -lt "$limit" ] || [ -f "$JOB/exit" ]; }; do
        sleep 2
        if [ $((SECONDS % 60)) -lt 2 ]; then
            # this job's runs (lab.repro's line as each ends), not the kept ones it restored into commands.jsonl
            ended=$(grep -c '^=== .* seed [0-9]*: exit code' "$JOB/output.txt" 2>/dev/null)
            echo "[$SECONDS s] ${ended:-0} runs ended;" \
                 "$(tail -n 1 "$JOB/output.txt" 2>/dev/null | cut -c1-160)"
        fi
    done
    if running; then  # what there is so far, packed: a session that ends here still has it
        echo "still running after $SECONDS s: bash lab/gpu/study.sh wait; packing what there is so far"
        OUT="$OUT" bash "$SCRIPT" pack
        exit 3
    fi
    tail -n 30 "$JOB/output.txt" 2>/dev/null
    code=$(cat "$JOB/exit" 2>/dev/null || echo "unknown (no job, or it was killed: start it again to resume)")
    echo "the study's job ended: exit $code"
    tarball=$(cat "$JOB/tarball" 2>/dev/null)
    if [ -f "$JOB/exit" ] && [ -f "$OUT/study.tar.gz" ] && ! [ "$JOB/exit" -nt "$OUT/study.tar.gz" ]; then
        echo "== its results, packed when it ended: $OUT/study.tar.gz"
    elif [ -f "$JOB/exit" ]; then  # packed into another $OUT, or this one was emptied since: pack again, here
        echo "== $OUT holds no study.tar.gz packed after the job ended (it packed into ${tarball:-?}): packing again"
        OUT="$OUT" bash "$SCRIPT" pack
    elif [ -f "$JOB/pid" ]; then  # killed before it could pack: what it left (no pid: its start failed, and packed)
        echo "== the job was stopped before it packed: packing what it left"
        OUT="$OUT" bash "$SCRIPT" pack
    fi
    [ "$code" = 0 ] || exit 1
    ;;
pack)
    one_part "$@"
    LOG=$WORK/study
    mkdir -p "$LOG" "$OUT" && rm -rf "$LOG/study-job" && cp -r "$JOB" "$LOG/" 2>/dev/null
    [ -f "$LOG/steps.tsv" ] || printf 'step\texit\tseconds\tlimit\tran\n' > "$LOG/steps.tsv"
    mapfile -t RUNLOGS < <(find "$ROOT" -name log.jsonl 2>/dev/null | sort)
    pack study "$REPORT" "$ROOT/commands.jsonl" "$ROOT/logs" "${RUNLOGS[@]}"
    ;;
*)
    usage
    exit 2
    ;;
esac
