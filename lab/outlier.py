"""What the massive activation on the BOS token does, run by run: GN's outlier-driven rescaling, put to the test.

    python -m lab.outlier --runs=out-sink-lab/baseline/seed1337,out-sink-lab/gatednorm/seed1337 --out=out/outlier.json

A run trained on windows that start with BOS often carries its largest activation there, in one channel of the
last block's output (GA's M-Act, GN's peak). That output goes to one place only, the final norm and the unembedding,
which predict the token after BOS. GN's reading: the outlier is a rescaler. RMSNorm divides a token's vector by its
root mean square, so one huge channel shrinks every other channel of that token. The channel can act on the
prediction two ways: through that denominator, and by its own value passing on through the norm (its own term).
Four versions of the prediction at position 0 take the two apart:

  as trained;
  own term removed   the final norm's output in that channel set to 0 at position 0, its denominator untouched:
                     what the channel passes on by its own value;
  denominator only   the channel set, at position 0, to its mean over the other positions (its value elsewhere),
                     so the denominator shrinks by rms_ratio and the rest of the token's vector leaves the norm that
                     much larger, while the norm's output in the channel itself is kept as trained;
  outlier removed    the channel set to that mean, both effects at once.

A rescaler moves the prediction far more through its denominator than through its own term. Each change is measured
by its KL divergence from the prediction as trained (nats; the prediction after BOS is one distribution, the same
in every window, since position 0 sees only itself), and by the loss and entropy at position 0 over the windows.
The outlier removed alone would prove nothing: a prediction trained close to its best gets worse under any change.
So, as a control, each channel's own term is removed in turn: own_term_rank says where the outlier's channel comes
among them (1: its own term moves the prediction most), own_term_kl_median what a typical channel's does.
For GatedNorm the own term is the norm's output after its gate, whose input still holds the channel; and the gate
reads the changed vector in "denominator only". LayerNorm subtracts the vector's mean before it divides: its
rms_ratio is that of the standard deviations, and the mean it subtracts moves with the channel too (a shift of every
other channel, inside "denominator only"). DyT divides by nothing: it has no rms_ratio.
Every run's final norm hands position 0 a vector of some size: out_rms_bos is its RMS over the channels, against its
mean (out_rms_rest) and its smallest (out_rms_rest_min) at positions 1..T-1 of every window; what the outlier's
denominator shrinks, whatever the norm. A GatedNorm can shrink one token's vector itself, with its gate: for one,
norm_gate_shrink is RMS(y * gate) / RMS(y) at position 0 (y the RMSNorm's output the gate multiplies), against its
mean and smallest elsewhere (norm_gate_shrink_rest, _rest_min); and two more versions of the prediction after BOS,
each against the prediction as trained (KL, and the loss and entropy at position 0):
  mean gate          each channel's gate at position 0 set to its mean over the other positions (kl_norm_gate):
                     what the gate's shrinking and its choice of channels there do together;
  mean shrink        the norm's output at position 0 scaled so that the gate's shrink there is its mean elsewhere,
                     its direction kept (kl_norm_gate_size): its shrinking alone, to compare with "denominator
                     only", which rescales the rest of the vector.
Also: where the channel's value at BOS comes from (the block's input, its attention, its MLP: what each adds), the
final norm's weight on it against the median |weight| (for PreAffine also its learned pre-scale), the norm's output
there and its rank among the channels by size, and the loss at the other positions, which no change at position 0
can move (nothing after the last block mixes positions; checked).

For each run's ckpt.pt (or --checkpoint=best.pt), on the validation windows it was evaluated on. Prints a table,
writes --out (JSON: each run's numbers, with its run id, seed, data fingerprint, where and when it was measured
and by which commit of this code)
and the same table beside it as Markdown, the two together (a command cut short leaves the pair as it was).
"""

import math
import os
import sys
import time
from contextlib import contextmanager
if not __package__:  # run as python lab/outlier.py: find the project from its root, as python -m lab.outlier does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dataclasses import dataclass

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import configure, device_name, fail, pick_device, run_main
from data.shards import bos_token, dataset_fingerprint, val_batches
from lab.analyze import eval_windows, load_run_checkpoint
from lab.report import not_a_file_name, repeated_label
from runfolder import code_version, result_set, writable_folder, write_json, write_text
import torch
import torch.nn.functional as F


@dataclass
class OutlierConfig:
    """Every key of python -m lab.outlier."""
    runs: tuple[str, ...] = ()  # the runs' out_dirs (train.py's), trained on windows that start with BOS
    labels: tuple[str, ...] = ()  # names for the runs in the same order (default: the folders' paths)
    checkpoint: str = "ckpt.pt"  # which file of each run: ckpt.pt (the latest state) or best.pt
    out: str = "out-outlier/outlier.json"  # the JSON; the Markdown table goes beside it (.md)
    device: str = "cpu"  # cpu, cuda, mps or auto; the model runs in float32


def set_at_first(channel, value):
    """A forward hook that sets `channel` of its module's output at position 0 to `value` (None: no change)."""
    def hook(module, args, out):
        if value is None:
            return None
        out = out.clone()
        out[:, 0, channel] = value
        return out
    return hook


@contextmanager
def changed(model, channel=None, value=None, own=None, final=None):
    """Inside: at position 0, `channel` of the last block's output set to `value` (when given), the final norm's
    output in that channel set to `own` (when given: 0 removes its own term), and its whole output set to the vector
    `final` (when given)."""
    hooks = [model.transformer.h[-1].register_forward_hook(set_at_first(channel, value)),
             model.transformer.ln_f.register_forward_hook(set_at_first(channel, own)),
             model.transformer.ln_f.register_forward_hook(set_at_first(slice(None), final))]
    try:
        with torch.no_grad():
            yield
    finally:
        for hook in hooks:
            hook.remove()


def predictions(model, x, y, **change):
    """(loss at position 0, its entropy, loss at positions 1..T-1), summed over the windows (nats), with `change`
    (changed's keys) made."""
    with changed(model, **change):
        logits, _ = model(x, y)
    logp = logits.float().log_softmax(-1)
    first = F.nll_loss(logp[:, 0], y[:, 0], reduction="sum").item()
    entropy = -(logp[:, 0].exp() * logp[:, 0]).sum().item()
    rest = F.nll_loss(logp[:, 1:].flatten(0, 1), y[:, 1:].flatten(), reduction="sum").item()
    return first, entropy, rest


def first_prediction(model, bos, **change):
    """Log-probabilities of the token after BOS (vocab,), from BOS alone (1, 1), with `change` made; in float64, so
    that a KL divergence near 0 does not round below it."""
    with changed(model, **change):
        logits, _ = model(bos)
    return logits[0, -1].double().log_softmax(-1)


def median(values):
    """The median of a 1-D tensor: the mean of the two middle values when there are an even number of them (64
    channels), as numpy's; torch's own median returns the lower of the two."""
    return torch.quantile(values.double(), 0.5).item()


def kl(logp, logq):
    """KL(p || q) in nats: how far the changed prediction q is from the prediction as trained, p."""
    return (logp.exp() * (logp - logq)).sum().item()


def run_hooked(model, batches, hooks):
    """One pass over the windows, as trained, with `hooks` (registered handles) removed after it, whatever happens."""
    try:
        with torch.no_grad():
            for x, _ in batches:
                model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return sum(x.shape[0] * (x.shape[1] - 1) for x, _ in batches)  # positions 1..T-1 of every window


def activations(model, batches):
    """One pass over the windows, as trained: at position 0 the last block's input, its residual stream after the
    attention (what its MLP's norm reads) and its output, each (windows, channels); and at positions 1..T-1 the
    output's mean and mean |h| per channel."""
    seen = {"in": [], "mid": [], "out": [], "rest": [], "rest_abs": []}

    def output(module, args, h):
        seen["out"].append(h[:, 0])
        seen["rest"].append(h[:, 1:].sum((0, 1)))
        seen["rest_abs"].append(h[:, 1:].abs().sum((0, 1)))
    block = model.transformer.h[-1]
    count = run_hooked(model, batches, [
        block.register_forward_pre_hook(lambda module, args: seen["in"].append(args[0][:, 0])),
        block.ln_2.register_forward_pre_hook(lambda module, args: seen["mid"].append(args[0][:, 0])),
        block.register_forward_hook(output)])
    at0 = {k: torch.cat(seen[k]) for k in ("in", "mid", "out")}
    return at0, sum(seen["rest"]) / count, sum(seen["rest_abs"]) / count


def final_norm_pass(model, batches):
    """One pass, as trained, through the final norm: (the out_rms_* keys and, for a GatedNorm, the norm_gate_shrink*
    keys; for a GatedNorm also, at position 0, BOS's and the same in every window: y, the gate, each channel's mean
    gate over positions 1..T-1, the shrink and the shrink's mean over positions 1..T-1; else None)."""
    final, seen = model.transformer.ln_f, {"out": [], "y": [], "gate": []}
    hooks = [final.register_forward_hook(lambda module, args, out: seen["out"].append(out))]
    if model.config.norm == "gatednorm":
        hooks += [final.norm.register_forward_hook(lambda module, args, y: seen["y"].append(y)),
                  final.up.register_forward_hook(lambda module, args, logits: seen["gate"].append(logits.sigmoid()))]
    run_hooked(model, batches, hooks)
    rms = torch.cat(seen["out"]).pow(2).mean(-1).sqrt()  # (windows, T)
    keys = dict(out_rms_bos=rms[:, 0].mean().item(), out_rms_rest=rms[:, 1:].mean().item(),
                out_rms_rest_min=rms[:, 1:].min().item())
    if not seen["gate"]:  # no gate in the norm: no shrink of its own
        keys.update(dict.fromkeys(("norm_gate_shrink", "norm_gate_shrink_rest", "norm_gate_shrink_rest_min")))
        return keys, None
    y, gate = torch.cat(seen["y"]), torch.cat(seen["gate"])
    shrink = (y * gate).pow(2).mean(-1).sqrt() / y.pow(2).mean(-1).sqrt()  # (windows, T)
    keys.update(norm_gate_shrink=shrink[:, 0].mean().item(), norm_gate_shrink_rest=shrink[:, 1:].mean().item(),
                norm_gate_shrink_rest_min=shrink[:, 1:].min().item())
    return keys, (y[0, 0], gate[0, 0], gate[:, 1:].mean((0, 1)), shrink[0, 0], shrink[:, 1:].mean())


def measure(run, checkpoint, device):
    """One run's numbers (see the module's docstring)."""
    model, ckpt = load_run_checkpoint(os.path.join(run, checkpoint), device, reader="lab.outlier")
    if any(not torch.isfinite(p).all() for p in model.parameters()):
        raise ValueError(f"{os.path.join(run, checkpoint)} holds NaN or infinite weights: nothing to measure (the run "
                         "diverged before this state was saved; its best.pt may be finite)")
    w = eval_windows(ckpt)
    if not w["bos"]:
        raise ValueError(f"{run} was trained on windows that do not start with BOS (bos=False): position 0 is an "
                         "ordinary token there, with nothing to test")
    batches = [(x.to(device), y.to(device)) for x, y in
               val_batches(w["data_dir"], w["block_size"], w["batch_size"], w["batches"], bos=bos_token(w["data_dir"]))]
    model.float()
    at0, mean_rest, abs_rest = activations(model, batches)
    h0 = at0["out"]  # (windows, channels): the last block's output at position 0
    channel = int(h0.abs().mean(0).argmax())
    value = mean_rest[channel].item()  # the channel's mean over positions 1..T-1 of every window
    bos = batches[0][0][:1, :1]
    seen = []  # the final norm's output at BOS, as trained
    hook = model.transformer.ln_f.register_forward_hook(lambda module, args, out: seen.append(out[0, 0].clone()))
    as_trained = first_prediction(model, bos)
    hook.remove()
    normed = seen[0]
    changes = {"as_trained": {}, "own_term": dict(channel=channel, own=0.0),
               "denominator": dict(channel=channel, value=value, own=normed[channel].item()),
               "removed": dict(channel=channel, value=value)}
    norm_keys, gate = final_norm_pass(model, batches)
    if gate is not None:  # GatedNorm: BOS's output with each channel's mean gate, or with the mean shrink alone
        y0, gate0, gate_rest, shrink0, shrink_rest = gate
        changes.update(norm_gate=dict(final=y0 * gate_rest),
                       norm_gate_size=dict(final=y0 * gate0 * shrink_rest / shrink0))
    outs = {name: [predictions(model, x, y, **change) for x, y in batches] for name, change in changes.items()}
    kls = {name: kl(as_trained, first_prediction(model, bos, **change)) for name, change in changes.items()}
    own_kls = torch.tensor([kl(as_trained, first_prediction(model, bos, channel=c, own=0.0))
                            for c in range(h0.shape[1])])  # the control: every channel's own term, one at a time
    n, T = h0.shape[0], batches[0][0].shape[1]
    total = {name: [sum(o[i] for o in out) for i in range(3)] for name, out in outs.items()}
    for name in list(changes)[1:]:  # nothing after the last block reads position 0
        if not math.isclose(total[name][2], total["as_trained"][2], rel_tol=1e-5, abs_tol=1e-6):
            raise RuntimeError(f"{run}: changing position 0 moved the other positions' loss "
                               f"({total['as_trained'][2]} -> {total[name][2]})")
    for name in ("norm_gate", "norm_gate_size"):  # None but for a GatedNorm
        made = name in changes
        norm_keys.update({f"kl_{name}": kls[name] if made else None,
                          f"loss_first_{name}": total[name][0] / n if made else None,
                          f"entropy_first_{name}": total[name][1] / n if made else None})
    final = model.transformer.ln_f  # its weight, or for PreAffine and GatedNorm that of the RMSNorm inside
    weight = (final.weight if hasattr(final, "weight") else final.norm.weight).detach().abs()
    scale = getattr(final, "pre_scale", None)  # PreAffine's: its RMSNorm divides pre_scale * h, not h
    without = h0.clone()
    without[:, channel] = value
    seen_by_norm = [v if scale is None else v * scale.detach() for v in (h0, without)]
    if model.config.norm == "layernorm":  # LayerNorm divides by the standard deviation: the vector less its mean
        seen_by_norm = [v - v.mean(-1, keepdim=True) for v in seen_by_norm]
    rms_ratio = (seen_by_norm[0].pow(2).mean(-1).sqrt() / seen_by_norm[1].pow(2).mean(-1).sqrt()).mean().item()
    rms_ratio = None if model.config.norm == "dyt" else rms_ratio  # DyT divides by nothing
    scale = None if scale is None else scale.detach().abs()
    at = {k: v[:, channel].mean().item() for k, v in at0.items()}
    return dict(run=run, iter=ckpt["iter_num"], run_id=ckpt.get("run_id"), seed=ckpt.get("config", {}).get("seed"),
                data_dir=w["data_dir"], data_fingerprint=dataset_fingerprint(w["data_dir"]),
                measured_on=f"{device_name(device)}, {time.strftime('%Y-%m-%d')}",  # whose run, what data, where
                norm=model.config.norm, gate=model.config.gate, channel=channel,
                channels=h0.shape[1],
                windows=n, act_bos=h0[:, channel].abs().mean().item(), act_rest=abs_rest[channel].item(), value=value,
                from_input=at["in"], from_attention=at["mid"] - at["in"], from_mlp=at["out"] - at["mid"],
                norm_weight=weight[channel].item(), norm_weight_median=median(weight),
                pre_scale=None if scale is None else scale[channel].item(),
                pre_scale_median=None if scale is None else median(scale), rms_ratio=rms_ratio,
                norm_out=normed[channel].item(), norm_out_rank=1 + int((normed.abs() > normed[channel].abs()).sum()),
                loss_first=total["as_trained"][0] / n, entropy_first=total["as_trained"][1] / n,
                loss_first_own_term=total["own_term"][0] / n, entropy_first_own_term=total["own_term"][1] / n,
                loss_first_denominator=total["denominator"][0] / n,
                entropy_first_denominator=total["denominator"][1] / n,
                loss_first_without=total["removed"][0] / n, entropy_first_without=total["removed"][1] / n,
                kl_own_term=kls["own_term"], kl_denominator=kls["denominator"], kl_without=kls["removed"],
                own_term_rank=1 + int((own_kls > own_kls[channel]).sum()), own_term_kl_median=median(own_kls),
                loss_rest=total["as_trained"][2] / (n * (T - 1)), flat=math.log(model.config.vocab_size),
                **norm_keys)


def table(rows):
    head = ("| run | norm | gate | channel | mean abs h at BOS (elsewhere) | from the block's input / attention / MLP "
            "| final norm's weight there (median) | its output there (rank by size) "
            "| KL from as trained: own term removed, denominator only, outlier removed "
            "| own term's rank of all channels' (their median KL) "
            "| loss at position 0: as trained, own term removed, denominator only, outlier removed "
            "| its entropy (flat: ln V) | the rest divided by (its RMS, LayerNorm's std: with / without the outlier) "
            "| the final norm's output at BOS: its RMS (mean elsewhere, least) "
            "| GatedNorm's gate: its shrink at BOS (mean elsewhere, least); KL with the mean gate, the mean shrink "
            "| loss elsewhere |")
    lines = [head, "| --- " * (head.count("|") - 1) + "|"]  # one rule cell a column: else no table to a renderer
    for r in rows:
        weight = f"{r['norm_weight']:.3f} ({r['norm_weight_median']:.3f})"
        if r["pre_scale"] is not None:
            weight += f"; pre-scale {r['pre_scale']:.2f} ({r['pre_scale_median']:.2f})"
        gate = "–" if r["norm_gate_shrink"] is None else (
            f"{r['norm_gate_shrink']:.2f} ({r['norm_gate_shrink_rest']:.2f}, {r['norm_gate_shrink_rest_min']:.2f}); "
            f"{r['kl_norm_gate']:.4f}, {r['kl_norm_gate_size']:.4f}")
        lines.append(f"| {r['label']} | {r['norm']} | {r['gate']} | {r['channel']} | {r['act_bos']:.1f} "
                     f"({r['act_rest']:.2f}) | {r['from_input']:.1f} / {r['from_attention']:.1f} / "
                     f"{r['from_mlp']:.1f} | {weight} | {r['norm_out']:.2f} ({r['norm_out_rank']}) | "
                     f"{r['kl_own_term']:.4f}, {r['kl_denominator']:.4f}, {r['kl_without']:.4f} | "
                     f"{r['own_term_rank']} ({r['own_term_kl_median']:.4f}) | {r['loss_first']:.3f}, "
                     f"{r['loss_first_own_term']:.3f}, {r['loss_first_denominator']:.3f}, "
                     f"{r['loss_first_without']:.3f} | {r['entropy_first']:.3f}, {r['entropy_first_own_term']:.3f}, "
                     f"{r['entropy_first_denominator']:.3f}, {r['entropy_first_without']:.3f} ({r['flat']:.3f}) | "
                     f"{'–' if r['rms_ratio'] is None else format(r['rms_ratio'], '.1f')} | {r['out_rms_bos']:.2f} "
                     f"({r['out_rms_rest']:.2f}, {r['out_rms_rest_min']:.2f}) | {gate} | {r['loss_rest']:.4f} |")
    return "\n".join(lines)


def main(argv=None):
    a, _ = configure(OutlierConfig, sys.argv[1:] if argv is None else argv)
    if not a.runs:
        fail("name the runs: --runs=out-sink-lab/baseline/seed1337,... (train.py's out_dirs)")
    if a.labels and len(a.labels) != len(a.runs):
        fail(f"--labels has {len(a.labels)} names for {len(a.runs)} runs; give one per run")
    if (wrong := not_a_file_name(a.checkpoint)):
        fail(wrong)
    if (twice := repeated_label(list(a.labels or a.runs), list(a.runs))):
        fail(twice)
    if not a.out.endswith(".json"):
        fail(f"--out={a.out}: a .json file (the Markdown table is written beside it, .md)")
    writable_folder(os.path.dirname(a.out) or ".", key="--out's folder")  # before the work, not after it
    device = pick_device(a.device)
    rows, code = [], code_version()
    for run, label in zip(a.runs, a.labels or a.runs):
        try:  # which lab/outlier.py measured (as train.py logs and lab.evaluate records)
            rows.append(dict(label=label, **measure(run, a.checkpoint, device), code=code))
        except (FileNotFoundError, ValueError, RuntimeError) as e:
            fail(e)
    md = table(rows)
    print(md)
    folder, name = os.path.split(a.out)
    names = (name, name[:-len(".json")] + ".md")
    with result_set(folder or ".", names, last=names[:1]) as staging:  # the pair together, never two sets mixed
        write_text(os.path.join(staging, names[1]), md + "\n")
        write_json(os.path.join(staging, names[0]), dict(checkpoint=a.checkpoint, runs=rows))
    print(f"wrote {a.out} and {a.out[:-len('.json')]}.md")


if __name__ == "__main__":
    run_main(main)  # Ctrl-C or a closed pipe: one line
