"""Checks of exercise 08 (predict, then measure), in order: the prediction is written; max_activation returns one
float per layer and leaves no hook behind; its numbers against probe.Probe's "max_act" on a small seeded GPT; the
two trained runs exist and differ only in the gate; measure(run) against the probe on the same windows; then a
report of what was predicted and what was measured, which never fails on the outcome.

The runs are read from $EXERCISE_RUNS if set (CI points it at toy-size runs), else from out/exercises/08/."""

import json
import math
import os

import torch

import check
from check import Wrong

CHOICES = ("lower with G1", "about the same", "higher with G1")
SAME = 0.15  # "about the same": the G1 run's M-Act within 15% of the baseline's (README.md says so too)
VAL_BATCHES = 4  # as starter.py's validation_windows

_measured = {}  # run name -> your measure, kept for the report


def runs_dir():
    return check.runs_dir("08")


def _small_gpt(seed=0, gate="g1"):
    import model
    torch.manual_seed(check.seeded(seed))
    config = model.GPTConfig(block_size=32, vocab_size=96, n_layer=3, n_head=2, n_embd=32, gate=gate,
                             attn_backend="torch")
    return model.GPT(config).eval()


def _windows(seed, B=4, T=24):
    return torch.randint(0, 96, (B, T), generator=check.generator(seed))


class _Stop(Exception):
    """Raised before the final norm: M-Act needs the blocks' outputs only, not the logits (the costly part)."""


def _stop(module, args):
    raise _Stop


def _probe_max_act(model, idx, skip_logits=False):
    from probe import Probe
    hook = model.transformer.ln_f.register_forward_pre_hook(_stop) if skip_logits else None
    try:
        with torch.no_grad(), Probe(model) as probe:
            model(idx)
    except _Stop:
        pass
    finally:
        if hook is not None:
            hook.remove()
    return probe.stats["max_act"]


def _as_floats(what, values, n):
    if not isinstance(values, (list, tuple)):
        raise Wrong(f"{what} should return a list of {n} floats (one per layer), got {type(values).__name__}.")
    if len(values) != n:
        raise Wrong(f"{what} returned {len(values)} values for a model of {n} layers: one per block of "
                    "model.transformer.h, in order. (Twice as many: a hook on something else as well, or hooks "
                    "left from an earlier call.)")
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError, RuntimeError):
        raise Wrong(f"{what} should hold plain floats (a tensor's .item()), got "
                    f"{[type(v).__name__ for v in values]}.") from None


def _window_max_mean(h):
    """The mean over the B windows of each window's largest |h| (h: (B, T, C)): for recognising a hook on the wrong
    module."""
    return h.abs().amax(dim=(1, 2)).mean().item()


def _hooks_left(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _hooks_left_by_a_failed_forward(student, model, idx):
    """In the student's process: max_activation(model, idx) on windows the model refuses, and how many hooks the
    failed call left on the model."""
    hooks = _hooks_left(model)
    try:
        student.max_activation(model, idx)
    except Exception:  # the forward's own error, as intended
        pass
    return _hooks_left(model) - hooks


def _committed_outcomes():
    """The sink lab study's seeds (results/sink_lab/summary.json), baseline and G1 elementwise paired by seed: how
    many fall in each answer's band, and the number of seeds; None where the file is not there."""
    path = os.path.join(check.REPO, "results", "sink_lab", "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            runs = json.load(f)["runs"]
    except (OSError, ValueError, KeyError):
        return None
    by_seed = {(r.get("variant"), r.get("seed")): r.get("max_act") for r in runs}
    ratios = [g1 / base for (variant, seed), base in by_seed.items() if variant == "baseline"
              for g1 in [by_seed.get(("g1_elementwise", seed))] if g1 and base]
    counts = {c: 0 for c in CHOICES}
    for ratio in ratios:
        counts[_answer(ratio)] += 1
    return (counts, len(ratios)) if ratios else None


def _answer(ratio):
    """Which of the three answers a G1 / baseline ratio of M-Act is (README.md's table)."""
    return "about the same" if abs(ratio - 1) <= SAME else "lower with G1" if ratio < 1 else "higher with G1"


def _call_counting_hooks(student, model, idx):
    """In the student's process: max_activation(model, idx), and how many hooks it left on the model."""
    hooks = _hooks_left(model)
    value = student.max_activation(model, idx)
    return value, _hooks_left(model) - hooks


# ----------------------------------------------------------------------------------------------------------------

def check_prediction(student):
    """your prediction is written down: PREDICTION_MAX_ACT is one of the three answers, REASON says why"""
    prediction = str(getattr(student, "PREDICTION_MAX_ACT", "") or "").strip()
    reason = str(getattr(student, "REASON", "") or "").strip()
    if not prediction:
        raise NotImplementedError("08-gap1: before you train, set PREDICTION_MAX_ACT to one of "
                                  f"{', '.join(repr(c) for c in CHOICES)} and say why in REASON (one sentence)")
    if prediction.lower() not in [c.lower() for c in CHOICES]:
        raise Wrong(f"PREDICTION_MAX_ACT = {check.student_text(repr(prediction), 100)} is not one of "
                    f"{', '.join(repr(c) for c in CHOICES)}: pick the one you expect, so that the measurement can "
                    "prove you right or wrong.")
    if not reason:
        raise NotImplementedError("08-gap1: REASON is empty: say in one sentence why you expect "
                                  f"{prediction!r} (what would the gate change in the network?)")


def check_max_activation_shape(student):
    """max_activation returns one float per layer, the same on a second call, and leaves no hook on the model"""
    model, idx = _small_gpt(), _windows(1)
    first, hooks_left = student.in_child(_call_counting_hooks, model, idx)
    first = _as_floats("max_activation(model, idx)", first, model.config.n_layer)
    if hooks_left:
        raise Wrong("max_activation left hooks on the model: every later forward of this model would keep running "
                    "them. Remove each hook you registered before returning, even when the forward raises.")
    too_long = _windows(1, T=model.config.block_size + 1)
    if student.in_child(_hooks_left_by_a_failed_forward, model, too_long):
        raise Wrong("max_activation left hooks on the model when its forward failed (windows longer than "
                    "block_size): remove them in a finally: block, so that a failed forward leaves the model as it "
                    "was.")
    second = _as_floats("max_activation (called again)", student.max_activation(model, idx), model.config.n_layer)
    if not all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(first, second)):
        raise Wrong("max_activation gave different values on a second call with the same model and windows: does it "
                    "keep values from an earlier call (a list created once, outside the function)?")
    if not all(math.isfinite(v) and v > 0 for v in first):
        raise Wrong(f"max_activation returned {first}: a max of |h| is a positive number.")


def check_max_activation_vs_probe(student):
    """max_activation matches probe.Probe(model).stats["max_act"], layer by layer, on a small seeded GPT"""
    for seed, gate in ((2, "g1"), (3, "none")):
        model, idx = _small_gpt(seed, gate), _windows(seed + 10)
        got = _as_floats("max_activation(model, idx)", student.max_activation(model, idx), model.config.n_layer)
        want = _probe_max_act(model, idx)
        if all(math.isclose(g, w, rel_tol=1e-5) for g, w in zip(got, want)):
            continue
        blocks, attns = [], []
        hooks = [b.register_forward_hook(lambda m, a, out: blocks.append(out)) for b in model.transformer.h]
        hooks += [b.attn.register_forward_hook(lambda m, a, out: attns.append(out)) for b in model.transformer.h]
        with torch.no_grad():
            model(idx)
        for hook in hooks:
            hook.remove()
        if all(math.isclose(g, h.abs().max().item(), rel_tol=1e-5) for g, h in zip(got, blocks)):
            raise Wrong("Your values are the max |h| over the whole batch. M-Act takes the max within each window "
                        "(a sequence: one row of idx), then averages those maxima over the windows: the max over "
                        "a batch grows with the batch size, so it would not compare across batch sizes.")
        if all(math.isclose(g, _window_max_mean(a), rel_tol=1e-5) for g, a in zip(got, attns)):
            raise Wrong("Your values are measured on the attention's output (block.attn). M-Act is measured on the "
                        "hidden states each block outputs, the residual stream: the block itself "
                        "(model.transformer.h[i]), whose output is x + attention + MLP.")
        layer = next(i for i, (g, w) in enumerate(zip(got, want)) if not math.isclose(g, w, rel_tol=1e-5))
        raise Wrong(f"gate={gate!r} model: layer {layer} is off (yours {got[layer]:.5g}). Re-check the reduction: "
                    "for each block's output (B, T, C), the largest |h| among each window's T x C values, one per "
                    "window, then the mean of those B values. And the order: one value per block, in layer order.")


def check_runs_exist_and_match(student):
    """the two trained runs exist (baseline/ and g1/, each with ckpt.pt) and differ only in the gate"""
    check.expect_trained_runs("08", "step 2")


def _oracle(run_dir):
    """The probe's M-Act of a run on the same windows as starter.py's validation_windows."""
    model, data_dir, batches = check.run_batches(run_dir, VAL_BATCHES)
    per_layer = torch.tensor([_probe_max_act(model, x, skip_logits=True) for x, _ in batches],
                             dtype=torch.float64).mean(0)  # (batches, layers) -> the mean over the batches
    return per_layer.mean().item(), per_layer.tolist()


def _save_deeper_run(run_dir, folder, n_layer=3, seed=0):
    """Save in folder a run like run_dir (the same data, sizes and validation windows) whose model is a freshly
    initialised GPT of n_layer layers: the sink lab's model has one layer, where the mean over the layers and the
    largest layer are the same number; here they differ."""
    import model
    from runfolder import CHECKPOINT, read_checkpoint
    checkpoint = read_checkpoint(os.path.join(run_dir, CHECKPOINT))
    args = dict(checkpoint["model_args"], n_layer=n_layer)
    torch.manual_seed(check.seeded(seed))
    state = model.GPT(model.GPTConfig(**args)).state_dict()
    torch.save({"model": state, "model_args": args, "config": checkpoint["config"]}, os.path.join(folder, CHECKPOINT))


def check_measure_vs_probe(student):
    """measure(run_dir) matches the probe's M-Act (mean over layers) on the same windows: both runs and a 3-layer one"""
    import tempfile
    with tempfile.TemporaryDirectory() as deeper:
        _save_deeper_run(os.path.join(runs_dir(), "baseline"), deeper)
        runs = {"baseline": os.path.join(runs_dir(), "baseline"), "g1": os.path.join(runs_dir(), "g1"),
                "3-layer": deeper}
        wants = {name: _oracle(path) for name, path in runs.items()}
        for name, path in runs.items():
            call = f"measure({name})" if name in check.RUN_FLAGS else "measure() of a 3-layer model saved as a run"
            got = student.measure(path)
            try:
                got = float(got)
            except (TypeError, ValueError, RuntimeError):
                raise Wrong(f"{call} should return one float, got {type(got).__name__}: average over the "
                            "batches, then over the layers.") from None
            want, per_layer = wants[name]
            if math.isclose(got, want, rel_tol=1e-4):
                if name in check.RUN_FLAGS:
                    _measured[name] = got
                continue
            if name in check.RUN_FLAGS:
                other = wants["g1" if name == "baseline" else "baseline"][0]
                if math.isclose(got, other, rel_tol=1e-4):
                    raise Wrong(f"measure() of the {name} run returned the other run's M-Act: load the checkpoint of "
                                "the run_dir you are given, os.path.join(run_dir, 'ckpt.pt').")
            last = "the largest (and the last) layer's" if per_layer[-1] == max(per_layer) else "the last layer's"
            layers = ((f"{last} value", per_layer[-1]), ("the largest layer's value", max(per_layer)))
            for which, value in layers:
                if math.isclose(got, value, rel_tol=1e-4):
                    raise Wrong(f"{call} is {which}: M-Act (GA Table 4) is averaged over the layers (this model has "
                                f"{len(per_layer)}; the sink lab's has one, where all three agree).")
            raise Wrong(f"{call} = {got:.5g} is not the probe's M-Act on the same windows. Re-check gap 3 "
                        "against the statement: this run_dir's ckpt.pt, every batch of "
                        "validation_windows(checkpoint) (the helper as given), each layer averaged over the batches, "
                        "then the layers averaged.")


def check_report(student):
    """what you predicted and what you measured (this check never fails on the outcome)"""
    if set(_measured) != {"baseline", "g1"}:  # run alone: measure again
        for name in ("baseline", "g1"):
            _measured[name] = float(student.measure(os.path.join(runs_dir(), name)))
    base, g1 = _measured["baseline"], _measured["g1"]
    ratio = g1 / base if base > 0 else float("nan")
    outcome = _answer(ratio)
    predicted = {c.lower(): c for c in CHOICES}[str(student.PREDICTION_MAX_ACT).strip().lower()]
    reason = check.student_text(student.REASON, 500, one_line=True)  # the student's words, on one line
    lines = [f"you predicted: {predicted!r}, because: {reason}",
             f"measured M-Act: baseline {base:.4g}, G1 {g1:.4g} (G1 / baseline = {ratio:.2f}): {outcome!r}"
             f" (\"about the same\" = within {SAME:.0%})"]
    lines.append(f"this seed's outcome is {'the one' if predicted == outcome else 'not the one'} you predicted. One "
                 "seed is one draw: it decides nothing about G1, one way or the other.")
    committed = _committed_outcomes()
    if committed:
        counts, n = committed
        lines.append(f"the sink lab's study, {n} seeds of each (results/sink_lab/summary.json): " +
                     ", ".join(f"{c!r} in {k} of {n}" for c, k in counts.items()) +
                     ". What holds for G1 is decided over seeds: results/sink_lab/REPORT.md does it by its rule (an "
                     "interval for the ratio of the means); README.md ('What to make of it') asks how you would "
                     "find out yourself.")
    lines.append("science is not graded on the outcome: this check passes either way.")
    print("\n".join("      " + line for line in lines))
