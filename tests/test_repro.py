"""The study runner lab/repro.py (python -m lab.repro): its commands end to end at toy size, its report
(lab/report.py), its variants, and the shape of the project's imports (no script imports another, bar the one step
lab.bench times; no cycle)."""

import ast
import contextlib
import dataclasses
import glob
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import lab.report as report
import lab.repro as repro
import lab.variants as variants
import probe
from cli import DIVERGED_EXIT, run_config_file
from lab.stats import RULE
from lab.variants import MODELS, STUDY, SWEEP, TEST_VARIANTS, VARIANTS
from model import GPT, VALID, GPTConfig
from probe import MEASURE, MEASURES
from data import prepare_if_missing
from data.shards import write_dataset
from runfolder import EVALUATED, load_checkpoint, save_checkpoint
from test_analyze import (assert_every_plot_is_labelled, assert_legends_in_image_beside_the_data, keep_figures,
                          keep_saved, matplotlib_colour)
from test_train import folder_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/


def test_repro_pipeline_tiny(tmp_path, dataset, capsys):
    """The study's commands end to end at toy size: two variants x two seeds, two runs side by side; the same
    command again (everything finished: skipped); an interrupted run resumed; the report with its verdicts."""
    root, env = str(tmp_path / "runs"), {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "lab.repro"]  # from the repository's root, as a user runs it
    extra = ["--dataset=toy", f"--data_dir={dataset}", "--max_iters=6", "--eval_interval=3", "--block_size=32"]
    study = ["train", "baseline", "g1_elementwise", "--tiny", "--seeds=2", f"--root={root}", *extra]
    first = subprocess.run(cmd + study + ["--parallel=2"], capture_output=True, text=True, env=env, cwd=REPO)
    assert first.stdout.count("exit code 0") == 4 and first.stdout.count("starting a new run") == 4, \
        first.stdout + first.stderr
    assert "4 runs to do, 2 at a time" in first.stdout  # the estimate line comes first
    runs = [(v, s) for v in ("baseline", "g1_elementwise") for s in (1337, 1338)]
    for v, s in runs:  # each run's output in its own file, and the run in its own folder
        assert "done: 6 iterations" in open(os.path.join(root, "logs", f"{v}-seed{s}.txt")).read()
        assert load_checkpoint(os.path.join(root, v, f"seed{s}", "ckpt.pt"))[1]["config"]["seed"] == s
    again = subprocess.run(cmd + study, capture_output=True, text=True, env=env, cwd=REPO)
    assert again.stdout.count("skipped") == 4 and "nothing to train" in again.stdout and "starting" not in again.stdout
    # an interrupted run is resumed by the same command: here one stopped during its last save, whose log has
    # the last evaluation's record (written before the save) while its checkpoint holds the evaluation before
    ckpt = os.path.join(root, "baseline", "seed1337", "ckpt.pt")
    state = torch.load(ckpt, weights_only=True)
    save_checkpoint({**state, "iter_num": 3, "tokens": 3 * 8 * 32}, ckpt)  # as if saved at iter 3
    recorded = open(os.path.join(root, "commands.jsonl")).read()  # and its command stopped so (Ctrl-C: 130)
    open(os.path.join(root, "commands.jsonl"), "w").writelines(
        json.dumps({**c, "exit_code": 130} if (c["variant"], c["seed"]) == ("baseline", 1337) else c) + "\n"
        for c in map(json.loads, recorded.splitlines()))
    assert json.loads(open(os.path.join(root, "baseline", "seed1337", "log.jsonl")).readlines()[-1])["iter"] == 6
    third = subprocess.run(cmd + study, capture_output=True, text=True, env=env, cwd=REPO)
    assert third.stdout.count("skipped") == 3 and "resuming the run" in third.stdout, third.stdout + third.stderr
    assert torch.load(ckpt, weights_only=True)["iter_num"] == 6
    after = open(os.path.join(root, "commands.jsonl")).read().splitlines()  # the first records as they were
    open(os.path.join(root, "commands.jsonl"), "w").write(recorded + "".join(line + "\n" for line in after[4:]))

    # commands.jsonl: exactly the commands that ran, as printed before each
    commands = [json.loads(line) for line in open(os.path.join(root, "commands.jsonl"))]
    assert sorted((c["variant"], c["seed"]) for c in commands[:4]) == runs
    assert (commands[4]["variant"], commands[4]["seed"], commands[4]["resumed"]) == ("baseline", 1337, True)
    printed = [line for line in (first.stdout + third.stdout).splitlines() if line.startswith(sys.executable)]
    assert sorted(c["command"] for c in commands) == sorted(printed)
    for c in commands:
        argv = shlex.split(c["command"])
        assert argv[1] == os.path.join(REPO, "train.py")
        assert f"--out_dir={os.path.join(root, c['variant'], 'seed%d' % c['seed'])}" in argv
        assert f"--seed={c['seed']}" in argv and argv[-len(extra):] == extra and c["exit_code"] == 0
        assert c["seconds"] > 0 and c["date"] and c["parallel"] in (1, 2)
    assert "--init_from=resume" in commands[4]["command"] and "--init_from" not in commands[0]["command"]

    # lab/evaluate.py on every trained seed of the study's models, then the report with them: each tool run as its
    # own process, as a module of the repository (python -m lab.evaluate), its command printed first
    evaluated = subprocess.run(cmd + ["evaluate", "--tiny", f"--root={root}", "--windows=4", "--quant=w4a4",
                                      "--lengths=1,2", "--keep_first=0,1"], capture_output=True, text=True, env=env,
                               cwd=REPO)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    printed = [shlex.split(line) for line in evaluated.stdout.splitlines() if line.startswith(sys.executable)]
    assert [argv[1:3] for argv in printed] == [["-m", "lab.evaluate"]]
    assert f"--out_dir={os.path.join(root, 'report', 'evaluate')}" in printed[0] and "--quant=w4a4" in printed[0]
    assert [r["label"] for r in json.load(open(os.path.join(root, "report", "evaluate", "summary.json")))["models"]] \
        == [f"{v}/seed{s}" for v, s in runs]
    reported = subprocess.run(cmd + ["report", "--tiny", f"--root={root}"], capture_output=True, text=True, env=env,
                              cwd=REPO)
    assert reported.returncode == 0, reported.stderr
    printed = [shlex.split(line) for line in reported.stdout.splitlines() if line.startswith(sys.executable)]
    assert [argv[1:3] for argv in printed] == [["-m", "lab.analyze"]]
    assert f"--out_dir={os.path.join(root, 'analysis')}" in printed[0]
    assert f"--labels={','.join(f'{v}/seed{s}' for v, s in runs)}" in printed[0]
    assert "--plot_labels=baseline/seed1337,g1_elementwise/seed1337" in printed[0]  # the single-run plots: first seeds
    # what the runner read back: lab/analyze.py's files; its table and figures copied beside the report
    analysis = json.load(open(os.path.join(root, "analysis", "summary.json")))
    assert [r["label"] for r in analysis["runs"]] == [f"{v}/seed{s}" for v, s in runs]
    assert open(os.path.join(root, "analysis", "summary.md")).read() == \
        open(os.path.join(root, "report", "summary.md")).read()
    with np.load(os.path.join(root, "analysis", "per_window.npz")) as per_window:
        assert per_window["0/val_loss"].shape == (2 * 8,) and "0/gate_mean" not in per_window.files  # no gate
        assert per_window["2/val_loss"].mean() == pytest.approx(analysis["runs"][2]["val_loss"], rel=1e-6)
    result = json.load(open(os.path.join(root, "report", "summary.json")))
    assert [(r["variant"], r["seed"]) for r in result["runs"]] == runs
    for r in result["runs"]:
        assert r["tokens"] == 6 * 8 * 32 and r["tiny"] and 0 < r["first_token_attn"] < 1 and r["max_act"] > 0
        assert 0 < r["sink_share"] <= 1 and 0 <= r["sink_heads"] <= 1 and r["peak_act"] >= r["max_act"]
        assert r["ppl"] == pytest.approx(math.exp(r["val_loss"]))
        # measured on the run's own eval windows: the val loss train.py logged for that checkpoint
        logged = load_checkpoint(os.path.join(root, r["variant"], f"seed{r['seed']}", "ckpt.pt"))[1]["val_loss"]
        assert r["val_loss"] == pytest.approx(logged, rel=1e-5)
    assert result["runs"][0]["gate_mean"] is None and 0 < result["runs"][2]["gate_mean"] < 1
    base = result["variants"]["baseline"]["val_loss"]
    assert base["n"] == 2 and base["lo"] < base["mean"] < base["hi"]
    assert base["mean"] == pytest.approx(np.mean([r["val_loss"] for r in result["runs"][:2]]))
    decided = {c["claim"]: c for c in result["claims"]}
    g1_loss = decided[repro.CLAIMS[0][0]]
    # two seeds a side: Welch's interval is there, but no verdict
    assert g1_loss["verdict"] == "too few seeds" and g1_loss["seeds"] == 2 and g1_loss["df"] > 0
    assert g1_loss["lo"] <= g1_loss["estimate"] <= g1_loss["hi"]
    assert g1_loss["var_seeds"] == pytest.approx([r["val_loss"] for r in result["runs"][2:]], rel=1e-6)
    assert decided[repro.CLAIMS[-1][0]]["verdict"] == "not measured (dyt not trained)"
    assert [row["lr"] for row in result["sweep"]] == [3e-3]
    assert result["sweep"][0]["difference"]["verdict"] == "too few seeds" and "sink_counts" not in result

    text = open(os.path.join(root, "report", "REPORT.md")).read()
    assert "SMOKE TEST" in text.splitlines()[0] and "concludes nothing" in text
    assert "decided by rule" in text and RULE in text and f"**{g1_loss['verdict']}**" in text
    assert "To be written" not in text and "TODO" not in text
    assert "1,536 training tokens" in text and "0.0M" not in text
    assert "| baseline | 2 | 0.003 | 2/2 finished |" in text
    assert "## Where the sink is" in text and "baseline (seed 1337):" in text
    assert f"`{commands[4]['command']}`" in text  # the last command of each run
    made = shlex.join([sys.executable, "-m", "lab.repro", "report", "--tiny", f"--root={root}"])
    assert f"This report: `{made}`" in text  # how it was made, as a user makes it again
    minutes = sum(c["seconds"] / c["parallel"] for c in commands) / 60  # every command, side by side at its share
    assert f"Training time: {minutes:.1f} minutes of the device in all" in text
    for plot in ("trends.png", "layers.png"):
        assert os.path.isfile(os.path.join(root, "report", plot)) and f"]({plot})" in text
    assert not os.path.exists(os.path.join(root, "report", "lr_sweep.png"))  # one rate: the sweep's row, no figure
    assert "Only this rate is trained so far" in text
    section = text[text.index("## Downstream consequences"):]
    assert ("| variant | seeds | W4A4 Δ | none 2x [32, 64) | none 2x [32, 64) Δ | yarn 2x [0, 32) Δ | "
            "yarn 2x [32, 64) | yarn 2x [32, 64) Δ | w=8 keep 0 Δ | w=8 keep 1 Δ |") in section
    assert "a [0, T) Δ: what the scaling costs inside the trained length" in section
    assert "| baseline | 2 | " in section and "| g1_elementwise | 2 | " in section and "Out of date" not in section
    assert "](evaluate/summary.md)" in section and "GA Table 5" in section

    # A study over several sessions (a borrowed GPU goes back with the checkpoints): the report kept each run's log,
    # measurements and command; `train` on a machine without the runs restores them, and the same evaluate and
    # report there give the same numbers from the kept measurements alone.
    kept = os.path.join(root, "report", "runs")
    for v, s in runs:
        assert sorted(os.listdir(os.path.join(kept, v, f"seed{s}"))) == \
            ["command.json", "evaluated.json", "log.jsonl", "measured.json", "measured.npz"]
    elsewhere, report2 = str(tmp_path / "elsewhere"), str(tmp_path / "report2")
    train_elsewhere = [*study[:-len(extra) - 1], f"--root={elsewhere}", f"--report_dir={os.path.join(root, 'report')}"]
    restored = subprocess.run(cmd + train_elsewhere + extra, capture_output=True, text=True, env=env, cwd=REPO)
    assert "restored from" in restored.stdout and "4 runs: baseline seeds 1337, 1338;" in restored.stdout, \
        restored.stdout
    assert restored.stdout.count("skipped") == 4 and "nothing to train" in restored.stdout, restored.stdout
    assert not glob.glob(os.path.join(elsewhere, "*", "*", "*.pt"))
    assert sorted((c["variant"], c["seed"]) for c in read_commands(elsewhere)) == runs
    # the report folder holds the commands of the runs it reports, as the root recorded them
    assert read_commands(os.path.join(root, "report")) == read_commands(root)
    # data that is not what the kept runs were measured on (a corpus built elsewhere): refused before any training
    other = str(tmp_path / "other-data")
    rng = np.random.default_rng(1)
    write_dataset(other, "toy", {split: [rng.integers(0, 50000, n, dtype=np.uint16) for n in (3000, 2000)]
                                 for split in ("train", "val")}, source="other random tokens")
    moved = [w if not w.startswith("--data_dir=") else f"--data_dir={other}" for w in extra]
    refused = subprocess.run(cmd + train_elsewhere + moved + ["g1_headwise"], capture_output=True, text=True, env=env,
                             cwd=REPO)  # another data_dir (a path, which may differ between machines) with other data
    assert refused.returncode == 1 and refused.stderr.startswith(f"error: {other}/ is not the data that baseline seed "
                                                                 "1337"), refused.stderr
    assert "starting" not in refused.stdout and not os.path.exists(os.path.join(elsewhere, "g1_headwise"))
    with pytest.raises(SystemExit) as e:  # the same folder, prepared again with other contents
        repro.check_kept_data(elsewhere, {**repro.study_settings(repro.Keys(tiny=True), extra), "data_dir": other})
    assert str(e.value.code).startswith(f"error: {other}/ is not the data that baseline seed 1337 (kept from CPU") \
        and "so runs trained now would not compare with the kept ones" in str(e.value.code)
    for step in (["evaluate", "--windows=4", "--quant=w4a4", "--lengths=1,2", "--keep_first=0,1"], ["report"]):
        done = subprocess.run(cmd + step + ["--tiny", f"--root={elsewhere}", f"--report_dir={report2}"],
                              capture_output=True, text=True, env=env, cwd=REPO)
        assert done.returncode == 0 and "measured earlier" in done.stdout, done.stdout + done.stderr
    again = json.load(open(os.path.join(report2, "summary.json")))
    assert again["claims"] == result["claims"] and again["variants"] == result["variants"]
    quant = [[json.load(open(os.path.join(folder, "evaluate", "summary.json")))["models"][i]["quant"] for i in (0, 3)]
             for folder in (report2, os.path.join(root, "report"))]
    assert quant[0] == quant[1]
    text2 = open(os.path.join(report2, "REPORT.md")).read()
    assert "Out of date" not in text2 and "Not evaluated" not in text2 and f"`{commands[4]['command']}`" in text2
    assert "Measured in an earlier session, from the record kept of each run whose checkpoint is gone: " \
        "baseline/seed1337 on CPU" in text2
    assert "Note: " not in text2.split("\n\n")[2]  # the data is here: the kept runs were checked on it
    # where it is not (lab.analyze's note, tests/test_analyze.py), REPORT.md says so beside the windows it names
    result2 = json.load(open(os.path.join(report2, "summary.json")))
    result2["validation"]["data_notes"] = [f"{dataset} is not here: the measurements kept of the runs are compared"]
    commands2 = {(c["variant"], c.get("seed")): c for c in read_commands(elsewhere)}
    analyzed = json.load(open(os.path.join(elsewhere, "analysis", "summary.json")))["runs"]
    text3 = report.render_report(result2, elsewhere, True, commands2, "cmd", [], analyzed, "t")
    assert f"Note: {dataset} is not here: the measurements kept of the runs are compared." in text3.split("\n\n")[2]
    # not restored: a kept run trained otherwise (it would be compared with runs it is not like), and one measured
    # short of max_iters (it cannot resume without its checkpoint, so it trains again)
    settings = repro.study_settings(repro.Keys(tiny=True), extra)
    repro.restore_runs(str(tmp_path / "third"), os.path.join(root, "report"), {**settings, "weight_decay": 0.5})
    assert not os.path.exists(tmp_path / "third")
    assert "trained with weight_decay=0.1 (here: 0.5)" in capsys.readouterr().out
    short = os.path.join(tmp_path, "short", "runs", "baseline", "seed1337")
    shutil.copytree(os.path.join(kept, "baseline", "seed1337"), short)
    measured = json.load(open(os.path.join(short, "measured.json")))
    json.dump({**measured, "iter": 3}, open(os.path.join(short, "measured.json"), "w"))  # its state at iter 3
    log = [line for line in open(os.path.join(short, "log.jsonl")) if json.loads(line)["iter"] <= 3]
    open(os.path.join(short, "log.jsonl"), "w").writelines(log)  # and its log, where it stopped
    repro.restore_runs(str(tmp_path / "third"), os.path.join(tmp_path, "short"), settings)
    assert not os.path.exists(tmp_path / "third") and "it was measured at iter 3 of 6" in capsys.readouterr().out
    # `restore`: the kept runs back and nothing trained, for a report drawn again (on any machine); once only
    restore = ["restore", "--tiny", f"--root={tmp_path / 'fourth'}", f"--report_dir={os.path.join(root, 'report')}"]
    repro.main(restore + extra)
    assert "restored from" in capsys.readouterr().out and not glob.glob(str(tmp_path / "fourth" / "*" / "*" / "*.pt"))
    assert repro.trained_runs(str(tmp_path / "fourth")) == runs
    repro.main(restore + extra)
    assert "nothing restored: " in capsys.readouterr().out
    repro.main([*restore[:2], f"--root={tmp_path / 'fifth'}", restore[3]])  # without the keys they were trained with
    assert capsys.readouterr().out.count("not restored: it was trained with") == 4
    assert repro.trained_runs(str(tmp_path / "fifth")) == []
    # a report drawn where the runs were restored reads each under its own root, not at the path it was evaluated at
    # (another machine's, say): there its checkpoint is gone and its evaluation kept, so it is not out of date
    moved = str(tmp_path / "moved-report")
    shutil.copytree(os.path.join(root, "report"), moved)
    summary = json.load(open(os.path.join(moved, "evaluate", "summary.json")))
    for r in summary["models"]:
        r["run"] = os.path.join(str(tmp_path / "another-machine"), r["label"])
    json.dump(summary, open(os.path.join(moved, "evaluate", "summary.json"), "w"))
    section = report.evaluate_section(moved, str(tmp_path / "fourth"), runs)
    assert "Downstream consequences" in section and "Out of date" not in section

    ckpt = os.path.join(root, "baseline", "seed1338", "ckpt.pt")  # trained again after its evaluation
    os.utime(ckpt, (time.time() + 60, time.time() + 60))
    assert "Out of date: the checkpoints of baseline/seed1338 changed" in report.evaluate_section(
        os.path.join(root, "report"), root, runs)
    evaluated = os.path.join(root, "report", "evaluate", "summary.json")  # as after `lab.repro evaluate baseline`
    summary = json.load(open(evaluated))
    json.dump({**summary, "models": summary["models"][:2]}, open(evaluated, "w"))
    assert "Not evaluated: g1_elementwise/seed1337, g1_elementwise/seed1338" in report.evaluate_section(
        os.path.join(root, "report"), root, runs)


def read_commands(root):
    return [json.loads(line) for line in open(os.path.join(root, "commands.jsonl"))]


def test_a_report_refuses_runs_not_trained_alike():
    """Runs that differ in a study setting their variants do not set cannot be compared: each setting is named with
    its values and runs. The variant's own flags (a sweep's learning rate) and the seed may differ."""
    def run(variant, seed, **config):
        return {"variant": variant, "seed": seed, "train_config": {"weight_decay": 0.1, "max_iters": 100,
                                                                   "learning_rate": 3e-3, "seed": seed, **config}}
    names = ["weight_decay", "max_iters", "learning_rate", "seed"]
    alike = [run("baseline", 1337), run("baseline", 1338), run("baseline_lr0.012", 1337, learning_rate=1.2e-2)]
    assert repro.unalike(alike, names) == []
    assert repro.unalike(alike + [run("g1_elementwise", 1337, weight_decay=0.5)], names) == \
        ["weight_decay: 0.1 (baseline seed 1337, baseline seed 1338, baseline_lr0.012 seed 1337); "
         "0.5 (g1_elementwise seed 1337)"]
    assert repro.differences({"weight_decay": 0.1, "seed": 1}, {"weight_decay": 0.5, "seed": 2}, "baseline") == \
        ["weight_decay=0.5 (here: 0.1)"]
    # a sweep's run differs from the study's learning rate by its own flags, and is restored as trained alike
    assert repro.differences({"learning_rate": 3e-3, "min_lr": 3e-4, "weight_decay": 0.1},
                             {"learning_rate": 0.024, "min_lr": 0.0024, "weight_decay": 0.1}, "baseline_lr0.024") == []


def fake_study(windows=600, seeds=3, **shift):
    """Per-window values and records of a study made up to test the report: each variant's loss on the same
    windows, shifted by shift[variant] (a real difference), plus a seed effect of 0.01 nats; its gate scores (if it
    has a gate) between 0.1 and 0.3, shifted by the same amount."""
    rng = np.random.default_rng(0)
    hard = rng.normal(3.0, 0.5, windows)  # how hard each validation window is, the same for every run
    by, win = {}, {}
    for v, d in shift.items():
        for s in range(seeds):
            w = {"val_loss": hard + d + rng.normal(0, 0.01) + rng.normal(0, 0.02, windows)}
            for key in ("first_token_attn", "sink_share", "max_act", "peak_act"):
                w[key] = np.abs(rng.normal(0.3, 0.05, windows))
            w["gate_mean"] = None if VARIANTS[v].flags["gate"] == "none" else rng.uniform(0.1, 0.3, windows) + d
            win.setdefault(v, []).append(w)
            record = {"variant": v, "seed": 1337 + s, "lr": (VARIANTS[v].train or {}).get("learning_rate", 3e-3),
                      "iter": 1600, "max_iters": 1600, "exit_code": 0, "nonfinite_steps": 0, "loss_spikes": s}
            record.update({m.key: None if w.get(m.key) is None else float(np.mean(w[m.key])) for m in MEASURES
                           if m.key not in ("sink_heads", "gate_below_0.1", "loss_spikes")})
            record.update(sink_heads=0.1, **{"gate_below_0.1": 0.4 if w["gate_mean"] is not None else None})
            by.setdefault(v, []).append(record)
    variants_ = {v: {"seeds": [r["seed"] for r in rs], **{m.key: report.over_seeds([r[m.key] for r in rs])
                                                          for m in MEASURES}} for v, rs in by.items()}
    return by, win, variants_


def test_claims_are_decided_by_rule_on_known_differences():
    """Three seeds a side: a variant made 0.05 nats better on every window is 'reproduced' where the paper says
    lower, 'not reproduced' where it says higher; one 0.0 apart is 'inconclusive'; with fewer than three seeds on a
    side the verdict is 'too few seeds', whatever the interval; a missing run is said. Beside the verdict: whether
    the estimate points the paper's way, and whether it is the paper's size."""
    by, win, variants_ = fake_study(baseline=0.0, g1_elementwise=-0.05, g1_headwise=0.0, g2_elementwise=+0.05,
                                    g1_head_shared=0.0)
    result = {c[0]: repro.claim_result(*c, win) for c in repro.CLAIMS}
    g1 = result["GA: a sigmoid gate on each head's SDPA output (G1 elementwise) lowers the loss"]
    assert g1["verdict"] == "reproduced" and g1["seeds"] == 3 and 2 < g1["df"] < 5
    assert g1["estimate"] == pytest.approx(-0.05, abs=0.02) and g1["lo"] < g1["estimate"] < g1["hi"] < 0
    # GA: PPL 6.026 -> 5.761, ln(5.761 / 6.026) = -0.045 nats: ours is the same size
    assert g1["paper_effect"] == pytest.approx(math.log(5.761 / 6.026))
    assert (g1["pointing"], g1["size"]) == ("same direction", "same size (within ×2)")
    assert g1["ref_mean"] == pytest.approx(np.mean(g1["ref_seeds"])) and len(g1["ref_seeds"]) == 3
    assert result["GA: a headwise G1 gate lowers the loss too"]["verdict"] == "inconclusive"
    g2 = result["GA: gating the values (G2) lowers the loss"]
    assert g2["verdict"] == "not reproduced" and g2["pointing"] == "opposite"
    assert g2["size"] == "opposite to the paper's"
    assert result["GA: G2 helps less than G1"]["verdict"] == "reproduced"  # +0.10 above G1, the paper's direction
    # the gate's sparsity is comparative: G1's scores (0.05 lower here) against G2's and the head-shared gate's
    sparser = result["GA: G1's gate scores are sparser than G2's (value gate)"]
    assert sparser["verdict"] == "reproduced" and sparser["estimate"] == pytest.approx(-0.10, abs=0.01)
    assert sparser["paper_effect"] == pytest.approx(0.116 - 0.221)
    assert result["GA: G1's gate scores are sparser than a head-shared gate's"]["verdict"] == "reproduced"
    assert result["GA: G1's gate scores are sparser than an input-independent gate's"]["verdict"] == \
        "not measured (g1_input_independent not trained)"
    # a ratio: the ratio of the geometric means over seeds, as its interval
    sink = result["GA: G1 reduces the attention sink (attention on the first token)"]
    assert sink["estimate"] == pytest.approx(sink["var_mean"] / sink["ref_mean"])
    assert sink["var_mean"] == pytest.approx(math.exp(np.mean(np.log(sink["var_seeds"]))))
    assert sink["lo"] < sink["estimate"] < sink["hi"] and sink["paper_effect"] == pytest.approx(math.log(0.048 / 0.467))
    assert result["GA: gating after the output projection (G5) helps less than G1"]["verdict"] == \
        "not measured (g5 not trained)"
    # a fixed value as the reference: the variant's three seeds against it
    fixed = repro.claim_result("G1's mean gate score is below 0.5", 0.5, "g1_elementwise", "gate_mean", -1, win)
    assert fixed["verdict"] == "reproduced" and fixed["ref_mean"] == 0.5 and fixed["size"] is None
    for seeds in (1, 2):
        _, few_win, _ = fake_study(seeds=seeds, baseline=0.0, g1_elementwise=-0.05)
        few = repro.claim_result(*repro.CLAIMS[0], few_win)
        assert few["verdict"] == "too few seeds" and few["estimate"] == pytest.approx(-0.05, abs=0.03)
        assert (few["lo"] is None) == (seeds == 1) and few["pointing"] == "same direction"
    whole = repro.claim_result("below 1", 1, "g1_elementwise", "gate_mean", -1, win)  # an int is a fixed value too
    assert whole["verdict"] == "reproduced" and whole["ref_mean"] == 1 and whole["reference"] == 1
    fixed_two = repro.claim_result("below 0.5", 0.5, "g1_elementwise", "gate_mean", -1, few_win)
    assert fixed_two["verdict"] == "too few seeds" and fixed_two["hi"] < -0.2  # clear, but two seeds


def test_the_claims_say_whose_they_are():
    """A claim starts with the paper that makes it (GA: or GN:), or says it is the project's own (the sink share is
    a measure of this project's); GA's sparsity claim is comparative; GA's G2 keeps the sink."""
    for claims in (repro.CLAIMS, repro.LAB_CLAIMS):
        for claim, ref, variant, measure, direction in claims:
            assert claim.startswith(("GA: ", "GN: ", "ours (not a paper's claim): ")), \
                f"{claim!r} starts with none of 'GA: ', 'GN: ', 'ours (not a paper's claim): '"
            # the project's own: a claim on its own measure (the sink share), or on a control no paper trained
            assert (measure == "sink_share" or variant in variants.CONTROLS) == claim.startswith("ours"), \
                f"{claim!r}: a claim on a variant of CONTROLS (no paper trained it) or on the sink share starts " \
                "with 'ours (not a paper's claim): ', and no other does"
            assert isinstance(ref, str), claim  # every claim compares two variants: no fixed value here
            if measure == "gate_mean":
                assert variant == "g1_elementwise" and direction == -1 and "sparser" in claim
        g2_sink = [c for c in claims if c[2] == "g2_elementwise" and c[3] == "first_token_attn"]
        assert all(c[1] == "g1_elementwise" and c[4] == +1 for c in g2_sink)
    assert ("GA: a G2 (value) gate keeps more of the sink than G1", "g1_elementwise", "g2_elementwise",
            "first_token_attn", +1) in repro.LAB_CLAIMS
    gate_refs = {ref for _, ref, _, measure, _ in repro.CLAIMS if measure == "gate_mean"}
    assert {"g2_elementwise", "g1_head_shared"} <= gate_refs
    assert not hasattr(report, "UNTRAINED_GATE")


def test_the_claims_table_gives_each_sides_seeds_and_a_dash_where_a_claim_has_no_paper():
    """seeds: the reference's / the variant's (here 3 / 2: too few); a fixed reference: the variant's seeds alone,
    and no paper's size or numbers to set beside it."""
    _, win, _ = fake_study(baseline=0.0, g1_elementwise=-0.05)
    win["g1_elementwise"] = win["g1_elementwise"][:2]
    loss = repro.claim_result(*repro.CLAIMS[0], win)
    fixed = repro.claim_result("G1's mean gate score is below 0.5", 0.5, "g1_elementwise", "gate_mean", -1, win)
    rows = report.claims_section([loss, fixed])[-2:]
    assert "| 3 / 2 | **too few seeds** | same direction |" in rows[0], rows[0]
    assert rows[1].endswith("| 2 | **too few seeds** | same direction | – | – | – |"), rows[1]


def test_a_variants_runs_say_how_many_finished_exited_non_zero_and_skipped_steps():
    runs = [dict(iter=10, max_iters=10, exit_code=0, nonfinite_steps=2),
            dict(iter=4, max_iters=10, exit_code=1, nonfinite_steps=3),
            dict(iter=10, max_iters=10, exit_code=None, nonfinite_steps=None)]  # not recorded: none counted
    assert report.status(runs) == "2/3 finished, 1 exited non-zero, 5 non-finite steps skipped"
    assert report.status(runs[2:]) == "1/1 finished"


def test_sink_counts_lead_the_sink_lab_report():
    """A run grew a sink head when its sink heads are above 0; per variant k of n with the exact interval, and the
    claims of counts decided by Fisher's exact test (4 of 5 against 0 of 5: p = 0.024)."""
    def runs(v, *sink_heads):
        return [{"variant": v, "seed": 1337 + i, "sink_heads": x, "iter": 400, "max_iters": 400}
                for i, x in enumerate(sink_heads)]
    by = {"baseline": runs("baseline", 1.0, 1.0, 0.0, 1.0, 1.0), "g1_elementwise": runs("g1_elementwise", *[0.0] * 5),
          "g1_headwise": runs("g1_headwise", 0.0, 0.0),
          "g2_elementwise": runs("g2_elementwise", 0.0, 1.0, 0.0, 0.0, 0.0)}
    counts = repro.sink_counts(by, repro.LAB_COUNTS)
    assert counts["variants"]["baseline"] == {"k": 4, "n": 5, "lo": pytest.approx(0.2836, abs=1e-4),
                                              "hi": pytest.approx(0.9949, abs=1e-4), "trained": 5, "stopped": 0}
    assert counts["variants"]["g1_elementwise"]["k"] == 0 and counts["variants"]["g1_elementwise"]["lo"] == 0
    decided = {c["variant"]: c for c in counts["claims"]}
    assert decided["g1_elementwise"]["verdict"] == "reproduced" and decided["g1_elementwise"]["p"] == \
        pytest.approx(5 / 210)
    assert decided["g1_headwise"]["verdict"] == "too few seeds"  # 2 seeds
    assert decided["g2_elementwise"]["verdict"] == "inconclusive"  # 1 of 5 against 0 of 5
    assert decided["g1_ns_sigmoid"]["verdict"] == "not measured (g1_ns_sigmoid not trained)"
    lines = report.counts_section(counts)
    assert lines[1] == "## Seeds that grew a sink head" and counts["rule"] in lines[3]
    assert "| baseline | 4 of 5 | 0.80 [0.28, 0.99] |" in lines
    assert "| GA: G1 removes the sink | baseline: 4 of 5 | g1_elementwise: 0 of 5 | 0.0238 | 1 | **reproduced** |" \
        in lines
    untrained = next(line for line in lines if "g1_ns_sigmoid: –" in line)  # no counts: no p, and no bold verdict
    assert untrained.endswith("| – | – | not measured (g1_ns_sigmoid not trained) |"), untrained
    assert report.counts_section(None) == []
    # a run whose sink heads were not measured is no seed of the count: 4 of 5 measured, not of 6 runs; a variant
    # none of whose runs was measured has no count at all
    by["baseline"].append({"variant": "baseline", "seed": 1342, "sink_heads": None, "iter": 400, "max_iters": 400})
    by["g1_headwise"] = [dict(r, sink_heads=None) for r in by["g1_headwise"]]
    counts = repro.sink_counts(by, repro.LAB_COUNTS)
    assert (counts["variants"]["baseline"]["k"], counts["variants"]["baseline"]["n"]) == (4, 5)
    assert "| baseline | 4 of 5 (1 more trained, not measured) | 0.80 [0.28, 0.99] |" in report.counts_section(counts)
    assert "g1_headwise" not in counts["variants"]
    headwise = next(c for c in counts["claims"] if c["variant"] == "g1_headwise")  # trained, but nothing to count
    assert headwise["verdict"] == "not measured (g1_headwise's sink heads not measured)", headwise
    alone = repro.sink_counts({"g1_elementwise": by["g1_elementwise"]}, [("c", "baseline", "g1_elementwise", -1)])
    assert alone["claims"][0]["verdict"] == "not measured (baseline not trained)"  # the reference's side missing


def test_a_seed_stopped_early_is_counted_for_no_sink_and_ranks_nothing():
    """A run that stopped before its max_iters (diverged) holds an earlier state: whether a sink had formed by its end
    is not known, so the counts leave it out and say so, a claim of counts on its variant is not decided (as a claim
    on means is), and its variant takes no part in the Measured table's bold ranking."""
    by, _, _ = fake_study(baseline=0.0, g1_elementwise=-0.05, g2_elementwise=-0.5)
    for v, heads in (("baseline", 1.0), ("g1_elementwise", 0.0), ("g2_elementwise", 0.0)):
        for r in by[v]:
            r.update(sink_heads=heads, model={"n_layer": 1, "n_head": 1})
    claims = [("G1 removes the sink", "baseline", "g1_elementwise", -1)]
    assert repro.sink_counts(by, claims)["claims"][0]["verdict"] == "too few seeds"  # 3 of 3 against 0 of 3
    by["g2_elementwise"][0]["iter"] = 10  # diverged at step 10 of 1600: its loss, the lowest, an earlier state's
    variants_ = {v: {m.key: repro.over_variant(rs, m.key) for m in MEASURES} for v, rs in by.items()}
    table = report.measured_section(by, variants_)
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in table
            if line.startswith("| ") and "---" not in line}
    shown = [m.key for m in MEASURES if not m.mechanism]
    loss, sinks = (4 + shown.index(key) for key in ("val_loss", "sink_heads"))
    assert rows["g2_elementwise"][3] == "2/3 finished" and "**" not in "|".join(rows["g2_elementwise"])
    assert rows["g1_elementwise"][loss].startswith("**")  # the best of the finished variants
    assert "g2_elementwise left out: a seed stopped early, its values an earlier state's" in table[-1]
    assert rows["g2_elementwise"][sinks] == "0 of 2 (1 more trained, 1 stopped early)"
    by["baseline"][1]["iter"] = 700  # diverged at step 700, a sink head in its last saved state
    counts = repro.sink_counts(by, claims)
    assert counts["variants"]["baseline"] == dict(counts["variants"]["baseline"], k=2, n=2, trained=3, stopped=1)
    assert counts["claims"][0]["verdict"] == ("not decided (1 of 3 seeds of baseline stopped early, whether a sink had "
                                              "formed by their end not known)")
    assert "| baseline | 2 of 2 (1 more trained, 1 stopped early) |" in "\n".join(report.counts_section(counts))
    assert report.uncounted(3, 1, 1) == " (2 more trained, 1 stopped early, 1 not measured)"
    assert report.uncounted(3, 2, 0) == " (1 more trained, not measured)" and report.uncounted(3, 3, 0) == ""
    by["baseline"] = [dict(r, iter=5) for r in by["baseline"]]
    assert repro.sink_counts(by, claims)["claims"][0]["verdict"] == \
        "not measured (every seed of baseline stopped early)"


def test_runs_measured_with_the_old_sink_share_are_named_as_such():
    """A run measured before the sink share left its gap (its record has no value norm ratio) measures recency at
    the half-window boundary: the report says so, and says nothing where every run has the new measure."""
    new = {"variant": "g1", "seed": 1, "layers": {"value_norm_ratio": [0.5]}}
    old = {"variant": "baseline", "seed": 1337, "layers": {"first_token_attn": [0.1]}}
    assert report.old_sink_share({"g1": [new]}) == ""
    said = report.old_sink_share({"baseline": [old, dict(old, seed=1338)], "g1": [new]})
    assert said.startswith(" 2 of the runs (baseline/seed1337, ...)") and "recency, not a sink" in said


@pytest.mark.parametrize("claim, said", [
    (("ours: x", "baseline", "g1_elementwise", "f_attn", -1), "names the measure 'f_attn'; the measures are val_loss"),
    (("ours: x", "baseline", "g1_no_such", "first_token_attn", -1), "names 'g1_no_such', not a variant of lab"),
    (("ours: x", "no_such", "g1_elementwise", "first_token_attn", -1), "names 'no_such', not a variant"),
    (("ours: x", "baseline", "g1_elementwise", "first_token_attn", 0), "has the direction 0, not -1 or +1"),
    (("ours: x", "baseline", "g1_elementwise", "first_token_attn", 2), "has the direction 2, not -1 or +1"),
    (("ours: x", 0, "g1_elementwise", "first_token_attn", -1), "has the fixed reference 0: a finite number, above 0"),
    (("ours: x", float("nan"), "g1_elementwise", "val_loss", -1), "has the fixed reference nan: a finite number"),
])
def test_a_claim_that_cannot_be_decided_stops_the_report_before_it_reads_a_run(claim, said, tmp_path):
    """A claim added by hand (docs/flags.md's example) is checked first: one line naming it, no runs read, nothing
    written (here the root does not even exist)."""
    study = dataclasses.replace(repro.STUDIES["sink_lab"], claims=[*repro.LAB_CLAIMS, claim])
    with pytest.raises(SystemExit) as stop:
        repro.report(str(tmp_path / "runs"), str(tmp_path / "report"), False, "report", study)
    assert str(stop.value).startswith("error: the claim 'ours: x' ") and said in str(stop.value), stop.value
    assert not (tmp_path / "report").exists()
    count = dataclasses.replace(repro.STUDIES["sink_lab"], counts=[*repro.LAB_COUNTS, ("c", "baseline", "g1", -1)])
    assert repro.claim_problem(count) == "the claim 'c' names 'g1', not a variant of lab.variants.VARIANTS"
    count = dataclasses.replace(repro.STUDIES["sink_lab"], counts=[("c", 0.5, "g1_elementwise", -1)])
    assert repro.claim_problem(count) == "the claim 'c' names 0.5, not a variant of lab.variants.VARIANTS"
    assert all(repro.claim_problem(study) is None for study in repro.STUDIES.values())


def test_a_claim_never_pools_the_old_and_the_new_sink_share():
    """Runs measured by the probe's older sink share are left out of the sink-share claim (the others decide it,
    here one seed a side: too few), the claims table says how many, and every other measure keeps them."""
    by, win, _ = fake_study(baseline=0.0, g1_elementwise=-0.05)
    old = {"iter": 9, "max_iters": 9, "layers": {"first_token_attn": [0.1]}}  # from before the value norm ratio
    new = {"iter": 9, "max_iters": 9, "layers": {"first_token_attn": [0.1], "value_norm_ratio": [0.5]}}
    for v in ("baseline", "g1_elementwise"):
        win[v] = [repro.comparable(old, w) for w in win[v][:2]] + [repro.comparable(new, win[v][2])]
    assert all("sink_share" in w for w in win["baseline"][2:]) and "sink_share" not in win["baseline"][0]
    claims = {c[3]: repro.claim_result(*c, win) for c in repro.CLAIMS[:9] if c[1:3] == ("baseline", "g1_elementwise")}
    share = claims["sink_share"]
    assert (share["n_seeds_ref"], share["n_seeds_var"], share["verdict"]) == (1, 1, "too few seeds")
    assert share["left_out"] == {"baseline": 2, "g1_elementwise": 2}
    assert claims["first_token_attn"]["n_seeds_ref"] == 3 and "left_out" not in claims["first_token_attn"]
    row = next(line for line in report.claims_section([share]) if line.startswith(f"| {share['claim']} |"))
    assert "| 1 / 1 (left out, measured by an older probe: 2 of baseline, 2 of g1_elementwise) |" in row
    one_side = dict(share, left_out={"baseline": 2, "g1_elementwise": 0})  # a side with none left out is not named
    assert "| 1 / 1 (left out, measured by an older probe: 2 of baseline) |" in report.claims_section([one_side])[-1]
    lacking = {**win, "baseline": [dict(w, max_act=None) if i == 0 else w for i, w in enumerate(win["baseline"])]}
    assert repro.claim_result(*next(c for c in repro.CLAIMS if c[3] == "max_act"), lacking)["verdict"].startswith(
        "not measured")  # a seed that lacks a measure for any other reason is never silently left out
    for v in ("baseline", "g1_elementwise"):  # every run measured by the older probe: no verdict, and why
        win[v][2] = repro.comparable(old, win[v][2])
    assert repro.claim_result(*next(c for c in repro.CLAIMS if c[3] == "sink_share"), win)["verdict"] == \
        "not measured (every run of a side was measured by the probe's older sink share)"


def test_a_claim_with_a_seed_stopped_early_is_not_decided():
    """A seed that stopped before its max_iters (diverged) holds an earlier state's values: a claim on either side of
    it keeps its numbers but is not decided, and says which seeds, as the sweep's rows do; finished seeds decide."""
    by, win, _ = fake_study(baseline=0.0, g1_elementwise=-0.05)
    run = {"iter": 1600, "max_iters": 1600, "layers": {"first_token_attn": [0.1], "value_norm_ratio": [0.5]}}
    win = {v: [repro.comparable(run, w) for w in ws] for v, ws in win.items()}
    loss = repro.claim_result(*repro.CLAIMS[0], win)
    fixed = ("G1's mean gate score is below 0.5", 0.5, "g1_elementwise", "gate_mean", -1)
    assert loss["verdict"] == repro.claim_result(*fixed, win)["verdict"] == "reproduced"
    win["g1_elementwise"][1] = repro.comparable(dict(run, iter=700), win["g1_elementwise"][1])
    stopped = repro.claim_result(*repro.CLAIMS[0], win)
    assert stopped["verdict"] == ("not decided (1 of 3 seeds of g1_elementwise stopped early, their val loss an "
                                  "earlier state's)")
    assert {k: stopped[k] for k in ("estimate", "lo", "hi")} == {k: loss[k] for k in ("estimate", "lo", "hi")}
    assert repro.claim_result(*fixed, win)["verdict"].startswith("not decided (1 of 3 seeds of g1_elementwise")
    win["baseline"][0] = repro.comparable(dict(run, iter=5), win["baseline"][0])
    assert repro.claim_result(*repro.CLAIMS[0], win)["verdict"].startswith(
        "not decided (1 of 3 seeds of baseline stopped early; 1 of 3 seeds of g1_elementwise stopped early, ")
    row = report.claims_section([stopped])[-1]
    assert f"| **{stopped['verdict']}** |" in row


def test_the_tables_never_pool_the_old_and_the_new_sink_share():
    """The Measured table's sink share is over the runs the current probe measured; those of the older probe are
    shown apart, never in one mean; every other measure keeps every seed. The per-layer tables show a seed the
    current probe measured where there is one, and say so where there is none."""
    by, _, _ = fake_study(baseline=0.0, g1_elementwise=-0.05)
    old, new = {"first_token_attn": [0.1, 0.2]}, {"first_token_attn": [0.1, 0.2], "value_norm_ratio": [0.5, 0.4]}
    for v in by:  # the first two seeds of each measured by the older probe, the third by the current one
        for i, r in enumerate(by[v]):
            r["layers"] = new if i == 2 and v == "baseline" else old
            r["sink_share"] = 0.5 if r["layers"] is old else 0.125
    variants_ = {v: {m.key: repro.over_variant(rs, m.key) for m in MEASURES} for v, rs in by.items()}
    assert variants_["baseline"]["sink_share"]["values"] == [0.125]  # the older probe's 0.5 pooled into none
    assert variants_["baseline"]["val_loss"]["n"] == 3 and variants_["g1_elementwise"]["sink_share"] is None
    table = "\n".join(report.measured_section(by, variants_))
    cells = {line.split(" | ")[0][2:]: line.split(" | ")[[m.key for m in MEASURES if not m.mechanism].index(
        "sink_share") + 4] for line in table.splitlines() if line.startswith(("| baseline |", "| g1_elementwise |"))}
    assert cells == {"baseline": "0.125 (1 seed); older probe: 0.500, 0.500", "g1_elementwise": "older probe: "
                     "0.500, 0.500, 0.500"}
    assert "never in one mean with the others" in table
    assert table.count("older probe: ") == 2  # the sink share's cells only: every other measure keeps every seed
    assert [r["seed"] for r in by["g1_elementwise"]] == [1337, 1338, 1339]
    records = by["baseline"] + by["g1_elementwise"]
    analyzed = [{"layers": r["layers"], "seed": r["seed"]} for r in records]
    assert report.one_seed(records, analyzed, "baseline")[0]["seed"] == 1339  # the one the current probe measured
    assert report.one_seed(records, analyzed, "g1_elementwise")[0]["seed"] == 1337  # none: the first
    assert report.older_sink_share({"val_loss": 1.0}) is False  # a record with no per-layer values says nothing


def test_the_sink_heads_of_one_head_models_are_counted_not_averaged():
    """A model with one attention head (the sink lab's) has 0 or 1 sink heads: a yes/no a run, which the Measured
    table counts over seeds ('1 of 4') as the sink counts do, never a mean with a t-interval. A model with more heads
    keeps its share's mean, even where every run's share is 0 (a share, not a count, in that column)."""
    by, _, _ = fake_study(baseline=0.0, g1_elementwise=-0.05, seeds=4)
    for i, r in enumerate(by["baseline"]):
        r.update(sink_heads=float(i == 0), model={"n_layer": 1, "n_head": 1})
    for r in by["g1_elementwise"]:
        r.update(sink_heads=0.0, model={"n_layer": 2, "n_head": 4})
    variants_ = {v: {m.key: repro.over_variant(rs, m.key) for m in MEASURES} for v, rs in by.items()}
    table = report.measured_section(by, variants_)
    column = 4 + [m.key for m in MEASURES if not m.mechanism].index("sink_heads")
    cells = {line.split(" | ")[0][2:]: line.split(" | ")[column] for line in table if line.startswith("| baseline |")
             or line.startswith("| g1_elementwise |")}
    assert cells == {"baseline": "1 of 4", "g1_elementwise": "**0.00 ± 0.00**"}, cells
    assert "how many of its runs grew a sink head" in table[-1]
    for r in by["g1_elementwise"]:  # two layers of one head each: two heads a run, a share again
        r["model"] = {"n_layer": 2, "n_head": 1}
    assert report.one_head(by["baseline"]) and not report.one_head(by["g1_elementwise"])
    by["baseline"][0]["model"] = None  # a record that does not say its model: its share, as before
    variants_ = {v: {m.key: repro.over_variant(rs, m.key) for m in MEASURES} for v, rs in by.items()}
    table = report.measured_section(by, variants_)
    assert "how many of its runs" not in table[-1] and "| 0.25 ± " in "\n".join(table)


def test_numbers_over_seeds_list_one_or_two_seeds_and_give_an_interval_from_three():
    assert report.fmt_ci(report.over_seeds([1.25]), ".2f") == "1.25 (1 seed)"
    assert report.fmt_ci(report.over_seeds([1.25, 1.5]), ".2f") == "1.25, 1.50"
    three = report.over_seeds([1.0, 2.0, 3.0])
    assert three["values"] == [1.0, 2.0, 3.0] and report.fmt_ci(three, ".2f") == f"2.00 ± {4.302653 / math.sqrt(3):.2f}"
    assert report.fmt_ci(report.over_seeds([0, 1, 2]), "g") == "1 ± 2.48" and report.fmt_ci(None, ".2f") == "–"
    assert report.over_seeds([1.0, None, 2.0]) is None  # a seed without the measure: no mean of the others as all
    # lab/evaluate.py's numbers: a mean over windows ± half its interval
    assert report.fmt_interval({"mean": 1.0, "lo": 0.8, "hi": 1.4}, ".2f", sign=True) == "+1.00 ± 0.30"
    assert report.fmt_interval({"mean": 1.0, "lo": None, "hi": None}, ".2f") == "1.00"
    assert report.finite_json({"a": [1.0, float("inf"), np.float32("nan")], "n": np.int64(2)}) == \
        ({"a": [1.0, None, None], "n": 2}, 2)  # JSON has no infinity either


def test_the_sweep_pairs_baseline_and_g1_at_each_learning_rate():
    shift = {"baseline": 0.0, "g1_elementwise": -0.01, "baseline_lr0.024": 0.5, "g1_elementwise_lr0.024": 0.1,
             "baseline_lr0.006": 0.05}
    by, win, _ = fake_study(**shift)
    by["baseline_lr0.024"][1]["iter"] = 400  # a seed that diverged, stopped at iter 400 of 1600
    rows = repro.sweep_rows(by, win)
    assert [r["lr"] for r in rows] == [3e-3, 6e-3, 2.4e-2]
    assert rows[2]["difference"]["verdict"].startswith("not decided on the loss (1 of 3 / 0 of 3 seeds stopped") \
        and rows[2]["difference"]["estimate"] == pytest.approx(-0.4, abs=0.03)
    assert rows[1]["g1_elementwise"] is None and "difference" not in rows[1]  # only the baseline ran at 6e-3
    assert rows[2]["baseline"]["loss_spikes"] == [0, 1, 2]
    table = [line for line in report.sweep_section(rows) if line.startswith("| 0.")]
    assert len(table) == 3 and table[1].startswith("| 0.006 | ") and "| – | not measured |" in table[1]
    assert table[1].endswith("| – | 3/3 / – |")  # g1's val loss, M-Act and spikes: '–' (a report, not a crash)
    # finishing is a yes/no per seed: counted, baseline's then G1's, never one word for all seeds
    assert rows[2]["baseline"]["finished"] == [True, False, True] and table[2].endswith("| 2/3 / 3/3 |")
    loss, act = MEASURE["val_loss"], MEASURE["max_act"]  # each model's own numbers, then G1's − the baseline's
    x, y, d = rows[2]["baseline"], rows[2]["g1_elementwise"], rows[2]["difference"]
    assert table[2].strip("| ").split(" | ")[1:7] == [
        report.fmt_ci(x["val_loss"], loss.spec), report.fmt_ci(y["val_loss"], loss.spec),
        report.fmt_difference(d, "diff"), d["verdict"], report.fmt_ci(x["max_act"], act.spec),
        report.fmt_ci(y["max_act"], act.spec)]
    assert "paired" not in "\n".join(report.sweep_section(rows))  # an unpaired test over seeds: it says no more
    assert "Only this rate is trained" not in "\n".join(report.sweep_section(rows))
    # the rows go by learning rate, whichever model was trained at it (G1 alone at 0.006, the baseline at 0.024)
    by, win, _ = fake_study(**{"baseline": 0.0, "g1_elementwise": -0.01, "baseline_lr0.024": 0.5,
                               "g1_elementwise_lr0.006": 0.0})
    assert [r["lr"] for r in repro.sweep_rows(by, win)] == [3e-3, 6e-3, 2.4e-2]


def test_one_learning_rate_is_a_table_row_not_a_sweep_figure(tmp_path):
    """Before the sweep's runs are trained the study has one rate: its row, a line saying how to train the rest, and
    no lr_sweep.png (one x value is no curve; matplotlib's layout of it divided by zero)."""
    by, win, _ = fake_study(baseline=0.0, g1_elementwise=-0.01)
    rows = repro.sweep_rows(by, win)
    assert [r["lr"] for r in rows] == [3e-3]
    section = "\n".join(report.sweep_section(rows))
    assert section.count("\n| 0.003 | ") == 1 and "`python -m lab.repro train sweep`" in section
    assert report.plot_sweep(rows, str(tmp_path)) == [] and not (tmp_path / "lr_sweep.png").exists()


def test_the_sweep_plot_leaves_out_what_a_run_did_not_measure(tmp_path):
    """A sweep row whose runs lack a measure (None) or a spike count is drawn without it: not a crash, and a missing
    count is no zero."""
    pytest.importorskip("matplotlib")
    by, win, _ = fake_study(**{"baseline": 0.0, "g1_elementwise": -0.01, "baseline_lr0.024": 0.5,
                               "g1_elementwise_lr0.024": 0.1})
    rows = repro.sweep_rows(by, win)
    rows[1]["baseline"]["max_act"] = None
    rows[1]["baseline"]["loss_spikes"] = [None, None, None]
    assert report.plot_sweep(rows, str(tmp_path)) == ["lr_sweep.png"]
    assert (tmp_path / "lr_sweep.png").stat().st_size > 0


def test_the_sweep_plots_legend_lies_beside_its_panels(tmp_path, monkeypatch):
    """lr_sweep.png's one legend (baseline, G1) lies beside the three panels and in the saved image: inside the loss
    panel it could cover a rate's seed dots."""
    pytest.importorskip("matplotlib")
    by, win, _ = fake_study(**{"baseline": 0.0, "g1_elementwise": -0.01, "baseline_lr0.024": 0.5,
                               "g1_elementwise_lr0.024": 0.1})
    figures = keep_saved(monkeypatch, report)
    assert report.plot_sweep(repro.sweep_rows(by, win), str(tmp_path)) == ["lr_sweep.png"]
    (name, fig, kw), = figures
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()] == list(report.SWEPT)
    assert not any(ax.get_legend() for ax in fig.axes)
    assert_legends_in_image_beside_the_data(name, fig, kw)


def test_the_sweep_plot_draws_m_act_on_its_log_axis_as_a_geometric_mean(tmp_path, monkeypatch):
    """M-Act several times apart between seeds (the tutorial's runs at 100x its rate: 3.2e5 to 1.5e6): its arithmetic
    t-interval reaches below 0, off the log axis, so the plot draws the geometric mean and the interval of the logs,
    as the rule decides a ratio. The loss panel keeps the arithmetic mean."""
    pytest.importorskip("matplotlib")
    acts, losses = [4.4e5, 3.2e5, 1.0e6, 1.5e6], [4.27, 4.34, 4.30, 4.29]
    assert report.mean_ci(acts)[1] < 0

    def row(scale):
        return {"val_loss": report.over_seeds(losses), "max_act": report.over_seeds([a * scale for a in acts]),
                "loss_spikes": [0] * 4}
    sweep = [{"lr": lr, "baseline": row(scale), "g1_elementwise": row(scale / 2)} for lr, scale in ((2e-2, 1e-2),
                                                                                                  (2e-1, 1.0))]
    figures = keep_figures(monkeypatch, report)
    assert report.plot_sweep(sweep, str(tmp_path)) == ["lr_sweep.png"]
    loss_axis, act_axis = figures[0][1].axes[:2]
    for bars in act_axis.containers:  # one errorbar per model: its line of means, then its vertical bars
        lows = [segment[0][1] for segment in bars.lines[2][0].get_segments()]
        assert all(low > 0 for low in lows)
    geometric = math.exp(np.mean(np.log(acts)))
    assert act_axis.containers[0].lines[0].get_ydata()[1] == pytest.approx(geometric)
    assert loss_axis.containers[0].lines[0].get_ydata()[1] == pytest.approx(np.mean(losses))
    # a value that cannot be logged (0) in one model's runs: both models are drawn with the arithmetic mean, alike
    sweep[0]["baseline"]["max_act"] = report.over_seeds([0.0, 1.0, 2.0, 3.0])
    figures.clear()
    report.plot_sweep(sweep, str(tmp_path))
    act_axis = figures[0][1].axes[1]
    assert act_axis.containers[1].lines[0].get_ydata()[1] == pytest.approx(np.mean(acts) / 2)


def test_the_report_adds_up_the_training_time_resumed_parts_and_side_by_side_runs_included():
    records = [{"variant": "baseline", "seed": 1337}, {"variant": "g1_elementwise", "seed": 1337}]
    every = [{"variant": "baseline", "seed": 1337, "seconds": 300.0, "parallel": 1},   # cut short, then resumed:
             {"variant": "baseline", "seed": 1337, "seconds": 60.0, "parallel": 1},    # both parts count
             {"variant": "g1_elementwise", "seed": 1337, "seconds": 480.0, "parallel": 2},  # half the device
             {"variant": "dyt", "seed": 1337, "seconds": 999.0}]                       # not in this report
    line = report.training_time(records, every)[-1]
    assert line.startswith("Training time: 10.0 minutes of the device in all (600 s over 3 commands, runs side by "
                           "side counted at their share)")
    assert report.training_time(records, every[:1])[-1].startswith("Training time: 5.0 minutes of the device in "
                                                                   "all (300 s over 1 command)")
    assert report.training_time(records, []) == []  # nothing recorded: no line, rather than a made-up zero


def test_render_report_states_the_rule_the_verdicts_and_the_papers():
    by, win, variants_ = fake_study(baseline=0.0, g1_elementwise=-0.05, dyt=0.2, g3=0.0)
    records = [dict(r, tokens=104_857_600, model=dict(n_layer=8, n_embd=512, n_head=8, block_size=512, qk_norm=True))
               for rs in by.values() for r in rs]
    layers = {"first_token_attn": [0.3, 0.1], "sink_share": [0.3, 0.2], "sink_heads": [0.25, 0.0], "sink_pos": [0, 0],
              "sink_pos_share": [0.9, 0.5], "sink_token": [50256, 198], "sink_token_share": [0.9, 0.3]}
    analyzed = [{"eval_windows": {"block_size": 512, "bos": True, "data_dir": "/nonexistent"}, "layers": layers,
                 "model": {"vocab_size": 50304}} for _ in records]  # no dataset here: GPT-2's ids, by the vocabulary
    result = {"device": "NVIDIA H100", "date": "2026-11-23", "rule": RULE,
              "validation": dict(batches=32, batch_size=64, source="the eval windows run 'baseline' was trained with"),
              "claims": [repro.claim_result(*c, win) for c in repro.CLAIMS],
              "sweep": repro.sweep_rows(by, win), "variants": variants_, "runs": records}
    commands = {(r["variant"], r["seed"]): dict(command=f"python train.py --out_dir=out-repro/{r['variant']}",
                                                exit_code=0, seconds=240.0, date="2026-11-23 10:00:00")
                for r in records if r["variant"] != "dyt"}
    text = report.render_report(result, "out-repro", False, commands, "python -m lab.repro report", ["trends.png"],
                                analyzed, repro.STUDIES["repro"].title)
    assert "SMOKE" not in text and "To be written" not in text and "TODO" not in text
    assert RULE in text and "never written by hand" in text
    for claim, *_ in repro.CLAIMS:
        assert f"| {claim} |" in text
    g1 = result["claims"][0]
    assert f"{g1['estimate']:+.4f} [{g1['lo']:+.4f}, {g1['hi']:+.4f}], df {g1['df']:.1f} | 3 / 3 | **reproduced** | " \
        "same direction | same size (within ×2) |" in text
    assert f"baseline → g1_elementwise: {g1['ref_mean']:.4f} → {g1['var_mean']:.4f} |" in text  # three seeds: means
    assert "## Seeds that grew a sink head" not in text  # the GPU study counts none
    assert "| GA PPL 6.026 → 5.761 (×0.956) | GA Table 4 |" in text
    assert "GN loss 1.964 → 2.216 (+0.252 nats)" in text  # DyT costs loss in GN
    assert "| dyt | 3 | 0.003 | 3/3 finished |" in text and "2,048 validation windows" in text
    assert "1.05M tokens" in text and "This report: `python -m lab.repro report`" in text
    assert "each starting with <|endoftext|>" in text and "qk_norm=True" in text and "105M training tokens" in text
    assert "Runs: `out-repro/<variant>/seed<N>/`, 3 seeds per variant, each 8 layers" in text
    assert "Left out" not in text
    left = report.render_report(dict(result, unfinished=["baseline seed 1340 (iter 500 of 1600)"]), "out-repro", False,
                                commands, "python -m lab.repro report", [], analyzed, repro.STUDIES["repro"].title)
    assert "Left out, not finished (the same `train` command continues them): baseline seed 1340 (iter 500 of " \
        "1600)." in left.split("\n## ")[0]  # in the header, beside the seeds per variant
    gone = report.render_report(dict(result, unusable=["dyt seed 1339 (no ckpt.pt, and its measured.json cannot be "
                                                       "read)"]), "out-repro", False, commands, "report", [], analyzed,
                                repro.STUDIES["repro"].title)  # a seed whose checkpoint and measurements are gone
    assert "Left out, nothing of them to report: dyt seed 1339 (no ckpt.pt, and its " \
        "measured.json cannot be read)." in gone.split("\n## ")[0]
    assert "g1_elementwise → g5 | – | – | not measured (g5 not trained) | – |" in text
    assert "- dyt seed 1337: not recorded" in text and "`python train.py --out_dir=out-repro/baseline`" in text
    # the papers' numbers, one column per number report.PAPERS gives a measure of probe.MEASURES, in MEASURES' order
    assert "| variant | GA PPL | GN loss | GA F-Attn | GA M-Act | GN max act | GA gate mean | source |" in text
    assert '| g1_elementwise | 5.761 | 1.957 | 0.048 | 94 | 2800 | 0.116 | GA Table 4 "G1 elementwise"; ' \
        'GN Table 1 "+GA" |' in text
    assert '| g3 | 6.016 | – | – | – | – | – | GA Table 1 "G3" |' in text
    assert "PPL 9.195" in text and "## Stability: the learning-rate sweep" in text
    assert "| 0 | 0.300 | 0.300 | 0.25 | 0 (90%) | 50256 `'<\\|endoftext\\|>'` (90%) |" in text  # decoded, | escaped
    assert "| 1 | 0.100 | 0.200 | 0.00 | 0 (50%) | 198 `'\\n'` (30%) |" in text
    assert "whether the sink is still growing" in text
    assert "dyt (seed" not in text and "g3 (seed" not in text  # where the sink is: the baseline's and G1's alone
    # the per-variant table: probe.MEASURES' columns, each column's best mean in bold where the measure has a better
    # direction, said once under the table
    measured = text[text.index("## Measured"):text.index("## GA Table 4")].splitlines()
    header = next(line for line in measured if line.startswith("| variant |")).strip("| ").split(" | ")
    assert header == ["variant", "seeds", "lr", "runs"] + [m.label for m in MEASURES if not m.mechanism]
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in measured if line.startswith("| ")
            and not line.startswith(("| variant", "| ---"))}
    for m in MEASURES:
        if m.mechanism:
            continue
        column = header.index(m.label)
        bold = {v for v, cells in rows.items() if cells[column].startswith("**")}
        means = {v: variants_[v][m.key]["mean"] for v in rows if variants_[v][m.key] is not None}
        if m.better is None or len(set(means.values())) < 2:
            assert not bold, m.key
        else:
            assert bold == {(min if m.better == "lower" else max)(means, key=means.get)}, m.key
    assert rows["g1_elementwise"][header.index("val loss")].startswith("**")  # made 0.05 nats better than the rest
    assert ("In bold: the best mean of each column among the variants with 3 seeds or more (a mean, not a test: the "
            "claims are decided by the rule). Lower is better for val loss, F-Attn, sink share, sink heads, "
            "M-Act, peak act and loss spikes (the direction the papers count as an improvement); gate mean and "
            "gate < 0.1: neither.") in measured


def test_token_ids_are_decoded_by_the_datasets_tokenizer_and_never_guessed(tmp_path):
    """The sink table's top tokens: with the dataset's meta.json, its tokenizer (the sink lab's symbols); drawn again
    without the dataset, GPT-2's only for a GPT-2-sized vocabulary, else the bare id: token 64 of the sink lab is its
    <|endoftext|>, which GPT-2's tokenizer would call 'a'."""
    from data.shards import write_dataset
    tokens = {"train": [np.arange(64, dtype=np.uint16)], "val": [np.arange(8, dtype=np.uint16)]}
    write_dataset(str(tmp_path), "task", tokens, source="symbols", tokenizer="symbols-64")
    assert report.token_decoder(str(tmp_path))(64) == "64 `'<\\|endoftext\\|>'`"
    assert report.token_decoder(str(tmp_path))(3) == "3 `'s3'`"
    missing = str(tmp_path / "gone")
    assert report.token_decoder(missing, vocab_size=65)(64) == "64"
    assert report.token_decoder(missing, vocab_size=50304)(64) == "64 `'a'`"
    assert report.token_decoder(missing)(None) == "–"


def test_a_variant_with_too_few_seeds_is_never_the_best_of_a_column():
    """The best mean in bold is a ranking: a variant of one or two seeds, however low its mean, takes no part."""
    _, _, variants_ = fake_study(baseline=0.0, g1_elementwise=-0.05)
    _, _, two = fake_study(seeds=2, g2_elementwise=-0.5)
    loss = MEASURE["val_loss"]
    assert report.best_variants({**variants_, **two}, loss) == {"g1_elementwise"}
    assert report.best_variants(two, loss) == set()


def test_table4_says_a_side_of_the_baseline_only_where_the_seeds_separate_them():
    """GA Table 4's column beside ours: "as in GA: below the baseline" where the rule's 95% interval of the F-Attn
    ratio over seeds leaves out 1, "not separated" where it holds 1 (never "as high as"), "too few seeds" below three
    seeds a side; the seeds with a sink head are counted among the runs that measured it."""
    by, _, variants_ = fake_study(baseline=0.0, g1_elementwise=0.0, g1_headwise=0.0, g2_elementwise=0.0)
    for v, scale in (("g1_elementwise", 0.2), ("g2_elementwise", 1.0)):
        for i, r in enumerate(by[v]):
            r["first_token_attn"] = by["baseline"][i]["first_token_attn"] * scale + 0.001 * i
        variants_[v]["first_token_attn"] = report.over_seeds([r["first_token_attn"] for r in by[v]])
    by["g1_headwise"] = by["g1_headwise"][:2]
    variants_["g1_headwise"]["first_token_attn"] = report.over_seeds([r["first_token_attn"] for r in by["g1_headwise"]])
    by["g2_elementwise"][0]["sink_heads"] = None  # a run whose sink heads were not measured
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in report.table4_section(by, variants_)
            if line.startswith("| ") and not line.startswith(("| variant", "| ---"))}
    assert rows["baseline"][-1] == "the reference"
    assert rows["g1_elementwise"][-1] == "as in GA: below the baseline"
    assert rows["g1_headwise"][-1] == "too few seeds (3 / 2)"
    assert rows["g2_elementwise"][-1] == "not separated from the baseline"
    assert rows["g2_elementwise"][2] == "2 of 2 (1 more trained, not measured)" and rows["baseline"][2] == "3 of 3"
    by["g1_elementwise"][2]["iter"] = 3  # diverged: its F-Attn an earlier state's, as a claim would not decide
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in report.table4_section(by, variants_)
            if line.startswith("| ") and not line.startswith(("| variant", "| ---"))}
    assert rows["g1_elementwise"][-1] == "a seed stopped early (0 / 1)"
    assert rows["g1_elementwise"][2] == "2 of 2 (1 more trained, 1 stopped early)"
    # the interval of the ratio, as the rule decides F-Attn: here it leaves out 1 (×0.031 [0.0019, 0.51]), where
    # the interval of the difference (−0.49 [−1.48, +0.50]) would hold 0
    spread = {v: [{"variant": v, "seed": 1337 + i, "sink_heads": 0.0, "first_token_attn": x, "iter": 9, "max_iters": 9}
                  for i, x in enumerate(xs)]
              for v, xs in (("baseline", [0.1, 0.5, 0.9]), ("g1_elementwise", [0.010, 0.011, 0.012]))}
    stats = {v: {"first_token_attn": report.over_seeds([r["first_token_attn"] for r in rs])}
             for v, rs in spread.items()}
    assert report.table4_section(spread, stats)[-1] == \
        "| g1_elementwise | 0.011 ± 0.002 | 0 of 3 | 0.048 | as in GA: below the baseline |"


def test_the_study_figures_label_their_axes(tmp_path, monkeypatch):
    """report.py's figures (headline.png, trends.png, lr_sweep.png) from made-up runs: every panel says what its axes
    are."""
    pytest.importorskip("matplotlib")
    shift = {"baseline": 0.0, "g1_elementwise": -0.01, "baseline_lr0.024": 0.5, "g1_elementwise_lr0.024": 0.1}
    by, win, variants_ = fake_study(**shift)
    logs = {(v, r["seed"]): [{"tokens": t * 1000, "first_token_attn": 0.1 * t, "sink_heads": 0.0, "max_act": 10.0 * t,
                              "gate_mean": None if r["gate_mean"] is None else 0.2} for t in (1, 2, 3)]
            for v, rs in by.items() for r in rs}
    figures = keep_figures(monkeypatch, report)
    written = report.plot_headline(by, variants_, logs, str(tmp_path)) + report.plot_trends(by, logs, str(tmp_path)) + \
        report.plot_sweep(report_sweep(by, win), str(tmp_path))
    assert written == ["headline.png", "trends.png", "lr_sweep.png"] == [name for name, _ in figures]
    assert all((tmp_path / name).stat().st_size > 1000 for name in written)
    assert_every_plot_is_labelled(figures)


def test_the_trends_give_each_variant_its_own_hue_a_legend_beside_and_say_what_a_panel_lacks(tmp_path, monkeypatch):
    """trends.png of the sink lab's 15 variants: no two drawn alike, the baseline and G1 in hues far apart (tab20 in
    order made them dark and light blue), one legend beside the panels (it lay over the F-Attn panel's data) and in
    the image; with no gated variant, the gate mean's panel says so rather than stand empty."""
    import colorsys
    matplotlib = pytest.importorskip("matplotlib")
    by, _, _ = fake_study(seeds=2, **{v: 0.0 for v in variants.LAB})
    logs = {(v, r["seed"]): [{"tokens": t * 1000, "first_token_attn": 0.1 * t, "sink_heads": 0.0, "max_act": 10.0 * t,
                              "gate_mean": None if r["gate_mean"] is None else 0.2} for t in (1, 2, 3)]
            for v, rs in by.items() for r in rs}
    figures = keep_saved(monkeypatch, report)
    report.plot_trends(by, logs, str(tmp_path))
    (name, fig, kw), = figures
    lines = {line.get_label(): (matplotlib_colour(line.get_color()), line.get_linestyle())
             for line in fig.axes[0].lines}
    assert list(lines) == list(variants.LAB) and len(set(lines.values())) == len(variants.LAB), lines
    hues = [colorsys.rgb_to_hsv(*matplotlib.colors.to_rgb(lines[v][0]))[0] for v in ("baseline", "g1_elementwise")]
    assert abs(hues[0] - hues[1]) > 0.2, hues
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()] == list(variants.LAB)
    assert_legends_in_image_beside_the_data(name, fig, kw)
    ungated = {v: rs for v, rs in by.items() if VARIANTS[v].flags["gate"] == "none"}
    report.plot_trends(ungated, logs, str(tmp_path))
    gate = figures[1][1].axes[3]
    assert not gate.lines and [t.get_text() for t in gate.texts] == ["no variant here has a gate"]


def test_the_single_run_figures_captions_name_the_seed_lab_analyze_is_asked_to_draw(tmp_path, monkeypatch):
    """analyze_runs asks lab/analyze.py for the figures of each variant's first (lowest) seed alone, whatever the
    order of the runs: the captions of those figures say so (they said "every run"), and none says what the gate
    scores look like (a histogram "piled up near 0" was not, for some variants)."""
    asked = []

    def fake_analyze(script, args):
        asked.append(dict(a[2:].split("=", 1) for a in args))
        os.makedirs(asked[-1]["out_dir"], exist_ok=True)
        with open(os.path.join(asked[-1]["out_dir"], "summary.json"), "w") as f:
            json.dump({"runs": []}, f)
        np.savez(os.path.join(asked[-1]["out_dir"], "per_window.npz"))
    monkeypatch.setattr(repro, "run_tool", fake_analyze)
    repro.analyze_runs(str(tmp_path), [("baseline", 1338), ("g1_elementwise", 1339), ("baseline", 1337),
                                       ("g1_elementwise", 1340)])
    assert asked[0]["plot_labels"] == "g1_elementwise/seed1339,baseline/seed1337"
    for name in ("layers.png", "gate_hist.png", "attn_maps.png", "curves.png", "emergence.png"):
        assert "first seed" in report.PLOT_TEXT[name] and "every run" not in report.PLOT_TEXT[name], name
    assert "near 0" not in report.PLOT_TEXT["gate_hist.png"]


def test_the_trends_count_the_seeds_with_a_sink_head_where_a_run_has_one_head(tmp_path, monkeypatch):
    """A one-head model's sink heads is 0 or 1 a run: trends.png counts the seeds that have one at each point (1 of 4
    there: 0.25 of the seeds, whatever share of a head the mean of 0.0 and 0.9 would give), labelled so; a model
    of more heads keeps the mean share of heads."""
    pytest.importorskip("matplotlib")
    by, _, _ = fake_study(seeds=4, baseline=0.0)
    for r in by["baseline"]:
        r["model"] = {"n_layer": 1, "n_head": 1}
    heads = {1337: 1.0, 1338: 0.0, 1339: 0.0, 1340: 0.0}
    logs = {("baseline", r["seed"]): [{"tokens": 1000, "first_token_attn": 0.5, "sink_heads": heads[r["seed"]],
                                       "max_act": 10.0, "gate_mean": None}] for r in by["baseline"]}
    figures = keep_figures(monkeypatch, report)
    report.plot_trends(by, logs, str(tmp_path))
    panel = figures[0][1].axes[1]
    assert panel.get_ylabel() == "share of the seeds" and "seeds with a sink head" in panel.get_title()
    assert list(panel.get_lines()[0].get_ydata()) == [0.25]
    for r in by["baseline"]:
        r["model"] = {"n_layer": 2, "n_head": 4}  # a share of eight heads a run: its mean over seeds
    logs[("baseline", 1337)][0]["sink_heads"] = 0.5
    report.plot_trends(by, logs, str(tmp_path))
    panel = figures[1][1].axes[1]
    assert panel.get_ylabel() == "sink heads (mean over seeds)" and list(panel.get_lines()[0].get_ydata()) == [0.125]


def test_the_headline_legend_lies_beside_the_panels(tmp_path, monkeypatch):
    """headline.png: one legend, of both panels' entries, beside them and in the image: inside the bars' panel it
    covered the seed dots and interval caps of the sink lab's last variants."""
    pytest.importorskip("matplotlib")
    by, _, variants_ = fake_study(seeds=3, **{v: 0.0 for v in variants.LAB})
    logs = {(v, r["seed"]): [{"tokens": t * 1000, "first_token_attn": 0.1 * t} for t in (1, 2, 3)]
            for v, rs in by.items() for r in rs}
    figures = keep_saved(monkeypatch, report)
    report.plot_headline(by, variants_, logs, str(tmp_path))
    (name, fig, kw), = figures
    assert not any(ax.get_legend() for ax in fig.axes) and len(fig.legends) == 1
    entries = [t.get_text() for t in fig.legends[0].get_texts()]
    assert entries[:2] == ["baseline (3 seeds)", "g1_elementwise (3 seeds)"] and "each seed" in entries
    assert_legends_in_image_beside_the_data(name, fig, kw)


def test_the_headline_curve_shows_a_weak_sink(tmp_path, monkeypatch):
    """The left panel's y range follows the curves up to 1: real text's sink (F-Attn 0.013 to 0.064 over a run) lay
    flat along the bottom of a fixed 0-1 axis; a sink lab's (0.9) keeps the whole 0-1."""
    pytest.importorskip("matplotlib")
    by, _, variants_ = fake_study(seeds=3, baseline=0.0, g1_elementwise=-0.01)
    figures = keep_figures(monkeypatch, report)
    for top, expected in ((0.2, 0.2 * 1.15), (0.064, 0.1), (0.9, 1.0)):  # 15% above the top, from 0.1 up to 1
        logs = {(v, r["seed"]): [{"tokens": t * 1000, "first_token_attn": top * t / 3} for t in (1, 2, 3)]
                for v, rs in by.items() for r in rs}
        report.plot_headline(by, variants_, logs, str(tmp_path))
        assert figures[-1][1].axes[0].get_ylim() == pytest.approx((0, expected))


def test_the_headline_draws_an_interval_only_where_seeds_give_one(tmp_path, monkeypatch):
    """Every seed is a dot; an error bar only from three seeds on (a variant with one seed has no interval, and a
    t-interval of two says little more than their two dots); every tick says how many seeds its bar averages."""
    pytest.importorskip("matplotlib")
    by, _, variants_ = fake_study(seeds=3, baseline=0.0, g1_elementwise=-0.01, g1_headwise=0.0, g2_elementwise=0.0)
    for v, n in (("g1_headwise", 2), ("g2_elementwise", 1)):
        by[v] = by[v][:n]
        variants_[v]["first_token_attn"] = report.over_seeds([r["first_token_attn"] for r in by[v]])
    assert variants_["g2_elementwise"]["first_token_attn"]["lo"] is None
    logs = {(v, r["seed"]): [{"tokens": 1000, "first_token_attn": 0.1}] for v, rs in by.items() for r in rs}
    figures = keep_figures(monkeypatch, report)
    report.plot_headline(by, variants_, logs, str(tmp_path))
    bars = figures[0][1].axes[1]
    assert [t.get_text() for t in bars.get_xticklabels()] == \
        ["baseline (3 seeds)", "g1_elementwise (3 seeds)", "g1_headwise (2 seeds)", "g2_elementwise (1 seed)"]
    (dots,) = [line for line in bars.get_lines() if line.get_label() == "each seed"]
    assert sorted(zip(*dots.get_data())) == sorted((i, r["first_token_attn"]) for i, v in enumerate(by)
                                                   for r in by[v])
    (errorbar,) = [c for c in bars.containers if type(c).__name__ == "ErrorbarContainer"]
    _, _, (vertical,) = errorbar.lines
    xs = sorted(seg[0][0] for seg in vertical.get_segments())
    assert xs == [0, 1]  # baseline and G1 elementwise, not the two-seed headwise nor the one-seed G2
    for x, v in zip(xs, ("baseline", "g1_elementwise")):
        seg = vertical.get_segments()[int(x)]
        s = variants_[v]["first_token_attn"]
        assert sorted(y for _, y in seg) == pytest.approx([s["lo"], s["hi"]])


def report_sweep(by, windows):
    return repro.sweep_rows(by, windows)


def test_what_the_sink_is_made_of_is_read_at_each_runs_sink_layer():
    """Each run's sink layer is the layer of its highest F-Attn; its value norm ratio there, and the seeds whose
    ratio is below 0.5, counted; the per-run table shows the first seed."""
    layers = [{"first_token_attn": f, "value_norm_ratio": v} for f, v in (([0.1, 0.6], [0.9, 0.3]),
                                                                          ([0.7, 0.2], [0.7, 0.1]),
                                                                          ([0.2, 0.5], [1.0, 0.4]))]
    records = [{"variant": "baseline", "seed": 1337 + i, "layers": x} for i, x in enumerate(layers)]
    analyzed = [{"label": f"baseline/seed{r['seed']}", "layers": x} for r, x in zip(records, layers)]
    lines = report.sink_parts_section(records, analyzed)
    row = next(line for line in lines if line.startswith("| baseline |"))
    f_attn, ratio = report.over_seeds([0.6, 0.7, 0.5]), report.over_seeds([0.3, 0.7, 0.4])
    assert row == f"| baseline | 3 of 3 | {report.fmt_ci(f_attn, '.3f')} | {report.fmt_ci(ratio, '.3f')} | 2 of 3 |"
    assert "| baseline/seed1337 | 1 | 0.600 | 0.300 |" in "\n".join(lines)
    # a seed an older probe measured has no value norms: the seeds measured, of those trained
    older = [*analyzed[:2], {"label": "baseline/seed1339", "layers": {"first_token_attn": [0.2, 0.5]}}]
    row = next(line for line in report.sink_parts_section(records, older) if line.startswith("| baseline |"))
    assert row.startswith("| baseline | 2 of 3 |") and row.endswith("| 1 of 2 |")
    assert report.sink_parts_section(records, [{"layers": {"first_token_attn": [0.1]}}] * 3) == []  # older probe


def test_the_papers_numbers_come_from_a_paper_that_gives_both_rows():
    """A claim whose rows sit in two tables names both; a side the paper gives no number for has none to compare. The
    paper's change is on the scale its size word is compared on: GA's perplexities by their ratio, a gate score (a
    difference measure) by its difference, not a ratio the size word never looked at."""
    assert report.paper_text("g1_elementwise", "g5", report.paper_numbers("val_loss"), "diff") == \
        ("GA PPL 5.761 → 6.017 (×1.044)", "GA Table 4 → Table 1")
    assert report.paper_text("g2_elementwise", "g1_elementwise", report.paper_numbers("gate_mean"), "diff") == \
        ("GA gate mean 0.221 → 0.116 (-0.105)", "GA Table 4")
    assert report.paper_effect("g2_elementwise", "g1_elementwise", report.MEASURE["gate_mean"]) == \
        pytest.approx(0.116 - 0.221)
    assert report.paper_pair("g1_elementwise_matched", "baseline", report.paper_numbers("val_loss")) is None


def test_a_ratio_near_zero_keeps_two_significant_digits():
    """×0.060 [0.0047, 0.87]: an interval's lower bound of 0.0047 printed as 0.00 reads as zero, which a ratio's never
    is; at 0.1 and above, two decimals; a difference keeps its sign and four."""
    c = {"estimate": 0.06, "lo": 0.0047, "hi": 0.8712, "df": 2.04}
    assert report.fmt_difference(c, "ratio") == "×0.060 [0.0047, 0.87], df 2.0"  # 0.060: two digits, both shown
    assert report.fmt_difference(dict(c, lo=0.03), "ratio") == "×0.060 [0.030, 0.87], df 2.0"
    assert report.fmt_difference(dict(c, estimate=0.36, lo=0.2), "ratio") == "×0.36 [0.20, 0.87], df 2.0"
    assert report.fmt_difference(dict(c, lo=None), "difference") == "+0.0600 (no interval: one seed)"
    # a bound that would round onto no change gets the digits that keep it off it, as the verdict reads it
    assert report.fmt_difference(dict(c, estimate=0.5, lo=0.2, hi=0.9954), "ratio") == "×0.50 [0.20, 0.995], df 2.0"
    assert report.fmt_difference({"estimate": -0.01, "lo": -0.02, "hi": -0.00004, "df": 3.0}, "diff") == \
        "-0.0100 [-0.0200, -0.00004], df 3.0"


def test_runs_measured_in_several_places_say_each_with_its_runs():
    assert report.places_text({"NVIDIA H200, 2026-11-26": 3, "CPU (x86_64), 2026-11-27": 1}) == \
        "NVIDIA H200, 2026-11-26 (3 runs); CPU (x86_64), 2026-11-27 (1 run)"
    assert report.places_text({"NVIDIA H200, 2026-11-26": 3}) == "NVIDIA H200, 2026-11-26"


def test_a_measurement_kept_of_an_earlier_run_in_the_folder_is_named(tmp_path):
    """A folder reused for a new run keeps the old run's measurement: another run id, or (without ids) a logged
    validation loss at its iteration that is not the log's, says it is not this run's."""
    with open(tmp_path / "log.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in ({"iter": 0, "val_loss": 10.0, "run_id": "new"},
                                                    {"iter": 6, "val_loss": 2.5, "run_id": "new"}))
    assert report.kept_of_other_run(str(tmp_path), {"iter": 6, "run_id": "new"}, "measured.json") == ""
    assert "an earlier run's" in report.kept_of_other_run(str(tmp_path), {"iter": 6, "run_id": "old"}, "m")
    assert report.kept_of_other_run(str(tmp_path), {"iter": 6, "val_loss_logged": 2.5}, "m") == ""
    assert "an earlier run's" in report.kept_of_other_run(str(tmp_path), {"iter": 6, "val_loss_logged": 2.4}, "m")


def test_token_counts_read_well_at_every_scale():
    assert [report.fmt_tokens(n) for n in (1536, 12_288, 1_228_800, 10_485_760, 104_857_600, 2_100_000_000)] == \
        ["1,536", "12,288", "1.23M", "10.5M", "105M", "2.1B"]
    # at each unit's edge: 999,999 is still a count, and 999.6M rounds to 1B, never "1e+03M"
    assert [report.fmt_tokens(n) for n in (999_999, 1_000_000, 999_400_000, 999_600_000)] == \
        ["999,999", "1M", "999M", "1B"]




# ----------------------------------------------------------------------------
# The registry (lab/variants.py): every variant, flag and paper number in one place

@pytest.mark.parametrize("name", VARIANTS, ids=list(VARIANTS))
def test_variant_is_what_its_name_and_paper_rows_say(name):
    v = VARIANTS[name]
    GPTConfig(n_layer=1, n_head=2, n_embd=32, **v.flags)  # a valid model
    assert set(v.train) <= {"learning_rate", "min_lr", "bos"} and \
        not set(v.train) & {f.name for f in dataclasses.fields(GPTConfig)}
    assert (v.flags["gate"] == "g1") == name.startswith("g1"), name  # a g1_ name means a G1 gate, and only then
    assert (v.flags["gate"] == "none") == (name in ("baseline", "sdpa_rmsnorm", "sdpa_silu", "dyt", "glu",
                                                    "gatednorm") or
                                           name.startswith("baseline_"))  # the rows measured without a gate
    assert v.ga or v.gn or name in variants.CONTROLS, "every variant but the controls reproduces a paper row"
    assert (v.ga is None or v.ga.paper == "GA") and (v.gn is None or v.gn.paper == "GN")
    for row in (v.ga, v.gn):
        numbers = row and [x for x in (row.ppl, row.gate_mean, row.m_act, row.f_attn, row.loss, row.max_act)
                           if x is not None]
        assert row is None or numbers or row.note, f"{row} gives neither a number nor a note"
    if v.ga and v.ga.table == "Table 4":  # GA Table 4 gives all four numbers (no gate score without a gate)
        assert None not in (v.ga.ppl, v.ga.m_act, v.ga.f_attn)
        assert (v.ga.gate_mean is None) == (v.flags["gate"] == "none")
    if v.gn:  # GN Table 1 gives loss and max activation
        assert v.gn.loss is not None and v.gn.max_act is not None


# A word of a variant's name and the flag value it stands for: the name says the variant, and only it, sets it
NAME_WORDS = {"headwise": ("gate_granularity", "headwise"), "head_shared": ("gate_shared", True),
              "additive": ("gate_op", "add"), "ns_sigmoid": ("gate_act", "ns_sigmoid"),
              "identity": ("gate_act", "identity"), "input_independent": ("gate_input", "none"),
              "rmsnorm": ("sdpa_nonlin", "rmsnorm"), "gatednorm": ("norm", "gatednorm"), "preaffine": ("norm", "preaffine"),
              "dyt": ("norm", "dyt"), "glu": ("mlp", "glu"), "matched": ("match_params", True)}


@pytest.mark.parametrize("name", VARIANTS, ids=list(VARIANTS))
def test_a_variants_name_says_its_gate_and_flags(name):
    """g2_elementwise is a G2 gate (not G3, whose parameter count is the same), g1_headwise is headwise, dyt has DyT,
    ...: each word of the name, and the gate position it starts with, is the flag it sets, and no other variant sets
    that flag without the word. A silu in the name is the gate's SiLU, or the SDPA non-linearity's without a gate."""
    flags = VARIANTS[name].flags
    gate = re.match(r"g(\d)(_|$)", name)
    assert flags["gate"] == (f"g{gate.group(1)}" if gate else flags["gate"]) and (gate or flags["gate"] == "none"), name
    for word, (flag, value) in NAME_WORDS.items():
        assert (word in name) == (flags.get(flag) == value), (name, word)
    if "silu" in name:
        assert flags.get("gate_act") == "silu" or (flags["gate"] == "none" and flags.get("sdpa_nonlin") == "silu"), name


def test_the_registry_holds_the_papers_numbers_as_papers_md_states_them():
    """Every number in lab/variants.py is the one PAPERS.md quotes, under the same row name."""
    text = open(os.path.join(REPO, "PAPERS.md")).read()
    for name, v in VARIANTS.items():
        ga, gn = v.ga, v.gn
        if ga and ga.table == "Table 4":
            gate = "–" if ga.gate_mean is None else f"{ga.gate_mean:.3f}"
            assert f"| {ga.name} | {gate} | {ga.m_act} | {ga.f_attn:.3f} | {ga.ppl:.3f} |" in text, name
        elif ga and ga.ppl is not None:
            assert f"{ga.name} {ga.ppl:.3f}" in text, name
        if gn:
            assert f"{gn.name} {gn.max_act} / {gn.loss:.3f}" in text, name
    # the numbers the claims compare: the differences the report prints
    assert VARIANTS["dyt"].gn.loss - VARIANTS["baseline"].gn.loss == pytest.approx(0.252)
    assert VARIANTS["g1_elementwise"].ga.ppl / VARIANTS["baseline"].ga.ppl == pytest.approx(0.956, abs=5e-4)


def test_study_and_claims_use_registry_names():
    assert len(STUDY) == len(set(STUDY)) == 20 and set(STUDY) <= set(VARIANTS) and STUDY == MODELS + SWEEP
    assert list(MODELS) == [v for v in VARIANTS if v in MODELS]  # the report's order is the registry's
    for _, ref, variant, measure, direction in repro.CLAIMS:
        assert measure in MEASURE and report.comparison(measure) in ("ratio", "diff")
        assert variant in MODELS and ref in MODELS and direction in (-1, 1)
        if measure != "sink_share":  # a paper gives both rows the number the claim compares, or says in words
            said = VARIANTS[variant].ga and VARIANTS[variant].ga.note  # what it found (GA's dense models)
            assert report.paper_pair(ref, variant, report.paper_numbers(measure)) or said, (ref, variant, measure)
    # the sweep: the baseline and G1 at each higher learning rate, min_lr a tenth of it, nothing else changed
    assert SWEEP == tuple(f"{v}_lr{lr:g}" for v in variants.SWEPT for lr in variants.LR_SWEEP)
    for name in SWEEP:
        family, _, lr = name.rpartition("_lr")
        assert VARIANTS[name].flags == VARIANTS[family].flags and VARIANTS[name].ga == variants.STABILITY_ROW
        assert VARIANTS[name].train == dict(learning_rate=float(lr), min_lr=pytest.approx(float(lr) / 10, rel=1e-9))
        assert len(str(VARIANTS[name].train["min_lr"])) <= 7  # as a command shows it: 0.0024


def test_the_sweep_is_the_baseline_and_g1_at_2_4_and_8_times_the_studys_rate():
    """The learning-rate sweep trains the baseline and G1 elementwise at 2, 4 and 8 times config/repro.py's rate
    (none of them the study's own), as docs/study.md says."""
    scope = {}
    run_config_file("config/repro.py", os.path.join(REPO, "config", "repro.py"), scope)
    assert variants.SWEPT == ("baseline", "g1_elementwise")
    assert variants.LR_SWEEP == tuple(pytest.approx(k * scope["learning_rate"]) for k in (2, 4, 8))
    assert "3e-3 (the study's own runs), 6e-3, 1.2e-2 and 2.4e-2" in open(os.path.join(REPO, "docs", "study.md")).read()
    assert scope["learning_rate"] == 3e-3


def test_the_papers_numbers_are_the_reports_keyed_by_the_cores_measures():
    """What the papers give for a measure (report.PAPERS) and how a claim compares it (report.COMPARE) are the
    report's, keyed by probe.MEASURES' keys and naming fields of variants.Row: the core says only what is measured."""
    assert set(report.PAPERS) | set(report.COMPARE) <= set(MEASURE)
    assert set(report.COMPARE.values()) <= {"ratio", "diff"} and report.comparison("sink_share") == "ratio"
    fields = {f.name for f in dataclasses.fields(variants.Row)}
    for key, numbers in report.PAPERS.items():
        assert report.paper_numbers(key) == numbers and numbers
        for paper, field, column, spec in numbers:
            assert paper in ("ga", "gn") and field in fields and column and format(1.0, spec), (key, field)
    assert report.paper_numbers("sink_share") == ()  # this project's own measure: no paper gives it
    assert {f.name for f in dataclasses.fields(probe.Measure)} == {"key", "label", "spec", "better", "mechanism"}


def test_the_matched_g1_has_the_baselines_parameters_at_the_studys_size():
    """g1_elementwise_matched (the study's fair parameter count) narrows the MLP until its model has the baseline's
    parameters within 1% at config/repro.py's size, where g1_elementwise has one n_embd x n_embd W_theta a layer
    more; it is G1 elementwise in every other flag."""
    scope = {}
    run_config_file("config/repro.py", os.path.join(REPO, "config", "repro.py"), scope)
    size = {k: scope[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "qk_norm")}
    params = {}
    for name in ("baseline", "g1_elementwise", "g1_elementwise_matched"):
        with torch.device("meta"):
            params[name] = GPT(GPTConfig(**size, **VARIANTS[name].flags)).num_params(non_embedding=False)
    extra = size["n_layer"] * size["n_embd"] ** 2
    assert params["g1_elementwise"] - params["baseline"] == extra == 2_097_152
    assert abs(params["g1_elementwise_matched"] - params["baseline"]) <= 0.01 * params["baseline"]
    assert params["g1_elementwise_matched"] < params["g1_elementwise"] - extra // 2
    assert VARIANTS["g1_elementwise_matched"].flags == {**VARIANTS["g1_elementwise"].flags, "match_params": True}


def test_test_variants_set_every_value_of_every_flag():
    """TEST_VARIANTS (the ids test_model.py parametrizes over) are valid models that together set every value of
    every flag, so a test over them reaches every code path of the model."""
    chosen_by_tests = {"attn_backend", "match_params"}
    models = {name for name, v in VARIANTS.items() if not v.train and not v.flags.keys() & chosen_by_tests}
    assert set(TEST_VARIANTS) >= models
    for name, flags in TEST_VARIANTS.items():
        GPTConfig(n_layer=1, n_head=4, n_embd=32, **{"n_kv_head": 2, **flags})
        assert not set(flags) & chosen_by_tests, name
    for flag, valid in VALID.items():
        if flag not in chosen_by_tests:
            default = GPTConfig.__dataclass_fields__[flag].default
            unset = set(valid) - {default} - {f[flag] for f in TEST_VARIANTS.values() if flag in f}
            assert not unset, f"{flag}={sorted(unset)} is set by no variant of lab.variants.VARIANTS: name one there"
    for f in dataclasses.fields(GPTConfig):
        if f.type is bool and f.name not in chosen_by_tests:
            assert any(flags.get(f.name) is (not f.default) for flags in TEST_VARIANTS.values()), \
                f"{f.name}={not f.default} is set by no variant of lab.variants.VARIANTS: name one there"
    # and the flags VALID cannot list, in each of their regimes: one KV head (MQA) and one per query head (the tests'
    # base has GQA), heads together wider than n_embd, a sliding window, an epsilon of its own
    set_to = {flag: {f[flag] for f in TEST_VARIANTS.values() if flag in f}
              for flag in ("n_kv_head", "head_dim", "attn_window", "norm_eps")}
    assert {1, None} <= set_to["n_kv_head"] and all(values - {None} for values in set_to.values()), set_to


# ----------------------------------------------------------------------------
# The command line: a step word, variant names, the runner's keys, and train.py's keys passed on

def test_train_names_and_keys(monkeypatch):
    calls, restored = [], []
    monkeypatch.setattr(repro, "train", lambda *args: calls.append(args))
    # no folders made here: not the root's lock, nor the kept runs restored into it (the root is under the checkout)
    monkeypatch.setattr(repro, "claimed_folder", lambda folder: contextlib.nullcontext())
    monkeypatch.setattr(repro, "restore_runs", lambda root, report_dir, settings: restored.append(root))
    monkeypatch.setattr(repro, "check_kept_data", lambda root, settings, kept_from: None)
    monkeypatch.setattr(repro, "require_corpus", lambda settings, data_dir: None)  # (the corpus need not be here)
    # nor the runs a user trained under the default root (out-repro/, with their own settings)
    monkeypatch.setattr(repro, "check_trained_alike", lambda runs, root, settings: None)
    repro.main(["train", "g1_elementwise", "all", "g3", "--tiny", "--max_iters=5", "--compile"])
    runs, root, keys, passed, settings = calls[-1]
    # `all` is the study, in order; a name given twice trains once; any registry name may be added; one seed: 1337
    assert runs == [(v, 1337) for v in ["g1_elementwise"] + [v for v in STUDY if v != "g1_elementwise"] + ["g3"]]
    assert (root, keys.tiny, passed) == ("out-repro-tiny", True, ["--max_iters=5", "--compile"])  # the rest, verbatim
    repro.main(["train", "baseline", "sweep", "--root=/tmp/r", "--tiny=False", "--seeds=2", "--parallel=3"])
    runs, root, keys, passed, settings = calls[-1]
    assert settings["max_iters"] == 1600  # config/repro.py, read once and handed to train
    assert runs == [(v, s) for v in ("baseline",) + SWEEP for s in (1337, 1338)] and root == "/tmp/r"
    assert (keys.tiny, keys.seeds, keys.parallel, passed) == (False, 2, 3, [])
    repro.main(["train", "models", "--config=config/repro_sink.py"])
    assert [v for v, _ in calls[-1][0]] == list(MODELS) and calls[-1][2].config == "config/repro_sink.py"
    assert restored == [calls[0][1], "/tmp/r", "out-repro"]  # each `train` restores the kept runs into its root first
    cmd = repro.train_command("baseline_lr0.024", 1338, "/tmp/r", tiny=True, extra=["--max_iters=5"],
                              config="config/repro_sink.py")
    assert cmd[1:4] == [os.path.join(REPO, "train.py"), os.path.join(REPO, "config", "repro.py"),
                        "config/repro_sink.py"]
    assert cmd[4:] == ["--out_dir=/tmp/r/baseline_lr0.024/seed1338", "--seed=1338",
                       *[f"--{k}={v}" for k, v in repro.TINY.items()], "--gate=none", "--learning_rate=0.024",
                       "--min_lr=0.0024", "--max_iters=5"]  # the user's keys last, so they win


def test_seeds_per_name_in_the_order_named(monkeypatch):
    """NAME:N trains N seeds of a variant or group, the rest --seeds' number; runs start in the order named, each
    once (a plan for a GPU available for a fixed time puts what matters most first)."""
    calls = []
    monkeypatch.setattr(repro, "train", lambda *args: calls.append(args))
    monkeypatch.setattr(repro, "claimed_folder", lambda folder: contextlib.nullcontext())  # no folders made here
    monkeypatch.setattr(repro, "restore_runs", lambda *args: None)
    monkeypatch.setattr(repro, "check_kept_data", lambda root, settings, kept_from: None)
    monkeypatch.setattr(repro, "require_corpus", lambda settings, data_dir: None)
    # a checkout's own out-repro/ (the real-text study's runs, trained with config/repro_sink.py) is not read here
    monkeypatch.setattr(repro, "check_trained_alike", lambda runs, root, settings: None)
    repro.main(["train", "baseline:2", "g1_elementwise:2", "g1_headwise", "baseline", "g2_elementwise:1", "--seeds=3"])
    assert calls[-1][0] == [("baseline", 1337), ("baseline", 1338), ("g1_elementwise", 1337), ("g1_elementwise", 1338),
                            ("g1_headwise", 1337), ("g1_headwise", 1338), ("g1_headwise", 1339), ("baseline", 1339),
                            ("g2_elementwise", 1337)]
    repro.main(["train", "sweep:2", "baseline"])
    assert calls[-1][0] == [(v, s) for v in SWEEP for s in (1337, 1338)] + [("baseline", 1337)]
    repro.main(["train", "baseline:2", "--seed=9001", "--max_iters=5"])  # --seed: the first seed, not each run's
    assert calls[-1][0] == [("baseline", 9001), ("baseline", 9002)] and calls[-1][3] == ["--max_iters=5"]


def test_study_settings_are_what_train_py_will_read():
    keys = repro.Keys(config="config/repro_sink.py")
    settings = repro.study_settings(keys, ["--batch_size=16"])
    assert (settings["n_layer"], settings["seed"], settings["qk_norm"], settings["bos"]) == (8, 1337, True, True)
    assert (settings["weight_decay"], settings["max_iters"], settings["batch_size"]) == (0.5, 3200, 16)
    assert repro.study_settings(repro.Keys(tiny=True), [])["max_iters"] == repro.TINY["max_iters"]


def test_a_config_files_imports_are_no_study_settings():
    """config/sink_lab.py imports os (for TUTORIAL_TOY): the study's settings hold its keys and never a module or a
    function, so that they can be compared, as JSON, with a kept run's (restore and train do, once runs are kept)."""
    settings = repro.study_settings(repro.Keys(study="sink_lab"), [])
    assert "os" not in settings and json.loads(json.dumps(settings)) == settings
    assert settings["max_iters"] == 2000 and settings["pos_emb"] == "learned"



def test_a_config_files_helpers_are_no_study_settings(tmp_path):
    """A --config of the user's own may hold a helper function or a name of its own (_x): train.py skips them
    (cli.configure), and so do the study's settings: they hold the keys, each as train.py reads it, and no traceback."""
    (tmp_path / "mine.py").write_text("_scale = 2\n\ndef steps(n):\n    return n * _scale\n\n"
                                      "max_iters = steps(1600)\n")
    settings = repro.study_settings(repro.Keys(config=str(tmp_path / "mine.py")), [])
    assert settings["max_iters"] == 3200 and "steps" not in settings and "_scale" not in settings
    assert json.loads(json.dumps(settings)) == settings


def test_a_run_whose_folder_was_removed_is_trained_again_whatever_its_commands_say(tmp_path):
    """finished() of a run whose folder is gone (moved aside to train it again) is False, though commands.jsonl still
    records how its last command ended: ended well (no log to read its iteration from, never a traceback) or
    diverged (a result no longer there)."""
    root = str(tmp_path)
    for code in (0, DIVERGED_EXIT):
        with open(os.path.join(root, "commands.jsonl"), "w") as f:
            f.write(json.dumps({"variant": "baseline", "seed": 1337, "exit_code": code}) + "\n")
        assert not repro.finished(root, "baseline", 1337, 6)


@pytest.mark.parametrize("argv,words", [
    (["train"], ["name the variants", "'all'", "g1_elementwise"]),
    (["train", "baseline", "--out_dir=x"], ["--out_dir=x", "the runner (lab.repro) sets --out_dir", "--root"]),
    (["train", "baseline", "--init_from=resume"], ["--init_from=resume", "the runner (lab.repro) sets"]),
    (["train", "g1_headwise", "--gate_act=silu"], ["these keys would train g1_headwise seed 1337: gate_act='silu' "
                                                   "(the study's g1_headwise: 'sigmoid'), but the report",
                                                   "lab.repro.DEFINING_KEYS", "a variant of its own"]),
    (["train", "models", "--learning_rate=0.001"], ["these keys would train baseline seed 1337: learning_rate=0.001 "
                                                    "(the study's baseline: 0.003); ..., but"]),
    (["train", "baseline", "--study=sink_lab", "--bos=False"],
     ["these keys would train baseline seed 1337: bos=False (the study's baseline: True), but"]),
    (["train", "baseline", "--seeds=0"], ["--seeds=0 must be at least 1"]),
    (["train", "baseline", "--config=nope.py"], ["--config=nope.py: no such config file"]),
    (["report", "--max_iters=3"], ["unknown key 'max_iters'"]),
    (["list", "--rot=x"], ["unknown key 'rot'", "did you mean 'root'"]),
    (["report", "baseline"], ["takes no variant names", "baseline"]),
    (["lst"], ["'lst' is not a step", "list, prepare, train, restore, evaluate, report"]),
    (["evaluate", "--out_dir=x"],
     ["--out_dir=x", "`python -m lab.repro evaluate` sets --runs, --labels and --out_dir"]),
    (["evaluate", "g9"], ["unknown variant(s) g9", "'models'"]),
    (["evaluate", "baseline", "--root=/nonexistent"], ["no trained runs of baseline under /nonexistent/"]),
    (["train", "baseline:0"], ["baseline:0: after the ':' comes the number of seeds, at least 1", "baseline:2"]),
    (["train", "g1_headwise", "baseline:two"], ["baseline:two: after the ':' comes the number of seeds"]),
    (["train", "baseline:²"], ["baseline:²: after the ':' comes the number of seeds"]),
    (["train", "g9:2"], ["unknown variant(s) g9", "'models'"]),
    (["evaluate", "baseline:2"], ["baseline:2: a number of seeds (NAME:N) is for `python -m lab.repro train`"]),
    (["train", "baseline", "--budget_min=-5"], ["--budget_min=-5 must be at least 0"]),
    (["restore", "baseline"], ["`python -m lab.repro restore` takes no variant names", "baseline"]),
    (["restore", "--config=nope.py"], ["--config=nope.py: no such config file"]),
    (["train", "baseline", "--parallel=0"], ["--parallel=0 must be at least 1"]),
    (["report", "--study=sink"], ["--study='sink' is not a study; choose one of repro, sink_lab"]),
], ids=["no-variant", "out_dir", "init_from", "variant-key", "sweep-key", "bos", "seeds", "config", "report-key", "typo", "report-names", "step",
        "evaluate-out_dir", "evaluate-variant", "evaluate-no-runs", "seeds-zero", "seeds-word", "seeds-super",
        "seeds-unknown",
        "seeds-evaluate", "budget", "restore-names", "restore-config", "parallel", "study"])
def test_mistakes_are_one_line(argv, words, monkeypatch):
    monkeypatch.setattr(repro, "train", lambda *args: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit) as e:
        repro.main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    for w in words:
        assert w in message


def test_list_says_the_memory_a_runs_step_needs_by_train_pys_estimate(capsys):
    """`list` ends with train.py's own estimate (runfolder.step_memory) of one training step of the study's runs, with
    --config applied: what docs/study.md quotes for a GPU's memory."""
    from runfolder import step_memory
    repro.main(["list", "--config=config/repro_sink.py"])
    last = capsys.readouterr().out.splitlines()[-1]
    settings = repro.study_settings(repro.Keys(config="config/repro_sink.py"), [])
    with torch.device("meta"):
        model = GPT(GPTConfig(**{k: v for k, v in settings.items() if k in GPTConfig.__dataclass_fields__}))
    need = step_memory(64, model.config, model.num_params()) / 2**30
    assert last.startswith(f"each run of config/repro.py + config/repro_sink.py: batch_size=64 x block_size=512 "
                           f"needs about {need:.1f} GiB for one training step") and "deliberately low" in last
    assert f"{need:.1f}" == "27.2"  # docs/study.md's number
    repro.main(["list", "--study=sink_lab"])  # a step of a few MiB is said in MiB, not as "about 0.0 GiB"
    assert re.search(r"block_size=64 needs about [1-9]\d* MiB for one training step", capsys.readouterr().out)


def test_list_with_a_broken_config_file_prints_its_one_line_only(tmp_path, capsys):
    """The list of variants came first, then the config file's error below it, out of sight."""
    bad = tmp_path / "bad.py"
    bad.write_text("batch_size = (\n")
    with pytest.raises(SystemExit, match=f"^error: {bad} line 1: "):
        repro.main(["list", f"--config={bad}"])
    assert capsys.readouterr().out == ""


def test_kept_runs_restored_without_their_config_are_told_which_one(tmp_path, capsys):
    """`restore` (or `train`) without the --config the committed runs were trained with restores none: five are named,
    one line counts the others (185 lines for the sink lab's report), and one line gives the --config their commands
    had; `report` on a root with no runs names `restore`."""
    settings = repro.study_settings(repro.Keys(), [])  # config/repro.py's, without config/repro_sink.py
    assert repro.restore_runs(str(tmp_path / "root"), os.path.join(REPO, "results", "repro"), settings) == []
    out = capsys.readouterr().out.splitlines()
    assert sum("not restored: it was trained with max_iters=3200 (here: 1600)" in line for line in out) == 5
    assert out[-2] == "=== ... and 11 more kept runs not restored" and len(out) == 7
    assert out[-1] == "=== 16 kept runs were not restored for their settings: give the keys they were trained with " \
        "(--config=config/repro_sink.py, as in their command.json)"
    with pytest.raises(SystemExit) as e:
        repro.main(["report", f"--root={tmp_path / 'empty'}"])
    assert "`python -m lab.repro restore` with the keys" in str(e.value.code)


def test_list_shows_every_variant_its_flags_and_paper_rows(capsys):
    repro.list_variants()
    lines = capsys.readouterr().out.splitlines()
    for name, v in VARIANTS.items():
        line = next(line for line in lines if line[2:].split(" ")[0] == name)
        assert line.startswith("* " if name in STUDY else "  ")
        assert all(f"--{k}={x}" in line for k, x in v.all_flags.items()) and str(v.ga or v.gn or "") in line


def test_repro_rejects_unknown_variant():
    result = subprocess.run([sys.executable, "-m", "lab.repro", "train", "g9"], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode != 0 and "g9" in result.stderr and "g1_elementwise" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and result.stdout == ""  # one line, before anything ran


HOLD = ("import sys, time; from runfolder import claim_folder; lock = claim_folder(sys.argv[1]); "
        "print('held', flush=True); time.sleep(60)")


@pytest.mark.parametrize("step", ["train", "evaluate", "report"])
def test_a_root_another_process_holds_is_refused_in_one_line(tmp_path, monkeypatch, step):
    """Another runner (here: a process that claimed the root and sleeps) owns the runs' root: a second `train`,
    or an evaluation or a report of those runs, stops with one line naming it, before any work."""
    root = tmp_path / "root"
    monkeypatch.setattr(repro, "train", lambda *args: pytest.fail("trained on a root another process holds"))
    monkeypatch.setattr(repro, "trained_runs", lambda *args: [("baseline", 1337)])
    monkeypatch.setattr(repro, "run_tool", lambda *args: pytest.fail("ran a tool on a root another process holds"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit) as e:
            repro.main([step, *(["baseline"] if step != "report" else []), f"--root={root}",
                        f"--report_dir={tmp_path / 'report'}"])
    finally:
        holder.kill()
        holder.wait()
    message = str(e.value.code)
    assert message.startswith(f"error: {root} is in use by another process (pid {holder.pid}: ") and \
        "\n" not in message, message


def test_a_report_folder_another_process_holds_is_refused(tmp_path, monkeypatch):
    report_dir = tmp_path / "report"
    monkeypatch.setattr(repro, "trained_runs", lambda *args: [("baseline", 1337)])
    monkeypatch.setattr(repro, "analyze_runs", lambda *args: pytest.fail("analyzed with the report folder held"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(report_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match=f"{report_dir} is in use by another process \\(pid {holder.pid}"):
            repro.main(["report", f"--root={tmp_path / 'root'}", f"--report_dir={report_dir}"])
    finally:
        holder.kill()
        holder.wait()
    # once the holder is gone the folders are free again; a folder named twice is claimed once (a second flock on
    # it from this process would refuse the first)
    with repro.claimed(str(tmp_path / "root"), str(report_dir), str(report_dir)):
        pass


@pytest.mark.parametrize("before", ["nothing", "a run stopped before its first checkpoint"])
def test_a_first_run_that_cannot_start_stops_the_study(tmp_path, before):
    """Data that is not there fails the first run while it starts: the runner stops there instead of failing every
    variant the same way, and records the one command that ran. So too when the first run is started again over one
    stopped before its first checkpoint: that one's log is no sign that this one started."""
    root, empty = tmp_path / "runs", tmp_path / "empty"
    empty.mkdir()
    if before != "nothing":
        (root / "baseline" / "seed1337").mkdir(parents=True)
        (root / "baseline" / "seed1337" / "log.jsonl").write_text('{"iter": 0}\n', encoding="utf-8")
        os.utime(root / "baseline" / "seed1337" / "log.jsonl", (time.time() - 60, time.time() - 60))
    result = subprocess.run([sys.executable, "-m", "lab.repro", "train", "baseline", "g1_elementwise", "--tiny",
                             f"--root={root}", "--dataset=nodata", f"--data_dir={empty}"], capture_output=True,
                            text=True, cwd=REPO)
    assert result.returncode == 1
    assert "dataset 'nodata' is not prepared" in result.stderr  # train.py's own message, passed through
    assert "the run baseline seed 1337 stopped before its first evaluation" in result.stderr
    assert "the other 1 would stop the same way" in result.stderr
    started = "starting a new run" if before == "nothing" else "again: it stopped before its first checkpoint"
    assert result.stdout.count(started) == 1 and "g1_elementwise seed" not in result.stdout, result.stdout
    commands = [json.loads(line) for line in open(root / "commands.jsonl")]
    assert [(c["variant"], c["exit_code"] != 0) for c in commands] == [("baseline", True)]
    left = [p.name for p in (root / "baseline").rglob("*") if p.is_file()]
    assert left == ([] if before == "nothing" else ["log.jsonl"])  # train.py wrote nothing, replaced nothing


def test_the_study_corpus_not_prepared_names_the_command_that_prepares_it(tmp_path, monkeypatch, capsys):
    """The study's corpus (pysrc) not prepared: `train` names `python -m lab.repro prepare`, not train.py's advice for a
    dataset of text files (data/textdir/prepare.py, which would build another corpus), before any run starts or an
    estimate is printed; the root it claimed is left as it was (not there)."""
    monkeypatch.setattr(repro, "launch", lambda *args: pytest.fail("a run started"))
    root = tmp_path / "root"
    with pytest.raises(SystemExit) as e:
        repro.main(["train", "baseline", f"--root={root}", f"--report_dir={tmp_path / 'report'}",
                    f"--data_dir={tmp_path / 'nothing'}"])
    assert str(e.value.code) == f"error: the study's corpus 'pysrc' is not prepared in {tmp_path / 'nothing'}: run " \
        "`python -m lab.repro prepare` first (the .py files of the installed packages)", e.value.code
    assert "estimate" not in capsys.readouterr().out and not root.exists()


BAD_KEYS = ["--gate=G1", "--n_head=3", "--n_layer=0", "--n_layer=abc", "--block_size=abc", "--batch_size=abc",
            "--foo=1", "--eval_interval=0"]


@pytest.mark.parametrize("study", ["repro", "sink_lab"])
@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_key_train_py_refuses_stops_train_in_its_words_before_anything(tmp_path, monkeypatch, capsys, study, key):
    """A train.py key that train.py would refuse (a value of the wrong case or type, a model that cannot be built, an
    unknown key, a meaningless setting) stops `train` with train.py's own line, before the kept runs of the committed
    report are restored into the root (both studies keep some), the FLOPs are counted or a run starts: the root is
    not even made."""
    import train
    root = tmp_path / "root"
    for name in ("restore_runs", "run_flops", "train"):
        monkeypatch.setattr(repro, name, lambda *args, name=name: pytest.fail(f"{name} ran"))
    with pytest.raises(SystemExit) as e:
        repro.main(["train", "all", f"--study={study}", f"--root={root}", key])
    with pytest.raises(SystemExit) as alone:  # train.py itself, on the study's config
        train.main([repro.STUDIES[study].config, f"--out_dir={tmp_path / 'run'}", key])
    message = str(e.value.code)
    assert message == str(alone.value.code) and message.startswith("error: ") and "\n" not in message
    assert capsys.readouterr().out == "" and not root.exists() and not (tmp_path / "run").exists()


def test_a_config_that_changes_what_a_variant_is_stops_train_before_any_run(tmp_path, monkeypatch):
    """A --config that sets a key making a variant (every G1 variant with SiLU scores) is refused as the same key on
    the command line is: the report would name and compare those runs as GA's sigmoid rows. config/repro_sink.py,
    which changes the study's settings only, trains as ever."""
    monkeypatch.setattr(repro, "train", lambda *args: pytest.fail("a run started"))
    (tmp_path / "silu.py").write_text("weight_decay = 0.2\ngate_act = 'silu'\n")
    with pytest.raises(SystemExit) as e:
        repro.main(["train", "g1_headwise", f"--root={tmp_path / 'root'}", f"--config={tmp_path / 'silu.py'}"])
    assert str(e.value.code).startswith("error: these keys would train g1_headwise seed 1337: gate_act='silu' (the "
                                        "study's g1_headwise: 'sigmoid'), but the report")
    assert not (tmp_path / "root").exists()
    repro.check_run_keys([("baseline", 1337), ("g1_elementwise", 1337), ("baseline_lr0.006", 1337)], "/tmp/r",
                         repro.Keys(config="config/repro_sink.py"), ["--max_iters=5"])  # no refusal


def test_a_key_that_only_a_variants_flags_refuse_stops_train_before_any_run(tmp_path, monkeypatch):
    """--mlp_hidden=64 fits the study's settings, but not the G1 gate at the baseline's parameter count, whose gate
    (512 x 512 per layer) an MLP 64 wide cannot absorb: train.py would refuse that run when its turn came, after the
    others; the runner refuses it before any."""
    monkeypatch.setattr(repro, "train", lambda *args: pytest.fail("a run started"))
    root = tmp_path / "root"
    with pytest.raises(SystemExit) as e:
        repro.main(["train", "baseline", "g1_elementwise_matched", f"--root={root}", "--mlp_hidden=64"])
    assert "match_params=True cannot absorb" in str(e.value.code) and "mlp_hidden" in str(e.value.code)
    assert not root.exists()


def test_runs_that_failed_make_train_exit_non_zero_and_are_named_last(tmp_path, monkeypatch, capsys):
    """A run that fails after it started (its log written), and the last run to start failing as it starts, are
    failures: the other runs go on, then `train` exits with RUNS_FAILED_EXIT (the report can follow: study.sh) and a
    last line naming them. A diverged run (cli.DIVERGED_EXIT) is a result, not a failure: alone it leaves the exit
    status 0."""
    outcome = {}  # (variant, seed) -> (exit code, whether the run writes its log before it exits)

    def launch(v, seed, root, keys, extra):
        code, logs = outcome[(v, seed)]
        if logs:
            os.makedirs(repro.run_dir(root, v, seed))
            open(os.path.join(repro.run_dir(root, v, seed), "log.jsonl"), "w").write('{"iter": 0}\n')
        return subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"]), ["train.py", v], False

    monkeypatch.setattr(repro, "launch", launch)
    monkeypatch.setattr(repro, "peak_flops", lambda device=None: None)
    runs = [("baseline", 1337), ("g1_elementwise", 1337), ("g1_headwise", 1337), ("g5", 1337)]
    outcome.update(zip(runs, [(1, True), (repro.DIVERGED_EXIT, True), (0, True), (1, False)]))
    settings, root = repro.study_settings(repro.Keys(), []), str(tmp_path / "runs")
    with pytest.raises(SystemExit) as e:
        repro.train(runs, root, repro.Keys(), [], settings)
    out, err = capsys.readouterr()
    assert e.value.code == repro.RUNS_FAILED_EXIT == 4 and out.count(": exit code") == 4  # every run ran
    assert err.splitlines()[-1] == "error: 2 of the runs failed: baseline seed 1337 (exit code 1), g5 seed 1337 " \
        "(exit code 1); their errors are above. The same command trains them again (the finished runs are skipped)"
    outcome[("g2_elementwise", 1337)] = (repro.DIVERGED_EXIT, True)
    repro.train([("g2_elementwise", 1337)], root, repro.Keys(), [], settings)  # returns: a result
    assert "error" not in capsys.readouterr().err


def test_a_run_train_py_refuses_to_replace_fails_the_command(tmp_path, small_task):
    """End to end: a folder that holds more than a run stopped before its first checkpoint (here best.pt of a later
    state, its ckpt.pt taken away) is never replaced: train.py refuses to start a new run there, and `train`, whose
    only run that was, exits non-zero naming it, the folder as it was."""
    folder = tmp_path / "lab" / "baseline" / "seed1337"
    folder.mkdir(parents=True)
    (folder / "log.jsonl").write_text('{"iter": 0, "val_loss": 4.2}\n{"iter": 20, "val_loss": 3.1}\n')
    torch.save({"iter_num": 20, "val_loss": 3.1, "model_args": {}}, folder / "best.pt")
    before = folder_state(folder)
    result = subprocess.run([sys.executable, "-m", "lab.repro", "train", "baseline", "--study=sink_lab", "--tiny",
                             f"--root={tmp_path / 'lab'}", f"--data_dir={small_task}"], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode == repro.RUNS_FAILED_EXIT, result.stdout + result.stderr
    assert "a new run would replace what is there" in result.stderr and "starting a new run" in result.stdout
    assert result.stderr.splitlines()[-1].startswith("error: 1 of the runs failed: baseline seed 1337 (exit code 1)")
    assert folder_state(folder) == before


def test_only_a_run_stopped_before_its_first_checkpoint_is_started_again(tmp_path):
    """restartable: a folder with no ckpt.pt whose best.pt holds the initial state (iter 0: a new run saves no ckpt.pt
    there) and nothing else but its log is started again; a later state, a kept run's measurements, a best.pt that is
    no train.py checkpoint or an empty folder are not."""
    def folder(name, best=None, files=("log.jsonl",)):
        path = tmp_path / name
        path.mkdir()
        for f in files:
            (path / f).write_text('{"iter": 0}\n')
        if best is not None:
            torch.save({"iter_num": best, "val_loss": 4.0, "model_args": {}}, path / "best.pt")
        return str(path)
    assert repro.restartable(folder("initial", best=0))
    assert repro.restartable(folder("log-only"))  # stopped between its log's first record and best.pt
    assert not repro.restartable(folder("later", best=20))
    assert not repro.restartable(folder("kept", best=0, files=("log.jsonl", "measured.json")))
    assert not repro.restartable(folder("empty", files=()))
    garbage = folder("garbage")
    open(os.path.join(garbage, "best.pt"), "w").write("not a checkpoint")
    assert not repro.restartable(garbage)


def test_stop_tools_passes_ctrl_c_on_and_kills_a_tool_that_ignores_it(monkeypatch):
    """Ctrl-C that reached the runner alone (kill -INT) reaches its tools too, after STOP_GRACE: a tool that stops on
    it ends as it ends on Ctrl-C (status 130 here); one that ignores it is killed after STOP_WAIT more."""
    monkeypatch.setattr(repro, "STOP_GRACE", 0.5)
    monkeypatch.setattr(repro, "STOP_WAIT", 1)
    polite = ("import sys, time\ntry:\n    print('up', flush=True); time.sleep(60)\nexcept KeyboardInterrupt:\n"
              "    sys.exit(130)")
    stubborn = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); " \
        "time.sleep(60)"
    tools = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,  # (SIGINT's default
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # in a background suite)
             for code in (polite, stubborn)]
    assert [t.stdout.readline() for t in tools] == ["up\n", "up\n"]  # both are waiting
    started = time.monotonic()
    repro.stop_tools(tools)
    assert [t.returncode for t in tools] == [130, -signal.SIGKILL] and time.monotonic() - started < 10


def test_the_header_says_how_many_seeds_a_variant_has_in_words():
    assert [report.seeds_per_variant(c) for c in ([1], [3], [1, 2, 3], [2, 3])] == \
        ["1 seed", "3 seeds", "1 to 3 seeds", "2 to 3 seeds"]


def test_the_time_estimate(tmp_path, monkeypatch):
    """From the runs already timed on this device at this --parallel (complete ones, not resumed), else from FLOPs on
    a known GPU."""
    keys = repro.Keys(parallel=2)
    settings = repro.study_settings(keys, [])
    todo = [("baseline", 1337)] * 5  # three rounds of two
    flops = repro.run_flops(settings, "baseline")
    # each variant's own model: G1 elementwise adds its gate's matmul (c_attn C wider), 6 C^2 FLOPs a token and layer
    tokens = settings["max_iters"] * settings["batch_size"] * settings["gradient_accumulation_steps"] * \
        settings["block_size"]
    assert repro.run_flops(settings, "g1_elementwise") - flops == \
        pytest.approx(6 * settings["n_layer"] * settings["n_embd"] ** 2 * tokens)
    with open(tmp_path / "commands.jsonl", "w") as f:
        # a run of half the FLOPs in 160 s is as fast as a whole one in 320 s; a record without FLOPs (an older
        # commands.jsonl), runs resumed or timed at another --parallel, and runs on another device do not count
        here = repro.this_device()
        for seconds, resumed, parallel, share, device in (
                (300, False, 2, 1, here), (330, False, 2, 1, here), (160, False, 2, 0.5, here), (9, True, 2, 1, here),
                (100, False, 1, 1, here), (50, False, 2, None, here), (30, False, 2, 1, "NVIDIA H200"),
                (40, False, 2, 1, None)):
            f.write(json.dumps({"seconds": seconds, "exit_code": 0, "resumed": resumed, "parallel": parallel,
                                "flops": share and share * flops, "device": device}) + "\n")
    assert repro.estimate(todo, str(tmp_path), keys, flops) == \
        "5 runs to do, 2 at a time: about 16 min (3 rounds of ~5.3 min, from the median speed of 3 earlier runs on " \
        f"{here})"
    os.remove(tmp_path / "commands.jsonl")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert "no time estimate yet" in repro.estimate(todo, str(tmp_path), keys, flops)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr(repro, "this_device", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(repro, "peak_flops", lambda device=None: 989e12)
    line = repro.estimate(todo, str(tmp_path), keys, flops)
    # config/repro.py: 105M tokens of a ~45M-parameter model (embedding included) at 11% of 989 TFLOP/s: ~320 s
    minutes = float(re.search(r"rounds of ~([\d.]+) min", line).group(1))
    assert "FLOPs at 11% of the GPU's peak" in line and 5.0 < minutes < 5.7
    # an H200's times say nothing of an H100's: on the H100 the estimate stays the FLOPs one
    with open(tmp_path / "commands.jsonl", "w") as f:
        f.write(json.dumps({"seconds": 200, "exit_code": 0, "resumed": False, "parallel": 2, "flops": flops,
                            "device": "NVIDIA H200"}) + "\n")
    assert "FLOPs at 11% of the GPU's peak" in repro.estimate(todo, str(tmp_path), keys, flops)
    # one run alone has the GPU to itself: twice the share, half the time (config/repro_sink.py's 210M tokens on an
    # H100, about 5.4 min: one run fits a 10-minute budget, where 11% would have started none)
    alone = dataclasses.replace(keys, parallel=1)
    line = repro.estimate(todo, str(tmp_path), alone, flops)
    assert "FLOPs at 22% of the GPU's peak, 1 run(s) side by side" in line
    assert float(re.search(r"rounds of ~([\d.]+) min", line).group(1)) == pytest.approx(minutes / 2, abs=0.1)
    sink = repro.run_flops(repro.study_settings(dataclasses.replace(keys, config="config/repro_sink.py"), []),
                           "baseline")
    assert sink == pytest.approx(2 * flops)  # twice the tokens of the same model
    assert repro.fits_budget(time.time(), str(tmp_path), dataclasses.replace(alone, budget_min=10), sink)
    monkeypatch.setattr(repro, "this_device", lambda: "NVIDIA H200")
    assert "rounds of ~3.3 min, from the median speed of 1 earlier runs on NVIDIA H200" in \
        repro.estimate(todo, str(tmp_path), keys, flops)


def test_a_diverged_run_is_a_result_never_trained_again(tmp_path, capsys):
    """A run that train.py stopped as diverged (cli.DIVERGED_EXIT) counts as done, here and restored from the kept
    report on another machine (the sweep's result, which training again would only repeat); a run that stopped
    otherwise (a crash: exit 1) is trained again, resuming or from the start."""
    root, kept = tmp_path / "root", tmp_path / "report" / "runs"
    log = [{"iter": 0, "val_loss": 10.0}, {"iter": 400, "val_loss": 25.0}]
    for folder in (root / "baseline" / "seed1337", kept / "baseline" / "seed1337", kept / "baseline" / "seed1338"):
        folder.mkdir(parents=True)
        (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    command = {"variant": "baseline", "seed": 1337, "exit_code": 3, "command": "python train.py config/repro.py"}
    (root / "commands.jsonl").write_text(json.dumps(dict(command, exit_code=1)) + "\n")
    assert not repro.finished(str(root), "baseline", 1337, 1600)  # a crash: trained again
    with open(root / "commands.jsonl", "a") as f:
        f.write(json.dumps(command) + "\n")  # the same run resumed, then diverged
    assert repro.finished(str(root), "baseline", 1337, 1600)
    assert not repro.finished(str(root), "baseline", 1338, 1600)  # no log: never trained
    settings = repro.study_settings(repro.Keys(), [])
    for seed, code in ((1337, 3), (1338, 1)):
        folder = kept / "baseline" / f"seed{seed}"
        (folder / "measured.json").write_text(json.dumps({"train_config": settings, "iter": 400}))  # its ckpt.pt's
        np.savez(folder / "measured.npz", val_loss=np.ones(4))
        (folder / "command.json").write_text(json.dumps(dict(command, seed=seed, exit_code=code)))
    elsewhere = tmp_path / "elsewhere"
    assert repro.restore_runs(str(elsewhere), str(tmp_path / "report"), settings) == ["baseline seed 1337"]
    out = capsys.readouterr().out
    assert "baseline seed 1338, kept in" in out and repro.finished(str(elsewhere), "baseline", 1337, 1600)
    assert "not restored for their settings" not in out  # 1338 was trained alike: unfinished, not otherwise


def test_a_budget_starts_only_the_runs_that_end_within_it(tmp_path, monkeypatch, capsys):
    """--budget_min: a run starts only if, by the time runs took here (the median speed of the runs timed at this
    --parallel), it ends within the budget; with nothing timed and no known GPU the first run starts and its time
    decides the rest. The runs left are listed, and train returns normally, so that the report can follow; a budget
    that admits no run stops train with one line. Here every run takes 600 s of a fake clock."""
    clock = [1000.0]
    monkeypatch.setattr(repro, "time", type("Clock", (), {"time": lambda: clock[0], "sleep": time.sleep,
                                                          "strftime": time.strftime}))
    launched = []

    def launch(v, seed, root, keys, extra):
        launched.append((v, seed))
        return subprocess.Popen([sys.executable, "-c", ""]), ["train.py", v], False

    real_wait = repro.wait_for_one

    def wait_for_one(running):
        proc = real_wait(running)
        clock[0] += 600  # the run took ten minutes
        return proc

    monkeypatch.setattr(repro, "launch", launch)
    monkeypatch.setattr(repro, "wait_for_one", wait_for_one)
    monkeypatch.setattr(repro, "peak_flops", lambda device=None: None)  # no estimate before a run is timed
    runs = [("baseline", 1337), ("g1_elementwise", 1337), ("baseline", 1338), ("g1_elementwise", 1338)]
    settings = repro.study_settings(repro.Keys(), [])
    root = str(tmp_path / "runs")
    repro.train(runs, root, repro.Keys(budget_min=25), [], settings)
    # the first at 0 (no estimate yet), the second at 10 min (ends at 20 <= 25), not a third (it would end at 30)
    assert launched == runs[:2]
    out = capsys.readouterr().out
    assert "the budget of 25 min leaves 2 runs untrained: baseline seed 1338, g1_elementwise seed 1338" in out
    assert "the same command trains them later" in out
    flops = {v: repro.run_flops(settings, v) for v in ("baseline", "g1_elementwise")}
    assert flops["g1_elementwise"] > flops["baseline"]  # the gate's matmul
    assert [(c["seconds"], c["device"], c["flops"]) for c in repro.read_jsonl(os.path.join(root, "commands.jsonl"))] \
        == [(600, repro.this_device(), flops[v]) for v, _ in runs[:2]]  # each run's time, device and own FLOPs
    # a budget shorter than one run, as timed: nothing starts, and train stops with one line (exit status 1, so that
    # study.sh neither evaluates nor reports) saying how long a run takes and what budget would admit one
    launched.clear()
    with pytest.raises(SystemExit) as e:
        repro.train(runs[2:], root, repro.Keys(budget_min=9), [], settings)
    # (the next run a baseline: 600 s times its FLOPs at the median of the two runs' speeds, G1's a little faster per
    # FLOP here, its model 4% larger in the same 600 s)
    per_run = 600 * flops["baseline"] * np.median([1 / f for f in flops.values()])
    assert launched == [] and str(e.value.code) == "error: the budget of 9 min admits none of the 2 runs to train: " \
        f"one takes about {per_run / 60:.1f} min, by the median speed of 2 earlier runs on {repro.this_device()}; " \
        "give --budget_min=10 or more (0: no limit)"
    assert "untrained" not in capsys.readouterr().out
    # no budget: every run starts
    repro.train(runs[2:], root, repro.Keys(), [], settings)
    assert launched == runs[2:] and "untrained" not in capsys.readouterr().out


def test_another_seeds_command_never_decides_whether_a_run_is_finished(tmp_path):
    """finished() reads the last command of that run alone: seed 1338 diverged after seed 1337 crashed, and seed 1337,
    its log short of max_iters, is trained again."""
    root = str(tmp_path)
    folder = repro.run_dir(root, "baseline", 1337)
    os.makedirs(folder)
    open(os.path.join(folder, "log.jsonl"), "w").write('{"iter": 0}\n{"iter": 400}\n')
    with open(os.path.join(root, "commands.jsonl"), "w") as f:
        for seed, code in ((1337, 1), (1338, DIVERGED_EXIT)):
            f.write(json.dumps({"variant": "baseline", "seed": seed, "exit_code": code}) + "\n")
    assert not repro.finished(root, "baseline", 1337, 1600)


def test_the_time_a_run_takes_is_the_median_of_the_complete_runs_timed_here(tmp_path):
    """A run that failed (its time says nothing of a whole run) and a record that does not say whether its run was
    resumed (an older commands.jsonl) do not count; of the others, the median time per FLOP, not the mean."""
    keys, here = repro.Keys(), repro.this_device()
    with open(tmp_path / "commands.jsonl", "w") as f:
        for seconds, code, resumed in ((300, 0, False), (330, 0, False), (320, 0, False), (9, 1, False), (10, 0, None)):
            f.write(json.dumps({"seconds": seconds, "exit_code": code, "parallel": 1, "flops": 1e15, "device": here,
                                **({} if resumed is None else {"resumed": resumed})}) + "\n")
    per_run, how = repro.seconds_per_run(str(tmp_path), keys, 2e15)
    assert per_run == pytest.approx(640) and how == f"the median speed of 3 earlier runs on {here}"


def test_a_run_that_ends_just_at_the_budget_starts(monkeypatch):
    """--budget_min=M admits a run estimated to end M minutes after `train` began, and not one a second later."""
    monkeypatch.setattr(repro, "time", type("Clock", (), {"time": lambda: 1600.0}))
    monkeypatch.setattr(repro, "seconds_per_run", lambda root, keys, flops: (600.0, "timed"))
    assert repro.fits_budget(1000.0, "root", repro.Keys(budget_min=20), 1e15)
    assert not repro.fits_budget(999.0, "root", repro.Keys(budget_min=20), 1e15)


def test_train_with_every_run_finished_trains_nothing_and_returns(tmp_path, monkeypatch, capsys):
    """The same `train` again once every run is finished: each is skipped, nothing starts, and train returns (exit
    status 0: the report can follow), never the budget's refusal."""
    monkeypatch.setattr(repro, "launch", lambda *args: pytest.fail("a finished run started"))
    settings = repro.study_settings(repro.Keys(), [])
    root = str(tmp_path)
    for seed in (1337, 1338):
        folder = repro.run_dir(root, "baseline", seed)
        os.makedirs(folder)
        open(os.path.join(folder, "log.jsonl"), "w").write(json.dumps({"iter": settings["max_iters"]}) + "\n")
        with open(os.path.join(root, "commands.jsonl"), "a") as f:
            f.write(json.dumps({"variant": "baseline", "seed": seed, "exit_code": 0}) + "\n")
    repro.train([("baseline", 1337), ("baseline", 1338)], root, repro.Keys(budget_min=5), [], settings)
    out = capsys.readouterr().out
    assert out.count("finished (at max_iters=1600, or it diverged), skipped") == 2 and "nothing to train" in out


def test_a_resumed_run_that_fails_is_a_failure_not_a_sign_that_no_run_can_start(tmp_path, monkeypatch, capsys):
    """A run resumed from its checkpoint that fails before it logs again (its log is the older session's) did start
    once: the runs after it start all the same, and train exits with RUNS_FAILED_EXIT naming it."""
    launched = []

    def launch(v, seed, root, keys, extra):
        launched.append((v, seed))
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)" if v == "baseline" else ""]), \
            ["train.py", v], v == "baseline"

    monkeypatch.setattr(repro, "launch", launch)
    monkeypatch.setattr(repro, "peak_flops", lambda device=None: None)
    root = str(tmp_path)
    os.makedirs(repro.run_dir(root, "baseline", 1337))
    log = os.path.join(repro.run_dir(root, "baseline", 1337), "log.jsonl")
    open(log, "w").write('{"iter": 0}\n{"iter": 400}\n')
    os.utime(log, (time.time() - 60, time.time() - 60))  # written in the earlier session
    runs = [("baseline", 1337), ("g1_elementwise", 1337)]
    with pytest.raises(SystemExit) as e:
        repro.train(runs, root, repro.Keys(), [], repro.study_settings(repro.Keys(), []))
    assert e.value.code == repro.RUNS_FAILED_EXIT and launched == runs
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: 1 of the runs failed: baseline seed 1337")


def test_each_command_is_recorded_with_what_the_time_estimate_reads(tmp_path):
    """record_run: the run, its command, its exit code and time, whether it resumed, at which --parallel, its FLOPs and
    the device (seconds_per_run counts only complete runs timed at the same --parallel on the same device)."""
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    seconds = repro.record_run(str(tmp_path), repro.Keys(parallel=2), 1e15, proc, "baseline", 1338,
                               ["train.py", "--seed=1338"], True, time.time() - 5)
    record, = repro.read_jsonl(str(tmp_path / "commands.jsonl"))
    assert 5 <= seconds < 60 and record["seconds"] == round(seconds, 1)
    assert {k: record[k] for k in ("variant", "seed", "command", "exit_code", "resumed", "parallel", "flops",
                                   "device")} == {
        "variant": "baseline", "seed": 1338, "command": "train.py --seed=1338", "exit_code": 3, "resumed": True,
        "parallel": 2, "flops": 1e15, "device": repro.this_device()}


# ----------------------------------------------------------------------------
# The sink lab: the same runner on the Bigram-Backcopy task (--study=sink_lab)

@pytest.fixture(scope="module")
def small_task(tmp_path_factory):
    from data.bigram_backcopy.prepare import prepare
    out = str(tmp_path_factory.mktemp("bigram_backcopy"))
    prepare(out_dir=out, train_tokens=50_000, val_tokens=8_192)
    return out


def test_sink_lab_pipeline_tiny(tmp_path, small_task):
    """`--study=sink_lab`: config/sink_lab.py under every run, the lab's claims, no learning-rate sweep, and the
    sink's mechanism in the report."""
    root = str(tmp_path / "lab")
    cmd = [sys.executable, "-m", "lab.repro"]
    train = subprocess.run(cmd + ["train", "baseline", "g1_elementwise", "--study=sink_lab", "--tiny", "--seeds=2",
                                  "--parallel=2", f"--root={root}", f"--data_dir={small_task}"],
                           capture_output=True, text=True, cwd=REPO)
    assert train.stdout.count("exit code 0") == 4, train.stdout + train.stderr
    for c in map(json.loads, open(os.path.join(root, "commands.jsonl"))):
        argv = shlex.split(c["command"])
        assert argv[2] == os.path.join(REPO, "config", "sink_lab.py") and "--max_iters=40" in argv
    os.makedirs(os.path.join(root, "report"))  # an earlier report's figure of a sweep this study has not: it goes
    open(os.path.join(root, "report", "lr_sweep.png"), "w").write("not this report's")
    report = subprocess.run(cmd + ["report", "--study=sink_lab", "--tiny", f"--root={root}"], capture_output=True,
                            text=True, cwd=REPO)
    assert report.returncode == 0, report.stderr
    result = json.load(open(os.path.join(root, "report", "summary.json")))
    assert [c["claim"] for c in result["claims"]] == [c[0] for c in repro.LAB_CLAIMS] and result["sweep"] == []
    g1 = result["variants"]["g1_elementwise"]
    assert g1["gate_mean_trigger"]["n"] == 2 and 0 < g1["prev_attn_trigger"]["mean"] <= 1
    assert result["variants"]["baseline"]["gate_mean_trigger"] is None
    assert all(r["first_token_attn_other"] is not None for r in result["runs"])
    counts = result["sink_counts"]  # whether each run grew a sink head, counted over seeds
    assert [counts["variants"][v]["n"] for v in ("baseline", "g1_elementwise")] == [2, 2]
    assert [c["claim"] for c in counts["claims"]] == [c[0] for c in repro.LAB_COUNTS]
    assert counts["claims"][0]["verdict"] == "too few seeds" and 0 <= counts["claims"][0]["p"] <= 1
    assert counts["claims"][1]["verdict"] == "not measured (g1_headwise not trained)"
    assert {c["verdict"] for c in result["claims"] if "estimate" in c} == {"too few seeds"}
    text = open(os.path.join(root, "report", "REPORT.md")).read()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Seeds that grew a sink head", "## The papers' claims, decided by rule"]
    assert text.startswith("# The sink lab") and "## The sink's mechanism" in text and "ideal loss" in text
    # what the sink is made of: the value at position 0 over the seeds, the massive activation's channels, emergence
    assert "## What the sink is made of" in text and "| baseline | 2 of 2 |" in text and "top channels" in text
    assert "![emergence.png](emergence.png)" in text and "were measured before" not in text
    assert "## Stability" not in text and not os.path.exists(os.path.join(root, "report", "lr_sweep.png"))
    assert "`'<\\|endoftext\\|>'`" in text or "`'s" in text  # the sink's token, decoded by the task's tokenizer
    summary = open(os.path.join(root, "report", "summary.md")).read()
    assert "| run | F-Attn at triggers |" in summary


def test_a_study_stopped_by_ctrl_c_is_continued_by_the_same_command(tmp_path, small_task):
    """Ctrl-C (sent as `timeout -s INT` sends it: to the runner, then to its whole process group, the run included)
    while a new run trains towards its first checkpoint, train.py having saved only its initial state (best.pt, no
    ckpt.pt): the run stops as train.py stops on Ctrl-C, the runner with one line and exit status 130, no traceback.
    The same command then starts that run again (--overwrite=True: it held no training) and finishes it; once more,
    it skips it."""
    root = tmp_path / "lab"
    cmd = [sys.executable, "-m", "lab.repro", "train", "baseline", "--study=sink_lab", "--tiny", f"--root={root}",
           f"--data_dir={small_task}", "--max_iters=200", "--eval_interval=200", "--lr_decay_iters=200"]
    folder = root / "baseline" / "seed1337"
    runner = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True,  # its own process group, as a terminal's foreground job, and
                              # SIGINT's default, which a suite started in the background (`cmd &`) would not pass on
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (folder / "best.pt").exists():  # the initial state saved: the run now trains towards iter 200
        assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
        time.sleep(0.02)
    os.kill(runner.pid, signal.SIGINT)
    os.killpg(runner.pid, signal.SIGINT)
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == 130 and "Traceback" not in err, out + err
    assert err.splitlines()[-1] == "interrupted (Ctrl-C); stopped baseline seed 1337: the same command continues " \
        "the study (the finished runs are skipped, a run with a checkpoint resumes, the others start again)"
    assert sorted(n for n in os.listdir(folder) if not n.startswith(".")) == ["best.pt", "log.jsonl"]
    assert [c["exit_code"] for c in read_commands(root)] == [130]  # stopped by its Ctrl-C, not killed; recorded
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"starting the run in {folder} again: it stopped before its first checkpoint" in again.stdout
    assert "--overwrite=True" in read_commands(root)[-1]["command"] and read_commands(root)[-1]["exit_code"] == 0
    assert json.loads(open(folder / "log.jsonl").readlines()[-1])["iter"] == 200 and (folder / "ckpt.pt").is_file()
    third = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert third.returncode == 0 and "skipped" in third.stdout and "nothing to train" in third.stdout


def test_a_run_is_finished_when_a_file_holds_its_last_state_or_train_py_ended_it_there(tmp_path):
    """finished(): the log's last record is written before the save it may not reach (a run stopped during its last
    save), so it alone does not finish a run; the checkpoint's iteration does, and so does a train.py that exited 0
    (or as diverged) with its log at max_iters, having saved no state there (--always_save_checkpoint=False)."""
    root = str(tmp_path)
    folder = repro.run_dir(root, "baseline", 1337)
    os.makedirs(folder)
    open(os.path.join(folder, "log.jsonl"), "w").write('{"iter": 0}\n{"iter": 3}\n{"iter": 6}\n')
    torch.save({"iter_num": 3, "val_loss": 1.0, "model_args": {}}, os.path.join(folder, "ckpt.pt"))
    assert repro.reached(folder) == 3

    def ended(code):
        with open(os.path.join(root, "commands.jsonl"), "w") as f:
            f.write(json.dumps({"variant": "baseline", "seed": 1337, "exit_code": code}) + "\n" if code != "" else "")
        return repro.finished(root, "baseline", 1337, 6)
    assert [ended(code) for code in ("", 130, 1, 0, DIVERGED_EXIT)] == [False, False, False, True, True]
    torch.save({"iter_num": 6, "val_loss": 1.0, "model_args": {}}, os.path.join(folder, "ckpt.pt"))
    assert ended("") and ended(130)  # the state at max_iters is there, however the command ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_runner_killed_outright_stops_its_run(tmp_path, small_task):
    """kill -9 of the runner (no Ctrl-C to pass on), started as a background job is, with Ctrl-C ignored: its
    train.py gets SIGTERM from the kernel and stops, its files whole, rather than training on unwatched while the
    same command, run again, finds its folder in use and records the run as failed."""
    root = tmp_path / "lab"
    cmd = [sys.executable, "-m", "lab.repro", "train", "baseline", "--study=sink_lab", "--tiny", f"--root={root}",
           f"--data_dir={small_task}", "--max_iters=100000", "--eval_interval=100000", "--lr_decay_iters=100000"]
    folder = root / "baseline" / "seed1337"
    runner = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    holder = None
    try:
        deadline = time.monotonic() + 120
        while not (folder / "best.pt").exists():  # the initial state saved: train.py now trains
            assert runner.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        holder = int(open(folder / ".lock").read().split()[1].rstrip(":"))  # "pid N: ...": the training's
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{holder}") and open(f"/proc/{holder}/stat").read().split()[2] != "Z":
            assert time.monotonic() < deadline, "train.py trained on after its runner was killed"
            time.sleep(0.1)
    finally:  # never leave a 100,000-step training behind
        for pid in (runner.pid, holder):
            with contextlib.suppress(TypeError, ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_sink_lab_study_is_its_config_and_variants():
    settings = repro.study_settings(repro.Keys(study="sink_lab"), [])
    assert (settings["dataset"], settings["n_layer"], settings["n_head"], settings["mlp"]) == \
        ("bigram_backcopy", 1, 1, "gelu")
    assert repro.study_settings(repro.Keys(study="sink_lab", tiny=True), [])["max_iters"] == repro.LAB_TINY["max_iters"]
    assert repro.chosen_variants(["all"], repro.STUDIES["sink_lab"]) == list(variants.LAB)
    assert set(variants.LAB) <= set(VARIANTS) and "g1_head_shared" not in variants.LAB  # one head: it is G1 itself
    assert VARIANTS["baseline_no_bos"].all_flags == {"gate": "none", "bos": False}
    for _, ref, variant, measure, direction in repro.LAB_CLAIMS:
        assert variant in variants.LAB and ref in variants.LAB and measure in MEASURE
    for _, ref, variant, direction in repro.LAB_COUNTS:
        assert {ref, variant} <= set(variants.LAB) and direction in (-1, 1)
    assert repro.STUDIES["sink_lab"].counts == repro.LAB_COUNTS and not repro.STUDIES["repro"].counts
    with pytest.raises(SystemExit, match="--study='nope' is not a study; choose one of repro, sink_lab"):
        repro.main(["list", "--study=nope"])


def test_help_lists_the_keys_before_or_after_the_step():
    """`python -m lab.repro --help` and `python -m lab.repro train --help`: what the runner does and its keys,
    exit 0; --help after a step is not passed on to train.py."""
    argvs = (["--help"], ["train", "--help"], ["report", "-h"])
    procs = [subprocess.Popen([sys.executable, "-m", "lab.repro", *argv], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for argv in argvs]  # side by side: mostly imports
    for argv, proc in zip(argvs, procs):
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0 and stderr == "", (argv, stderr)
        assert stdout.startswith("Reproduce the gated-attention papers' trends") and "starting" not in stdout
        assert "python -m lab.repro train all" in stdout and "repro.py train" not in stdout  # how it runs
        keys = [line.split("=")[0][4:] for line in stdout.splitlines() if line.startswith("  --")]
        assert keys == [f.name for f in dataclasses.fields(repro.Keys)], argv


# ----------------------------------------------------------------------------
# The project's imports: scripts run, libraries are imported; no script imports another (but the one step lab.bench
# times); nothing imports in a circle. (That the core never imports the lab, and what the top level holds, is
# test_layout.py's.)

SCRIPTS = ("train", "sample",  # run as `python NAME.py`
           "lab.analyze", "lab.evaluate", "lab.repro", "lab.bench", "lab.setup_check",
           "lab.outlier")  # run as `python -m lab.NAME`
LIBRARIES = ("cli", "runfolder", "probe", "model", "kernels", "pretrained",
             "lab", "lab.report", "lab.variants", "lab.stats")
# A script that another imports, and the names it imports, each with its reason: lab.bench times train.py's own
# optimizer step, so that its timings are the training loop's (train.py runs only under its __main__); lab.setup_check
# times two steps of the main job's own model and optimizer step, to say how long the main job takes here;
# lab.outlier measures each run on the windows lab.analyze measures it on, after the same checks of its checkpoint
IMPORTED_SCRIPTS = {("lab.outlier", "lab.analyze"): {"eval_windows", "load_run_checkpoint"},
                    ("lab.bench", "train"): {"optimizer_step"},
                    ("lab.setup_check", "train"): {"MODEL_KEYS", "TrainConfig", "optimizer_step"},
                    ("lab.repro", "train"): {"TrainConfig", "check_settings"}}  # its keys, checked before any run


def project_modules():
    """{import name: file} of the project's own modules: the top-level .py files, the lab package and the data
    package (the tests, in tests/, are none of them)."""
    modules = {os.path.basename(p)[:-3]: p for p in glob.glob(os.path.join(REPO, "*.py"))}
    for package in ("lab", "data"):
        for path in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True):
            modules[os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").removesuffix(".__init__")] = path
    return modules


def imported(path, modules, names_from=None):
    """The project modules a file imports anywhere (inside functions too): import X, from X import Y (Y a module or a
    name of X). With names_from, the names the file imports from that module instead."""
    found, names_of = set(), set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: a relative import"
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if node.module == names_from:
                names_of |= {a.name for a in node.names}
        else:
            continue
        found |= {n for n in names if n in modules}
    return names_of if names_from else found


def test_no_script_imports_another_and_no_library_imports_a_script():
    modules = project_modules()
    own = {name for name in modules if not name.startswith("data")}
    assert own == set(SCRIPTS) | set(LIBRARIES), "a new module: say whether it is a script or a library"
    graph = {name: imported(path, modules) for name, path in modules.items()}
    for name in SCRIPTS:
        others = {other for other in graph[name] & set(SCRIPTS) if (name, other) not in IMPORTED_SCRIPTS}
        assert not others, f"{name} imports the script(s) {others}: run it instead"
    for (name, script), allowed in IMPORTED_SCRIPTS.items():
        assert imported(modules[name], modules, names_from=script) <= allowed, f"{name} imports more of {script}"
    for name in set(modules) - set(SCRIPTS):
        assert not graph[name] & set(SCRIPTS), f"the library {name} imports the script(s) {graph[name] & set(SCRIPTS)}"
    assert "lab.report" in graph["lab.evaluate"] and "lab.report" in graph["lab.repro"]  # tables both show
    assert "pretrained" not in graph["model"] and "model" in graph["pretrained"]


def test_the_import_graph_has_no_cycle():
    modules = project_modules()
    graph = {name: imported(path, modules) - {name} for name, path in modules.items()}
    done, path = set(), []

    def visit(name):
        if name in path:
            pytest.fail("an import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for other in sorted(graph[name]):
            visit(other)
        path.pop()
        done.add(name)
    for name in sorted(graph):
        visit(name)
    assert len(done) == len(modules)


def test_repro_runs_every_tool_one_way(tmp_path, monkeypatch):
    """train.py, lab.analyze, lab.evaluate and the corpus's prepare.py are started by start_tool alone (the one place
    that calls subprocess), each from tool_command (the one place that names this Python): a top-level script by its
    path, a lab tool as a module, which start_tool finds from any folder (the repository on the child's PYTHONPATH)."""
    tree = ast.parse(open(os.path.join(REPO, "lab", "repro.py"), encoding="utf-8").read())
    where = {}
    for function in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                where.setdefault(f"{node.value.id}.{node.attr}", set()).add(function.name)
    assert {k: v for k, v in where.items() if k.startswith("subprocess.")} == \
        {"subprocess.Popen": {"start_tool"}, "subprocess.STDOUT": {"start_tool"}}
    assert where["sys.executable"] == {"tool_command"}
    # the scripts named: train.py's runs, lab/analyze.py for the report, lab/evaluate.py, and the runner's own command
    # (the report's last line says how it was made)
    scripts = sorted(node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call) and
                     isinstance(node.func, ast.Name) and node.func.id in ("run_tool", "tool_command") and
                     isinstance(node.args[0], ast.Constant))
    assert scripts == ["lab/analyze.py", "lab/evaluate.py", "lab/repro.py", "train.py"]
    assert repro.tool_command("lab/analyze.py", ["--runs=x"]) == [sys.executable, "-m", "lab.analyze", "--runs=x"]
    assert repro.tool_command("train.py", ["c.py"]) == [sys.executable, os.path.join(REPO, "train.py"), "c.py"]
    monkeypatch.chdir(tmp_path)  # elsewhere, with no PYTHONPATH: the child still imports the lab
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    child = repro.start_tool([sys.executable, "-c", "import lab.stats"], log=str(tmp_path / "out.txt"), env=env)
    assert child.wait(timeout=120) == 0, open(tmp_path / "out.txt").read()


# ----------------------------------------------------------------------------
# What a careless user meets: the committed results, kept runs that cannot stand for theirs, folders that are files

def test_a_report_goes_under_the_root_unless_the_committed_folder_is_named(tmp_path, monkeypatch, capsys):
    """A command run to look never replaces the committed report: `report` and `evaluate` write to <root>/report/
    (git-ignored) unless --report_dir names another folder, and say so when that folder is in results/; `train` and
    `restore` read the kept runs from the committed report, never write it."""
    written, read = [], []
    monkeypatch.setattr(repro, "report", lambda root, report_dir, *args: written.append(report_dir))
    monkeypatch.setattr(repro, "evaluate_runs", lambda root, report_dir, *args: written.append(report_dir))
    monkeypatch.setattr(repro, "restore_runs", lambda root, kept, settings: read.append(kept) or [])
    root = str(tmp_path / "root")
    for step in ("report", "evaluate"):
        repro.main([step, "--study=sink_lab", f"--root={root}"])
        assert written[-1] == os.path.join(root, "report")
    assert "note: writing into" not in capsys.readouterr().out
    repro.main(["restore", "--study=sink_lab", f"--root={root}"])
    assert read == [os.path.join(REPO, "results", "sink_lab")]  # from any folder the runner is started in
    committed = os.path.join(REPO, "results", "sink_lab")
    repro.main(["report", "--study=sink_lab", f"--root={root}", f"--report_dir={committed}"])
    assert written[-1] == committed
    assert f"note: writing into {committed}/, committed results, as --report_dir={committed} asks" in \
        capsys.readouterr().out


def test_a_tiny_study_keeps_to_its_own_runs_and_a_report_compares_the_studys_settings(tmp_path, monkeypatch):
    """--tiny (a smoke test) restores only what its own report keeps, never the committed study's runs; `report`
    hands the study's settings to the check that its runs were trained alike."""
    read, reported = [], []
    monkeypatch.setattr(repro, "restore_runs", lambda root, kept, settings: read.append(kept) or [])
    monkeypatch.setattr(repro, "report", lambda *args: reported.append(args))
    root = str(tmp_path / "root")
    repro.main(["restore", "--tiny", "--study=sink_lab", f"--root={root}"])
    assert read == [os.path.join(root, "report")]
    repro.main(["report", "--study=sink_lab", f"--root={root}"])
    settings = reported[-1][-1]
    named = list(repro.study_settings(repro.Keys(study="sink_lab"), []))
    assert settings == repro.report_settings(repro.Keys(study="sink_lab")) and settings[:len(named)] == named
    assert {"max_iters", "weight_decay", "dataset", "qk_norm", "dropout"} <= set(settings)


def kept_run(source, target, change=None):
    """A copy of a run the sink lab's committed report keeps (results/sink_lab/runs/...), changed by change(folder)."""
    shutil.copytree(os.path.join(REPO, "results", "sink_lab", "runs", source), target)
    if change:
        change(str(target))


def test_kept_runs_that_cannot_be_read_or_are_an_earlier_runs_are_left_out_with_a_note(tmp_path, capsys):
    """A kept measurement cut short, or one an earlier run left in a reused folder, counts as absent: left out of
    what is restored or reported, with one note each, never a traceback."""
    kept = tmp_path / "kept" / "runs" / "baseline"

    def cut(folder):
        with open(os.path.join(folder, "measured.json"), "r+") as f:
            f.truncate(100)

    def new_run(folder):
        with open(os.path.join(folder, "log.jsonl"), "w") as f:
            f.write(json.dumps({"iter": 0, "tokens": 0, "val_loss": 4.2}) + "\n")
    kept_run("baseline/seed1337", kept / "seed1337")
    kept_run("baseline/seed1338", kept / "seed1338", cut)
    kept_run("baseline/seed1339", kept / "seed1339", new_run)
    capsys.readouterr()
    unusable = {}  # what the report names in its header, beside the runs not finished
    assert repro.trained_runs(str(tmp_path / "kept" / "runs"), variants.LAB, unusable) == [("baseline", 1337)]
    assert list(unusable) == [("baseline", 1338), ("baseline", 1339)], unusable
    out = capsys.readouterr().out
    assert "note: baseline seed 1338 left out: its ckpt.pt is not in" in out and "cannot be read" in out
    assert "note: baseline seed 1339 left out" in out and "earlier run's" in out
    settings = repro.study_settings(repro.Keys(study="sink_lab"), [])
    restored = repro.restore_runs(str(tmp_path / "root"), str(tmp_path / "kept"), settings)
    assert restored == ["baseline seed 1337"] and sorted(os.listdir(tmp_path / "root" / "baseline")) == ["seed1337"]


def test_kept_measurements_without_their_settings_or_with_their_arrays_cut_are_left_out(tmp_path, capsys):
    """A kept measured.json that lacks the settings it was trained with (which run_settings and restore read), or a
    measured.npz cut short (a copy interrupted), counts as absent, with a note: never a traceback later."""
    kept = tmp_path / "kept" / "runs" / "baseline"

    def no_settings(folder):
        path = os.path.join(folder, "measured.json")
        record = json.load(open(path))
        del record["train_config"]
        open(path, "w").write(json.dumps(record))

    def cut_arrays(folder):
        with open(os.path.join(folder, "measured.npz"), "r+") as f:
            f.truncate(100)
    kept_run("baseline/seed1337", kept / "seed1337", no_settings)
    kept_run("baseline/seed1338", kept / "seed1338", cut_arrays)
    capsys.readouterr()
    assert repro.trained_runs(str(tmp_path / "kept" / "runs"), variants.LAB) == []
    out = capsys.readouterr().out
    for seed in (1337, 1338):
        assert f"note: baseline seed {seed} left out: its ckpt.pt is not in" in out
    assert "cannot be read (measured.json, .npz: KeyError)" in out and "(measured.json, .npz: BadZipFile)" in out
    for seed in (1337, 1338):  # the run's checkpoint is here: it is the run, whatever was kept beside it
        torch.save({"iter_num": 2000, "val_loss": 1.0, "model_args": {}}, kept / f"seed{seed}" / "ckpt.pt")
    assert repro.trained_runs(str(tmp_path / "kept" / "runs"), variants.LAB) == [("baseline", 1337), ("baseline", 1338)]


def test_a_report_never_replaces_the_report_of_runs_trained_otherwise(tmp_path, monkeypatch):
    """A study trained without the --config of the committed report (config/repro.py's runs, where results/repro keeps
    config/repro_sink.py's): the report stops before it writes anything into that folder, naming the setting."""
    out_dir = tmp_path / "report"
    kept_run("baseline/seed1337", out_dir / "runs" / "baseline" / "seed1337")
    train_config = json.loads((out_dir / "runs" / "baseline" / "seed1337" / "measured.json").read_text())["train_config"]
    new = {"runs": [{"train_config": dict(train_config, weight_decay=0.5)}]}
    monkeypatch.setattr(repro, "analyze_runs", lambda root, runs: (new, [{}]))
    monkeypatch.setattr(repro, "keep_runs", lambda *args: pytest.fail("kept runs into the other report"))
    before = folder_state(str(out_dir))
    with pytest.raises(SystemExit, match=r"report/ is the report of runs trained otherwise than those under .*root/ "
                                         r"\(weight_decay: 0\.5 \(g1_elementwise seed 1337\); 0\.1 \(baseline seed "
                                         r"1337 \(kept\)\)\), and the report would replace it: give --report_dir"):
        repro.write_report(str(tmp_path / "root"), str(out_dir), True, "report", repro.STUDIES["sink_lab"],
                           ["weight_decay"], [("g1_elementwise", 1337)])
    assert folder_state(str(out_dir)) == before
    monkeypatch.setattr(repro, "analyze_runs", lambda root, runs: ({"runs": [{"train_config": train_config}]}, [{}]))
    monkeypatch.setattr(repro, "keep_runs", lambda *args: pytest.fail("reached: the runs are alike"))
    with pytest.raises(pytest.fail.Exception, match="reached: the runs are alike"):
        repro.write_report(str(tmp_path / "root"), str(out_dir), True, "report", repro.STUDIES["sink_lab"],
                           ["weight_decay"], [("g1_elementwise", 1337)])


def test_a_report_of_runs_not_trained_alike_stops_before_it_writes(tmp_path, monkeypatch):
    """Runs under the root that differ in a study setting their variants do not set: the report stops with one line
    naming the setting, its values and runs, before it keeps or writes anything."""
    two = {"runs": [{"train_config": {"weight_decay": 0.1}}, {"train_config": {"weight_decay": 0.5}}]}
    monkeypatch.setattr(repro, "analyze_runs", lambda root, runs: (two, [{}, {}]))
    monkeypatch.setattr(repro, "keep_runs", lambda *args: pytest.fail("kept the runs"))
    with pytest.raises(SystemExit, match=r"the runs under .*root/ were not trained alike, so the report cannot compare "
                                         r"them: weight_decay: 0\.1 \(baseline seed 1337\); 0\.5 \(g1_elementwise "
                                         r"seed 1337\); move"):
        repro.write_report(str(tmp_path / "root"), str(tmp_path / "report"), True, "report",
                           repro.STUDIES["sink_lab"], ["weight_decay"], [("baseline", 1337), ("g1_elementwise", 1337)])
    assert not (tmp_path / "report").exists()


def test_a_report_cut_short_leaves_its_folder_and_the_runs_it_keeps_as_they_were(tmp_path, monkeypatch):
    """Ctrl-C while the report draws its figures (after it has read the runs): the report folder, the runs it keeps
    under runs/ included, is exactly as it was, never a new runs/ beside the old REPORT.md."""
    root, out_dir = tmp_path / "root", tmp_path / "report"
    for run in ("baseline/seed1337", "g1_elementwise/seed1337"):
        kept_run(run, root / run)
        kept_run(run, out_dir / "runs" / run)
        with open(out_dir / "runs" / run / "log.jsonl", "a") as f:  # a copy the report would replace
            f.write("\n")
    (out_dir / "REPORT.md").write_text("the report before")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(repro, "plot_trends", interrupted)
    before = folder_state(str(out_dir))
    with pytest.raises(KeyboardInterrupt):
        repro.main(["report", "--study=sink_lab", f"--root={root}", f"--report_dir={out_dir}"])
    assert folder_state(str(out_dir)) == before


def analyzed_from_kept(root, runs):
    """lab.repro.analyze_runs in short: each run's train_config from its kept measurement, no measures."""
    configs = [json.load(open(os.path.join(root, v, f"seed{s}", "measured.json")))["train_config"] for v, s in runs]
    return {"runs": [{"train_config": c} for c in configs]}, [{} for _ in runs]


def test_a_report_refuses_a_run_trained_with_a_key_its_studys_config_does_not_name(tmp_path, monkeypatch):
    """A baseline seed trained with --qk_norm=True (a key config/sink_lab.py does not name, and no variant's) beside
    one trained without it: `report` stops with one line naming the key, its values and runs, instead of pooling
    the two as seeds of one baseline. Keys that say only how a run was computed (INCIDENTAL_KEYS) may differ."""
    assert {"qk_norm", "dropout", "grad_clip", "beta2"} <= set(repro.report_settings(repro.Keys(study="sink_lab")))
    assert not {"seed", "out_dir", "init_from", "overwrite", "device"} & set(
        repro.report_settings(repro.Keys(study="sink_lab")))
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337", with_config(device="cuda", overwrite=True))
    kept_run("baseline/seed1338", root / "baseline" / "seed1338", with_config(qk_norm=True))

    monkeypatch.setattr(repro, "analyze_runs", analyzed_from_kept)
    monkeypatch.setattr(repro, "keep_runs", lambda *args: pytest.fail("kept the runs"))
    with pytest.raises(SystemExit, match=r"were not trained alike, so the report cannot compare them: qk_norm: false "
                                         r"\(baseline seed 1337\); true \(baseline seed 1338\); move"):
        repro.main(["report", "--study=sink_lab", f"--root={root}", f"--report_dir={tmp_path / 'report'}"])


def test_a_report_compares_no_key_a_run_lacks_for_being_trained_before_it_existed(tmp_path, monkeypatch):
    """report_settings names every train.py key, and a run kept from before a key existed (its train_config lacks it)
    is compared in the others only: such a run beside newer ones is reported, not refused as trained otherwise."""
    def without(key):
        def edit(folder):
            path = os.path.join(folder, "measured.json")
            record = json.load(open(path))
            del record["train_config"][key]
            open(path, "w").write(json.dumps(record))
        return edit
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337", without("spike_threshold"))
    kept_run("baseline/seed1338", root / "baseline" / "seed1338")

    monkeypatch.setattr(repro, "analyze_runs", analyzed_from_kept)

    class Compared(Exception):
        pass
    monkeypatch.setattr(repro, "keep_runs", lambda *args: (_ for _ in ()).throw(Compared()))
    with pytest.raises(Compared):  # past both comparisons, to the first write
        repro.main(["report", "--study=sink_lab", f"--root={root}", f"--report_dir={tmp_path / 'report'}"])


def test_train_refuses_to_continue_or_count_a_run_with_settings_it_was_not_trained_with(tmp_path, monkeypatch,
                                                                                       capsys):
    """`train baseline:2 --weight_decay=0.5` over runs trained at the config's 0.1 said "finished, skipped" (or
    resumed an interrupted one at 0.5, one run of two settings whose checkpoint records only the last): it stops
    with one line naming a run and the key, before anything starts or any data is prepared (the kept runs' data
    check prepared the task first). How a run is computed (--device, --data_dir) may change."""
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337")
    kept_run("baseline/seed1338", root / "baseline" / "seed1338")
    monkeypatch.setattr(repro, "launch", lambda *args: pytest.fail("started a run"))
    monkeypatch.setattr(repro, "prepare_if_missing", lambda *args: pytest.fail("prepared the data"))
    with pytest.raises(SystemExit, match=r"^error: runs under .*root/ were trained with other settings than these "
                                         r"\(baseline seed 1337: weight_decay=0.1 \(here: 0.5\); \.\.\.\): a run cannot"):
        repro.main(["train", "baseline:2", "--study=sink_lab", f"--root={root}", f"--report_dir={tmp_path / 'r'}",
                    "--weight_decay=0.5"])
    assert "skipped" not in capsys.readouterr().out
    monkeypatch.setattr(repro, "prepare_if_missing", prepare_if_missing)  # the same settings, computed elsewhere
    repro.main(["train", "baseline:2", "--study=sink_lab", f"--root={root}", f"--report_dir={tmp_path / 'r'}",
                "--device=cpu", f"--data_dir={tmp_path / 'bigram_backcopy'}"])  # (the task prepared there, not in data/)
    assert capsys.readouterr().out.count("finished (at max_iters") == 2


def test_a_report_refuses_while_its_folder_keeps_a_run_its_root_lacks(tmp_path):
    """A run folder removed from the root after a report kept it: the report left it out of REPORT.md and kept it in
    runs/, where `restore` brought it back into the next report. It stops with one line saying what to do."""
    root, out_dir = tmp_path / "root", tmp_path / "report"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337")
    kept_run("baseline/seed1338", out_dir / "runs" / "baseline" / "seed1338")
    with pytest.raises(SystemExit, match=r"runs/ keeps baseline seed 1338, which .*root/ lacks: `python -m lab.repro "
                                         r"restore` with the same --root, --report_dir and the keys"):
        repro.report(str(root), str(out_dir), False, "report", repro.STUDIES["sink_lab"], [])
    assert not {"REPORT.md", "summary.json"} & set(os.listdir(out_dir))


def with_config(**change):
    """kept_run's change: the kept measurement's train_config, as if the run had been trained with these keys."""
    def edit(folder):
        path = os.path.join(folder, "measured.json")
        record = json.load(open(path))
        record["train_config"].update(change)
        open(path, "w").write(json.dumps(record))
    return edit


def test_a_seed_that_failed_before_its_first_checkpoint_is_named_not_silently_absent(tmp_path, monkeypatch):
    """A run whose command failed before it saved a checkpoint has nothing to measure: the report names it, with its
    exit code (and keeps its command), instead of reporting one seed fewer as if it had never been tried."""
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337")
    (root / "baseline" / "seed1338").mkdir()
    records = [{"variant": "baseline", "seed": s, "command": f"python train.py --seed={s}", "exit_code": code}
               for s, code in ((1337, 0), (1338, 1), (1339, 0))]  # 1339: exit 0 but nothing saved, not a failure
    (root / "commands.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    got = []
    monkeypatch.setattr(repro, "write_report", lambda *args: got.append(args))
    repro.report(str(root), str(tmp_path / "report"), False, "report", repro.STUDIES["sink_lab"], [])
    assert got[0][6:] == ([("baseline", 1337)], [], {("baseline", 1338): "baseline seed 1338 (no ckpt.pt: its last "
                                                                         "command exited 1)"})


def test_a_report_leaves_out_the_runs_not_finished_and_names_them(tmp_path, monkeypatch, capsys):
    """A run stopped before its max_iters (Ctrl-C, a time budget) is no seed yet: the report draws the others and
    names it (its header, from `left_out`), and with no run finished it stops with one line."""
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337")
    kept_run("baseline/seed1338", root / "baseline" / "seed1338", with_config(max_iters=4000))  # its log: 2000
    got = []
    monkeypatch.setattr(repro, "write_report", lambda *args: got.append(args))
    repro.report(str(root), str(tmp_path / "report"), False, "report", repro.STUDIES["sink_lab"], [])
    assert got[0][6:] == ([("baseline", 1337)], ["baseline seed 1338 (iter 2000 of 4000)"], {})
    assert "note: baseline seed 1338 (iter 2000 of 4000) left out: not finished" in capsys.readouterr().out
    with_config(max_iters=4000)(str(root / "baseline" / "seed1337"))
    with pytest.raises(SystemExit, match=r"no finished runs under .*root/ to report \(baseline seed 1337 \(iter 2000 "
                                         r"of 4000\); baseline seed 1338 .*\): the `train` command that started them"):
        repro.report(str(root), str(tmp_path / "report"), False, "report", repro.STUDIES["sink_lab"], [])


def test_evaluate_leaves_out_the_runs_not_finished(tmp_path, monkeypatch, capsys):
    """`evaluate` measures the runs the report will draw: a run short of its max_iters is left out, and named."""
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337")
    kept_run("baseline/seed1338", root / "baseline" / "seed1338", with_config(max_iters=4000))
    ran = []
    monkeypatch.setattr(repro, "run_tool", lambda script, args: ran.append(args))
    repro.evaluate_runs(str(root), str(tmp_path / "report"), ["baseline"], [], repro.STUDIES["sink_lab"])
    assert [a for a in ran[0] if a.startswith("--labels=")] == ["--labels=baseline/seed1337"]
    out = capsys.readouterr().out
    assert "note: baseline seed 1338 (iter 2000 of 4000) left out: not finished" in out
    # the lab's learned positions have no length mode (it needs RoPE): the modes that apply, said, unless given
    assert [a for a in ran[0] if a.startswith("--modes=")] == ["--modes=quant,stream"] and "--modes=quant" in out
    repro.evaluate_runs(str(root), str(tmp_path / "report"), ["baseline"], ["--modes=quant"], repro.STUDIES["sink_lab"])
    assert [a for a in ran[1] if a.startswith("--modes=")] == ["--modes=quant"]


def test_a_key_a_run_lacks_is_taken_as_it_was_then_and_only_the_keys_that_differ_are_named():
    """mislabelled: a run trained before a defining key existed lacks it (nothing to compare, no KeyError); a key
    that differs is named with the study's value."""
    lacking = {"variant": "g1_headwise", "seed": 1337, "train_config": {"gate": "g1"}}
    assert repro.mislabelled([lacking], False, repro.STUDIES["repro"]) == []
    silu = dict(lacking, train_config={"gate": "g1", "gate_act": "silu"})
    assert repro.mislabelled([silu], False, repro.STUDIES["repro"]) == \
        ["g1_headwise seed 1337: gate_act='silu' (the study's g1_headwise: 'sigmoid')"]


def test_evaluate_measures_the_studys_models_by_default_not_its_sweep(tmp_path, monkeypatch):
    """`evaluate` without variant names: the GPU study's models, its learning-rate sweep left out."""
    root = tmp_path / "root"
    for v in ("baseline", "baseline_lr0.024"):
        kept_run("baseline/seed1337", root / v / "seed1337")
    ran = []
    monkeypatch.setattr(repro, "run_tool", lambda script, args: ran.append(args))
    repro.evaluate_runs(str(root), str(tmp_path / "report"), [], [], repro.STUDIES["repro"])
    assert [a for a in ran[0] if a.startswith("--labels=")] == ["--labels=baseline/seed1337"]


@pytest.mark.parametrize("step", ["report", "evaluate"])
def test_a_checkpoint_without_train_pys_settings_is_one_line(tmp_path, monkeypatch, step):
    """A ckpt.pt that lacks train.py's settings (not train.py's, or older than them) in a run folder: `report` and
    `evaluate` stop with one line naming it, as lab/analyze.py does (load_run_checkpoint), never a KeyError."""
    monkeypatch.setattr(repro, "run_tool", lambda *args: pytest.fail("a tool ran"))
    folder = tmp_path / "root" / "baseline" / "seed1337"
    folder.mkdir(parents=True)
    (folder / "log.jsonl").write_text('{"iter": 0}\n{"iter": 6}\n')
    torch.save({"iter_num": 6, "val_loss": 1.0, "model_args": {}}, folder / "ckpt.pt")
    with pytest.raises(SystemExit) as e:
        if step == "report":
            repro.report(str(tmp_path / "root"), str(tmp_path / "report"), False, "report", repro.STUDIES["sink_lab"])
        else:
            repro.evaluate_runs(str(tmp_path / "root"), str(tmp_path / "report"), ["baseline"], [],
                                repro.STUDIES["sink_lab"])
    message = str(e.value.code)
    assert message.startswith(f"error: {folder / 'ckpt.pt'}") and "settings" in message and "\n" not in message


def test_a_report_refuses_runs_that_are_not_the_variant_they_are_named_after(tmp_path, monkeypatch):
    """A run trained with a key that makes another variant (here G1 headwise with SiLU scores, in g1_headwise/), or
    another study's (the sink lab's runs reported as the GPU study's: their MLP is GELU), or such a run kept in the
    report folder, would be named and compared as what it is not: the report stops first, naming the key; the runs as
    their study trained them report as ever."""
    monkeypatch.setattr(repro, "write_report", lambda *args: reported.append(args[6]))
    reported, root, out_dir = [], tmp_path / "root", tmp_path / "report"
    kept_run("g1_headwise/seed1337", root / "g1_headwise" / "seed1337", with_config(gate_act="silu"))
    with pytest.raises(SystemExit, match=r"error: g1_headwise seed 1337: gate_act='silu' \(the study's g1_headwise: "
                                         r"'sigmoid'\) was trained otherwise than --study=sink_lab and the variant "
                                         r"make it"):
        repro.report(str(root), str(out_dir), False, "report", repro.STUDIES["sink_lab"], [])
    shutil.rmtree(root / "g1_headwise")
    kept_run("g1_headwise/seed1337", root / "g1_headwise" / "seed1337")
    with pytest.raises(SystemExit, match=r"mlp='gelu' \(the study's g1_headwise: 'swiglu'\) was trained otherwise "
                                         r"than --study=repro"):
        repro.report(str(root), str(out_dir), False, "report", repro.STUDIES["repro"], [])
    kept_run("g1_headwise/seed1338", out_dir / "runs" / "g1_headwise" / "seed1338", with_config(gate_act="silu"))
    with pytest.raises(SystemExit, match=r"g1_headwise seed 1338 \(kept in the report\): gate_act='silu'"):
        repro.report(str(root), str(out_dir), False, "report", repro.STUDIES["sink_lab"], [])
    shutil.rmtree(out_dir / "runs")
    repro.report(str(root), str(out_dir), False, "report", repro.STUDIES["sink_lab"], [])
    assert reported == [[("g1_headwise", 1337)]]


def test_train_naming_a_report_of_runs_trained_otherwise_stops_before_training(tmp_path, monkeypatch):
    """`train --report_dir=R` (as lab/gpu/study.sh runs it): where R keeps runs trained with other settings, the
    report drawn there would refuse the new runs, so training would be wasted: it stops first. The same settings
    train as ever."""
    kept_run("baseline/seed1337", tmp_path / "report" / "runs" / "baseline" / "seed1337")
    monkeypatch.setattr(repro, "train", lambda *args: trained.append(args))
    monkeypatch.setattr(repro, "check_kept_data", lambda root, settings, kept_from: None)  # no dataset prepared here
    trained = []
    command = ["train", "baseline:2", "--study=sink_lab", f"--root={tmp_path / 'root'}",
               f"--report_dir={tmp_path / 'report'}"]
    with pytest.raises(SystemExit, match=r"report/, the report named, keeps runs trained otherwise than these settings "
                                         r"\(baseline seed 1337: weight_decay=.* \(here: 0\.5\)\)"):
        repro.main(command + ["--weight_decay=0.5"])
    assert trained == [] and not (tmp_path / "root").exists()
    repro.main(command)
    assert [r for r in trained[0][0]] == [("baseline", 1337), ("baseline", 1338)]


def test_a_report_folder_that_is_a_file_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(repro, "trained_runs", lambda *args: [("baseline", 1337)])
    monkeypatch.setattr(repro, "write_report", lambda *args: pytest.fail("reported into a file"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as e:
        repro.main(["report", f"--root={tmp_path / 'root'}", f"--report_dir={tmp_path / 'file'}"])
    assert str(e.value.code) == (f"error: {tmp_path / 'file'} cannot be used as a folder (File exists): choose another "
                                 "--root or --report_dir")


def test_evaluations_that_cannot_be_read_are_named_in_the_report_not_a_traceback(tmp_path, capsys):
    """evaluate/summary.json cut short (a copy interrupted): the report is written all the same, and says why its
    section on lab/evaluate.py's numbers is missing."""
    os.makedirs(tmp_path / "evaluate")
    (tmp_path / "evaluate" / "summary.json").write_text('{"models": [')
    section = report.evaluate_section(str(tmp_path), str(tmp_path / "root"), [("baseline", 1337)])
    assert "**Not shown: evaluate/summary.json cannot be read (JSONDecodeError): run `python -m lab.repro evaluate` " \
           "again.**" in section
    assert "note: the report has no section on lab/evaluate.py's measurements" in capsys.readouterr().out


def test_the_evaluations_say_which_are_out_of_date_missing_or_measured_earlier(tmp_path):
    """A checkpoint saved after the evaluation, or gone with no record kept beside it, is out of date; a run the
    report draws that was not evaluated is named; the section says it was measured when any run was measured now, and
    drawn from records only when every one was measured earlier."""
    def record(seed, **more):
        return {"label": f"baseline/seed{seed}", "run": str(tmp_path / f"seed{seed}"), "checkpoint": "ckpt.pt",
                "quant": {"settings": [{"setting": "w4a4", "increase": {"mean": 0.1 * (seed - 1336)}}]}, **more}
    models = [record(1337), record(1338), record(1339, measured_earlier=True, device="GPU", date="earlier")]
    os.makedirs(tmp_path / "evaluate")
    summary = tmp_path / "evaluate" / "summary.json"
    summary.write_text(json.dumps({"device": "CPU", "date": "today", "models": models}))
    for seed in (1337, 1338, 1339):
        os.makedirs(tmp_path / f"seed{seed}")
        (tmp_path / f"seed{seed}" / "ckpt.pt").write_text("")
    stamp = os.path.getmtime(summary)
    os.utime(tmp_path / "seed1337" / "ckpt.pt", (stamp - 60, stamp - 60))  # saved before its evaluation
    os.utime(tmp_path / "seed1338" / "ckpt.pt", (stamp + 60, stamp + 60))  # trained again since
    os.remove(tmp_path / "seed1339" / "ckpt.pt")
    (tmp_path / "seed1339" / EVALUATED).write_text("{}")  # gone, its record kept
    trained = [("baseline", s) for s in (1337, 1338, 1339, 1340)]
    section = report.evaluate_section(str(tmp_path), str(tmp_path / "root"), trained)
    assert "**Out of date: the checkpoints of baseline/seed1338 changed" in section
    assert "Not evaluated: baseline/seed1340 (" in section
    assert "Measured by `python -m lab.repro evaluate` on CPU, today" in section
    assert "Measured in an earlier session, from the record kept of each run whose checkpoint is gone: " \
        "baseline/seed1339 on GPU, earlier." in section
    os.remove(tmp_path / "seed1339" / EVALUATED)  # gone, and nothing kept of it
    assert "the checkpoints of baseline/seed1338, baseline/seed1339 changed" in report.evaluate_section(
        str(tmp_path), str(tmp_path / "root"), trained)
    summary.write_text(json.dumps({"device": "CPU", "date": "today", "models": [
        dict(r, measured_earlier=True, device="GPU", date="earlier") for r in models]}))
    assert "Drawn by `python -m lab.repro evaluate` on today, every run from its record measured earlier" in \
        report.evaluate_section(str(tmp_path), str(tmp_path / "root"), trained)


def test_a_column_some_seeds_lack_shows_the_seeds_that_have_it_and_says_how_many(tmp_path):
    """A variant whose kept seeds were evaluated before the length Δ existed, and whose new seed has it: the Δ cell
    shows the new seed's value and says '1 of 3 seeds', never '–' (nothing shown) nor a mean over fewer seeds
    presented as all of them; a column every seed has stays as it was."""
    def record(seed, delta):
        bucket = {"from": 64, "to": 128, "mean": 2.0 + (seed - 1337) / 1e4,
                  **({"increase": {"mean": delta}} if delta else {})}
        return {"label": f"baseline/seed{seed}", "run": str(tmp_path / f"seed{seed}"), "checkpoint": "ckpt.pt",
                "length": {"none": [{"multiple": 2, "buckets": [bucket]}]}}
    models = [record(1337, None), record(1338, None), record(1339, 0.25)]
    os.makedirs(tmp_path / "evaluate")
    for seed in (1337, 1338, 1339):  # each run's kept evaluation beside it: none is out of date
        os.makedirs(tmp_path / f"seed{seed}")
        (tmp_path / f"seed{seed}" / EVALUATED).write_text("{}")
    (tmp_path / "evaluate" / "summary.json").write_text(json.dumps({"device": "GPU", "date": "today",
                                                                     "models": models}))
    section = report.evaluate_section(str(tmp_path), str(tmp_path / "root"), [("baseline", s) for s in
                                                                               (1337, 1338, 1339)])
    row = next(line for line in section.splitlines() if line.startswith("| baseline |")).strip("| ").split(" | ")
    assert row[3] == "0.2500 (1 of 3 seeds)" and row[2].startswith("2.0001 ± ")
    assert "A cell marked (k of n seeds)" in section
    # an evaluated run the report does not draw (left out as not finished): not averaged in, and named
    section = report.evaluate_section(str(tmp_path), str(tmp_path / "root"), [("baseline", 1337), ("baseline", 1338)])
    row = next(line for line in section.splitlines() if line.startswith("| baseline |")).strip("| ").split(" | ")
    header = next(line for line in section.splitlines() if line.startswith("| variant |"))
    assert row == ["baseline", "2", "2.0000, 2.0001"] and ") Δ" not in header  # only 1339 had the Δ column
    assert "Evaluated but not in this report, so left out here too: baseline/seed1339." in section
    assert report.some_seeds([None, None], ".2f") == "–" and report.some_seeds([0.5, 0.25], ".2f") == "0.50, 0.25"
    assert report.some_seeds([1.0, None, 2.0, 3.0], ".2f") == f"2.00 ± {4.302653 / math.sqrt(3):.2f} (3 of 4 seeds)"


@pytest.mark.parametrize("library", ["report", "stats"])
def test_the_report_library_run_as_a_command_says_which_command_reports(library):
    result = subprocess.run([sys.executable, "-m", f"lab.{library}"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith(f"error: lab/{library}.py is a library") and "python -m lab.repro report" in \
        result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_the_corpus_keeps_the_list_of_packages_it_was_built_from(tmp_path):
    """The study's corpus is the .py files of the installed packages: prepare writes their list beside it, and a
    report of runs trained here keeps it (corpus-packages.txt), so that the corpus can be built again elsewhere; a
    report drawn from kept runs alone keeps the list it had."""
    site = tmp_path / "site-packages"
    for name, version in (("zeta", "1.0"), ("Alpha", "2.3")):  # two installed distributions
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    assert repro.corpus_packages(str(site)) == ["Alpha==2.3", "zeta==1.0"]
    data, root, out = tmp_path / "data", tmp_path / "root", tmp_path / "report"
    data.mkdir()
    out.mkdir()
    (data / repro.CORPUS_PACKAGES).write_text("# the list\nAlpha==2.3\n")
    record = {"train_config": {"dataset": "toy", "data_dir": str(data)}}
    (root / "baseline" / "seed1337").mkdir(parents=True)
    repro.keep_corpus_packages(str(root), str(out), [("baseline", 1337)], [record])  # kept: no checkpoint here
    assert not (out / repro.REPORT_PACKAGES).exists()
    (root / "baseline" / "seed1337" / "ckpt.pt").write_bytes(b"")  # a run trained here, on that data
    repro.keep_corpus_packages(str(root), str(out), [("baseline", 1337)], [record])
    assert (out / repro.REPORT_PACKAGES).read_text() == "# the list\nAlpha==2.3\n"
    (data / repro.CORPUS_PACKAGES).unlink()  # a corpus prepared before the list was written: no stale list kept
    repro.keep_corpus_packages(str(root), str(out), [("baseline", 1337)], [record])
    assert not (out / repro.REPORT_PACKAGES).exists()


def test_prepare_runs_again_over_its_own_list(tmp_path, monkeypatch):
    """prepare can be run again (check_kept_data's advice): its list of packages, no file of the dataset's
    preparation, is out of the folder while the corpus is built, and written again after."""
    folder = tmp_path / "pysrc"
    folder.mkdir()
    (folder / repro.CORPUS_PACKAGES).write_text("old\n")
    seen = []
    monkeypatch.setattr(repro, "dataset_dir", lambda name, data_dir="": str(folder))
    monkeypatch.setattr(repro, "run_tool", lambda tool, args: seen.append(sorted(os.listdir(folder))))
    repro.prepare()
    assert seen == [[]]
    text = (folder / repro.CORPUS_PACKAGES).read_text()
    assert text.startswith("# the distributions whose .py files made this corpus") and "==" in text.splitlines()[1]


def test_kept_runs_are_not_checked_against_data_that_is_not_there(tmp_path, capsys):
    """check_kept_data where the data has no validation shards (and none to prepare): a note, and train.py says what
    to do; no traceback from reading windows that are not there."""
    root = tmp_path / "root"
    kept_run("baseline/seed1337", root / "baseline" / "seed1337")
    (tmp_path / "empty").mkdir()
    repro.check_kept_data(str(root), {"dataset": "nodata", "data_dir": str(tmp_path / "empty")})
    assert f"note: {tmp_path / 'empty'}/ holds no validation shards, so the data was not checked against the 1 " \
        "kept runs" in capsys.readouterr().out


def test_data_other_than_the_kept_runs_names_the_python_and_packages_they_were_prepared_with(tmp_path, capsys):
    """check_kept_data's refusal of data that gives other validation windows than the kept runs': one line that names
    the report's corpus-packages.txt and the Python its first line records, the way to prepare the corpus again."""
    data, root, kept_from = tmp_path / "data", tmp_path / "root", tmp_path / "report"
    rng = np.random.default_rng(0)
    write_dataset(str(data), "toy", {split: [rng.integers(0, 50000, 3000, dtype=np.uint16)] for split in
                                     ("train", "val")}, source="random tokens")
    folder = root / "baseline" / "seed1337"
    folder.mkdir(parents=True)
    windows = {"block_size": 32, "batch_size": 2, "batches": 2, "bos": False}
    right = report.windows_id(report.load_windows({**windows, "data_dir": str(data)}))
    np.savez(folder / "measured.npz", val_loss=np.ones(4))
    settings = {"dataset": "toy", "data_dir": str(data)}
    for windows_id in (right, "0" * 16):  # measured on these windows, then on others
        (folder / "measured.json").write_text(json.dumps({"train_config": settings, "eval_windows": windows,
                                                          "windows_id": windows_id, "measured_on": "NVIDIA H200"}))
        kept_from.mkdir(exist_ok=True)
        (kept_from / repro.REPORT_PACKAGES).write_text("# the distributions whose .py files made this corpus (Python "
                                                       "3.12.3, from /venv/site-packages): ...\nAlpha==2.3\n")
        if windows_id == right:
            repro.check_kept_data(str(root), settings, str(kept_from))
            assert f"{data}/ gives the validation windows the 1 kept runs were measured on" in capsys.readouterr().out
            continue
        with pytest.raises(SystemExit) as e:
            repro.check_kept_data(str(root), settings, str(kept_from))
    message = str(e.value.code)
    assert message.startswith(f"error: {data}/ is not the data that baseline seed 1337 (kept from NVIDIA H200)")
    assert f"run by Python 3.12.3 in an environment holding exactly the packages {kept_from}/corpus-packages.txt " \
        "lists" in message and "\n" not in message


# ----------------------------------------------------------------------------
# The committed reports are what the project's code draws from the runs they keep

REDRAW = {  # the commands that draw each committed report again from the runs it keeps: no GPU, no corpus
    "sink_lab": (["restore", "--study=sink_lab"], ["report", "--study=sink_lab", "--report_dir=results/sink_lab"]),
    "repro": (["restore", "--config=config/repro_sink.py"],
              ["evaluate", "--config=config/repro_sink.py", "--report_dir=results/repro", "--windows=32"],
              ["report", "--config=config/repro_sink.py", "--report_dir=results/repro"]),
}


DRAWN_ON = re.compile(r"(Drawn by [^\n]*? on )\d{4}-\d\d-\d\d")  # the day a page was drawn, not measured


def as_drawn_any_day(text):
    return DRAWN_ON.sub(r"\1<the day drawn>", text)


def without_figures(text):
    """REPORT.md up to the line of the command that drew it, without the figures' lines and the day it was drawn:
    what matplotlib, the Python it ran under and the calendar do not change."""
    head = re.sub(r"^!\[[^\]]*\]\([^)]*\.png\)$", "", text[:text.index("\nThis report: `")], flags=re.M)
    return as_drawn_any_day(re.sub(r"\n{3,}", "\n\n", head))


def as_measured(summary):
    """A summary.json without the figures' names (none are drawn here) and the day it was drawn ("date"; the days its
    runs were measured stay)."""
    return {key: value for key, value in summary.items() if key not in ("plots", "date")}


@pytest.mark.parametrize("study", REDRAW)
def test_the_committed_reports_are_what_their_kept_runs_draw(tmp_path, study, drawing_checkout):
    """Every number of a committed report comes from the project's scripts: drawn again from the runs it keeps, by
    the commands docs/study.md gives, in a checkout as fresh as the one that drew it (conftest's drawing_checkout: the
    sink lab's task prepared, no other data) and where matplotlib is missing (no figure drawn: the fast path), each
    file is the committed one, word for word and number for number, the figures left out. A change to what a report
    says (its measures, rule or wording) fails here until the committed reports are drawn again."""
    checkout, env = drawing_checkout
    committed = os.path.join(checkout, "results", study)
    if not os.path.isdir(os.path.join(committed, "runs")):
        pytest.skip(f"results/{study}/ keeps no runs here")
    work = tmp_path / "work"
    work.mkdir()
    for step in REDRAW[study]:
        out = subprocess.run([sys.executable, "-m", "lab.repro", *step], cwd=work, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "no plots" in out.stdout or step[0] == "restore", out.stdout  # (the stub was taken for matplotlib)
    drawn = work / "results" / study
    again = " && ".join(shlex.join(["python", "-m", "lab.repro", *step]) for step in REDRAW[study])
    stale = f"results/{study}/ is not what its kept runs draw now: draw it again (`{again}`) and commit it"
    files = sorted(str(p.relative_to(drawn)) for p in drawn.rglob("*") if p.is_file() and p.name != ".lock")
    kept = sorted(os.path.relpath(p, committed) for p in glob.glob(os.path.join(committed, "runs", "**", "*"),
                                                                     recursive=True) if os.path.isfile(p))
    assert kept and kept == [f for f in files if f.startswith("runs" + os.sep)], stale  # every kept run, no other
    assert {"REPORT.md", "summary.json", "summary.md", "commands.jsonl"} <= set(files), files
    for name in files:
        path = os.path.join(committed, name)
        assert os.path.isfile(path), f"{stale}: it lacks {name}"
        if name.endswith("REPORT.md"):
            theirs, ours = (without_figures(open(p, encoding="utf-8").read()) for p in (path, drawn / name))
        elif name.endswith(".json"):
            theirs, ours = (as_measured(json.load(open(p))) for p in (path, drawn / name))
        elif name.endswith(".md"):
            theirs, ours = (as_drawn_any_day(open(p, encoding="utf-8").read()) for p in (path, drawn / name))
        else:
            theirs, ours = open(path, "rb").read(), (drawn / name).read_bytes()
        assert ours == theirs, f"{stale}: {name} differs"
