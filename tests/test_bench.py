"""lab/bench.py (python -m lab.bench): without --tiny and without a GPU --kernels and --train refuse at once (--step
times a CPU); its keys are checked before anything runs; importing it runs nothing. Its tiny modes on CPU (Triton
interpreter, fp32), which write complete records marked as smoke tests, are run by the GPU scripts' toy runs
(test_gpu_scripts.py, with lab/gpu/kernels.sh and lab/gpu/throughput.sh at toy size) and checked there with
check_bench_kernels_tiny and check_bench_train_tiny below: one smoke run of each mode in the suite."""

import json
import os
import subprocess
import sys
import time

import pytest

import kernels
import lab.bench as bench
from cli import sdpa_order
from conftest import fused_kernel_runs_on_the_cpu
from lab.variants import VARIANTS

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/


def run_bench(cwd, *flags, env=None, timeout=300):
    """python -m lab.bench with these flags in the folder cwd, the repository on PYTHONPATH (as lab.repro starts the
    lab's tools), so that it runs from any folder."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "lab.bench", *flags], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def check_smoke_test(stdout, data, md):
    """A --tiny result says, in every place a reader may look, that its timings mean nothing."""
    assert stdout.startswith("SMOKE TEST") and "mean nothing about speed" in stdout
    assert data["smoke_test"] is True
    first_note = md.splitlines()[2]
    assert first_note.startswith("- **SMOKE TEST") and "mean nothing about speed" in first_note


def check_bench_kernels_tiny(stdout, out_dir):
    """lab.bench --kernels --gqa=2 --tiny --out_dir=out_dir: every provider, mode, T and head layout timed once."""
    data = json.load(open(os.path.join(out_dir, "bench_kernels.json")))
    md = open(os.path.join(out_dir, "bench_kernels.md")).read()
    check_smoke_test(stdout, data, md)
    assert data["date"] and data["device"] and data["command"].startswith("python -m lab.bench --kernels")
    # the configs each tuned kernel chose, per key (none under the interpreter's one config): kernels.tuned_configs
    assert set(data["autotuned"]) == ({"_attn_fwd", "_dkdv_kernel", "_dkdv_kernel_dq", "_bwd_dq"} if kernels.HAS_TRITON
                                      else set())
    assert "laid out as model.py passes them" in md
    keys = {"device", "B", "H", "Hkv", "T", "D", "causal", "dtype", "provider", "mode", "ms", "tflops"}
    records = data["records"]
    for r in records:
        assert keys <= r.keys(), keys - r.keys()
        assert r["ms"] > 0 and r["tflops"] > 0 and r["causal"] is True and r["dtype"] == "float32"
        assert r["H"] * r["D"] == 64 and r["H"] % r["Hkv"] == 0
    combos = {(r["provider"], r["mode"], r["T"], r["Hkv"]) for r in records}
    want = {(p, m, t, hkv) for p in ("sdpa", "sdpa+gate", "triton", "triton+gate") for m in ("fwd", "fwd+bwd")
            for t in (16, 40) for hkv in (2, 1)}
    want |= {("triton+gate atomic-dq", "fwd+bwd", t, hkv) for t in (16, 40) for hkv in (2, 1)}  # fwd: the same kernel
    assert combos == want and len(records) == len(want)
    assert "`python -m lab.bench --kernels" in md and md.count("| triton+gate |") == 8
    # the summary: one row per shape, its ratios computed from the records (above 1: the fused kernel is faster)
    ms = {(r["provider"], r["mode"], r["T"], r["Hkv"]): r["ms"] for r in records}
    summary = data["summary"]
    assert [(r["T"], r["Hkv"]) for r in summary] == [(16, 2), (40, 2), (16, 1), (40, 1)]
    for r in summary:
        get = lambda provider, mode="fwd+bwd": ms[(provider, mode, r["T"], r["Hkv"])]  # noqa: E731
        fused = min(get("triton+gate"), get("triton+gate atomic-dq"))
        assert r["best"] == ("triton+gate" if get("triton+gate") == fused else "triton+gate atomic-dq")
        assert r["vs_sdpa_gate"] == pytest.approx(get("sdpa+gate") / fused, rel=1e-2)
        assert r["vs_sdpa"] == pytest.approx(get("sdpa") / fused, rel=1e-2)
        assert r["fwd_vs_sdpa_gate"] == pytest.approx(get("sdpa+gate", "fwd") / get("triton+gate", "fwd"), rel=1e-2)
    head = md.split("## Every measurement")[0]
    assert "## Fused gated attention against SDPA" in head and head.count("\n| 32 | 2 |") == 4
    assert "training (train.py, python -m lab.bench --train) uses 'recompute'" in head
    assert data["sdpa_backend"] == "default" and data["sdpa_order"] == sdpa_order()  # PyTorch's own order
    assert f"SDPA tries its kernels in the order {', '.join(sdpa_order())}" in head


def check_bench_train_tiny(stdout, out_dir):
    """lab.bench --train --match_params --tiny --out_dir=out_dir: the three variants on both backends."""
    data = json.load(open(os.path.join(out_dir, "bench_train.json")))
    md = open(os.path.join(out_dir, "bench_train.md")).read()
    check_smoke_test(stdout, data, md)
    assert data["date"] and data["batch_size"] == 2 and data["match_params"] is True
    assert data["kernel_backward"] in ("recompute", "atomic") and f"dQ by '{data['kernel_backward']}'" in md
    assert data["sdpa_backend"] == "default" and data["sdpa_order"] == sdpa_order()
    assert f"SDPA tries its kernels in the order {', '.join(sdpa_order())} (the torch backend)" in md
    keys = {"device", "config", "variant", "flags", "backend", "compile", "tokens_per_s", "mfu", "ms_per_step",
            "peak_mem_gb"}
    records = data["records"]
    # registry variants, each timed with the fused kernel and with torch, built from lab/variants.py's own flags
    runs = [(r["variant"], r["backend"]) for r in records]
    assert runs == [(v, b) for v in ("baseline", "g1_elementwise", "g1_headwise") for b in ("triton", "torch")]
    for r in records:
        assert keys <= r.keys(), keys - r.keys()
        assert r["flags"] == VARIANTS[r["variant"]].flags
        assert r["ms_per_step"] > 0 and r["tokens_per_s"] > 0 and r["compile"] is False and "error" not in r
        # tokens/s and ms/step describe the same measurement: batch 2 x T 32 tokens per step
        assert r["tokens_per_s"] * r["ms_per_step"] / 1e3 == pytest.approx(64, rel=1e-2)
    params = {r["variant"]: r["params"] for r in records}
    for gated in ("g1_elementwise", "g1_headwise"):
        assert abs(params[gated] - params["baseline"]) < 0.01 * params["baseline"]  # param-matched
    assert data["command"].startswith("python -m lab.bench --train")
    assert "`python -m lab.bench --train" in md and md.count("| g1_headwise |") == 2


def test_bench_without_gpu_refuses_at_once(tmp_path):
    """No GPU and no --tiny: one line pointing at --tiny within seconds, not hours of CPU benchmarks."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # hides any GPU; on a CPU machine there is none anyway
    t0 = time.time()
    out = run_bench(HERE, "--kernels", "--train", f"--out_dir={tmp_path / 'res'}", env=env, timeout=120)
    assert time.time() - t0 < 60  # the import of torch is most of it
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0, out.stderr  # one line, no traceback
    assert "GPU" in out.stderr and "--tiny" in out.stderr
    assert not (tmp_path / "res").exists()  # nothing written


def test_importing_bench_runs_nothing(tmp_path):
    """lab.bench is a module: importing it reads no command line, prints nothing and writes nothing (python -m
    lab.bench runs its main)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", "import lab.bench", "--kernels", "--tiny"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and (out.stdout, out.stderr) == ("", ""), out.stderr
    assert os.listdir(tmp_path) == [] and callable(bench.main)


def test_bench_keys_are_checked_before_anything_runs(tmp_path, monkeypatch, capsys):
    """lab.bench reads its keys as every script does (cli.configure): --key=value, a bare --key for a bool, config
    files. A mistaken key or value stops with one line naming it, before anything is timed or written."""
    config = tmp_path / "bench_config.py"
    config.write_text("train = True\ntiny = True\ncompile = 'sometimes'\n")
    partial = tmp_path / "partial_train_config.py"
    partial.write_text("n_layer = 1\nn_embd = 64\nblock_size = 64\n")
    cases = [
        (["--kernels", "--tiny", "--seq_len=16"], "unknown key 'seq_len' (did you mean 'seq_lens'?)"),
        (["--kernels", "--tiny", "--head_dims=64,x"],
         "--head_dims=64,x: head_dims must be a list of int, written a,b,c"),
        (["--kernels", "--tiny", "--head_dims=64,0"], "--head_dims=64,0: give positive integers"),
        (["--tiny"], "choose --kernels, --train and/or --step"),
        (["--step", "--tiny", "--step_modes=plain,fast"],
         "--step_modes=plain,fast: unknown 'fast'; choose from plain,"),
        (["--step", "--tiny", "--step_shape=4,128,128"], "--step_shape=4,128,128: give four positive integers"),
        (["--step", "--rounds=0"], "--rounds and --steps at least 1"),
        (["--kernels", "--tiny", "--step_config=config/sink_lab.py"],
         "--step_config=config/sink_lab.py is a key of --step: add --step"),
        (["--step", "--tiny", "--step_config=config/sink_lap.py"], "--step_config=config/sink_lap.py: no such file"),
        (["--step", f"--step_config={partial}"], f"--step_config={partial} sets no n_head, batch_size: give a file"),
        ([str(config)], "--compile=sometimes: choose both, true or false"),  # the file set train, tiny and compile
        (["--train", "--tiny", "--compile_mode=fast"],
         "--compile_mode='fast' is not valid; choose one of default, reduce-overhead"),
        (["--train", "--tiny", "--variants=baseline,g9"],
         "--variants=baseline,g9: unknown 'g9'; choose from baseline,"),
        (["--train", "--tiny", "--backends=cuda"], "--backends=cuda: unknown 'cuda'; choose from triton, torch"),
        (["--train", "--tiny", "--backends=,"], "--backends=: give at least one; choose from triton, torch"),
        (["--train", "--tiny", "--loss_chunk=-8"], "--loss_chunk=-8: give 0"),
        (["--train", "--tiny", "--pad_c_attn=0"], "--pad_c_attn=0: give a multiple of outputs per row: 64"),
        (["--train", "--tiny", "--profile=-5"], "--profile=-5: give 0 (no profile)"),
        (["--kernels", "--tiny", "--profile=5"], "--profile=5 is a key of --train: add --train"),
        (["--step", "--tiny", "--pad_c_attn=1"], "--pad_c_attn=1 is a key of --train: add --train"),
        (["--kernels", "--tiny", "--sdpa_backend=fa3"],
         "--sdpa_backend='fa3' is not valid; choose one of default, cudnn, flash"),
        # heads that --gqa cannot group: --tiny's 2 (a modulo by zero), and a GPU's 32 and 16, where kernels.py
        # refused the Hkv=10 of --gqa=3 only after the rows without GQA were timed, writing nothing
        (["--kernels", "--tiny", "--gqa=3"], "--gqa=3: --tiny's width 64 and head dim 32 give 2 query heads (H = "
                                             "width / D), which do not split into groups of 3 (Hkv = H / gqa); give a "
                                             "divisor of 2 (1, 2), or 0 for no GQA rows"),
        (["--kernels", "--gqa=3"], "--gqa=3: --width=2048 and --head_dims=64,128 give 32, 16 query heads"),
        (["--kernels", "--head_dims=64,4096", "--gqa=2"], "--head_dims=4096 is wider than --width=2048"),
        # a shape whose model model.py refuses: n_embd must split into 4 heads of an even width (was a traceback)
        (["--step", "--step_shape=4,130,128,8"], "--step_shape=4,130,128,8: model.py refuses its model (n_head=4): "
                                                 "GPTConfig.n_embd=130 must be divisible by n_head=4"),
        (["--step", "--tiny", "--step_shape=4,132,128,8"], "rope' needs an even head_dim, got head_dim=33. Give "
                                                           "an n_embd that is a multiple of 8"),
    ]
    # in this process (a fresh python for each costs seconds), through the module's main: the checks raise
    # cli.fail's SystemExit before its first side effect; the first case also in a process of its own, as a user
    # meets it
    monkeypatch.chdir(tmp_path)
    for flags, message in cases:
        with pytest.raises(SystemExit) as stop:
            bench.main([*flags, f"--out_dir={tmp_path / 'res'}"])
        said = str(stop.value.code)
        assert said.startswith("error: ") and message in said and "\n" not in said, (flags, said)
        assert capsys.readouterr() == ("", ""), flags
    out = run_bench(HERE, *cases[0][0], f"--out_dir={tmp_path / 'res'}", timeout=120)
    assert out.returncode != 0 and out.stderr.startswith("error: ") and cases[0][1] in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and out.stdout == "", out.stderr
    assert not (tmp_path / "res").exists()


def test_a_fused_kernel_that_cannot_run_here_is_one_line_that_names_the_way_around(tmp_path, monkeypatch):
    """Without a Triton the kernel can run on (none, or one too old: kernels.triton_unavailable), --kernels and --train
    with the triton backend stop before they start, saying why and what still runs; --backends=torch times as ever."""
    reason = "backend='triton' needs Triton 3.3 or newer, found 3.2.0"
    monkeypatch.setattr(kernels, "triton_unavailable", lambda: reason)
    for flags in (["--kernels"], ["--train"], ["--train", "--backends=triton"]):
        with pytest.raises(SystemExit) as stop:
            bench.checked_keys([*flags, "--tiny", f"--out_dir={tmp_path}"])
        assert str(stop.value.code) == (f"error: {reason}: --kernels times the fused kernel, and so does --train "
                                        "unless --backends=torch"), flags
    assert bench.checked_keys(["--train", "--tiny", "--backends=torch"]).backends == ("torch",)


def stop_after(monkeypatch, name, calls):
    """Make lab.bench's `name` raise KeyboardInterrupt at its call number `calls` + 1, as a command stopped there."""
    real, count = getattr(bench, name), [0]

    def stopping(*args, **kwargs):
        count[0] += 1
        if count[0] > calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(bench, name, stopping)


@pytest.mark.skipif(kernels.triton_unavailable() is not None, reason="times the fused kernel, which cannot run here")
def test_a_stopped_bench_keeps_what_it_measured_beside_the_last_complete_set(tmp_path, monkeypatch, capsys):
    """A command stopped part-way (a time limit, Ctrl-C) leaves what it measured in {name}.partial.{json,md},
    marked incomplete, and leaves the last complete {name}.json and .md as they were; a complete run replaces
    those and removes the partial files."""
    out = tmp_path / "res"
    out.mkdir()
    (out / "bench_train.json").write_text("the last complete set")
    # --train: one optimizer step per record at --tiny (no warm-up, one timed); stopped in the third of 4 records
    stop_after(monkeypatch, "optimizer_step", 2)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--train", "--tiny", "--variants=baseline,g1_headwise", f"--out_dir={out}"])
    data = json.loads((out / "bench_train.partial.json").read_text())
    assert data["complete"] is False and data["smoke_test"] is True
    assert [(r["variant"], r["backend"]) for r in data["records"]] == [("baseline", "triton"), ("baseline", "torch")]
    md = (out / "bench_train.partial.md").read_text()
    assert "- **incomplete: 2 of 4 measurements" in md and md.count("| baseline |") == 2
    assert (out / "bench_train.json").read_text() == "the last complete set"
    # --kernels: every shape's records at once (its summary needs them all); stopped in the second of 2 shapes
    per_shape = sum(len(modes) for _, _, modes in bench.PROVIDERS.values())
    monkeypatch.setattr(bench, "time_ms", lambda fn, grads=(): 1.0)  # no kernel runs: the writes are tested here
    stop_after(monkeypatch, "time_ms", per_shape)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--kernels", "--tiny", f"--out_dir={out}"])
    data = json.loads((out / "bench_kernels.partial.json").read_text())
    assert data["complete"] is False and len(data["records"]) == per_shape and {r["T"] for r in data["records"]} == {16}
    assert [row["T"] for row in data["summary"]] == [16]
    assert f"- **incomplete: {per_shape} of {2 * per_shape} measurements" in \
        (out / "bench_kernels.partial.md").read_text()
    assert not (out / "bench_kernels.json").exists()
    # run whole, each writes its complete set and removes what the stopped command left
    monkeypatch.undo()
    bench.main(["--train", "--tiny", "--variants=baseline", "--backends=torch", f"--out_dir={out}"])
    assert json.loads((out / "bench_train.json").read_text())["complete"] is True
    assert sorted(os.listdir(out)) == ["bench_kernels.partial.json", "bench_kernels.partial.md", "bench_train.json",
                                       "bench_train.md"]
    capsys.readouterr()


def test_pad_c_attn_sets_each_layers_padding_on_the_benchs_device():
    """lab.bench --pad_c_attn: every attention layer's c_attn pads its rows to that multiple on the bench's device
    (--tiny's CPU too, so the smoke test runs the padded path); 1 leaves them unpadded."""
    import torch
    from model import GPT, GPTConfig
    model = GPT(GPTConfig(block_size=8, vocab_size=32, n_layer=2, n_head=2, n_embd=16, **VARIANTS["g1_headwise"].flags))
    bench.pad_c_attn(model, 64, "cpu")
    x = torch.randn(2, 8, 16)
    for block in model.transformer.h:
        assert block.attn.c_attn(x).stride()[-2:] == (64, 1)  # 3 * 16 + 2 = 50 outputs, 64 apart
    bench.pad_c_attn(model, 1, "cpu")
    assert all(block.attn.c_attn(x).stride()[-2:] == (50, 1) for block in model.transformer.h)


@pytest.mark.parametrize("steps", [1, 3])
def test_profile_steps_reports_each_op_per_step(steps, tmp_path):
    """lab.bench --profile's profile_steps: the top ops by their own time, each as ms and calls per step (over all
    the steps profiled, divided by their number), and PyTorch's table in the file, saying how many steps it holds."""
    import torch
    a = torch.randn(64, 64, device="cuda" if bench.cuda else "cpu")
    key = "self_device_time_total" if bench.cuda else "self_cpu_time_total"

    def step():
        return (a @ a).relu() @ a  # two aten::mm, one relu a step

    ops = bench.profile_steps(step, steps, str(tmp_path / "profile.txt"))
    calls = {name: per_step for name, _, per_step in ops}
    assert calls["aten::mm"] == 2 and calls["aten::relu"] == 1, ops
    assert len(ops) <= 15 and ops == sorted(ops, key=lambda op: -op[1]) and all(ms >= 0 for _, ms, _ in ops)
    table = (tmp_path / "profile.txt").read_text()
    first = table.splitlines()[0]
    assert first == (f"1 step profiled, sorted by {key} (microseconds)" if steps == 1 else
                     f"{steps} steps profiled, sorted by {key} (microseconds, over all {steps})")
    assert "aten::mm" in table


def test_bench_step_times_the_real_step_against_the_plain_loop_in_fresh_processes(tmp_path):
    """lab.bench --step --tiny: each mode in its own process, with the allocator setting and the chunked loss only
    where the mode has them, and train.py's dtype=auto only in the real step; the summary's ratios are computed from
    the records, and the smoke test says so. (Three modes of STEP_MODES, which differ in all three; each process
    costs seconds.)"""
    import cli
    import train
    modes = ["plain", "real", "real_fp32"]
    out = run_bench(HERE, "--step", "--tiny", "--step_modes=" + ",".join(modes), f"--out_dir={tmp_path / 'res'}",
                    timeout=600)
    assert out.returncode == 0, out.stderr
    data = json.load(open(tmp_path / "res" / "bench_step.json"))
    md = open(tmp_path / "res" / "bench_step.md").read()
    check_smoke_test(out.stdout, data, md)
    records = data["records"]
    assert [r["mode"] for r in records] == modes and data["rounds"] == 1
    for r in records:
        assert r["ms_per_step"] > 0 and r["peak_mem_gb"] > 0 and r["page_faults_per_step"] >= 0, r
        assert r["tokens_per_s"] * r["ms_per_step"] / 1e3 == pytest.approx(2 * 16, rel=1e-2)  # batch 2 x T 16
        on_linux = sys.platform.startswith("linux")  # glibc's mallopt: elsewhere the setting is never made
        assert r["allocator_setting"] == (on_linux and r["mode"] not in ("plain", "real_no_setting")), r
        # bf16 autocast where this CPU computes bf16 (train.py's auto), else fp32; the plain loop is nanoGPT's fp32
        assert r["dtype"] == ("float32" if r["mode"] in ("plain", "real_fp32") else cli.autocast_for("cpu", "auto")[1])
        assert r["loss_chunk"] == (0 if r["mode"] in ("plain", "real_plain_loss") else 4096), r
    plain = records[0]
    summary = {r["mode"]: r for r in data["summary"]}
    for r in records:
        assert summary[r["mode"]]["time_vs_plain"] == pytest.approx(r["ms_per_step"] / plain["ms_per_step"], rel=1e-2)
        assert summary[r["mode"]]["peak_vs_plain"] == pytest.approx(r["peak_mem_gb"] / plain["peak_mem_gb"], rel=1e-2)
    assert "## Summary" in md and md.count("| real_fp32 |") == 2  # the summary row and the measurement's
    # the real step is train.py's: the same loss_chunk as train.py's default run
    assert data["loss_chunk"] == train.TrainConfig().loss_chunk > 0


def test_bench_step_takes_the_model_batch_dtype_and_loss_chunk_of_a_train_config(tmp_path):
    """lab.bench --step --step_config=config/sink_lab.py times the sink lab's own step: its model as train.py builds it
    from the file, its batch, and the real step in the file's dtype (fp32, pinned there, where auto would take bf16
    on a CPU that computes it) with its loss_chunk (0), not --step_shape's and --step_loss_chunk's."""
    import dataclasses

    import train
    from cli import configure
    from model import GPT, GPTConfig
    # lab.bench reads the file over train.py's defaults without train.TrainConfig: GPTConfig's, but for the sizes,
    # which it asks the file for, and loss_chunk, --step_loss_chunk's (4096, train.py's)
    model_defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    differ = {f.name for f in dataclasses.fields(train.TrainConfig)
              if f.name in model_defaults and f.default != model_defaults[f.name]}
    assert differ == {"n_layer", "n_head", "n_embd", "block_size", "loss_chunk"}
    assert train.TrainConfig().loss_chunk == 4096 and train.TrainConfig().dtype == "auto"  # lab.bench's copies
    lab, _ = configure(train.TrainConfig, [os.path.join(HERE, "config", "sink_lab.py")])
    params = GPT(GPTConfig(**{key: getattr(lab, key) for key in train.MODEL_KEYS})).num_params()
    out = run_bench(tmp_path, "--step", "--tiny", "--step_config=config/sink_lab.py", "--step_modes=real",
                    f"--out_dir={tmp_path / 'res'}", timeout=300)  # cwd elsewhere: the file is found in the repo
    assert out.returncode == 0, out.stderr
    data = json.load(open(tmp_path / "res" / "bench_step.json"))
    (record,) = data["records"]
    assert lab.dtype == "float32" and lab.loss_chunk == 0 != train.TrainConfig().loss_chunk
    assert record["dtype"] == "float32" and record["loss_chunk"] == data["loss_chunk"] == 0
    shape = [lab.n_layer, lab.n_embd, lab.block_size, lab.batch_size]
    assert record["shape"] == data["shape"] == shape == [1, 64, 64, 32]
    assert record["params"] == params and data["model"]["vocab_size"] == 65 and data["model"]["mlp"] == "gelu"
    assert record["tokens_per_s"] * record["ms_per_step"] / 1e3 == pytest.approx(32 * 64, rel=1e-2)
    assert data["step_config"] == "config/sink_lab.py" and data["summary"][0]["time_vs_plain"] is None  # no plain
    md = open(tmp_path / "res" / "bench_step.md").read()
    assert "config/sink_lab.py's model: n_layer 1, n_head 1, n_embd 64, block_size 64, vocab 65" in md


def test_keep_freed_memory_stops_the_page_faults_of_steps_that_free_large_blocks(tmp_path):
    """cli.keep_freed_memory, in a fresh process (it lasts the process): a step that makes three 64 MB tensors,
    each from the last, and frees them page-faults them in again at every step by default; with the setting,
    once the heap has settled, hardly ever. Settling takes a varying number of steps (the tensors' small bookkeeping
    allocations split the freed holes now and then, and the heap grows one block), so the test looks at the last 20
    of 40 steps and asks for under a tenth of the default's faults there."""
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt: Linux only")
    script = tmp_path / "faults.py"
    script.write_text(
        "import resource, sys, torch\n"
        f"sys.path.insert(0, {HERE!r})\n"
        "from cli import keep_freed_memory\n"
        "print(keep_freed_memory() if sys.argv[1] == 'set' else False)\n"
        "def step():\n"
        "    a = torch.ones(16 << 20)  # 16M floats: 64 MB, above glibc's largest default heap block (32 MB)\n"
        "    b = a * 2\n"
        "    return float((b + a)[-1])\n"
        "for i in range(40):\n"
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    step()\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")
    last = {}
    for how, expect_set in (("set", True), ("default", False)):
        out = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        was_set, *faults = out.stdout.split()
        assert was_set == str(expect_set) and len(faults) == 40
        last[how] = [int(f) for f in faults[-20:]]
    # how many faults a fresh block costs depends on the kernel's transparent huge pages (4 KiB or 2 MiB at a time):
    # by default every step faults, and with the setting the last 20 steps fault under a tenth as often
    assert min(last["default"]) > 0, last
    assert sum(last["set"]) < 0.1 * sum(last["default"]), last


def test_a_cpu_step_goes_to_a_git_ignored_folder_unless_results_is_named(tmp_path, monkeypatch, capsys):
    """python -m lab.bench --step is run to look: its results go to out-bench/ (git-ignored), never over the
    committed ones in results/, which it writes only when --out_dir names it, saying so."""
    def fake_step(session, setup):  # the timing itself is another test's: here, where its results go
        session.write("bench_step", {"records": []}, ["a note"], ["mode"], [["plain"]])
    monkeypatch.setattr(bench, "bench_step", fake_step)
    monkeypatch.chdir(tmp_path)
    bench.main(["--step"])
    assert os.listdir(tmp_path) == ["out-bench"] and json.load(open(tmp_path / "out-bench" / "bench_step.json"))
    assert "note: writing" not in capsys.readouterr().out
    committed = os.path.join(HERE, "results")
    monkeypatch.setattr(bench, "write_json", lambda path, value: None)  # the committed files stay as they are
    monkeypatch.setattr(bench, "write_text", lambda path, text: None)
    bench.main(["--step", f"--out_dir={committed}"])
    assert f"note: writing bench_step.json and .md into {committed}/, the committed measurements" in \
        capsys.readouterr().out


def test_a_step_too_big_for_memory_is_refused_before_any_child_starts(tmp_path, monkeypatch, capsys):
    """As train.py's guard, with its estimate (runfolder.step_memory): --step refuses up front a step that cannot fit
    in the free memory, with a batch that fits, rather than start a child that the system kills part-way (--step_config
    =config/train_fineweb.py was a 24 GB process OOM-killed on a 23 GB machine, and an empty message). The estimate
    is the hungriest mode's: the loss over all the logits at once. No child starts: each would allocate gigabytes."""
    import runfolder
    from model import GPTConfig
    monkeypatch.setattr(bench, "free_memory", lambda device: 2**30)  # 1 GiB free
    monkeypatch.setattr(bench.subprocess, "run", lambda *args, **kwargs: pytest.fail("a --step child started"))
    monkeypatch.setattr(bench, "time_step", lambda *args: pytest.fail("a step was timed"))
    monkeypatch.chdir(tmp_path)
    out_dir = f"--out_dir={tmp_path / 'res'}"

    def refusal(*flags):
        with pytest.raises(SystemExit) as stop:
            bench.main([*flags, out_dir])
        said = str(stop.value.code)
        assert said.startswith("error: --step: the ") and "\n" not in said, said
        assert capsys.readouterr() == ("", "")
        return said

    said = refusal("--step", "--step_shape=4,128,128,4096", "--step_modes=real,real_plain_loss")
    assert said.startswith("error: --step: the real_plain_loss step of --step_shape's model: batch_size=4096 x "
                           "block_size=128 needs about ") and "1.0 GiB is free: try --step_shape=4,128,128," in said
    fits = int(said.split("try --step_shape=4,128,128,")[1].split()[0])
    config = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128)  # real_plain_loss: loss_chunk 0, as here
    n_params = sum(p.numel() for p in bench.GPT(config).parameters())
    assert runfolder.step_memory(fits, config, n_params) <= 2**30 < runfolder.step_memory(fits + 1, config, n_params)
    assert "even batch_size 1 does not fit: lower the block_size" in refusal("--step", "--step_shape=4,128,100000,1")
    assert refusal("--step_child=plain", "--step_shape=4,128,128,4096").startswith("error: --step: the plain step")
    # the finding's command, with the limit in the test's hands: GPT-2 small's batch of 16 x 1024
    monkeypatch.setattr(bench, "free_memory", lambda device: 8 * 2**30)
    said = refusal("--step", "--step_config=config/train_fineweb.py")
    assert said.startswith("error: --step: the plain step of config/train_fineweb.py's model: batch_size=16 x "
                           "block_size=1024 needs about 20.2 GiB for one training step on cpu (runfolder."
                           "step_memory's estimate); 8.0 GiB is free: time a copy of config/train_fineweb.py with "
                           "batch_size = "), said
    assert not (tmp_path / "res").exists()


def test_a_step_child_killed_by_a_signal_says_so(tmp_path, monkeypatch):
    """A child the system kills (the OOM killer's SIGKILL) leaves no words: the line says what killed it, not
    'failed (exit code -9): ' and nothing after."""
    def child(returncode, stderr=""):
        monkeypatch.setattr(bench.subprocess, "run",
                            lambda cmd, **kwargs: subprocess.CompletedProcess(cmd, returncode, "", stderr))
        with pytest.raises(SystemExit) as stop:
            bench.main(["--step", "--tiny", "--step_modes=plain", f"--out_dir={tmp_path / 'res'}"])
        return str(stop.value.code)
    assert child(-9) == ("error: --step: the plain step was killed by signal 9 (SIGKILL): out of memory? (a smaller "
                         "--step_shape or batch_size needs less)")
    assert child(-15) == "error: --step: the plain step was killed by signal 15 (SIGTERM)"
    assert child(1, "Traceback ...\nRuntimeError: boom\n") == \
        "error: --step: the plain step failed (exit code 1): Traceback ...\nRuntimeError: boom"


def test_bench_key_values_that_would_mislead_or_crash_are_refused(monkeypatch):
    """The rest of lab.bench's key checks, each one line: a negative --gqa, a --gqa that splits one head dim's heads
    but not another's, --step_shape with a count or a size that is not four positive integers, --step_loss_chunk
    below 0, --steps 0 (a division by zero after the work), --tokens or a batch below 1, --train alone without a
    GPU; and what is accepted:
    a name given twice counts once, --step_modes=all is every mode, --warmup=0 is no warm-up."""
    monkeypatch.setattr(bench, "cuda", False)
    cases = [
        (["--kernels", "--tiny", "--gqa=-2"], "--gqa=-2: give 0 (no GQA rows) or the number of query heads"),
        # 32 heads of D=64 split into one group of 32, 16 heads of D=128 do not: the common divisors are 16's
        (["--kernels", "--gqa=32"], "--gqa=32: --width=2048 and --head_dims=64,128 give 32, 16 query heads (H = "
                                    "width / D), which do not split into groups of 32 (Hkv = H / gqa); give a divisor "
                                    "of 16 (1, 2, 4, 8, 16), or 0 for no GQA rows"),
        (["--step", "--step_shape=4,128,128,8,2"], "--step_shape=4,128,128,8,2: give four positive integers"),
        (["--step", "--step_shape=4,128,128,0"], "--step_shape=4,128,128,0: give four positive integers"),
        (["--step", "--step_loss_chunk=-1"], "--step_loss_chunk and --warmup must be at least 0"),
        (["--step", "--steps=0"], "--rounds and --steps at least 1"),
        (["--train"], "--train measure GPU speed and no CUDA GPU is visible here"),
        # a B of tokens // T, at least 1: --tokens=-5 timed B = 1 as if asked
        (["--kernels", "--tiny", "--tokens=-5"], "--tokens=-5: give a positive integer (default 16384)"),
        (["--train", "--tiny", "--batch_size=0"], "--batch_size=0: give a positive integer (default 16)"),
    ]
    for flags, message in cases:
        with pytest.raises(SystemExit) as stop:
            bench.checked_keys(flags)
        said = str(stop.value.code)
        assert said.startswith("error: ") and message in said and "\n" not in said, (flags, said)
    args = bench.checked_keys(["--train", "--tiny", "--variants=baseline,g1_headwise,baseline", "--backends=torch,torch",
                               "--step_modes=all", "--warmup=0"])
    assert args.variants == ("baseline", "g1_headwise") and args.backends == ("torch",) and args.warmup == 0
    assert args.step_modes == tuple(bench.STEP_MODES)


def test_a_step_config_that_model_py_refuses_is_one_line(tmp_path):
    """--step_config whose model GPTConfig refuses (a ValueError, as a head width that does not divide): one line."""
    config = tmp_path / "odd.py"
    config.write_text("n_layer = 1\nn_head = 3\nn_embd = 64\nblock_size = 16\nbatch_size = 2\n")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--step", f"--step_config={config}", f"--out_dir={tmp_path / 'res'}"])
    said = str(stop.value.code)
    assert said.startswith(f"error: --step_config={config}: ") and "n_embd=64 must be divisible by n_head=3" in said
    assert "\n" not in said and not (tmp_path / "res").exists()


def test_time_ms_times_the_call_in_milliseconds_and_compiles_outside_the_timing(monkeypatch):
    """time_ms on a CPU: one call, timed, in ms; on a GPU: a first untimed call (Triton compiles and autotunes
    there), then triton.testing.do_bench's median, with the inputs' gradients reset between its calls."""
    import torch
    import triton.testing
    ms = bench.time_ms(lambda: time.sleep(0.05))
    assert 45 <= ms < 2000, ms
    events, grads = [], (torch.zeros(2, requires_grad=True),)

    def do_bench(fn, **kwargs):
        events.append(("do_bench", kwargs))
        return 1.5
    monkeypatch.setattr(bench, "cuda", True)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    assert bench.time_ms(lambda: events.append("call"), grads=grads) == 1.5
    assert events[0] == "call" and events[1][0] == "do_bench" and len(events) == 2
    assert events[1][1]["return_mode"] == "median" and events[1][1]["grad_to_none"] == list(grads)


@pytest.mark.skipif(kernels.triton_unavailable() is not None, reason="the fused kernel cannot run here")
def test_each_kernel_provider_computes_the_attention_its_name_says():
    """PROVIDERS: a '+gate' row computes the gated attention, the others attention without the gate (the timings
    compare them under these names)."""
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the kernel's device: a GPU where there is one
    if device == "cpu" and not fused_kernel_runs_on_the_cpu():
        pytest.skip("the fused kernel on a CPU needs TRITON_INTERPRET=1 (conftest.py sets it without a GPU)")
    gen = torch.Generator().manual_seed(0)
    q, k, v, g = (torch.randn(1, 2, 16, 16, generator=gen).to(device) for _ in range(4))
    gated, plain = kernels.attention_torch(q, k, v, g, True), kernels.attention_torch(q, k, v, None, True)
    assert not torch.allclose(gated, plain, atol=1e-3)
    for name, (fn, _, _) in bench.PROVIDERS.items():
        torch.testing.assert_close(fn(q, k, v, g, True), gated if "gate" in name else plain, rtol=1e-4, atol=1e-4,
                                   msg=name)


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_rows_count_flops_the_flashattention_way_in_their_tables(causal, tmp_path, monkeypatch, capsys):
    """--kernels' records and tables, with the timer replaced (each call's ms given): TFLOP/s = FLOPs / s / 1e12 with
    forward 4*B*H*T^2*D, halved when causal, and forward+backward 3.5x that; each row's columns where the header says;
    each fused provider timed under its own dQ mode, and the default mode restored after (--train after --kernels
    in one command trains with it); the summary's faster dQ mode named."""
    per_shape = [1.0, 4.0, 1.5, 6.0, 0.5, 2.0, 0.75, None, None]  # PROVIDERS' calls: 7 and 8 the fused fwd+bwd
    calls, backwards = [0], []

    def fake_time_ms(fn, grads=()):
        shape, i = divmod(calls[0], len(per_shape))
        calls[0] += 1
        backwards.append(kernels.BACKWARD)
        if i >= 7:  # the atomic dQ faster at even shapes, recompute at odd
            return (3.0 if i == 7 else 2.5) if shape % 2 == 0 else (2.5 if i == 7 else 3.0)
        return per_shape[i]
    monkeypatch.setattr(bench, "time_ms", fake_time_ms)
    monkeypatch.setattr(kernels, "triton_unavailable", lambda: None)  # nothing runs the kernel: this tests the tables
    kernels.choose_backward("atomic")  # not the default: the command ends with the default chosen
    bench.main(["--kernels", "--tiny", "--gqa=2", f"--out_dir={tmp_path}"] + ([] if causal else ["--non_causal"]))
    assert kernels.BACKWARD == kernels.DEFAULT_BACKWARD
    data = json.load(open(tmp_path / "bench_kernels.json"))
    md = (tmp_path / "bench_kernels.md").read_text()
    records = data["records"]
    assert len(records) == len(backwards) == 4 * len(per_shape) and calls[0] == len(records)
    for r, backward in zip(records, backwards):
        flops = 4 * r["B"] * r["H"] * r["T"] ** 2 * r["D"] * (0.5 if causal else 1) * (3.5 if r["mode"] == "fwd+bwd"
                                                                                         else 1)
        assert r["causal"] is causal and r["tflops"] == pytest.approx(flops / (r["ms"] / 1e3) / 1e12, rel=1e-3), r
        assert r["B"] == 80 // r["T"]  # --tiny's B*T of 80
        if r["provider"].startswith("triton"):
            assert backward == ("atomic" if r["provider"].endswith("atomic-dq") else "recompute"), r
        assert (f"\n| {r['D']} | {r['H']} | {r['Hkv']} | {r['T']} | {r['B']} | {r['provider']} | {r['mode']} | "
                f"{r['ms']} | {r['tflops']} |") in md, r
    assert f"causal={causal}, B*T = 80, H*D = 64" in md
    for i, r in enumerate(data["summary"]):
        assert r["best"] == bench.FUSED[i % 2 == 0]
        assert (f"\n| 32 | 2 | {r['Hkv']} | {r['T']} | {r['B']} | 4.0 | 6.0 | {r['triton+gate']} | "
                f"{r['triton+gate atomic-dq']} | {'atomic' if i % 2 == 0 else 'recompute'} | {sigs(6.0 / 2.5)} | "
                f"{sigs(4.0 / 2.5)} | 2.0 |") in md, r
    capsys.readouterr()


def sigs(x):
    return float(f"{x:.3g}")


def bench_train_on_a_fake_clock(monkeypatch, tmp_path, events, built, flags):
    """bench_train on a GPU's path (--warmup, --steps, --compile; the tiny smoke test has no warm-up and one step)
    with a model made small, torch.compile the identity and a clock that one optimizer step moves by 1 s: each step,
    sync and reading of the clock appended to events, each model built to built."""
    import types

    import torch
    from model import GPT, GPTConfig
    now = [0.0]

    def clock():
        events.append("clock")
        return now[0]

    def step(*args):
        real_step(*args)
        events.append("step")
        now[0] += 1.0
    real_step = bench.optimizer_step
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(bench, "optimizer_step", step)
    monkeypatch.setattr(bench, "sync", lambda: events.append("sync"))
    monkeypatch.setattr(bench, "GPTConfig", lambda **kw: GPTConfig(**{**kw, "vocab_size": 64, "n_layer": 1,
                                                                         "n_head": 2, "n_embd": 32}))
    monkeypatch.setattr(bench, "GPT", lambda config: built.append(GPT(config)) or built[-1])
    monkeypatch.setattr(torch, "compile", lambda model, mode: model)
    args = bench.checked_keys(["--train", "--tiny", "--batch_size=2", "--block_size=16", *flags,
                               f"--out_dir={tmp_path}"])
    args.tiny = False  # the GPU's path
    bench.bench_train(bench.Session(args, "python -m lab.bench --train", "today", "cpu", torch.float32, ()))


def test_train_timing_excludes_the_warm_up_and_reads_the_clock_after_a_sync(tmp_path, monkeypatch, capsys):
    """bench_train as on a GPU (bench_train_on_a_fake_clock): the clock starts after the warm-up and a sync, stops
    after a sync that follows the timed steps; ms/step, tokens/s and MFU are of one step; compiled runs first for
    --compile=both; each record's model is built with its backend, loss_chunk and c_attn padding; the table's
    columns are where its header says."""
    import probe
    events, built = [], []
    monkeypatch.setattr(bench, "estimate_mfu", lambda model, n, dt, seq_len: probe.estimate_mfu(
        model, n, dt, seq_len=seq_len, peak=1e12))
    backends = ["torch"] + (["triton"] if fused_kernel_runs_on_the_cpu() else [])  # the fake clock's device: a CPU
    bench_train_on_a_fake_clock(monkeypatch, tmp_path, events, built, [
        "--variants=baseline", f"--backends={','.join(backends)}", "--warmup=2", "--steps=3", "--loss_chunk=8",
        "--pad_c_attn=64"])
    data = json.load(open(tmp_path / "bench_train.json"))
    md = (tmp_path / "bench_train.md").read_text()
    records = data["records"]
    assert [(r["compile"], r["backend"]) for r in records] == [(c, b) for c in (True, False) for b in backends]
    one = ["step", "step", "sync", "clock", "step", "step", "step", "sync", "clock"]
    assert events == one * len(records)
    for r, model in zip(records, built):
        assert r["ms_per_step"] == 1000.0 and r["tokens_per_s"] == 2 * 16, r
        assert r["mfu"] == sigs4(probe.estimate_mfu(model, 2, 1.0, seq_len=16, peak=1e12))
        assert model.config.attn_backend == r["backend"] and model.config.loss_chunk == 8
        assert model.transformer.h[0].attn.c_attn.multiple == 64 and model.transformer.h[0].attn.c_attn.devices == (
            "cpu",)
        assert (f"\n| baseline | {r['backend']} | {r['compile']} | 1000.0 | 32.0 | {r['mfu']} | – | {r['params']} |"
                in md), md
    assert "2 warm-up then 3 timed steps" in md
    capsys.readouterr()


def test_train_profiles_every_row_only_after_every_timing(tmp_path, monkeypatch, capsys):
    """bench_train --profile: a process can stay slower on the host after a profile, so no row is timed after one;
    each row is built again, warmed up and then profiled, its top ops in its record, and a command stopped during the
    profiles keeps every timing (the partial files count the profiles as measurements too)."""
    events, partials = [], []

    def profile(step, steps, path):
        events.append("profile")
        return [["aten::mm", 1.0, 2.0]]
    real_write = bench.write_train
    monkeypatch.setattr(bench, "profile_steps", profile)
    monkeypatch.setattr(bench, "write_train", lambda session, shape, records, partial=None: partials.append(
        (partial, [dict(r) for r in records])) or real_write(session, shape, records, partial))
    bench_train_on_a_fake_clock(monkeypatch, tmp_path, events, [], [
        "--variants=baseline,g1_headwise", "--backends=torch", "--warmup=1", "--steps=1", "--profile=3"])
    timed = ["step", "sync", "clock", "step", "sync", "clock"]  # warm-up, sync, clock, timed step, sync, clock
    # 2 variants x compiled or not; then each warmed up, its queued work finished (sync), profiled
    assert events == timed * 4 + ["step", "sync", "profile"] * 4
    data = json.load(open(tmp_path / "bench_train.json"))
    assert data["complete"] and all(r["top_ops"] == [["aten::mm", 1.0, 2.0]] for r in data["records"])
    assert [p for p, _ in partials] == [(1, 8), (2, 8), (3, 8), (4, 8), (5, 8), (6, 8), (7, 8), None]
    assert [r["ms_per_step"] for r in partials[3][1]] == [1000.0] * 4  # every timing kept before the first profile
    assert "top_ops" not in partials[3][1][0] and "top_ops" in partials[4][1][0]
    capsys.readouterr()


def sigs4(x):
    return float(f"{x:.4g}")


def test_step_summary_takes_medians_ranges_and_each_rounds_own_plain_loop():
    """step_summary over three rounds: the median ms/step and its range, the median page faults, the largest peak;
    time vs plain the median of each round's ratio to that round's plain loop, peak vs plain the largest peak over
    the plain loop's largest."""
    def rec(rnd, mode, ms, faults, peak):
        return dict(round=rnd, mode=mode, ms_per_step=ms, page_faults_per_step=faults, peak_mem_gb=peak)
    records = [rec(1, "plain", 10.0, 100, 1.0), rec(1, "real", 5.0, 10, 0.5),
               rec(2, "plain", 20.0, 300, 1.2), rec(2, "real", 30.0, 30, 0.9),
               rec(3, "plain", 40.0, 200, 1.1), rec(3, "real", 8.0, 1000, 0.6)]
    plain, real = bench.step_summary(records, ("plain", "real"))
    assert plain == dict(mode="plain", rounds=3, ms_per_step=20.0, ms_min=10.0, ms_max=40.0, page_faults_per_step=200,
                         peak_mem_gb=1.2, time_vs_plain=1.0, peak_vs_plain=1.0)
    # ratios 0.5, 1.5, 0.2 (median 0.5); over the rounds' medians (8 / 20) or means it would differ
    assert real == dict(mode="real", rounds=3, ms_per_step=8.0, ms_min=5.0, ms_max=30.0, page_faults_per_step=30,
                        peak_mem_gb=0.9, time_vs_plain=0.5, peak_vs_plain=0.75)


def test_bench_step_runs_the_rounds_alternating_and_passes_its_keys_to_each_child(tmp_path, monkeypatch, capsys):
    """--step without a child's cost (subprocess.run answered here): each round runs every mode once, in order;
    each child gets the parent's --step_shape, --step_loss_chunk, --warmup and --steps; the table's columns are
    where its header says. A child that exits 0 without its record is one line, not a traceback."""
    import platform
    platform.processor()  # asked once before subprocess.run is answered here (Python caches it; Linux runs uname)
    cmds = []

    def run(cmd, **kwargs):
        cmds.append(cmd)
        child = bench.checked_keys(cmd[3:])
        record = dict(mode=child.step_child, shape=list(child.step_shape), dtype="float32", loss_chunk=0,
                      allocator_setting=False, params=1, ms_per_step=10.0 * len(cmds), tokens_per_s=3.0,
                      page_faults_per_step=7, system_s_per_step=0.25, user_s_per_step=0.5, peak_mem_gb=0.125)
        return subprocess.CompletedProcess(cmd, 0, "STEP_RECORD " + json.dumps(record) + "\n", "")
    monkeypatch.setattr(bench.subprocess, "run", run)
    flags = ["--step", "--step_shape=2,64,32,4", "--step_loss_chunk=64", "--warmup=3", "--steps=5", "--rounds=2",
             f"--out_dir={tmp_path}"]
    bench.main(flags)
    parent = bench.checked_keys(flags)
    children = [bench.checked_keys(cmd[3:]) for cmd in cmds]
    assert [(c.step_child) for c in children] == ["plain", "real", "plain", "real"]
    for c in children:
        assert (c.step_shape, c.step_loss_chunk, c.warmup, c.steps, c.tiny) == \
            (parent.step_shape, 64, 3, 5, False)
    md = (tmp_path / "bench_step.md").read_text()
    data = json.load(open(tmp_path / "bench_step.json"))
    assert [(r["round"], r["mode"], r["ms_per_step"]) for r in data["records"]] == [
        (1, "plain", 10.0), (1, "real", 20.0), (2, "plain", 30.0), (2, "real", 40.0)]
    assert "\n| 2 | real | float32 | 40.0 | 3.0 | 7 | 0.25 | 0.5 | 0.125 |" in md
    assert "\n| real | 2 | 30.0 | 20.0–40.0 | 7 | 0.125 |" in md
    capsys.readouterr()
    monkeypatch.setattr(bench.subprocess, "run",
                        lambda cmd, **kwargs: subprocess.CompletedProcess(cmd, 0, "no record\n", ""))
    with pytest.raises(SystemExit) as stop:
        bench.main(flags)
    assert str(stop.value.code) == "error: --step: the plain step failed (exit code 0): no record"


def test_time_step_records_each_mode_per_step_in_its_units(monkeypatch, capsys):
    """time_step in this process for every STEP_MODES mode, with the clock and the process's counters given: ms/step
    the median timed step in ms, page faults and CPU seconds per timed step (the warm-up not counted), the peak in
    GB from Linux's KiB; the allocator setting, the dtype, the loss_chunk and train.py's optimizer step only where
    the mode has them."""
    import types

    import cli
    now, usage, opt_steps = [0.0], [], [0]

    def clock():
        now[0] += 0.125
        return now[0]

    def getrusage(who):
        usage.append(who)
        n = len(usage)  # before: 1, after: 2
        return types.SimpleNamespace(ru_minflt=60 * n, ru_stime=0.5 * n, ru_utime=1.5 * n, ru_maxrss=2_000_000)

    def counted(*args):
        opt_steps[0] += 1
        return real_step(*args)
    real_step = bench.optimizer_step
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(bench, "resource", types.SimpleNamespace(getrusage=getrusage, RUSAGE_SELF=0))
    monkeypatch.setattr(bench, "keep_freed_memory", lambda: True)
    monkeypatch.setattr(bench, "optimizer_step", counted)
    monkeypatch.setattr(bench.sys, "platform", "linux")
    args = bench.checked_keys(["--step", "--warmup=1", "--steps=3"])
    setup = (bench.shape_config((1, 32, 8, 2)), 2, "auto", 4096, "--step_shape")
    for mode in bench.STEP_MODES:
        usage.clear()
        opt_steps[0] = 0
        bench.time_step(args, setup, mode)
        record = json.loads(capsys.readouterr().out.split("STEP_RECORD ", 1)[1])
        assert record["mode"] == mode and record["shape"] == [1, 32, 8, 2]
        assert record["ms_per_step"] == 125.0 and record["tokens_per_s"] == 2 * 8 / 0.125
        assert record["page_faults_per_step"] == 20 and record["system_s_per_step"] == sigs4(0.5 / 3)
        assert record["user_s_per_step"] == 0.5 and record["peak_mem_gb"] == sigs(2_000_000 * 1024 / 1e9)
        assert record["allocator_setting"] == (mode not in ("plain", "real_no_setting")), mode
        assert record["dtype"] == ("float32" if mode in ("plain", "real_fp32") else cli.autocast_for("cpu", "auto")[1])
        assert record["loss_chunk"] == (0 if mode in ("plain", "real_plain_loss") else 4096), mode
        assert opt_steps[0] == (0 if mode in ("plain", "real_no_clip") else 4), mode
