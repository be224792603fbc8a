"""
pretrained.py: published checkpoints mapped onto model.py, tested offline on tiny checkpoints written on the fly in
the published formats: transformers' GPT-2 and Qwen3 (a test-only dependency), and the gated-attention models'
Qwen3 with its widened q_proj, whose forward is written out below from modeling_qwen3.py's description and checked
against transformers' Qwen3 first. Each must give the same logits as its reference to fp32 tolerance.
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lab.analyze as analyze
import lab.evaluate as evaluate
import pretrained
import sample
from data.shards import GPT2_ENCODER, get_tokenizer
from probe import Probe

transformers = pytest.importorskip("transformers")  # requirements-test.txt pins it; users need it for no script
from safetensors.torch import save_file  # noqa: E402 (transformers brings safetensors)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
VOCAB = 300  # tiny, but room for a byte-level BPE's 256 bytes and its merges (tiny_tokenizer)
QWEN3 = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rope_theta=1000.0, rms_norm_eps=1e-6, max_position_embeddings=64)


def quiet(fn, *args, **kwargs):
    transformers.logging.set_verbosity_error()
    return fn(*args, **kwargs)


def randomize(model, std=0.3):
    """Weights far from their init (norm gains included), so that a swapped or transposed matrix shows."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model.eval()


def tiny_gpt2(folder, **overrides):
    cfg = {**dict(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=48), **overrides}
    model = randomize(quiet(transformers.GPT2LMHeadModel, transformers.GPT2Config(**cfg)), std=0.1)
    quiet(model.save_pretrained, folder)
    return model


def tiny_qwen3(folder, **overrides):
    model = randomize(quiet(transformers.Qwen3ForCausalLM, transformers.Qwen3Config(**{**QWEN3, **overrides})))
    quiet(model.save_pretrained, folder)
    return model


def tokens(T, seed=1):
    return torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------
# GPT-2 and Qwen3: the same logits as transformers

@pytest.mark.parametrize("tie, act", [(True, "gelu_new"), (False, "gelu_new"), (True, "gelu")])
def test_gpt2_gives_transformers_logits(tmp_path, tie, act):
    ref = tiny_gpt2(tmp_path, tie_word_embeddings=tie, activation_function=act)
    model = pretrained.load_model(pretrained.locate(str(tmp_path)))
    c = model.config
    assert (c.pos_emb, c.norm, c.bias, c.gate, c.tie_embeddings) == ("learned", "layernorm", True, "none", tie)
    assert c.mlp == ("gelu" if act == "gelu" else "gelu_tanh")
    assert (model.lm_head.weight is model.transformer.wte.weight) == tie
    idx = tokens(48)
    with torch.no_grad():
        want, got = ref(idx).logits, model(idx)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert model.num_params(non_embedding=False) == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("kv, tie", [(2, True), (2, False), (4, False), (1, True)])
def test_qwen3_gives_transformers_logits(tmp_path, kv, tie):
    """GQA (2 or 1 KV heads for 4 query heads) and plain multi-head, tied and untied, a head_dim (16) of its own:
    4 heads of 16 are wider than the 32-wide residual stream."""
    ref = tiny_qwen3(tmp_path, num_key_value_heads=kv, tie_word_embeddings=tie)
    model = pretrained.load_model(pretrained.locate(str(tmp_path)))
    c = model.config
    assert (c.n_kv_head, c.head_dim, c.qk_norm, c.rope_base, c.gate, c.tie_embeddings) == \
        (kv, 16, True, 1000.0, "none", tie)
    idx = tokens(40)
    with torch.no_grad():
        want, got = ref(idx).logits, model(idx)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert model.num_params() == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("left_out, kw", [
    ("head_dim", dict(head_dim=128)),  # 4 heads of 128, where hidden_size // heads is 8
    ("num_key_value_heads", dict(num_attention_heads=64, num_key_value_heads=32, head_dim=8))])  # 32 KV heads, not 64
def test_a_qwen3_config_without_a_key_is_read_with_qwen3s_own_default(tmp_path, left_out, kw):
    """Qwen3Config (transformers', and the gated release's configuration_qwen3.py) reads a config.json without head_dim
    as 128 and without num_key_value_heads as 32, not as hidden_size // heads and the query heads: the same model."""
    tiny_qwen3(tmp_path, **kw)
    cfg = written_config(tmp_path)
    del cfg[left_out]
    with open(tmp_path / "config.json", "w") as f:
        json.dump(cfg, f)
    ref = quiet(transformers.AutoModelForCausalLM.from_pretrained, tmp_path).eval()
    model = pretrained.load_model(pretrained.locate(str(tmp_path)))
    assert (model.config.head_dim, model.config.n_kv_head) == (ref.config.head_dim, ref.config.num_key_value_heads)
    idx = tokens(24)
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], ref(idx).logits, rtol=1e-5, atol=1e-5)


def test_the_formats_of_real_hub_files(tmp_path):
    """What the hub's files look like, which transformers 5 no longer writes: GPT-2's keys without "transformer."
    and with the causal-mask buffers; a Qwen3 config.json from transformers 4 (rope_theta at the top, no
    rope_parameters or layer_types); weights as pytorch_model.bin, in the zip format and in the one before it."""
    ref = tiny_gpt2(tmp_path / "gpt2")
    w = {k.removeprefix("transformer."): v for k, v in ref.state_dict().items() if k != "lm_head.weight"}
    w.update({f"h.{i}.attn.bias": torch.ones(1, 1, 48, 48).tril() for i in range(2)})
    os.remove(tmp_path / "gpt2" / "model.safetensors")
    torch.save(w, tmp_path / "gpt2" / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    idx = tokens(48)
    with torch.no_grad():
        torch.testing.assert_close(pretrained.load_model(pretrained.locate(str(tmp_path / "gpt2")))(idx)[0],
                                   ref(idx).logits, rtol=1e-5, atol=1e-5)

    ref = tiny_qwen3(tmp_path / "qwen3", rope_theta=5e5)
    cfg = written_config(tmp_path / "qwen3")
    assert cfg.pop("rope_parameters") == {"rope_theta": 5e5, "rope_type": "default"}  # transformers 5 writes it there
    del cfg["layer_types"]
    with open(tmp_path / "qwen3" / "config.json", "w") as f:
        json.dump({**cfg, "rope_theta": 5e5, "rope_scaling": None}, f)
    os.remove(tmp_path / "qwen3" / "model.safetensors")
    torch.save(ref.state_dict(), tmp_path / "qwen3" / "pytorch_model.bin")
    model = pretrained.load_model(pretrained.locate(str(tmp_path / "qwen3")))
    assert model.config.rope_base == 5e5
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], ref(idx).logits, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# The gated-attention models: q_proj widened per KV-head group, sigmoid(gate) * SDPA output before o_proj

def reference_forward(w, cfg, idx):
    """The forward of modeling_qwen3.py (github.com/qiuzh20/gated_attention), written out in float64 from its
    description: q_proj's output viewed per KV head as [G heads' queries, G heads' gate logits]; RMSNorm on q and k
    per head, then RoPE (rotate_half); causal softmax attention, K/V heads repeated for their G query heads;
    attn_output (B, T, H, D) * sigmoid(gate); o_proj. Returns (logits, each layer's mean gate score or None)."""
    w = {k: v.double() for k, v in w.items()}
    H, Hkv, D, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    G, (B, T) = H // Hkv, idx.shape
    width = D if cfg.get("elementwise_attn_output_gate") else 1 if cfg.get("headwise_attn_output_gate") else 0

    def rms(x, weight):
        return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    inv_freq = 1.0 / cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos()[:, None], torch.cat([angles, angles], -1).sin()[:, None]
    x, gate_means = w["model.embed_tokens.weight"][idx], []
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, Hkv, -1)
        q, gate = q.split([G * D, G * width], dim=-1)
        q, gate = q.reshape(B, T, H, D), gate.reshape(B, T, H, width)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, D)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, D)
        q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = k.repeat_interleave(G, dim=2), v.repeat_interleave(G, dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)
        if width:
            y = y * torch.sigmoid(gate)
            gate_means.append(torch.sigmoid(gate).mean().item())
        x = x + y.reshape(B, T, H * D) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        mlp = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + mlp @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T, (gate_means or None)


def written_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def test_the_reference_forward_is_transformers_qwen3(tmp_path):
    """Without a gate, reference_forward gives transformers' Qwen3 logits: what it adds for the gate is all that
    the gated tests below trust unchecked."""
    ref = tiny_qwen3(tmp_path, tie_word_embeddings=False)
    cfg = {**QWEN3, "tie_word_embeddings": False}
    idx = tokens(40)
    with torch.no_grad():
        want = ref(idx).logits.double()
    got, _ = reference_forward(ref.state_dict(), cfg, idx)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def gated_checkpoint(folder, granularity, kv=2, tie=False, gate_std=1.0):
    """A tiny checkpoint laid out as the released gated models: transformers' Qwen3 weights with gate rows put into
    q_proj after each KV-head group's query rows, and the flag in config.json. Returns (weights, config)."""
    ref = tiny_qwen3(folder, num_key_value_heads=kv, tie_word_embeddings=tie)
    cfg = {**written_config(folder), **QWEN3, "num_key_value_heads": kv, "tie_word_embeddings": tie,
           f"{granularity}_attn_output_gate": True}
    H, D, C = cfg["num_attention_heads"], cfg["head_dim"], cfg["hidden_size"]
    G, width = H // kv, D if granularity == "elementwise" else 1
    g = torch.Generator().manual_seed(2)
    w = {k: v.clone() for k, v in ref.state_dict().items()}
    if tie:
        w.pop("lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        key = f"model.layers.{i}.self_attn.q_proj.weight"
        q = w[key].view(kv, G * D, C)
        gate = torch.randn(kv, G * width, C, generator=g) * gate_std
        w[key] = torch.cat([q, gate], dim=1).reshape(-1, C).contiguous()
    os.remove(os.path.join(folder, "model.safetensors"))
    save_file(w, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return w, cfg


@pytest.mark.parametrize("granularity, kv, tie", [("elementwise", 2, False), ("headwise", 2, False),
                                                  ("elementwise", 1, True), ("headwise", 4, True)])
def test_gated_checkpoints_give_the_reference_logits_and_gate_scores(tmp_path, granularity, kv, tie):
    w, cfg = gated_checkpoint(tmp_path, granularity, kv, tie)
    model = pretrained.load_model(pretrained.locate(str(tmp_path)))
    c = model.config
    assert (c.gate, c.gate_granularity, c.gate_act, c.gate_op, c.n_kv_head) == ("g1", granularity, "sigmoid", "mul", kv)
    idx = tokens(40)
    want, gate_means = reference_forward(w, cfg, idx)
    with torch.no_grad(), Probe(model) as probe:
        got = model(idx)[0]
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    # the probe reads the published model's gate scores as the reference computes them
    assert probe.stats["gate_mean"] == pytest.approx(gate_means, abs=1e-6)
    # and the gate matters: opening layer 0's gate fully (logits +50, sigmoid -> 1) computes something else
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.weight[-c.gate_logits_width():] = 0.0
        model.transformer.h[0].attn.c_attn.bias = torch.nn.Parameter(torch.cat([
            torch.zeros(model.transformer.h[0].attn.c_attn.out_features - c.gate_logits_width()),
            torch.full((c.gate_logits_width(),), 50.0)]))
        assert (model(idx)[0].double() - want).abs().max() > 1e-2


# ----------------------------------------------------------------------------
# What the mapping refuses, and how each failure reads

def test_configs_it_cannot_compute_are_refused_with_the_reason():
    gpt2 = dict(model_type="gpt2", n_positions=32, vocab_size=VOCAB, n_layer=1, n_head=2, n_embd=16)
    qwen3 = dict(model_type="qwen3", **QWEN3)
    assert pretrained.map_config(gpt2)[0] == "gpt2" and pretrained.map_config(qwen3)[0] == "qwen3"
    assert pretrained.map_config({**qwen3, "rope_scaling": {"rope_type": "default"}})[1].rope_base == 1000.0
    for hub, words in [
        ({**gpt2, "model_type": "llama"}, "model_type='llama'"),
        ({**gpt2, "activation_function": "relu"}, "activation_function='relu'"),
        ({**gpt2, "scale_attn_by_inverse_layer_idx": True}, "scaled"),
        ({**qwen3, "headwise_attn_output_gate": True, "elementwise_attn_output_gate": True}, "both"),
        ({**qwen3, "hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({**qwen3, "use_sliding_window": True}, "sliding-window"),
        ({**qwen3, "layer_types": ["full_attention", "sliding_attention"]}, "sliding-window"),
        ({**qwen3, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "RoPE scaling"),
        ({**qwen3, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "RoPE scaling"),
        ({**qwen3, "attention_bias": True}, "biases"),
        ({**qwen3, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "RoPE scaling"),
    ]:
        with pytest.raises(ValueError) as e:
            pretrained.map_config(hub, where="x/config.json")
        assert words in str(e.value) and "x/config.json" in str(e.value), (words, str(e.value))


def test_weights_that_do_not_fit_their_config_are_refused(tmp_path):
    w, cfg = gated_checkpoint(tmp_path, "elementwise")

    def refused(weights, config, words):
        save_file(weights, os.path.join(tmp_path, "model.safetensors"))
        with open(os.path.join(tmp_path, "config.json"), "w") as f:
            json.dump(config, f)
        with pytest.raises(ValueError) as e:
            pretrained.load_model(pretrained.locate(str(tmp_path)))
        assert words in str(e.value), str(e.value)

    # elementwise-wide q_proj under a headwise flag, or under no flag at all
    flags = {"elementwise_attn_output_gate": False}
    refused(w, {**cfg, **flags, "headwise_attn_output_gate": True}, "q_proj has 128 rows")
    refused(w, {**cfg, **flags}, "4 heads x (16 query + 0 gate)")
    refused({**w, "model.layers.0.self_attn.extra.weight": torch.zeros(2)}, cfg, "does not use")
    refused({k: v for k, v in w.items() if "down_proj" not in k}, cfg, "lack 'layers.0.mlp.down_proj.weight'")
    refused(w, {**cfg, "intermediate_size": 40}, "mlp.c_fc.weight: (96, 32) in the checkpoint, (80, 32) here")
    refused(w, {k: v for k, v in cfg.items() if k != "hidden_size"}, "has no 'hidden_size'")


def test_names_dependencies_and_network_each_fail_with_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown checkpoint 'gtp2'.*'gpt2'.*folder"):
        pretrained.locate("gtp2")
    with pytest.raises(FileNotFoundError, match="no folder results/nope"):  # a path, not a hub id: results/ exists
        pretrained.locate("results/nope")
    tiny_gpt2(tmp_path)  # first: transformers imports its GPT-2 (and huggingface_hub) on first use
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if it were not installed
    with pytest.raises(ImportError, match="'huggingface_hub'.*pip install"):
        pretrained.locate("gpt2")
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(ImportError, match="'safetensors'.*pip install"):
        pretrained.load_model(pretrained.locate(str(tmp_path)))


def test_a_hub_name_fetches_its_description_first_and_its_weights_when_loaded(tmp_path, monkeypatch):
    """gated-1b-headwise: config.json and tokenizer.json of the repository's folder, then (load_model) its weights,
    each from the local cache when the hub cannot be reached; what comes back is the released model's forward."""
    import huggingface_hub
    folder = tmp_path / "snapshot" / "1B_gate_headwise"
    w, cfg = gated_checkpoint(folder, "headwise")
    tiny_tokenizer(folder)
    calls = []

    def snapshot_download(repo, allow_patterns, local_files_only=False):  # a cache that has it, and no network
        calls.append((repo, allow_patterns, local_files_only))
        if not local_files_only:
            raise OSError("no network")
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    ckpt = pretrained.locate("gated-1b-headwise")
    assert calls == [("QwQZh/gated_attention", ["1B_gate_headwise/config.json", "1B_gate_headwise/tokenizer.json"], f)
                     for f in (False, True)]
    assert (ckpt.folder, ckpt.config.gate_granularity, ckpt.config.attn_backend) == (str(folder), "headwise", "auto")
    model = pretrained.load_model(ckpt)
    assert calls[2][1] == ["1B_gate_headwise/*.safetensors", "1B_gate_headwise/*.safetensors.index.json"]
    idx = tokens(24)
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0].double(), reference_forward(w, cfg, idx)[0], rtol=1e-5, atol=1e-5)
    assert pretrained.load_tokenizer(ckpt).eot_token is not None


def test_a_cached_snapshot_without_the_files_asked_for_is_no_copy(tmp_path, monkeypatch):
    """Offline, the cache's snapshot of a repository may hold some of its files only (its description, fetched by
    an earlier locate, and no weights): the download's failure is said, not 'this folder has no weights'."""
    import huggingface_hub
    folder = tmp_path / "snapshot" / "1B_gate_headwise"
    gated_checkpoint(folder, "headwise")
    for weights in folder.glob("*.safetensors*"):
        weights.unlink()

    tries = []

    def snapshot_download(repo, allow_patterns, local_files_only=False):  # no network; the cache: config.json only
        if not local_files_only:
            tries.append(allow_patterns)
            raise OSError("no network")
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    ckpt = pretrained.locate("gated-1b-headwise")  # config.json is cached (tokenizer.json is not: one is enough)
    tries.clear()
    with pytest.raises(RuntimeError, match=r"cannot get 'gated-1b-headwise': downloading QwQZh/gated_attention from "
                                           r"the Hugging Face Hub failed \(OSError: no network\) and the local cache "
                                           "has no copy"):
        pretrained.load_model(ckpt)
    assert len(tries) == 1  # the pickled weights' fallback is looked for in the cache, not downloaded: one wait


def test_no_network_and_no_local_copy_is_one_line_naming_both(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-m", "lab.analyze", "--pretrained=gated-1b-headwise"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "cannot get 'gated-1b-headwise'" in out.stderr and "QwQZh/gated_attention" in out.stderr
    assert "network" in out.stderr and "local cache has no copy" in out.stderr
    assert f"the files stay in {tmp_path / 'hf' / 'hub'}" in out.stderr  # HF_HOME's cache, not ~/.cache's


# ----------------------------------------------------------------------------
# Tokenizers and the text sample

def tiny_tokenizer(folder):
    """A byte-level BPE trained on the sample text, saved as tokenizer.json, as a Qwen checkpoint ships one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 20, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(pretrained.SAMPLE_TEXT, encoding="utf-8") as f:
        tok.train_from_iterator([f.read()], trainer)
    tok.save(os.path.join(folder, "tokenizer.json"))


def test_tokenizers_gpt2_ships_and_tokenizer_json_round_trips(tmp_path):
    tiny_gpt2(tmp_path / "gpt2", vocab_size=50257)
    enc = pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "gpt2")))
    assert enc.eot_token == 50256 and enc.encode("Hello world") == [15496, 995]  # GPT-2's BPE, from this repo
    with open(GPT2_ENCODER, encoding="utf-8") as f:  # a tokenizer.json of GPT-2's tokens (as the Hub's gpt2 has)
        json.dump({"model": {"type": "BPE", "vocab": json.load(f)}}, open(tmp_path / "gpt2" / "tokenizer.json", "w"))
    assert pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "gpt2"))).encode("Hello world") == [15496, 995]
    tiny_tokenizer(tmp_path / "gpt2")  # a GPT-2-shaped model trained with a BPE of its own: that one, not GPT-2's
    enc = pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "gpt2")))
    assert enc.n_vocab == 280 and enc.decode(enc.encode("The keeper")) == "The keeper"
    tiny_gpt2(tmp_path / "small", vocab_size=200)  # not GPT-2's vocabulary: its own tokenizer.json, which must fit
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "small")))
    tiny_tokenizer(tmp_path / "small")
    with pytest.raises(ValueError, match="tokenizer has 280 tokens, more than the model's vocab_size 200"):
        pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "small")))
    tiny_qwen3(tmp_path / "qwen3")
    ckpt = pretrained.locate(str(tmp_path / "qwen3"))
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        pretrained.load_tokenizer(ckpt)
    tiny_tokenizer(tmp_path / "qwen3")
    enc = pretrained.load_tokenizer(ckpt)
    text = "The keeper's log, day 4: fog. <|endoftext|>Next"
    ids = enc.encode(text, allowed_special={"<|endoftext|>"})
    assert enc.decode(ids) == text and enc.eot_token in ids and max(ids) < enc.n_vocab <= VOCAB
    (tmp_path / "qwen3" / "tokenizer.json").write_bytes(b"\x80not json")  # a download cut short: one line
    with pytest.raises(ValueError, match="tokenizer.json cannot be read as a tokenizer.json .*download it again"):
        pretrained.load_tokenizer(ckpt)


def test_text_windows_are_consecutive_and_shifted_by_one():
    enc = get_tokenizer("gpt2")
    with open(pretrained.SAMPLE_TEXT, encoding="utf-8") as f:
        text = f.read()
    ids = enc.encode(text)
    assert len(ids) >= 8 * 1025, "the sample must hold lab/analyze.py's 8 windows of 1024 tokens"
    plain = pretrained.text_windows(enc, text, 16, 3)
    assert len(plain) == 3 and all(x.shape == y.shape == (1, 16) for x, y in plain)
    for i, (x, y) in enumerate(plain):
        assert x[0].tolist() == ids[17 * i:17 * i + 16] and y[0].tolist() == ids[17 * i + 1:17 * i + 17]
    anchored = pretrained.text_windows(enc, text, 16, 2, bos=50256)
    for i, (x, y) in enumerate(anchored):
        assert x[0, 0] == 50256 and x[0, 1:].tolist() == ids[16 * i:16 * i + 15]
        assert y[0].tolist() == ids[16 * i:16 * i + 16]
    assert len(pretrained.text_windows(enc, "a short text " * 10, 8, 100)) == 31 // 9
    with pytest.raises(ValueError, match="fewer than one window"):
        pretrained.text_windows(enc, "too short", 64, 1)


# ----------------------------------------------------------------------------
# lab.analyze, lab.evaluate and sample.py on published checkpoints

def test_analyze_pretrained_measures_what_transformers_attention_shows(tmp_path):
    """lab.analyze --pretrained on a GPT-2 and a gated Qwen3 (each with its own tokenizer): its F-Attn per layer is the
    first-token column of transformers' own attention probabilities on the same windows, and summary.md puts the
    measured models beside GA Table 4's published values."""
    ref = tiny_gpt2(tmp_path / "gpt2", n_positions=64, vocab_size=50257)  # GPT-2's BPE ids
    gated_checkpoint(tmp_path / "gated", "headwise")
    tiny_tokenizer(tmp_path / "gated")
    analyze.main([f"--pretrained={tmp_path / 'gpt2'},{tmp_path / 'gated'}", "--labels=gpt2-tiny,gated-tiny",
                  "--window=64", "--windows=3", "--map_tokens=16", f"--out_dir={tmp_path / 'out'}"])
    with open(tmp_path / "out" / "summary.json") as f:
        summary = json.load(f)
    gpt2, gated = summary["models"]
    assert (gpt2["label"], gpt2["windows"], gpt2["bos"], gated["windows"]) == ("gpt2-tiny", 3, False, 3)
    assert gpt2["gate_mean"] is None and 0 < gated["gate_mean"] < 1 and gated["model"]["gate_granularity"] == "headwise"

    enc = pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "gpt2")))
    with open(pretrained.SAMPLE_TEXT, encoding="utf-8") as f:
        windows = pretrained.text_windows(enc, f.read(), 64, 3)
    x = torch.cat([w[0] for w in windows])
    with torch.no_grad():
        ref.config._attn_implementation = "eager"
        out_ref = ref(x, output_attentions=True)
    f_attn = [a[:, :, 1:, 0].mean().item() for a in out_ref.attentions]
    assert gpt2["layers"]["first_token_attn"] == pytest.approx(f_attn, abs=1e-5)
    loss = F.cross_entropy(out_ref.logits.flatten(0, 1), torch.cat([w[1] for w in windows]).flatten()).item()
    assert gpt2["loss"] == pytest.approx(loss, abs=1e-4)

    table = (tmp_path / "out" / "summary.md").read_text()
    assert "| gpt2-tiny | " in table and "| gated-tiny | " in table
    assert "| G1 elementwise | 0.048 | 94 | 0.116 |" in table and "| baseline | 0.467 | 1053 | – |" in table
    assert "15B-parameter MoE" in table and "Sun et al. 2024" in table
    assert {"layers.png", "attn_maps.png", "gate_hist.png"} <= set(os.listdir(tmp_path / "out"))

    analyze.main([f"--pretrained={tmp_path / 'gpt2'}", "--bos=True", "--window=64", "--windows=1",
                  f"--out_dir={tmp_path / 'bos'}"])
    with open(tmp_path / "bos" / "summary.json") as f:
        record = json.load(f)["models"][0]
    assert record["bos"] is True and record["first_window_start"].startswith("<|endoftext|>The Keeper's Log")


def test_evaluate_pretrained_quantizes_and_slides_a_window_over_transformers_losses(tmp_path):
    """lab.evaluate --pretrained on a GPT-2 (learned positions): its full-precision loss is transformers' on the same
    windows, a window that keeps every position in view changes nothing, and the length mode is refused."""
    ref = tiny_gpt2(tmp_path / "gpt2", n_positions=64, vocab_size=50257)
    evaluate.main([f"--pretrained={tmp_path / 'gpt2'}", "--modes=quant,stream", "--window=32", "--windows=3",
                   "--quant=w4a4", "--stream_windows=8", "--keep_first=0,32", f"--out_dir={tmp_path / 'out'}"])
    with open(tmp_path / "out" / "summary.json") as f:
        r = json.load(f)["models"][0]
    enc = pretrained.load_tokenizer(pretrained.locate(str(tmp_path / "gpt2")))
    with open(pretrained.SAMPLE_TEXT, encoding="utf-8") as f:
        windows = pretrained.text_windows(enc, f.read(), 32, 3)
    with torch.no_grad():
        logits = ref(torch.cat([w[0] for w in windows])).logits
    loss = F.cross_entropy(logits.flatten(0, 1), torch.cat([w[1] for w in windows]).flatten()).item()
    assert (r["T"], r["windows"], r["pretrained"]) == (32, 3, str(tmp_path / "gpt2"))
    assert r["quant"]["full"]["mean"] == pytest.approx(loss, abs=1e-4)
    assert r["quant"]["settings"][0]["increase"]["mean"] != 0
    keep = {k["k"]: k["increase"]["mean"] for k in r["stream"][0]["keep"]}
    assert keep[32] == pytest.approx(0, abs=1e-6) and keep[0] != pytest.approx(0, abs=1e-6)
    with pytest.raises(SystemExit, match="published checkpoint.*--modes=quant,stream"):
        evaluate.main([f"--pretrained={tmp_path / 'gpt2'}", "--modes=length", "--window=32", "--windows=1",
                       f"--out_dir={tmp_path / 'out2'}"])


def test_analyze_and_sample_refuse_bad_requests_in_one_line(tmp_path, capsys):
    tiny_gpt2(tmp_path, vocab_size=50257)
    for args, words in [([f"--pretrained={tmp_path}", "--runs=out"], "not both"),
                        ([f"--pretrained={tmp_path}", "--window=4096"], "--window=4096 is longer than"),
                        ([f"--pretrained={tmp_path}", "--text=nope.txt"], "--text=nope.txt: no such file"),
                        ([f"--pretrained={tmp_path}", "--labels=a,b"], "2 names for 1"),
                        (["--pretrained=gtp2"], "unknown checkpoint 'gtp2'")]:
        with pytest.raises(SystemExit) as e:  # cli.fail: one line, no traceback
            analyze.main(args)
        assert str(e.value).startswith("error: ") and words in str(e.value), (args, str(e.value))
    capsys.readouterr()
    sample.main([f"--pretrained={tmp_path}", "--start=The keeper", "--num_samples=1", "--max_new_tokens=5"])
    assert capsys.readouterr().out.startswith("The keeper")
    with pytest.raises(SystemExit, match="unknown checkpoint 'gtp2'"):
        sample.main(["--pretrained=gtp2"])
    # a run and a published checkpoint mixed up: each named as what it is, with the option that takes it
    run = tmp_path / "run"
    for args, words in [([f"--out_dir={tmp_path}"], f"holds a published checkpoint (config.json), not a run; sample "
                                                    f"or measure it with --pretrained={tmp_path}"),
                        ([f"--pretrained={run / 'ckpt.pt'}"], "is a file: a published checkpoint is the folder"),
                        ([f"--pretrained={run}"], "holds train.py checkpoints, not a published one")]:
        with pytest.raises(SystemExit) as e:
            sample.main(args)
        assert str(e.value).startswith("error: ") and words in str(e.value), (args, str(e.value))
        run.mkdir(exist_ok=True)  # after the first case: beside config.json, a folder of runs is another message
        (run / "ckpt.pt").write_bytes(b"")


@pytest.mark.parametrize("config,words", [("{nope", "cannot be read as JSON"), ("[1, 2]", "holds a JSON list")])
def test_a_config_json_that_is_not_one_is_named(tmp_path, config, words):
    """A cut-short or foreign config.json: one line naming the file, never a traceback (main() prints it)."""
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(ValueError, match=words) as e:
        pretrained.locate(str(tmp_path))
    assert str(tmp_path / "config.json") in str(e.value)


@pytest.mark.parametrize("safe", [True, False])
def test_a_sharded_checkpoint_missing_a_shard_is_named(tmp_path, safe):
    """A download cut short between shards (or a cache holding some): the shard the index names and the folder lacks
    is named, not a weight 'its config.json implies'; with every shard there the model loads."""
    model = tiny_qwen3(tmp_path)
    (tmp_path / "model.safetensors").unlink()  # the unsharded copy tiny_qwen3 wrote
    quiet(model.save_pretrained, tmp_path, max_shard_size="20KB")
    if not safe:  # older checkpoints' layout: the same shards pickled, and their index
        from safetensors.torch import load_file
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        for f in tmp_path.glob("*.safetensors*"):
            if f.name.endswith(".safetensors"):
                torch.save(load_file(f), tmp_path / f.name.replace("model-", "pytorch_model-").replace(
                    ".safetensors", ".bin"))
            f.unlink()
        index["weight_map"] = {k: v.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
                               for k, v in index["weight_map"].items()}
        (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    shards = sorted(tmp_path.glob("*.safetensors" if safe else "pytorch_model-*.bin"))
    assert len(shards) > 2
    x = tokens(8)
    assert torch.allclose(pretrained.load_model(pretrained.locate(str(tmp_path)))(x)[0],
                          model(x).logits, atol=1e-4)
    shards[1].unlink()
    with pytest.raises(FileNotFoundError, match=f"lacks 1 of the {len(shards)} weight shards.*{shards[1].name}"):
        pretrained.load_model(pretrained.locate(str(tmp_path)))


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
def test_weights_that_cannot_be_read_are_named_without_unsafe_advice(tmp_path, name):
    """Random bytes where the weights should be (a download cut short): one line naming the file; never torch's
    advice to load with weights_only=False, which would run whatever code the file holds."""
    if name.endswith(".safetensors"):
        pytest.importorskip("safetensors")
    (tmp_path / name).write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError) as e:
        pretrained.read_weights(str(tmp_path))
    assert str(e.value).startswith(f"{tmp_path / name} is not a readable ") and "weights_only" not in str(e.value)


# ----------------------------------------------------------------------------
# What each line of pretrained.py decides, one property at a time

class NotATensor:  # an object a weights-only load refuses (a pickle that would run code when loaded)
    pass


def test_a_hub_id_is_asked_for_by_its_own_patterns_and_a_home_path_never_is(tmp_path, monkeypatch):
    """owner/name/a/b is the folder a/b of owner/name; a name of HUB at the repository's top asks for the files
    themselves (no leading /), and its folder is the snapshot's, without a trailing separator. A path under ~ that
    is not there is a missing folder, never a repository id to download."""
    import huggingface_hub
    tiny_gpt2(tmp_path / "snap")
    calls = []

    def snapshot_download(repo, allow_patterns, local_files_only=False):
        calls.append((repo, allow_patterns))
        return str(tmp_path / "snap") + os.sep
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    ckpt = pretrained.locate("gpt2")
    assert calls == [("openai-community/gpt2", ["config.json", "tokenizer.json"])]
    assert (ckpt.folder, ckpt.hub) == (str(tmp_path / "snap"), ("openai-community/gpt2", ""))
    calls.clear()
    with pytest.raises(FileNotFoundError, match="has no config.json"):  # the snapshot holds no a/b/config.json
        pretrained.locate("owner/name/a/b")
    assert calls == [("owner/name", ["a/b/config.json", "a/b/tokenizer.json"])]
    calls.clear()
    with pytest.raises(FileNotFoundError, match="no folder ~/nope/model"):
        pretrained.locate("~/nope/model")
    assert calls == []


def test_a_config_json_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "config.json").write_bytes(b'{"model_type": "gpt2\x80"}')
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        pretrained.locate(str(tmp_path))


def test_the_extras_a_checkpoint_needs_are_asked_for_before_its_weights(tmp_path, monkeypatch):
    """locate says which optional package is missing before load_model downloads gigabytes: safetensors for any
    checkpoint, tokenizers for a Qwen3 one only (GPT-2's BPE ships here)."""
    tiny_gpt2(tmp_path / "gpt2")
    tiny_qwen3(tmp_path / "qwen3")
    monkeypatch.setattr(pretrained, "read_weights", lambda folder: pytest.fail("read weights before the check"))
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert pretrained.locate(str(tmp_path / "gpt2")).family == "gpt2"
    with pytest.raises(ImportError, match="'tokenizers'.*pip install"):
        pretrained.locate(str(tmp_path / "qwen3"))
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(ImportError, match="'safetensors'.*pip install"):
        pretrained.locate(str(tmp_path / "gpt2"))


def test_a_hub_checkpoint_with_pickled_weights_only_fetches_them(tmp_path, monkeypatch):
    """A repository that holds pytorch_model.bin and no *.safetensors (older GPT-2 uploads): the snapshot of
    WEIGHTS' patterns comes back without weights, so PICKLED's are fetched, and the model loads."""
    import huggingface_hub
    ref = tiny_gpt2(tmp_path / "snap")
    torch.save(ref.state_dict(), tmp_path / "snap" / "pytorch_model.bin")
    os.remove(tmp_path / "snap" / "model.safetensors")
    calls = []

    def snapshot_download(repo, allow_patterns, local_files_only=False):  # the network at hand
        calls.append(allow_patterns)
        return str(tmp_path / "snap")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model = pretrained.load_model(pretrained.locate("gpt2"))
    assert calls[1:] == [list(pretrained.WEIGHTS), list(pretrained.PICKLED)]
    idx = tokens(16)
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], ref(idx).logits, rtol=1e-5, atol=1e-5)


def test_gpt2_configs_as_the_hub_writes_them_and_what_they_cannot_be():
    """The Hub's gpt2 config.json has no tie_word_embeddings (GPT-2 ties them; a Qwen3 config without it is untied,
    as transformers reads it), and n_inner, when set, is the MLP's
    width; attention scores not scaled, cross-attention and biased Qwen3 projections are refused with the reason."""
    gpt2 = dict(model_type="gpt2", n_positions=32, vocab_size=VOCAB, n_layer=1, n_head=2, n_embd=16)
    c = pretrained.map_config(gpt2)[1]
    assert (c.tie_embeddings, c.mlp_hidden, c.norm_eps) == (True, 64, 1e-5)
    c = pretrained.map_config({**gpt2, "n_inner": 24, "layer_norm_epsilon": 1e-3})[1]
    assert (c.mlp_hidden, c.norm_eps) == (24, 1e-3)
    c = pretrained.map_config(dict(model_type="qwen3", **{**QWEN3, "rms_norm_eps": 1e-4}))[1]
    assert (c.norm_eps, c.tie_embeddings) == (1e-4, False)  # Qwen3Config's default: untied
    for hub, words in [({**gpt2, "scale_attn_weights": False}, "not scaled"),
                       ({**gpt2, "add_cross_attention": True}, "cross-attention"),
                       (dict(model_type="qwen3", **QWEN3, qkv_bias=True), "biases")]:
        with pytest.raises(ValueError, match=words):
            pretrained.map_config(hub)


@pytest.mark.parametrize("old_format", [False, True])
def test_pickled_weights_that_hold_objects_are_refused_unloaded(tmp_path, old_format):
    """weights_only=True in both of read_weights' loads: a pytorch_model.bin holding an object (whose unpickling
    could run code) is refused in one line, in the zip format and in the one before it."""
    torch.save({"wte.weight": torch.zeros(2), "x": NotATensor()}, tmp_path / "pytorch_model.bin",
               _use_new_zipfile_serialization=not old_format)
    with pytest.raises(ValueError, match="holds more than tensors"):
        pretrained.read_weights(str(tmp_path))


@pytest.mark.parametrize("index", ["{}", "[1]", '{"weight_map": [1]}'])
def test_a_shard_index_without_a_weight_map_is_named(tmp_path, index):
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ValueError, match="is not a shard index"):
        pretrained.read_weights(str(tmp_path))


def test_old_checkpoints_buffers_and_tied_copies_are_dropped(tmp_path):
    """What older uploads keep beside the weights: GPT-2's masked_bias buffers and a tied lm_head's copy, Qwen's
    rotary inv_freq buffers. Each is dropped, not 'a weight this mapping does not use'."""
    ref = tiny_gpt2(tmp_path / "gpt2")
    w = {k.removeprefix("transformer."): v for k, v in ref.state_dict().items()}  # lm_head.weight: wte's copy
    w.update({f"h.{i}.attn.masked_bias": torch.tensor(-1e4) for i in range(2)})
    os.remove(tmp_path / "gpt2" / "model.safetensors")
    torch.save(w, tmp_path / "gpt2" / "pytorch_model.bin")
    idx = tokens(16)
    with torch.no_grad():
        torch.testing.assert_close(pretrained.load_model(pretrained.locate(str(tmp_path / "gpt2")))(idx)[0],
                                   ref(idx).logits, rtol=1e-5, atol=1e-5)
    ref = tiny_qwen3(tmp_path / "qwen3")
    w = {**ref.state_dict(), **{f"model.layers.{i}.self_attn.rotary_emb.inv_freq": torch.ones(8) for i in range(2)}}
    os.remove(tmp_path / "qwen3" / "model.safetensors")
    torch.save(w, tmp_path / "qwen3" / "pytorch_model.bin")
    with torch.no_grad():
        torch.testing.assert_close(pretrained.load_model(pretrained.locate(str(tmp_path / "qwen3")))(idx)[0],
                                   ref(idx).logits, rtol=1e-5, atol=1e-5)


def test_load_model_puts_the_weights_in_the_dtype_and_on_the_device_asked_for(tmp_path):
    ref = tiny_qwen3(tmp_path, tie_word_embeddings=True)
    model = pretrained.load_model(pretrained.locate(str(tmp_path)), dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert model.lm_head.weight is model.transformer.wte.weight
    idx = tokens(16)
    with torch.no_grad():
        logits = model(idx)[0]
    assert logits.dtype == torch.float64
    torch.testing.assert_close(logits, ref.double()(idx).logits, rtol=1e-5, atol=1e-5)
    model = pretrained.load_model(pretrained.locate(str(tmp_path)), device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_an_added_endoftext_token_is_in_the_tokenizers_vocabulary(tmp_path):
    """Qwen's tokenizer.json holds <|endoftext|> among its added tokens, past the BPE model's own vocabulary: n_vocab
    counts them, so the end-of-text id is one the sampler may pick and the vocab_size check sees."""
    from tokenizers import Tokenizer
    tiny_qwen3(tmp_path)
    tiny_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok.add_special_tokens(["<|im_start|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    enc = pretrained.load_tokenizer(pretrained.locate(str(tmp_path)))
    assert enc.n_vocab == 281 and enc.encode("<|im_start|>") == [280] and enc.eot_token < enc.n_vocab


@pytest.mark.parametrize("content", ["[1, 2]", '{"model": [1]}'])
def test_a_gpt2_folders_tokenizer_json_that_is_not_one_is_named(tmp_path, content):
    tiny_gpt2(tmp_path, vocab_size=50257)
    (tmp_path / "tokenizer.json").write_text(content)
    with pytest.raises(ValueError, match="cannot be read as a tokenizer.json"):
        pretrained.load_tokenizer(pretrained.locate(str(tmp_path)))


class CharIds:
    """A stand-in tokenizer: one id per character, so that a text's token count is its length."""
    def encode(self, text, allowed_special=()):
        return [ord(ch) % 7 for ch in text]


def test_text_windows_at_the_edge_of_a_whole_window():
    """n windows of `window` tokens need n * (window + 1) tokens of text, or n * window with a bos id (0 is one)."""
    enc = CharIds()
    assert len(pretrained.text_windows(enc, "x" * 34, 16, 5)) == 2
    assert len(pretrained.text_windows(enc, "x" * 33, 16, 5)) == 1
    anchored = pretrained.text_windows(enc, "x" * 32, 16, 5, bos=0)
    assert len(anchored) == 2 and anchored[0][0][0, 0] == 0 and anchored[0][0].shape == (1, 16)
    with pytest.raises(ValueError, match="the text has 16 tokens, fewer than one window of 17"):
        pretrained.text_windows(enc, "x" * 16, 16, 5)


def test_text_windows_read_an_endoftext_written_in_the_text_as_one_token():
    enc = get_tokenizer("gpt2")
    (x, y), = pretrained.text_windows(enc, "a<|endoftext|>b c d", 3, 1)
    assert x[0].tolist() == [64, 50256, 65] and y[0].tolist() == [50256, 65, 269]


def test_sample_reads_a_published_model_without_an_added_endoftext(tmp_path, capsys):
    """Neither GPT-2 nor Qwen3 trained with a BOS token at each window's start: a prompt longer than the model's
    48 positions is read as its last 48 tokens, no <|endoftext|> put first."""
    tiny_gpt2(tmp_path, vocab_size=50257)
    capsys.readouterr()
    sample.main([f"--pretrained={tmp_path}", "--start=" + " ".join(["The keeper"] * 30), "--num_samples=1", "--max_new_tokens=1"])
    assert capsys.readouterr().out.startswith("note: the prompt is 60 tokens, more than the model's block_size, 48: it "
                                              "reads the last 48\nThe keeper The keeper")


def test_sample_says_a_missing_package_or_network_in_one_line(tmp_path, monkeypatch):
    import huggingface_hub

    def snapshot_download(repo, allow_patterns, local_files_only=False):  # no network, nothing cached
        raise OSError("no network")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(SystemExit, match=r"^error: cannot get 'gpt2': downloading openai-community/gpt2 .*no copy"):
        sample.main(["--pretrained=gpt2"])
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(SystemExit, match=r"^error: published checkpoints need the optional package 'huggingface_hub'"):
        sample.main(["--pretrained=gpt2"])


@pytest.mark.parametrize("family", ["gpt2", "qwen3"])
def test_a_tied_config_with_an_lm_head_unlike_the_embedding_is_refused(tmp_path, family):
    """config.json says tied, but the weights hold an lm_head.weight of their own: which one the model computed with
    is not known (transformers 5 keeps the stored one), so it is refused, naming the checkpoint; an equal copy loads."""
    ref = (tiny_gpt2 if family == "gpt2" else tiny_qwen3)(tmp_path, tie_word_embeddings=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "tie_word_embeddings": True}))
    with pytest.raises(ValueError, match="lm_head.weight that differs") as e:
        pretrained.load_model(pretrained.locate(str(tmp_path)))
    assert str(tmp_path) in str(e.value)


@pytest.mark.parametrize("change", [{"hidden_size": None, "head_dim": None}, {"num_attention_heads": "4"},
                                    {"rope_theta": "big"}])
def test_a_config_value_of_the_wrong_type_is_one_line_naming_the_file(tmp_path, change):
    tiny_qwen3(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(ValueError, match="a value this mapping cannot use") as e:
        pretrained.locate(str(tmp_path))
    assert str(path) in str(e.value)
