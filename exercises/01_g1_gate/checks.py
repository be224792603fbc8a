"""Checks of exercise 01 (the G1 gate), in order: shapes, the gate's range, headwise layout, numbers against
model.Gate, causality, two traps (G5, self-gating), then the whole block against model.CausalSelfAttention."""

import math

import torch
import torch.nn.functional as F

import check
from check import Wrong, expect_close, expect_shape, same


def _gate_inputs(B, T, H, D, granularity, seed, dtype=torch.float64):
    """y (B, T, H, D), x (B, T, C), w_gate (H*D or H, C), fixed seed."""
    gen = check.generator(seed)
    C = H * D
    y = torch.randn(B, T, H, D, generator=gen, dtype=dtype)
    x = torch.randn(B, T, C, generator=gen, dtype=dtype)
    rows = H * D if granularity == "elementwise" else H
    w_gate = torch.randn(rows, C, generator=gen, dtype=dtype) / math.sqrt(C)
    return y, x, w_gate


def _block_inputs(B, T, H, D, granularity, seed):
    """x, w_qkv, w_gate, w_o in float64, fixed seed."""
    gen = check.generator(seed)
    C = H * D
    x = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    w_qkv = torch.randn(3 * C, C, generator=gen, dtype=torch.float64) / math.sqrt(C)
    rows = H * D if granularity == "elementwise" else H
    w_gate = torch.randn(rows, C, generator=gen, dtype=torch.float64) / math.sqrt(C)
    w_o = torch.randn(C, C, generator=gen, dtype=torch.float64) / math.sqrt(C)
    return x, w_qkv, w_gate, w_o


def _model_gate(H, D, granularity):
    """model.Gate for G1 with this layout: gate.logits lays out the logits per head, gate(y, logits) gates y."""
    import model
    return model.Gate(model.GPTConfig(n_embd=H * D, n_head=H, gate="g1", gate_granularity=granularity,
                                      pos_emb="learned"))


def _model_attention(x, w_qkv, w_o, n_head, gate="none", w_gate=None, granularity="elementwise"):
    """model.CausalSelfAttention (float64, no biases) with these weights: its c_attn holds [w_qkv; w_gate] (q, k, v
    and the gate logits in one matmul), its c_proj is w_o. gate "none": no gate; "g5": the gate after W_O."""
    import model
    config = model.GPTConfig(n_embd=x.size(-1), n_head=n_head, gate=gate, gate_granularity=granularity, bias=False,
                             pos_emb="learned", attn_backend="torch")
    attn = model.CausalSelfAttention(config).double()
    with torch.no_grad():
        attn.c_attn.weight.copy_(w_qkv if w_gate is None else torch.cat([w_qkv, w_gate]))
        attn.c_proj.weight.copy_(w_o)
        return attn(x, rope=None)


def _heads(x, w_qkv, n_head):
    """Each head's ungated SDPA output, the heads concatenated, (B, T, C): the model's attention with W_O = I."""
    return _model_attention(x, w_qkv, torch.eye(x.size(-1), dtype=x.dtype), n_head)


def check_g1_gate_shapes(student):
    """g1_gate returns y's shape (B, T, H, D) and dtype, elementwise and headwise"""
    y, x, w = _gate_inputs(2, 5, 2, 8, "elementwise", seed=0, dtype=torch.float32)
    out = student.g1_gate(y, x, w, "elementwise")
    expect_shape("g1_gate(y, x, w_gate, 'elementwise')", out, y.shape,
                 "The gate rescales y, so the output has y's shape. Compare the shape of your scores with y's: "
                 "elementwise, there is one score for every entry of y.")
    if out.dtype != y.dtype:
        raise Wrong(f"g1_gate turned float32 inputs into {out.dtype}: keep y's dtype (no .double() or .half()).")
    y, x, w = _gate_inputs(2, 5, 4, 4, "headwise", seed=1, dtype=torch.float32)
    out = student.g1_gate(y, x, w, "headwise")
    expect_shape("g1_gate(y, x, w_gate, 'headwise')", out, y.shape,
                 "Headwise there is one score per head and token; it must reach all D channels of its head, and "
                 "the output still has y's shape. Check which axes your scores have before you multiply.")


def check_gate_scores_in_0_1(student):
    """gate scores lie in (0, 1): very negative logits give ~0 (a head can output nothing), 0 gives y/2, large ~y"""
    for granularity in ("elementwise", "headwise"):
        y, x, w = _gate_inputs(2, 4, 4, 4, granularity, seed=2)  # H == D: see the next check
        x = x.abs() + 0.5  # positive inputs, so a weight's sign sets the logits' sign
        for weight, want, meaning in ((-50.0, torch.zeros_like(y), "~0 (the gate is shut)"),
                                      (0.0, y / 2, "y / 2 (a logit of 0 is a score of 0.5)"),
                                      (50.0, y, "~y (the gate is open)")):
            w_const = torch.full_like(w, weight / x.size(-1))
            out = student.g1_gate(y, x, w_const, granularity)
            expect_shape(f"g1_gate(..., '{granularity}')", out, y.shape)
            if same(out, want, 1e-6):
                continue
            logits = F.linear(x, w_const).view(*y.shape[:3], -1)
            if weight == 0 and same(out, torch.zeros_like(y), 1e-6):  # a threshold, (scores > 0.5), shuts it at 0.5
                raise Wrong(f"{granularity}: where every gate logit is 0 your output is 0, but a logit of 0 is a "
                            "score of 0.5, which lets half of y through: the scores are used as they are, between 0 "
                            "and 1, not rounded or compared with a threshold.")
            if weight != 0 and same(out, y * logits, 1e-6):  # (at weight 0, y * logits is 0: the case above)
                raise Wrong(f"{granularity}: your output is y times the raw logits: the sigmoid is missing, so the "
                            "'scores' are unbounded and of either sign, not gate scores in (0, 1).")
            if weight < 0 and same(out, y, 1e-6) and same(student.g1_gate(y, x, -w_const, granularity), y, 1e-6):
                raise Wrong(f"{granularity}: your output is y itself whether every gate logit is large and negative "
                            "or large and positive: the gate does not act on y. Multiply y by the scores (a score "
                            "near 0 should silence that channel).")
            if weight != 0 and same(out, y * torch.sigmoid(-logits), 1e-6):  # a sign flipped: 1 - the score
                raise Wrong(f"{granularity}: where every gate logit is large and negative your gate lets y through, "
                            "and where they are large and positive it shuts: your scores are 1 minus the gate's. A "
                            "negative logit should close the gate (a score near 0); check the sign.")
            raise Wrong(f"{granularity}: with every entry of w_gate set to {weight:g} / C, every gate logit is "
                        f"{weight:g} times the mean of x (positive here), so the output should be {meaning}, and it "
                        "is not. Re-check how the logits become scores, and that y is "
                        "multiplied by the scores, not shifted by them.")


def check_headwise_one_score_per_head(student):
    """headwise: one score per head, shared by its D channels (shutting head 1 silences head 1 only)"""
    B, T, H, D = 2, 3, 4, 4  # H == D on purpose: a score broadcast over the wrong axis still runs
    y, x, w = _gate_inputs(B, T, H, D, "headwise", seed=3)
    x = x.abs() + 0.5
    w = torch.full_like(w, 50.0 / x.size(-1))
    w[1] = -w[1]  # head 1's gate is shut, the other heads' gates are open
    out = student.g1_gate(y, x, w, "headwise")
    expect_shape("g1_gate(..., 'headwise')", out, y.shape)
    want = y.clone()
    want[:, :, 1] = 0
    if same(out, want, 1e-6):
        return
    wrong_axis = y.clone()
    wrong_axis[..., 1] = 0
    if same(out, wrong_axis, 1e-6):
        raise Wrong("Shutting head 1's gate silenced channel 1 of every head instead of all channels of head 1: "
                    "your headwise scores run along y's channel axis and are broadcast over the heads. Each head's "
                    "one score must sit on that head's axis and be broadcast over its D channels.")
    raise Wrong("With head 1's gate shut (very negative logits) and the others open, head 1's output should be ~0 "
                "and the other heads' ~y. Row h of w_gate scores head h: check which axis of y each score lands on.")


def check_g1_gate_numbers(student):
    """g1_gate matches model.Gate (float64, random weights), elementwise and headwise; any other granularity raises
    ValueError"""
    for granularity, H, D in (("elementwise", 2, 8), ("headwise", 3, 4)):
        y, x, w = _gate_inputs(2, 5, H, D, granularity, seed=4)
        gate = _model_gate(H, D, granularity)
        want = gate(y, gate.logits(F.linear(x, w)))
        out = student.g1_gate(y, x, w, granularity)
        expect_shape(f"g1_gate(..., '{granularity}')", out, y.shape)
        if granularity == "elementwise" and same(out, gate(y, gate.logits(F.linear(y.reshape(2, 5, -1), w)))):
            raise Wrong("Your gate logits are computed from y (self-gating). G1's logits come from x, the block's "
                        "input after the norm (what Q, K, V are computed from).")
        if same(out, want, 1e-5) and not same(out, want, 1e-9):  # right, but rounded as float32 rounds
            raise Wrong(f"{granularity}: g1_gate is right to about 1e-7 but not to float64's precision: part of your "
                        "arithmetic ran in float32 (a .float(), a float32 tensor you made). Keep the inputs' dtype: "
                        "the maths is right.")
        known = y.abs() > 1e-3  # where y tells the score the student's gate used
        s = gate.logits(F.linear(x, w)).expand_as(y)[known]  # each entry's logit, in the right layout
        mine = (out / y)[known]
        if not same(out, want) and mine[s.argsort()].diff().min() > -1e-6:  # scores rising with the right logits
            i = (mine - torch.sigmoid(s)).abs().argmax()  # where they differ most
            raise Wrong(f"{granularity}: your scores rise with the right logits, in the right layout, but are not "
                        f"the sigmoid of them: at a logit of {s[i]:.3f} the score should be "
                        f"{torch.sigmoid(s[i]):.4f}, yours is {mine[i]:.4f}. G1's score "
                        "is exactly the logistic sigmoid of the logit: no other squashing, and no scale on the logit.")
        expect_close(f"g1_gate(..., '{granularity}')", out, want, atol=1e-9, rtol=1e-9,
                     hint="Re-check the layout of the scores: elementwise, row h*D + d of w_gate scores head h's "
                          "channel d; headwise, row h scores head h. And w_gate is stored like an nn.Linear weight, "
                          "(out_features, in_features).")
    y, x, w = _gate_inputs(2, 3, 2, 4, "elementwise", seed=10)
    for granularity in ("channelwise", "Headwise", ""):
        try:
            student.g1_gate(y, x, w, granularity)
        except ValueError:
            continue
        except Exception as e:
            raise Wrong(f"g1_gate(..., {granularity!r}) raised {type(e).__name__}, not ValueError: check the "
                        "granularity before you use it, and say which ones there are.") from None
        raise Wrong(f"g1_gate(..., {granularity!r}) returned a value: any granularity but 'elementwise' and "
                    "'headwise' should raise ValueError. A silent fallback hides a typo in a config and gates the "
                    "wrong way.")


def check_attention_block_causal(student):
    """attention_block returns (B, T, C), is causal (later tokens never change earlier outputs) and mixes tokens"""
    B, T, H, D = 2, 6, 2, 4
    x, w_qkv, w_gate, w_o = _block_inputs(B, T, H, D, "elementwise", seed=5)
    out = student.attention_block(x, w_qkv, w_gate, w_o, H, "elementwise")
    expect_shape("attention_block(x, ...)", out, (B, T, H * D))
    x2 = x.clone()
    x2[:, 3:] = torch.randn(B, T - 3, H * D, generator=check.generator(6), dtype=x.dtype)
    out2 = student.attention_block(x2, w_qkv, w_gate, w_o, H, "elementwise")
    if not same(out[:, :3], out2[:, :3]):
        raise Wrong("Changing tokens 3.. changed the outputs at positions 0..2: the block sees the future. "
                    "causal_attention masks along its third axis, which must be the tokens: check the layout of "
                    "q, k, v when you pass them (its docstring gives it). With the heads there, it masks heads. If "
                    "those are right, check the layout of the heads' output when it reaches g1_gate and when you "
                    "concatenate them: g1_gate takes (B, T, H, D), as the scores it computes from x are laid out, "
                    "and the reshape to (B, T, C) needs the tokens on the second axis too, or it mixes one token's "
                    "heads with another's.")
    x3 = x.clone()
    x3[:, 0] = -x3[:, 0]
    out3 = student.attention_block(x3, w_qkv, w_gate, w_o, H, "elementwise")
    if same(out[:, 1:], out3[:, 1:]):
        raise Wrong("Changing token 0 left every later output unchanged: your block does not mix tokens at all. "
                    "causal_attention attends along its third axis, which must be the tokens: check the layout of "
                    "q, k, v when you pass them (its docstring gives it). With the heads there, each token attends "
                    "over its own heads.")


def check_trap_gate_after_wo(student):
    """the gate multiplies each head's output before W_O (G1), not the output of W_O (G5)"""
    B, T, H, D = 2, 5, 2, 4
    x, w_qkv, w_gate, w_o = _block_inputs(B, T, H, D, "elementwise", seed=7)
    out = student.attention_block(x, w_qkv, w_gate, w_o, H, "elementwise")
    if same(out, _model_attention(x, w_qkv, w_o, H, gate="g5", w_gate=w_gate)):
        raise Wrong("Your output equals the G5 gate: you gated the output of W_O. G1 gates each head's SDPA output "
                    "before the heads are concatenated and mixed by W_O. After W_O a score no longer belongs to one "
                    "head, and W_V W_O stays one linear map with no non-linearity between them (GA finds G5 gains "
                    "almost nothing: PPL 6.017 vs the baseline's 6.026).")


def check_trap_self_gating(student):
    """the gate logits come from x (the block's input), not from the attention output (self-gating) nor from q, k
    or v"""
    B, T, H, D = 2, 5, 2, 4
    x, w_qkv, w_gate, w_o = _block_inputs(B, T, H, D, "elementwise", seed=8)
    out = student.attention_block(x, w_qkv, w_gate, w_o, H, "elementwise")
    heads = _heads(x, w_qkv, H)
    self_gated = F.linear(heads * torch.sigmoid(F.linear(heads, w_gate)), w_o)
    if same(out, self_gated):
        raise Wrong("Your gate logits are computed from the attention output (self-gating). G1's logits come from "
                    "x, the block's input after the norm, the same tensor as q, k, v: pass x to g1_gate, so the "
                    "current token decides what to keep of each head.")
    for name, projected in zip("qkv", F.linear(x, w_qkv).split(H * D, dim=-1)):  # each (B, T, C), heads in order
        if same(out, F.linear(heads * torch.sigmoid(F.linear(projected, w_gate)), w_o)):
            raise Wrong(f"Your gate logits are computed from {name}, a projection of x, not from x itself. G1's "
                        "logits have a projection of their own, w_gate, applied to the block's input after the "
                        "norm, the tensor q, k and v come from: pass that tensor to g1_gate.")


def check_attention_block_vs_model(student):
    """attention_block matches model.CausalSelfAttention (gate='g1'), elementwise and headwise, float64"""
    for granularity in ("elementwise", "headwise"):
        B, T, H, D = 2, 7, 3, 4
        x, w_qkv, w_gate, w_o = _block_inputs(B, T, H, D, granularity, seed=9)
        want = _model_attention(x, w_qkv, w_o, H, gate="g1", w_gate=w_gate, granularity=granularity)
        out = student.attention_block(x, w_qkv, w_gate, w_o, H, granularity)
        expect_shape(f"attention_block(..., '{granularity}')", out, want.shape)
        if same(out, _model_attention(x, w_qkv, w_o, H)):
            raise Wrong(f"{granularity}: your output is attention without the gate: call g1_gate on each head's "
                        "output, (B, T, H, D), before the heads are concatenated.")
        for gate, where in (("g2", "the values, before attention"), ("g4", "the queries"), ("g3", "the keys")):
            if gate in ("g3", "g4") and granularity == "headwise":
                continue  # defined elementwise only (model.check_config)
            if same(out, _model_attention(x, w_qkv, w_o, H, gate=gate, w_gate=w_gate, granularity=granularity)):
                raise Wrong(f"{granularity}: your output equals the {gate.upper()} gate: you gated {where}. G1 "
                            "gates each head's output of attention (its SDPA output), after attention and before "
                            "the heads are concatenated.")
        expect_close(f"attention_block(..., '{granularity}')", out, want, atol=1e-9, rtol=1e-9,
                     hint="g1_gate passed its checks, so look at the block: the order of q, k, v in w_qkv (q "
                          "first), the head split (head h is the h-th block of D channels), the layout of each "
                          "head's output when it reaches g1_gate and when the heads are concatenated, and W_O, "
                          "applied as an nn.Linear applies its weight (out_features, in_features).")
