"""
What this project reproduces, in one place: the study's variants and the model's flags, each with the paper
row it is compared with.

  VARIANTS       name -> Variant: the flags that make it, the GA and GN rows it implements, their numbers
  STUDY          the variants `python -m lab.repro train all` trains, in the report's order: MODELS (one model
                 each, at the study's learning rate) then SWEEP (baseline and G1 at the higher LR_SWEEP rates)
  LAB            the sink lab's variants (`python -m lab.repro train all --study=sink_lab`)
  TEST_VARIANTS  name -> model flags: every variant that is a model (not a training setting, and not
                 match_params, which the tests set themselves), plus a few configurations no paper row names, so
                 that together they set every value of every flag
  FLAGS          every GPTConfig flag: what it does, with the papers' definitions, and its paper rows
  flag_table()   FLAGS as the markdown table of docs/flags.md (`python -m lab.variants --write` writes it there)

lab/repro.py trains and reports VARIANTS, lab/bench.py times three of them, the tests take their ids from here, and
tests/test_docs.py checks that docs/flags.md holds flag_table() verbatim. The papers' numbers are their own (PAPERS.md):
GA's perplexity, mean gate score, M-Act and F-Attn of a 15B MoE with
2B active parameters trained on 400B tokens (Tables 1, 3, 4), GN's loss and max activation of a 2B dense model
(Table 1).
"""

import os
import sys
from dataclasses import dataclass, field

if not __package__:  # run as python lab/variants.py: find the project from its root, as python -m lab.variants does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runfolder import atomic_write


@dataclass
class Row:
    """One row of a paper's table, named as the paper names it, with the numbers the paper gives there."""
    paper: str  # "GA" or "GN"
    table: str  # where in the paper: "Table 4"
    name: str  # the row's name in that table
    ppl: float = None  # GA: perplexity
    gate_mean: float = None  # GA Table 4: mean gate score
    m_act: int = None  # GA Table 4: M-Act, the largest |h| of each layer's output, averaged over layers
    f_attn: float = None  # GA Table 4: F-Attn, the attention on the first token, averaged over layers
    loss: float = None  # GN: final loss
    max_act: int = None  # GN: the residual stream's largest activation
    note: str = ""  # what the paper reports where it gives no number to compare with

    def __str__(self):
        return f'{self.paper} {self.table} "{self.name}"'


@dataclass
class Variant:
    """A model (and, for the stability pair, a training setting) and the paper rows it is compared with."""
    flags: dict  # GPTConfig flags. The default model is G1-gated, so every variant names its gate.
    ga: Row = None
    gn: Row = None
    train: dict = field(default_factory=dict)  # train.py keys other than the model's

    @property
    def all_flags(self):
        """What train.py is given for this variant (after config/repro.py)."""
        return {**self.flags, **self.train}


# The stability sweep (GA §3.2, Table 2: pushed from lr 4e-3 to 8e-3, a dense baseline nearly diverged or diverged
# while the gated model trained stably): the baseline and G1 at these learning rates, beside the study's own runs of
# both at config/repro.py's 3e-3. The report plots final loss, M-Act and loss spikes against the learning rate.
LR_SWEEP = (6e-3, 1.2e-2, 2.4e-2)  # 2x, 4x and 8x config/repro.py's 3e-3
SWEPT = ("baseline", "g1_elementwise")
STABILITY_ROW = Row("GA", "§3.2, Table 2", "baseline vs gated at lr 8e-3",
                    note="dense 1.7B, 48 layers: at lr 8e-3 the baseline nearly diverged (PPL 9.195) or diverged; "
                         "the gated model trained stably and improved")


def sweep_name(variant, lr):
    return f"{variant}_lr{lr:g}"  # baseline_lr0.006

VARIANTS = {
    # --- the study: `python -m lab.repro train all` ---
    "baseline": Variant(dict(gate="none"),
                        ga=Row("GA", "Table 4", "Baseline", ppl=6.026, m_act=1053, f_attn=0.467),
                        gn=Row("GN", "Table 1", "Baseline", loss=1.964, max_act=6000)),
    "g1_elementwise": Variant(dict(gate="g1"),
                              ga=Row("GA", "Table 4", "G1 elementwise", ppl=5.761, gate_mean=0.116, m_act=94,
                                     f_attn=0.048),
                              gn=Row("GN", "Table 1", "+GA", loss=1.957, max_act=2800)),
    # G1 at the baseline's parameter count: the MLP gives up what the gate's W_theta adds, as GA's dense models do,
    # so that a loss gain cannot come from the extra parameters alone
    "g1_elementwise_matched": Variant(dict(gate="g1", match_params=True),
                                      ga=Row("GA", "§3.2, Table 2", "dense 1.7B with the SDPA output gate",
                                             note="the FFN narrowed to keep the parameters equal; the gate lowered "
                                                  "the loss in every setting tried")),
    "g1_headwise": Variant(dict(gate="g1", gate_granularity="headwise"),
                           ga=Row("GA", "Table 4", "G1 headwise", ppl=5.792, gate_mean=0.172, m_act=98, f_attn=0.073)),
    "g1_head_shared": Variant(dict(gate="g1", gate_shared=True),
                              ga=Row("GA", "Table 4", "G1 head-shared", ppl=5.801, gate_mean=0.271, m_act=286,
                                     f_attn=0.301)),
    "g2_elementwise": Variant(dict(gate="g2"),
                              ga=Row("GA", "Table 4", "G2 (value) elementwise", ppl=5.820, gate_mean=0.221, m_act=125,
                                     f_attn=0.297)),
    "g5": Variant(dict(gate="g5"), ga=Row("GA", "Table 1", "G5", ppl=6.017)),
    "g1_ns_sigmoid": Variant(dict(gate="g1", gate_act="ns_sigmoid"),
                             ga=Row("GA", "Table 4", "NS-sigmoid", ppl=5.900, gate_mean=0.653, m_act=892,
                                    f_attn=0.451)),
    "g1_input_independent": Variant(dict(gate="g1", gate_input="none"),
                                    ga=Row("GA", "Table 4", "input-independent", ppl=5.917, gate_mean=0.335, m_act=471,
                                           f_attn=0.364)),
    "g1_additive_silu": Variant(dict(gate="g1", gate_op="add", gate_act="silu"),
                                ga=Row("GA", "Table 1", "G1 additive SiLU", ppl=5.821)),
    # GA Table 3's non-linearity without a gate, at G1's position
    "sdpa_rmsnorm": Variant(dict(gate="none", sdpa_nonlin="rmsnorm"), ga=Row("GA", "Table 3", "G1 RMSNorm", ppl=5.847)),
    # GN narrowed the FFN for GatedNorm's parameters too; this model keeps them on top of g1_elementwise's (no
    # match_params, which would absorb the gate's only): its loss is compared knowing it has a few more parameters
    "g1_gatednorm": Variant(dict(gate="g1", norm="gatednorm"),
                            gn=Row("GN", "Table 1", "GA+GatedNorm", loss=1.951, max_act=430)),
    "g1_preaffine": Variant(dict(gate="g1", norm="preaffine"),
                            gn=Row("GN", "Table 1", "GA+PreAffine", loss=1.954, max_act=640)),
    "dyt": Variant(dict(gate="none", norm="dyt"), gn=Row("GN", "Table 1", "DyT", loss=2.216, max_act=73)),
    # --- the stability sweep, added below: baseline_lr0.006 ... g1_elementwise_lr0.024 ---

    # --- paper rows outside the study: `python -m lab.repro train g3` trains one beside it ---
    "g3": Variant(dict(gate="g3"), ga=Row("GA", "Table 1", "G3", ppl=6.016)),
    "g4": Variant(dict(gate="g4"), ga=Row("GA", "Table 1", "G4", ppl=5.981)),
    "g1_elementwise_silu": Variant(dict(gate="g1", gate_act="silu"),
                                   ga=Row("GA", "Table 1", "G1 elementwise SiLU", ppl=5.822)),
    "g1_additive_identity": Variant(dict(gate="g1", gate_op="add", gate_act="identity"),
                                    ga=Row("GA", "Table 3", "additive identity", ppl=5.882)),
    "sdpa_silu": Variant(dict(gate="none", sdpa_nonlin="silu"), ga=Row("GA", "Table 3", "G1 SiLU-only", ppl=5.975)),
    "glu": Variant(dict(gate="none", mlp="glu"), gn=Row("GN", "Table 1", "GLU", loss=1.975, max_act=1300)),
    # the control of the sink lab: windows that start anywhere in the text, with no BOS token at position 0
    "baseline_no_bos": Variant(dict(gate="none"), train=dict(bos=False)),
    # GN's norm without GA's gate: which of the two removes the attention sink, and which the massive activation
    "gatednorm": Variant(dict(gate="none", norm="gatednorm")),
}

VARIANTS.update({sweep_name(v, lr): Variant(VARIANTS[v].flags, ga=STABILITY_ROW,  # min_lr 0.0024, not 0.00240...02
                                            train=dict(learning_rate=lr, min_lr=float(f"{lr / 10:.6g}")))
                 for v in SWEPT for lr in LR_SWEEP})
SWEEP = tuple(sweep_name(v, lr) for v in SWEPT for lr in LR_SWEEP)

MODELS = ("baseline", "g1_elementwise", "g1_elementwise_matched", "g1_headwise", "g1_head_shared", "g2_elementwise",
          "g5", "g1_ns_sigmoid", "g1_input_independent", "g1_additive_silu", "sdpa_rmsnorm", "g1_gatednorm",
          "g1_preaffine", "dyt")
STUDY = MODELS + SWEEP  # `python -m lab.repro train all`; `train models` and `train sweep` train either part
# The sink lab (`python -m lab.repro train all --study=sink_lab`, config/sink_lab.py): GA Table 4's sink column in its
# order, the other gate positions and forms, the baseline without a BOS token as the control, and GN's norms (with
# the gate, as GN Table 1, and GatedNorm without it: which of the two removes the sink, which the massive
# activation). Not G1 head-shared: the lab's model has one head, and one head's shared gate is its own
# (g1_head_shared would train g1_elementwise again).
CONTROLS = ("baseline_no_bos", "gatednorm")  # variants that reproduce no paper row: they test what the others rely on
LAB = ("baseline", "g1_elementwise", "g1_headwise", "g1_ns_sigmoid", "g1_input_independent", "g1_additive_silu",
       "g2_elementwise", "g3", "g4", "g5", "baseline_no_bos", "g1_gatednorm", "g1_preaffine", "dyt", "gatednorm")

# Configurations no paper row names, each a change from GPTConfig's defaults, so that TEST_VARIANTS sets every
# value of every flag (but attn_backend and match_params, which the tests choose themselves)
MODEL_ONLY = {
    "g2_headwise": dict(gate="g2", gate_granularity="headwise"),
    "g2_head_shared": dict(gate="g2", gate_shared=True),
    "layernorm": dict(norm="layernorm", bias=True),
    "sandwich_norm": dict(sandwich_norm=True),
    "qk_norm": dict(qk_norm=True),
    "gelu_learned_pos": dict(mlp="gelu", pos_emb="learned"),
    "mha": dict(n_kv_head=None),  # as many KV heads as query heads, whatever the test's base has
    "mqa_headwise": dict(n_kv_head=1, gate_granularity="headwise"),
    "gpt2_like": dict(gate="none", mlp="gelu_tanh", pos_emb="learned", norm="layernorm", bias=True, norm_eps=1e-5,
                      tie_embeddings=False),  # GPT-2's MLP, untied embeddings as Qwen3's larger models
    "wide_heads": dict(head_dim=16, qk_norm=True),  # Qwen3's head_dim: n_head * head_dim != n_embd
    "ntk_2x": dict(rope_scaling="ntk", rope_factor=2.0),  # lab/evaluate.py's length mode
    "yarn_window": dict(rope_scaling="yarn", rope_factor=4.0, attn_window=8, attn_keep_first=1),  # length, stream
}
TEST_VARIANTS = {**{name: v.flags for name, v in VARIANTS.items() if not v.train and "match_params" not in v.flags},
                 **MODEL_ONLY}


# ----------------------------------------------------------------------------
# The model's flags

@dataclass
class Flag:
    name: str  # a GPTConfig field, or several (", "-separated) that share one line
    what: str  # what it does, with the papers' definitions
    rows: str = "—"  # the paper rows it implements
    values: str = ""  # the values column, where VALID and the default cannot say it


FLAGS = [
    Flag("gate", "where the gate acts. G1: each head's SDPA output, gated before the heads are concatenated and "
         "`W_O`; G2: the value projection's output; G3: the key projection's; G4: the query projection's (G3 and "
         "G4 before QK-norm and RoPE, as on the projection's output: with `qk_norm` the norm divides out a gate's "
         "overall scale, so it can only reweight channels); G5: the output of `W_O`; `'none'`: no gate",
         'GA Table 1 rows "SDPA / Value / Key / Query / Dense output"; `\'none\'` = the baseline'),
    Flag("gate_granularity", "elementwise: one score per channel of `Y`; headwise: one score per head, shared by "
         "its channels (G1, G2)", 'GA Table 1 "elementwise" vs "headwise"; Table 4 "G1 headwise"'),
    Flag("gate_shared", "head-specific (`False`): every head has its own scores; head-shared (`True`): one vector "
         "of `head_dim` scores serves every head (G1, G2 elementwise)", 'GA Table 1, Table 4 "G1 head-shared"'),
    Flag("gate_op", "multiplicative `Y' = Y ⊙ act(X W_θ)` or additive `Y' = Y + act(X W_θ)`",
         'GA Table 1 "G1 additive SiLU"'),
    Flag("gate_act", "`act`: sigmoid, in [0, 1] (the papers' gate: its scores can be sparse); SiLU, unbounded "
         "(multiplicative in GA's \"G1 elementwise SiLU\", additive in \"G1 additive SiLU\"); NS-sigmoid "
         "`0.5 + 0.5·sigmoid`, in [0.5, 1]: non-linear but never sparse; "
         "identity: `X W_θ` itself",
         'GA Table 1 "G1 elementwise SiLU"; Table 4 "NS-sigmoid"; Table 3 "additive identity" '
         "(`gate_op='add', gate_act='identity'`)"),
    Flag("gate_input", "`'hidden'`: scores from `X`, the block's input after the pre-attention norm (the tensor that "
         "feeds Q/K/V), so they depend on the token; `'none'`: input-independent, a learned logit per score "
         "(`n_head·head_dim` at G1 elementwise), zero-initialised (every score starts at sigmoid(0) = 0.5), the "
         "same for every token", 'GA Table 4 "input-independent"'),
    Flag("sdpa_nonlin", "a non-linearity that is not a gate, on each head's SDPA output (G1's position): RMSNorm of "
         "each head on its own, or SiLU; it does not replace the gate (with G1, the model's default, it comes just "
         "before it), so GA's rows need `gate='none'` too (the study's `sdpa_rmsnorm` and `sdpa_silu` set both)",
         "GA Table 3 \"G1 RMSNorm\", \"G1 SiLU-only\" (with `gate='none'`)"),
    Flag("match_params", "shrink the MLP's hidden width so the model has `gate='none'`'s parameters, within 1%: "
         "the gate's parameters only, not a GatedNorm's (GN narrows the FFN for those too); with `gate='none'` it "
         "changes nothing (the baseline is its own match)",
         "GA's dense models, which keep parameters equal this way"),
    Flag("norm", "every norm of the residual stream (the pre-norms, a sandwich norm's, the final one; QK-norm and "
         "`sdpa_nonlin`'s stay RMSNorm). LayerNorm has its β only with `bias=True`, as in nanoGPT. DyT "
         "`γ ⊙ tanh(α·x) + β` (α one learned scalar, initialised at 0.5): "
         "element by element, nothing normalised across channels; PreAffine `RMSNorm(λ ⊙ x)` (λ a learned vector, "
         "initialised at 1), so an outlier can live in a weight instead of the activations; GatedNorm "
         "`y ⊙ sigmoid(W_up SiLU(W_down y))` with `y = RMSNorm(x)`",
         'GN Table 1 "DyT", "GA+PreAffine", "GA+GatedNorm"'),
    Flag("norm_eps", "the epsilon of every norm that divides by a statistic; `None`: 1e-6 for RMSNorm (and "
         "PreAffine, GatedNorm, QK-norm), 1e-5 for LayerNorm, PyTorch's default; a published checkpoint sets its own",
         values="`None`"),
    Flag("gatednorm_rank", "GatedNorm's bottleneck rank r: `W_down` maps d to r, `W_up` r to d (with "
         "`norm='gatednorm'`; another norm refuses a rank it would not use)", "GN (r = 16)"),
    Flag("sandwich_norm", "one more norm on the attention and MLP outputs before each joins the residual stream, "
         "on top of the pre-norms", "GA §3.2's stability study (dense 1.7B at lr 8e-3)"),
    Flag("qk_norm", "per-head RMSNorm on the queries and keys"),
    Flag("mlp", "SwiGLU; GLU, with a sigmoid: bounded, fewer outliers in GN; GELU; GELU's tanh approximation, "
         "as GPT-2 was trained (published GPT-2 checkpoints load with it: `pretrained.py`)", 'GN Table 1 "GLU"'),
    Flag("mlp_hidden", "the MLP's hidden width; `None`: 8/3·`n_embd` rounded up to a multiple of 64 for the GLUs, "
         "4·`n_embd` for GELU"),
    Flag("n_kv_head", "key/value heads; fewer than `n_head`: grouped-query attention (GA's MoE models use GQA)",
         values="`None` (= `n_head`)"),
    Flag("head_dim", "each head's width; `None`: `n_embd / n_head`. Qwen3 sets it apart, so the heads together can "
         "be wider than the residual stream (`W_O` maps `n_head·head_dim` to `n_embd`)", values="`None`"),
    Flag("pos_emb", "rotary or learned absolute position embeddings"),
    Flag("rope_base", "RoPE's base θ (with `pos_emb='rope'` only)"),
    Flag("rope_scaling", "how RoPE runs past the trained length. `'none'`: its angles continued as trained; with "
         "`'ntk'` or `'yarn'`, `block_size` is `rope_factor` times the trained length and the angles are rescaled: "
         "NTK-aware, a larger base; YaRN, slow channel pairs interpolated, fast ones kept, logits sharpened "
         "(`python -m lab.evaluate --modes=length`)", 'GA Table 5 (context extended with YaRN)'),
    Flag("rope_factor", "`rope_scaling`'s factor s: > 1 with `'ntk'` or `'yarn'`, 1 with `'none'`"),
    Flag("attn_window", "sliding-window attention: each query sees its last `attn_window` keys, itself included; "
         "`None`: every earlier key (`python -m lab.evaluate --modes=stream`)", values="`None`"),
    Flag("attn_keep_first", "with `attn_window`: the first positions every query sees as well, StreamingLLM's "
         "\"attention sinks\" (`python -m lab.evaluate --modes=stream`)"),
    Flag("tie_embeddings", "`True`: the output layer `lm_head` reads logits with the token embedding's matrix "
         "(GPT-2, nanoGPT, small Qwen3s); `False`: a matrix of its own (larger Qwen3s)"),
    Flag("attn_backend", "which `kernels.gated_attention` path computes attention with a G1 sigmoid gate or none: "
         "`'auto'` is PyTorch's SDPA until the fused kernel's GPU tests pass (`kernels.FUSED_BY_DEFAULT`), "
         "`'triton'` the fused kernel (CUDA, or a CPU under `TRITON_INTERPRET=1`), `'torch'` SDPA"),
    Flag("loss_chunk", "the training loss over this many rows of logits at a time, their gradients computed with them "
         "(`kernels.ChunkedCrossEntropy`): the same loss, and one chunk of logits in memory instead of all (`0`, the "
         "model's default: all at once, and the logits returned; `train.py` trains with 4096)"),
    Flag("block_size, vocab_size, n_layer, n_head, n_embd, dropout, bias",
         "as in nanoGPT; `bias=False`; dropout on the embeddings and the residual branches. `bias=True` gives every "
         "linear a bias, `W_θ` too (its rows of `c_attn`), which the papers' gate has not", values="as nanoGPT"),
]


def values(flag, config_class, valid):
    """The values column: the default first, then the other valid ones (model.VALID), or both values of a bool."""
    if flag.values:
        return flag.values
    default = config_class.__dataclass_fields__[flag.name].default
    if flag.name in valid:
        choices = [default] + [v for v in valid[flag.name] if v != default]
    elif isinstance(default, bool):
        choices = [default, not default]
    else:
        choices = [default]
    return ", ".join(f"`{v!r}`" for v in choices)


def flag_table():
    """FLAGS as the markdown table that docs/flags.md holds (`python -m lab.variants --write` puts it there)."""
    # imported here, not at the top: model imports triton, and lab/bench.py must set TRITON_INTERPRET before that
    from model import VALID, GPTConfig

    lines = ["| flag | values (default first) | what it does | paper row |", "| --- | --- | --- | --- |"]
    for f in FLAGS:
        lines.append(f"| `{f.name}` | {values(f, GPTConfig, VALID)} | {f.what} | {f.rows} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # `python -m lab.variants` prints the flag table; `python -m lab.variants --write[=PATH]` puts it into
    # docs/flags.md (or PATH) in place, between the page's two marker lines. tests/test_docs.py checks the page holds
    # it verbatim.
    BEGIN, END = "<!-- BEGIN python -m lab.variants -->\n", "<!-- END python -m lab.variants -->\n"
    args = sys.argv[1:]
    if not args:
        print(flag_table(), end="")
    elif len(args) == 1 and args[0].split("=")[0] == "--write":
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above lab/
        path = args[0].partition("=")[2] or os.path.join(repo, "docs", "flags.md")
        try:
            with open(path, encoding="utf-8") as f:
                page = f.read()
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else e
            sys.exit(f"error: {path} cannot be read ({why}): --write=PATH names a Markdown page that holds the table's "
                     "marker lines (default docs/flags.md)")
        if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
            sys.exit(f"error: {path}: no table to replace: the page needs the lines {BEGIN.strip()} and {END.strip()}")
        head, rest = page.split(BEGIN)
        new = head + BEGIN + "\n" + flag_table() + "\n" + END + rest.split(END, 1)[1]  # blank lines: a table apart
        atomic_write(path, lambda f: f.write(new.encode("utf-8")))  # a kill leaves the old page, not half a new one
        print(f"{path}: the flag table {'is up to date' if new == page else 'rewritten'}")
    else:
        usage = "usage: python -m lab.variants [--write[=PATH]]: print the flag table, or write it into docs/flags.md"
        if args not in (["--help"], ["-h"]):
            sys.exit(usage)
        print(usage)
