"""lab/outlier.py on the sink lab's toy-size runs (CPU): what the BOS token's massive activation does."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lab.outlier as outlier
from conftest import change_a_token
from data.shards import bos_token, dataset_fingerprint, val_batches
from lab.analyze import eval_windows
from model import GPT, GPTConfig
from runfolder import code_version, load_checkpoint, read_checkpoint, save_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/


@pytest.fixture(scope="module")
def runs(sink_lab_runs, tmp_path_factory):
    """The sink lab's baseline and G1, and "deep": two layers with PreAffine's final norm, untrained (seed 0), its
    pre-scale and a weight of either sign drawn at random, on the same windows: a last block that is not the first,
    a norm that divides pre_scale * h, and at BOS a largest |h| in a channel whose value is negative."""
    baseline = os.path.join(sink_lab_runs, "baseline")
    ckpt = read_checkpoint(os.path.join(baseline, "ckpt.pt"))
    args = {**ckpt["model_args"], "n_layer": 2, "norm": "preaffine"}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args))
    with torch.no_grad():
        model.transformer.ln_f.pre_scale.uniform_(0.5, 2.0)
        model.transformer.ln_f.norm.weight.uniform_(-1.5, 1.5)
    deep = tmp_path_factory.mktemp("outlier") / "deep"
    deep.mkdir()
    save_checkpoint({**ckpt, "model": model.state_dict(), "model_args": args}, str(deep / "ckpt.pt"))
    # "layernorm": the baseline's one block with LayerNorm everywhere, biases on, the final norm's weight and bias
    # drawn at random: a norm that subtracts the mean before it divides
    args = {**ckpt["model_args"], "norm": "layernorm", "bias": True}
    torch.manual_seed(1)
    model = GPT(GPTConfig(**args))
    with torch.no_grad():
        model.transformer.ln_f.weight.uniform_(-1.5, 1.5)
        model.transformer.ln_f.bias.uniform_(-0.5, 0.5)
    layernorm = deep.parent / "layernorm"
    layernorm.mkdir()
    save_checkpoint({**ckpt, "model": model.state_dict(), "model_args": args}, str(layernorm / "ckpt.pt"))
    # "gatednorm": the baseline's one block with GatedNorm everywhere, its final norm's weight and gate drawn at
    # random and large, so that its gate differs from token to token and from channel to channel, and the logits are
    # large enough for a change of the output's size to move the prediction
    args = {**ckpt["model_args"], "norm": "gatednorm"}
    torch.manual_seed(2)
    model = GPT(GPTConfig(**args))
    with torch.no_grad():
        model.transformer.ln_f.norm.weight.uniform_(-20, 20)
        model.transformer.ln_f.down.weight.normal_(0, 1.0)
        model.transformer.ln_f.up.weight.normal_(0, 1.0)
    gatednorm = deep.parent / "gatednorm"
    gatednorm.mkdir()
    save_checkpoint({**ckpt, "model": model.state_dict(), "model_args": args}, str(gatednorm / "ckpt.pt"))
    return {"baseline": baseline, "g1": os.path.join(sink_lab_runs, "g1"), "deep": str(deep),
            "layernorm": str(layernorm), "gatednorm": str(gatednorm)}


def final_norm(ln_f):
    """(the RMSNorm inside the final norm, or the norm itself; PreAffine's pre-scale or None)."""
    return getattr(ln_f, "norm", ln_f), getattr(ln_f, "pre_scale", None)


def windows(run):
    model, ckpt = load_checkpoint(os.path.join(run, "ckpt.pt"))
    w = eval_windows(ckpt)
    return model, val_batches(w["data_dir"], w["block_size"], w["batch_size"], w["batches"],
                              bos=bos_token(w["data_dir"]))


@pytest.mark.parametrize("name", ["baseline", "g1", "deep", "layernorm", "gatednorm"])
def test_the_numbers_are_the_models_own(runs, name):
    """Position 0's loss and the others' make up the model's own loss; the channel is the largest mean |h| at
    position 0 of the last block's output; entropies lie between 0 and ln V."""
    run = runs[name]
    r = outlier.measure(run, "ckpt.pt", "cpu")
    model, batches = windows(run)
    seen, inputs = [], []
    hooks = [model.transformer.h[-1].register_forward_hook(lambda module, args, h: seen.append(h)),
             model.transformer.h[-1].register_forward_pre_hook(lambda module, args: inputs.append(args[0][:, 0]))]
    with torch.no_grad():
        losses = [model(x, y)[1].item() for x, y in batches]
    for hook in hooks:
        hook.remove()
    T = batches[0][0].shape[1]
    assert math.isclose((r["loss_first"] + (T - 1) * r["loss_rest"]) / T, sum(losses) / len(losses), rel_tol=1e-5)
    h = torch.cat(seen)
    assert r["channel"] == int(h[:, 0].abs().mean(0).argmax()) and r["windows"] == h.shape[0]
    assert math.isclose(r["act_bos"], h[:, 0, r["channel"]].abs().mean().item(), rel_tol=1e-5)
    assert math.isclose(r["act_rest"], h[:, 1:, r["channel"]].abs().mean().item(), rel_tol=1e-5)
    assert r["flat"] == math.log(model.config.vocab_size)
    for key in ("entropy_first", "entropy_first_without"):
        assert 0 <= r[key] <= r["flat"] + 1e-5
    # the final norm's weight on the channel and the median over the channels, both as |weight|; PreAffine's pre-scale
    norm, scale = final_norm(model.transformer.ln_f)
    weight = norm.weight.detach().abs()
    assert r["norm_weight"] == weight[r["channel"]].item()
    assert math.isclose(r["norm_weight_median"], float(np.median(weight.double().numpy())), rel_tol=1e-12)
    if scale is None:
        assert r["pre_scale"] is None and r["pre_scale_median"] is None
    else:
        scale = scale.detach().abs()
        assert r["pre_scale"] == scale[r["channel"]].item()
        assert math.isclose(r["pre_scale_median"], float(np.median(scale.double().numpy())), rel_tol=1e-12)
    # where the channel's value at BOS comes from: the block's input, its attention and its MLP add up to it
    signed = h[:, 0, r["channel"]].mean().item()
    assert math.isclose(r["from_input"] + r["from_attention"] + r["from_mlp"], signed, rel_tol=1e-4, abs_tol=1e-4)
    assert math.isclose(r["from_input"], torch.cat(inputs)[:, r["channel"]].mean().item(), rel_tol=1e-4, abs_tol=1e-6)
    assert signed < 0 or name != "deep"  # the channel is the largest |h| there, whatever its sign
    if model.config.n_layer == 1:  # the one block's input at BOS: the BOS token's embedding and position 0's
        embedding = model.transformer.wte.weight[bos_token(eval_windows(read_checkpoint(
            os.path.join(run, "ckpt.pt")))["data_dir"])] + model.transformer.wpe.weight[0]
        assert math.isclose(r["from_input"], embedding[r["channel"]].item(), rel_tol=1e-4, abs_tol=1e-5)
    # what the attention adds at BOS, seen at its own output; the outlier's replacement, its signed mean elsewhere
    attn = []
    hook = model.transformer.h[-1].attn.register_forward_hook(lambda module, args, out: attn.append(out[:, 0]))
    with torch.no_grad():
        [model(x) for x, _ in batches]
    hook.remove()
    assert math.isclose(r["from_attention"], torch.cat(attn)[:, r["channel"]].mean().item(), rel_tol=1e-4, abs_tol=1e-5)
    assert math.isclose(r["value"], h[:, 1:, r["channel"]].mean().item(), rel_tol=1e-4, abs_tol=1e-6)


@pytest.mark.parametrize("name", ["baseline", "g1", "deep", "layernorm", "gatednorm"])
def test_the_four_predictions_after_bos_by_hand(runs, name):
    """The final norm and the unembedding, written out here on the block's output at BOS: its own term removed,
    the denominator alone changed, the outlier removed, each one's KL from the prediction as trained, loss and
    entropy over the windows, the every-channel control's rank, the norm's output and rms_ratio: the tool's numbers.
    For a final GatedNorm also how much its gate shrinks each vector, and the prediction with its mean gate or
    its mean shrink."""
    run = runs[name]
    r = outlier.measure(run, "ckpt.pt", "cpu")
    model, batches = windows(run)
    seen = []
    hook = model.transformer.h[-1].register_forward_hook(lambda module, args, h: seen.append(h))
    with torch.no_grad():
        [model(x) for x, _ in batches]
    hook.remove()
    everywhere = torch.cat(seen).double()  # (windows, T, C): the block's output
    h = everywhere[:, 0]  # at BOS, the same in every window
    assert torch.allclose(h, h[:1].expand_as(h), atol=1e-5)
    c, (norm, scale) = r["channel"], final_norm(model.transformer.ln_f)
    h = h[0]
    w = norm.weight.detach().double()
    scale = torch.ones_like(h) if scale is None else scale.detach().double()  # PreAffine's: the norm reads scale * h
    layernorm = isinstance(norm, torch.nn.LayerNorm)  # it divides the vector less its mean, and adds a bias
    gated = model.config.norm == "gatednorm"  # GatedNorm: y * sigmoid(W_up SiLU(W_down y)), y its RMSNorm's output

    def divided(v):  # what the norm divides by its RMS
        v = v * scale
        return v - v.mean(-1, keepdim=True) if layernorm else v

    def before_gate(v):
        v = divided(v)
        out = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + norm.eps) * w
        return out + norm.bias.detach().double() if layernorm else out

    def gate(y):
        down, up = (model.transformer.ln_f.get_submodule(k).weight.detach().double() for k in ("down", "up"))
        return torch.sigmoid(F.silu(y @ down.T) @ up.T)

    def normed(v):
        y = before_gate(v)
        return y * gate(y) if gated else y

    def logp(y):
        return (model.lm_head.weight.detach().double() @ y).log_softmax(-1)
    without = h.clone()
    without[c] = r["value"]
    as_trained = normed(h)
    own, removed = as_trained.clone(), normed(without)
    own[c] = 0.0
    denominator = removed.clone()
    denominator[c] = as_trained[c]
    rms = [divided(v).pow(2).mean().sqrt() for v in (h, without)]
    assert math.isclose(r["rms_ratio"], (rms[0] / rms[1]).item(), rel_tol=1e-4)
    assert math.isclose(r["norm_out"], as_trained[c].item(), rel_tol=1e-4)
    assert r["norm_out_rank"] == 1 + int((as_trained.abs() > as_trained[c].abs()).sum())
    targets = torch.cat([y[:, 0] for _, y in batches])
    p = logp(as_trained)
    for key, y in (("own_term", own), ("denominator", denominator), ("without", removed)):
        q = logp(y)
        assert math.isclose(r[f"kl_{key}"], (p.exp() * (p - q)).sum().item(), rel_tol=1e-3, abs_tol=1e-6), key
        assert math.isclose(r[f"loss_first_{key}"], -q[targets].mean().item(), rel_tol=1e-4), key
        assert math.isclose(r[f"entropy_first_{key}"], -(q.exp() * q).sum().item(), rel_tol=1e-4), key
    assert math.isclose(r["loss_first"], -p[targets].mean().item(), rel_tol=1e-4)
    assert math.isclose(r["entropy_first"], -(p.exp() * p).sum().item(), rel_tol=1e-4)
    own_kls = []
    for channel in range(h.numel()):
        y = as_trained.clone()
        y[channel] = 0.0
        own_kls.append((p.exp() * (p - logp(y))).sum().item())
    own_kls = torch.tensor(own_kls)
    others = torch.cat([own_kls[:c], own_kls[c + 1:]])  # the rank counts the channels above c, never c itself
    above = [1 + int((others > own_kls[c] * (1 + tol)).sum()) for tol in (1e-4, -1e-4)]  # float32 against 64
    assert above[0] <= r["own_term_rank"] <= above[1]
    assert math.isclose(r["own_term_kl_median"], float(np.median(own_kls.numpy())), rel_tol=1e-3, abs_tol=1e-7)
    # the final norm's output at every position: its RMS at BOS, against its mean and its least elsewhere
    rms = normed(everywhere).pow(2).mean(-1).sqrt()
    for key, value in (("out_rms_bos", rms[0, 0]), ("out_rms_rest", rms[:, 1:].mean()),
                       ("out_rms_rest_min", rms[:, 1:].min())):
        assert math.isclose(r[key], value.item(), rel_tol=1e-4), key
    keys = [f"{k}{name}" for name in ("norm_gate", "norm_gate_size") for k in ("kl_", "loss_first_", "entropy_first_")]
    keys += ["norm_gate_shrink", "norm_gate_shrink_rest", "norm_gate_shrink_rest_min"]
    if not gated:
        assert all(r[key] is None for key in keys)
        return
    y = before_gate(everywhere)
    shrink = (y * gate(y)).norm(dim=-1) / y.norm(dim=-1)  # (windows, T): how much the gate shrinks each vector
    assert math.isclose(r["norm_gate_shrink"], shrink[0, 0].item(), rel_tol=1e-4)
    assert math.isclose(r["norm_gate_shrink_rest"], shrink[:, 1:].mean().item(), rel_tol=1e-4)
    assert math.isclose(r["norm_gate_shrink_rest_min"], shrink[:, 1:].min().item(), rel_tol=1e-4)
    mean_gate = gate(y[:, 1:]).mean((0, 1))
    assert (gate(y[0, 0]) - mean_gate).abs().max() > 0.1  # the drawn gate differs between BOS and elsewhere
    assert abs(shrink[0, 0] - shrink[:, 1:].mean()) > 0.01  # and so does its shrink: a real test of either change
    for name, out in (("norm_gate", y[0, 0] * mean_gate),  # each channel's mean gate at BOS
                      ("norm_gate_size", as_trained * shrink[:, 1:].mean() / shrink[0, 0])):  # the mean shrink alone
        q = logp(out)
        assert math.isclose(r[f"kl_{name}"], (p.exp() * (p - q)).sum().item(), rel_tol=1e-3, abs_tol=1e-6), name
        assert math.isclose(r[f"loss_first_{name}"], -q[targets].mean().item(), rel_tol=1e-4), name
        assert math.isclose(r[f"entropy_first_{name}"], -(q.exp() * q).sum().item(), rel_tol=1e-4), name
        assert r[f"kl_{name}"] > 1e-4, name  # each change moves this prediction


def test_only_the_channel_at_position_0_changes_and_its_own_term_alone_can_be_removed(sink_lab_runs):
    model, batches = windows(os.path.join(sink_lab_runs, "baseline"))
    x, y = batches[0]
    seen = {}  # what the block computed, and what the final norm receives after the tool's change
    hooks = [model.transformer.h[-1].register_forward_hook(lambda module, args, h: seen.update(h=h)),
             model.transformer.ln_f.register_forward_pre_hook(lambda module, args: seen.update(into=args[0]))]
    first, entropy, rest = outlier.predictions(model, x, y, channel=3, value=1.5)
    for hook in hooks:
        hook.remove()
    h, changed = seen["h"], seen["into"]
    at0, mean_rest, abs_rest = outlier.activations(model, [(x, y)])  # as trained: the block's output unchanged
    assert torch.equal(at0["out"], h[:, 0]) and torch.equal(changed[:, 1:], h[:, 1:])
    assert torch.allclose(mean_rest, h[:, 1:].mean((0, 1))) and torch.allclose(abs_rest, h[:, 1:].abs().mean((0, 1)))
    assert torch.equal(changed[:, 0, :3], h[:, 0, :3]) and (changed[:, 0, 3] == 1.5).all()
    logp = model.lm_head(model.transformer.ln_f(changed)).float().log_softmax(-1)
    assert math.isclose(first, F.nll_loss(logp[:, 0], y[:, 0], reduction="sum").item(), rel_tol=1e-5)
    assert math.isclose(rest, outlier.predictions(model, x, y)[2], rel_tol=1e-6)  # no other position moves
    assert not model.transformer.h[-1]._forward_hooks and not model.transformer.ln_f._forward_hooks  # all removed

    # the own term removed: the norm's output in that channel at position 0 set to 0, nothing else; so a channel
    # whose norm weight is 0 passes nothing on by itself, and removing its term changes nothing
    with torch.no_grad():
        model.transformer.ln_f.weight[3] = 0.0
    as_trained = outlier.predictions(model, x, y)
    own_term = outlier.predictions(model, x, y, channel=3, own=0.0)
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(as_trained[:3], own_term[:3]))
    with torch.no_grad():
        model.transformer.ln_f.weight[3] = 5.0  # now it passes something on: removing its term moves the prediction
    assert not math.isclose(outlier.predictions(model, x, y, channel=3, own=0.0)[0],
                            outlier.predictions(model, x, y)[0], rel_tol=1e-4)


def test_the_command_writes_its_table_and_refuses_what_it_cannot_measure(sink_lab_runs, tmp_path, monkeypatch):
    runs = [os.path.join(sink_lab_runs, n) for n in ("baseline", "g1")]
    out = tmp_path / "o" / "outlier.json"
    outlier.main([f"--runs={','.join(runs)}", "--labels=base,gated", f"--out={out}"])
    rows = json.loads(out.read_text())["runs"]
    assert [r["label"] for r in rows] == ["base", "gated"] and [r["gate"] for r in rows] == ["none", "g1"]
    for r, run in zip(rows, runs):  # which run (and seed), on what data, measured where and when
        ckpt = read_checkpoint(os.path.join(run, "ckpt.pt"))
        assert (r["run_id"], r["seed"], r["data_dir"]) == (ckpt["run_id"], ckpt["config"]["seed"],
                                                           ckpt["config"]["data_dir"])
        assert r["data_fingerprint"] == dataset_fingerprint(r["data_dir"]) and r["measured_on"].startswith("CPU (")
        assert r["code"] == code_version()  # and by which code (None outside git, as train.py logs it)
    md = (tmp_path / "o" / "outlier.md").read_text()
    assert md.count("\n| base |") == 1 and md.count("\n| gated |") == 1
    # --checkpoint: the file it names is the one measured (here a best.pt of another iteration than ckpt.pt's)
    best = tmp_path / "best"
    best.mkdir()
    ckpt = read_checkpoint(os.path.join(runs[0], "ckpt.pt"))
    save_checkpoint({**ckpt, "iter_num": 7}, str(best / "best.pt"))
    outlier.main([f"--runs={best}", "--checkpoint=best.pt", f"--out={tmp_path / 'best.json'}"])
    written = json.loads((tmp_path / "best.json").read_text())
    assert written["checkpoint"] == "best.pt" and [r["iter"] for r in written["runs"]] == [7]

    no_bos = tmp_path / "no_bos"
    no_bos.mkdir()
    ckpt = read_checkpoint(os.path.join(runs[0], "ckpt.pt"))
    ckpt["config"]["bos"] = False
    save_checkpoint(ckpt, str(no_bos / "ckpt.pt"))
    bare = tmp_path / "bare"  # a model and its shape, without train.py's settings: not a run to measure
    bare.mkdir()
    save_checkpoint({k: ckpt[k] for k in ("model", "model_args")}, str(bare / "ckpt.pt"))
    changed, data = tmp_path / "changed", tmp_path / "data"  # trained on data that has changed since: refused
    changed.mkdir()
    ckpt = read_checkpoint(os.path.join(runs[0], "ckpt.pt"))
    shutil.copytree(ckpt["config"]["data_dir"], data)
    ckpt["config"]["data_dir"] = str(data)
    save_checkpoint(ckpt, str(changed / "ckpt.pt"))
    change_a_token(data)
    diverged = tmp_path / "diverged"  # a state saved after its weights went NaN: refused for that, not for a leak
    diverged.mkdir()
    ckpt = read_checkpoint(os.path.join(runs[0], "ckpt.pt"))
    ckpt["model"] = {k: v.clone().fill_(float("nan")) if k.startswith("lm_head") else v
                     for k, v in ckpt["model"].items()}
    save_checkpoint(ckpt, str(diverged / "ckpt.pt"))
    for argv, message in [([f"--runs={bare}"], "lacks train.py's run settings"),
                          ([f"--runs={diverged}"], "holds NaN or infinite weights: nothing to measure"),
                          ([f"--runs={changed}"], "was trained on other data"),
                          ([], "name the runs"),
                          ([f"--runs={runs[0]}", "--labels=a,b"], "--labels has 2 names for 1 runs"),
                          ([f"--runs={runs[0]}", f"--out={tmp_path / 'o.txt'}"], "a .json file"),
                          ([f"--runs={tmp_path / 'nothing'}"], "nothing"),
                          ([f"--runs={no_bos}"], "do not start with BOS (bos=False)")]:
        with pytest.raises(SystemExit) as e:
            outlier.main(argv + ([] if any(a.startswith("--out=") for a in argv) else [f"--out={tmp_path / 'x.json'}"]))
        assert message in str(e.value.code), (argv, e.value.code)
    result = subprocess.run([sys.executable, "-m", "lab.outlier", f"--runs={no_bos}", f"--out={tmp_path / 'y.json'}"],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and result.stderr.strip().count("\n") == 0, result.stderr  # one line, no traceback
    assert not (tmp_path / "y.json").exists()
    # the check that no change at position 0 reaches another position: a change that does is refused in one line

    def everywhere(channel, value):  # set_at_first, but at every position
        def hook(module, args, out):
            if value is None:
                return None
            out = out.clone()
            out[..., channel] = value
            return out
        return hook
    monkeypatch.setattr(outlier, "set_at_first", everywhere)
    with pytest.raises(SystemExit) as e:
        outlier.main([f"--runs={runs[0]}", f"--out={tmp_path / 'z.json'}"])
    assert "changing position 0 moved the other positions' loss" in str(e.value.code) and runs[0] in str(e.value.code)
    assert not (tmp_path / "z.json").exists()


def test_a_checkpoint_path_or_a_run_named_twice_is_refused(sink_lab_runs, tmp_path):
    """--checkpoint=../g1/ckpt.pt measured g1's weights and wrote them under the baseline's name (lab/evaluate.py
    refuses such a path); the same run twice gave two identical rows under one label."""
    base, g1 = (os.path.join(sink_lab_runs, n) for n in ("baseline", "g1"))
    for argv, message in [([f"--runs={base}", f"--checkpoint={os.path.join('..', 'g1', 'ckpt.pt')}"], "not a path"),
                          ([f"--runs={base},{base}"], "two models share the label"),
                          ([f"--runs={base},{g1}", "--labels=x,x"], "two models share the label")]:
        with pytest.raises(SystemExit) as e:
            outlier.main(argv + [f"--out={tmp_path / 'o.json'}"])
        assert message in str(e.value.code), (argv, e.value.code)
        assert not (tmp_path / "o.json").exists()


def test_the_table_has_a_rule_cell_for_every_column():
    """A Markdown table whose rule line has fewer cells than its header is no table to a renderer (GFM): the rows
    would show as one paragraph of pipes."""
    row = dict(label="run", norm="rmsnorm", gate="none", channel=3, act_bos=40.0, act_rest=0.5, from_input=1.0,
               from_attention=2.0, from_mlp=37.0, norm_weight=0.1, norm_weight_median=1.0, pre_scale=None,
               pre_scale_median=None, norm_out=0.2, norm_out_rank=9, kl_own_term=0.001, kl_denominator=0.5,
               kl_without=0.6, own_term_rank=20, own_term_kl_median=0.001, loss_first=1.0, loss_first_own_term=1.0,
               loss_first_denominator=2.0, loss_first_without=2.1, entropy_first=1.0, entropy_first_own_term=1.0,
               entropy_first_denominator=2.0, entropy_first_without=2.0, flat=4.17, rms_ratio=5.0, loss_rest=2.0,
               out_rms_bos=0.3, out_rms_rest=0.9, out_rms_rest_min=0.8, norm_gate_shrink=None,
               norm_gate_shrink_rest=None, norm_gate_shrink_rest_min=None, kl_norm_gate=None, kl_norm_gate_size=None)
    gated = {**row, "norm": "gatednorm", "norm_gate_shrink": 0.3, "norm_gate_shrink_rest": 0.8,
             "norm_gate_shrink_rest_min": 0.6, "kl_norm_gate": 0.5, "kl_norm_gate_size": 0.1}
    head, rule, line, gated_line = outlier.table([row, gated]).split("\n")
    assert head.count("|") == rule.count("|") == line.count("|") == gated_line.count("|")
    assert "| 0.30 (0.90, 0.80) | 0.30 (0.80, 0.60); 0.5000, 0.1000 |" in gated_line
    assert "| 0.30 (0.90, 0.80) | – |" in line
