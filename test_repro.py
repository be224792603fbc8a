"""The study runner repro.py: its commands end to end at toy size, its report, and its variants."""

import dataclasses
import json
import math
import os
import re
import shlex
import subprocess
import sys

import pytest

import repro
import variants
from common import load_checkpoint
from model import VALID, GPTConfig
from variants import FLAGS, STUDY, TEST_VARIANTS, VARIANTS

REPO = os.path.dirname(os.path.abspath(__file__))


def test_repro_pipeline_tiny(tmp_path, dataset):
    """The study's commands end to end at toy size: train two variants, train one again (a resume), report."""
    root, env = str(tmp_path / "runs"), {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, os.path.join(REPO, "repro.py")]
    extra = ["--dataset=toy", f"--data_dir={dataset}", "--max_iters=6", "--eval_interval=3", "--block_size=32"]
    first = subprocess.run(cmd + ["train", "baseline", "g1_elementwise", "--tiny", f"--root={root}", *extra],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert first.stdout.count("exit code 0") == 2 and first.stdout.count("starting a new run") == 2, first.stdout + first.stderr
    again = subprocess.run(cmd + ["train", "baseline", "--tiny", f"--root={root}", *extra],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "resuming the run" in again.stdout and "nothing to do" in again.stdout and "exit code 0" in again.stdout

    # commands.jsonl: exactly the commands that ran, as printed before each
    commands = [json.loads(line) for line in open(os.path.join(root, "commands.jsonl"))]
    assert [c["variant"] for c in commands] == ["baseline", "g1_elementwise", "baseline"]
    printed = [line for line in (first.stdout + again.stdout).splitlines() if line.startswith(sys.executable)]
    assert [c["command"] for c in commands] == printed
    for c in commands:
        argv = shlex.split(c["command"])
        assert argv[1] == os.path.join(REPO, "train.py") and f"--out_dir={os.path.join(root, c['variant'])}" in argv
        assert argv[-len(extra):] == extra and c["exit_code"] == 0 and c["seconds"] > 0 and c["date"]
    assert "--init_from=resume" in commands[2]["command"] and "--init_from" not in commands[0]["command"]

    report = subprocess.run(cmd + ["report", "--tiny", f"--root={root}"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    records = json.load(open(os.path.join(root, "report", "summary.json")))
    assert [r["variant"] for r in records] == ["baseline", "g1_elementwise"]
    for r in records:
        assert r["tokens"] == 6 * 8 * 32 and r["tiny"] and 0 < r["first_token_attn"] < 1 and r["max_act"] > 0
        assert r["ppl"] == pytest.approx(math.exp(r["val_loss"]))
        # measured on the run's own eval windows: the val loss train.py logged for that checkpoint
        logged = load_checkpoint(os.path.join(root, r["variant"], "ckpt.pt"))[1]["val_loss"]
        assert r["val_loss"] == pytest.approx(logged, rel=1e-5)
    assert records[0]["gate_mean"] is None and 0 < records[1]["gate_mean"] < 1

    text = open(os.path.join(root, "report", "REPORT.md")).read()
    assert "SMOKE TEST" in text.splitlines()[0] and "concludes nothing" in text
    assert not re.search(r"\b(yes|no)\b", text, re.IGNORECASE)  # no verdicts
    assert "central claims" not in text and "GA PPL" not in text  # no claims, no paper columns
    assert "To be written" not in text and "TODO" not in text
    assert "| val loss (nats) | perplexity |" in text and "| 1,536 |" in text and "0.0M" not in text
    assert f"`{commands[2]['command']}`" in text and f"`{commands[1]['command']}`" in text  # the last of each
    assert f"`{commands[0]['command']}`" not in text


def full_study_records(skip=()):
    """Hand-made records of a finished full-size study, as repro.report writes them."""
    records = []
    for i, v in enumerate(v for v in STUDY if v not in skip):
        gated = VARIANTS[v].flags["gate"] != "none"
        records.append(dict(variant=v, val_loss=3.5 - 0.01 * i, ppl=math.exp(3.5 - 0.01 * i), first_token_attn=0.4,
                            max_act=100.0, peak_act=300.0, gate_mean=0.2 if gated else None,
                            **{"gate_below_0.1": 0.4 if gated else None}, tokens=104_857_600, lr=3e-3, iter=1600,
                            max_iters=1600, seed=1337, loss_spikes=0, nonfinite_steps=0, exit_code=0,
                            model=dict(n_layer=8, n_embd=512, n_head=8, block_size=512)))
    return records


def test_render_report_full_study_lists_claims_without_verdicts():
    records = full_study_records(skip=("g5",))
    records.append(dict(records[-1], variant="g3"))  # a paper row outside the study, trained by name
    summary = dict(device="NVIDIA H100", date="2026-11-23", plots=[],
                   validation=dict(batches=20, batch_size=64, source="the eval windows run 'baseline' was trained with"))
    commands = {r["variant"]: dict(command=f"python train.py --out_dir=out-repro/{r['variant']}", exit_code=0,
                                   seconds=240.0, date="2026-11-23 10:00:00") for r in records if r["variant"] != "dyt"}
    text = repro.render_report(records, summary, "out-repro", False, commands, "python repro.py report")

    assert "SMOKE" not in text and "To be written" not in text and "TODO" not in text
    assert not re.search(r"\b(yes|no)\b", text, re.IGNORECASE)
    assert "Verdicts are not given" in text and "several seeds" in text and "planned work" in text
    for claim, *_ in repro.CLAIMS:
        assert f"| {claim} |" in text
    # the G1 loss claim: our difference in nats and as a perplexity ratio, beside GA's perplexities
    d = records[1]["val_loss"] - records[0]["val_loss"]
    assert f"{d:+.4f} nats (PPL ×{math.exp(d):.3f})" in text and "GA PPL 6.026 → 5.761" in text
    assert "(PPL ×0.956)" in text and "GN loss 1.964 → 2.216 | +0.252 nats" in text  # DyT costs loss in GN
    # loss and perplexity in separate labelled columns, ours and the papers', with the caveat on scale
    assert "| val loss (nats) | perplexity |" in text and "| GA PPL | GN loss |" in text
    assert "| baseline | 6.026 | 1.964 |" in text and "Absolute values are not comparable" in text
    assert "| 105M |" in text and "0.0M" not in text
    assert "baseline → g5: g5 not trained" in text
    assert "- dyt: not recorded" in text and "`python train.py --out_dir=out-repro/baseline`" in text
    # every paper number comes from the registry, with the row it is quoted from
    assert '| g1_elementwise | 5.761 | 1.957 | 0.116 | 94 | 2800 | 0.048 | GA Table 4 "G1 elementwise"; GN Table 1 "+GA" |' in text
    assert '| g3 | 6.016 | – | – | – | – | – | GA Table 1 "G3" |' in text
    assert "PPL 9.195" in text and "Our pair at lr 0.01" in text


def test_token_counts_read_well_at_every_scale():
    assert [repro.fmt_tokens(n) for n in (1536, 12_288, 1_228_800, 10_485_760, 104_857_600, 2_100_000_000)] == \
        ["1,536", "12,288", "1.23M", "10.5M", "105M", "2.1B"]




# ----------------------------------------------------------------------------
# The registry (variants.py): every variant, flag and paper number in one place

@pytest.mark.parametrize("name", VARIANTS, ids=list(VARIANTS))
def test_variant_is_what_its_name_and_paper_rows_say(name):
    v = VARIANTS[name]
    GPTConfig(n_layer=1, n_head=2, n_embd=32, **v.flags)  # a valid model
    assert set(v.train) <= {"learning_rate", "min_lr"} and not set(v.train) & {f.name for f in dataclasses.fields(GPTConfig)}
    assert (v.flags["gate"] == "g1") == name.startswith("g1"), name  # a g1_ name means a G1 gate, and only then
    assert (v.flags["gate"] == "none") == (name in ("baseline", "baseline_high_lr", "sdpa_rmsnorm", "sdpa_silu",
                                                    "dyt", "glu"))  # the rows the papers measured without a gate
    assert v.ga or v.gn, "every variant reproduces a paper row"
    assert (v.ga is None or v.ga.paper == "GA") and (v.gn is None or v.gn.paper == "GN")
    for row in (v.ga, v.gn):
        numbers = row and [x for x in (row.ppl, row.gate_mean, row.m_act, row.f_attn, row.loss, row.max_act) if x is not None]
        assert row is None or numbers or row.note, f"{row} gives neither a number nor a note"
    if v.ga and v.ga.table == "Table 4":  # GA Table 4 gives all four numbers (no gate score without a gate)
        assert None not in (v.ga.ppl, v.ga.m_act, v.ga.f_attn) and (v.ga.gate_mean is None) == (v.flags["gate"] == "none")
    if v.gn:  # GN Table 1 gives loss and max activation
        assert v.gn.loss is not None and v.gn.max_act is not None


def test_the_registry_holds_the_papers_numbers_as_papers_md_states_them():
    """Every number in variants.py is the one PAPERS.md quotes (checked against ../shared/PAPER-NOTES.md), under
    the same row name."""
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
    assert len(STUDY) == len(set(STUDY)) == 15 and set(STUDY) <= set(VARIANTS)
    assert list(STUDY) == [v for v in VARIANTS if v in STUDY]  # the report's order is the registry's
    for _, ref, variant, measure in repro.CLAIMS:
        assert variant in STUDY and ref in (None, *STUDY)
        if measure == "gate_mean":
            assert VARIANTS[variant].ga.gate_mean is not None
        else:  # at least one paper gives both rows the number the claim compares
            assert repro.paper_pair(ref, variant, repro.MEASURES[measure][3]), (ref, variant, measure)
    high = {k: VARIANTS[k].train for k in ("baseline_high_lr", "g1_elementwise_high_lr")}
    assert all(t["learning_rate"] == variants.HIGH_LR and t["min_lr"] == variants.HIGH_LR / 10 for t in high.values())
    assert VARIANTS["baseline_high_lr"].flags == VARIANTS["baseline"].flags
    assert VARIANTS["g1_elementwise_high_lr"].flags == VARIANTS["g1_elementwise"].flags


def test_test_variants_set_every_value_of_every_flag():
    """TEST_VARIANTS (the ids test_model.py parametrizes over) are valid models that together set every value of
    every flag, so a test over them reaches every code path of the model."""
    chosen_by_tests = {"attn_backend", "match_params"}
    assert set(TEST_VARIANTS) >= {name for name, v in VARIANTS.items() if not v.train}
    for name, flags in TEST_VARIANTS.items():
        GPTConfig(n_layer=1, n_head=4, n_embd=32, **{"n_kv_head": 2, **flags})
        assert not set(flags) & chosen_by_tests, name
    for flag, valid in VALID.items():
        if flag not in chosen_by_tests:
            default = GPTConfig.__dataclass_fields__[flag].default
            assert {default} | {f[flag] for f in TEST_VARIANTS.values() if flag in f} == set(valid), flag
    for f in dataclasses.fields(GPTConfig):
        if f.type is bool and f.name not in chosen_by_tests:
            assert any(flags.get(f.name) is (not f.default) for flags in TEST_VARIANTS.values()), f.name


def test_flags_document_every_config_field_once():
    names = [n for f in FLAGS for n in f.name.split(", ")]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(GPTConfig)), "a GPTConfig field without a line"
    for f in FLAGS:
        assert f.what and f.rows
    table = variants.flag_table()
    assert table.count("\n") == len(FLAGS) + 2
    # the values column comes from model.VALID and the defaults: the default first
    assert "| `gate` | `'g1'`, `'none'`, `'g2'`, `'g3'`, `'g4'`, `'g5'` |" in table
    assert "| `sandwich_norm` | `False`, `True` |" in table and "| `gatednorm_rank` | `16` |" in table
    # the papers' definitions a reader looks for
    for words in ("before the heads are concatenated and `W_O`", "0.5 + 0.5·sigmoid", "[0.5, 1]", "input-independent",
                  "zero-initialised", "head-shared", "additive", "RMSNorm(λ ⊙ x)", "tanh(α·x)", "W_up SiLU(W_down y)"):
        assert words in table, words


def test_readme_holds_the_flag_table_verbatim():
    """README.md's flag table is variants.flag_table(): `python variants.py` prints the text to paste there."""
    readme = open(os.path.join(REPO, "README.md")).read()
    assert variants.flag_table() in readme, "README.md's flag table is out of date: paste `python variants.py`"
    out = subprocess.run([sys.executable, os.path.join(REPO, "variants.py")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == variants.flag_table()


# ----------------------------------------------------------------------------
# The command line: a step word, variant names, repro.py's keys, and train.py's keys passed on

def test_train_names_and_keys(monkeypatch):
    calls = []
    monkeypatch.setattr(repro, "train", lambda *args: calls.append(args))
    repro.main(["train", "g1_elementwise", "all", "g3", "--tiny", "--max_iters=5", "--compile"])
    variants_, root, tiny, passed = calls[-1]
    # `all` is the study, in order; a name given twice trains once; any registry name may be added
    assert variants_ == ["g1_elementwise"] + [v for v in STUDY if v != "g1_elementwise"] + ["g3"]
    assert (root, tiny, passed) == ("out-repro-tiny", True, ["--max_iters=5", "--compile"])  # the rest, verbatim
    repro.main(["train", "baseline", "--root=/tmp/r", "--tiny=False"])
    assert calls[-1] == (["baseline"], "/tmp/r", False, [])
    cmd = repro.train_command("baseline_high_lr", "/tmp/r", tiny=True, extra=["--max_iters=5"])
    assert cmd[1:3] == [os.path.join(REPO, "train.py"), os.path.join(REPO, "config", "repro.py")]
    assert cmd[3:] == ["--out_dir=/tmp/r/baseline_high_lr", *[f"--{k}={v}" for k, v in repro.TINY.items()],
                       "--gate=none", f"--learning_rate={variants.HIGH_LR}", f"--min_lr={variants.HIGH_LR / 10}",
                       "--max_iters=5"]  # the user's keys last, so they win


@pytest.mark.parametrize("argv,words", [
    (["train"], ["name the variants", "'all'", "g1_elementwise"]),
    (["train", "baseline", "--out_dir=x"], ["--out_dir=x", "repro.py sets --out_dir", "--root"]),
    (["train", "baseline", "--init_from=resume"], ["--init_from=resume", "repro.py sets"]),
    (["report", "--max_iters=3"], ["unknown key 'max_iters'"]),
    (["list", "--rot=x"], ["unknown key 'rot'", "did you mean 'root'"]),
    (["report", "baseline"], ["takes no variant names", "baseline"]),
    (["lst"], ["'lst' is not a step", "list, prepare, train, report"]),
], ids=["no-variant", "out_dir", "init_from", "report-key", "typo", "report-names", "step"])
def test_mistakes_are_one_line(argv, words, monkeypatch):
    monkeypatch.setattr(repro, "train", lambda *args: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit) as e:
        repro.main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    for w in words:
        assert w in message


def test_list_shows_every_variant_its_flags_and_paper_rows(capsys):
    repro.list_variants()
    lines = capsys.readouterr().out.splitlines()
    for name, v in VARIANTS.items():
        line = next(line for line in lines if line[2:].split(" ")[0] == name)
        assert line.startswith("* " if name in STUDY else "  ")
        assert all(f"--{k}={x}" in line for k, x in v.all_flags.items()) and str(v.ga or v.gn) in line


def test_repro_rejects_unknown_variant():
    result = subprocess.run([sys.executable, os.path.join(REPO, "repro.py"), "train", "g9"], capture_output=True, text=True)
    assert result.returncode != 0 and "g9" in result.stderr and "g1_elementwise" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and result.stdout == ""  # one line, before anything ran


def test_a_first_run_that_cannot_start_stops_the_study(tmp_path):
    """A mistaken train.py key fails the first run while it starts: repro.py stops there instead of failing every
    variant the same way, and records the one command that ran."""
    root = tmp_path / "runs"
    result = subprocess.run([sys.executable, os.path.join(REPO, "repro.py"), "train", "baseline", "g1_elementwise",
                             "--tiny", f"--root={root}", "--max_iter=5"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0
    assert "unknown key 'max_iter'" in result.stderr  # train.py's own message, passed through
    assert "the first run (baseline) stopped before its first evaluation" in result.stderr
    assert result.stdout.count("starting a new run") == 1 and "g1_elementwise" not in result.stdout
    commands = [json.loads(line) for line in open(root / "commands.jsonl")]
    assert [(c["variant"], c["exit_code"] != 0) for c in commands] == [("baseline", True)]
    assert not (root / "baseline").exists() or not any((root / "baseline").iterdir())  # train.py wrote nothing
