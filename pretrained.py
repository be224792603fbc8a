"""
Published checkpoints as model.py GPTs, to measure the attention sink and massive activations where they are
known to exist: GPT-2, and the models the gated-attention paper's authors released, trained alike but for the gate.

    import pretrained
    ckpt = pretrained.locate("gpt2")      # a name of HUB, a local folder or a hub repository id: where it is, what it is
    model, enc = pretrained.load_model(ckpt), pretrained.load_tokenizer(ckpt)   # a model.py GPT in eval mode

No transformers at run time: a checkpoint's config.json is read into a GPTConfig (every difference from the
published architecture is a GPTConfig flag: learned positions, LayerNorm with biases and GPT-2's tanh GELU;
RoPE, RMSNorm, SwiGLU, GQA, QK-norm, a head_dim of its own, untied embeddings), and its weights are renamed and
reshaped into model.py's. A config or weight this mapping does not understand stops it with a ValueError that
says what; nothing is guessed. The optional extras (requirements-extra.txt): huggingface_hub (download),
safetensors (weights) and, for the Qwen-based models, tokenizers. GPT-2's BPE ships with this repository.

The gated-attention models (github.com/qiuzh20/gated_attention, modeling_qwen3.py) widen q_proj: per KV-head
group, its G query heads' rows (G * head_dim) and then their gate rows (G * head_dim elementwise, G headwise),
and the attention output is multiplied by sigmoid of those logits before o_proj: GA's G1 gate. Here the gate
rows go to the end of c_attn, as the project's own G1 models hold them (model.py), so the probe reads their
gate scores like any run's.
"""

import glob
import json
import os
from dataclasses import dataclass

import torch

from model import GPT, GPTConfig

# name -> (hub repository, folder in it, what it is). The gated models (GA, arXiv 2505.06708; their README at
# github.com/qiuzh20/gated_attention) follow Qwen3's architecture and differ only in the gate; the release does not
# say which of the paper's runs they are (its dense models: 1.7B parameters, 3.5T tokens).
HUB = {
    "gpt2": ("openai-community/gpt2", "", "GPT-2 small (124M parameters), OpenAI 2019, trained on WebText"),
    "gpt2-medium": ("openai-community/gpt2-medium", "", "GPT-2 medium (350M), WebText"),
    "gpt2-large": ("openai-community/gpt2-large", "", "GPT-2 large (774M), WebText"),
    "gpt2-xl": ("openai-community/gpt2-xl", "", "GPT-2 XL (1.5B), WebText"),
    "gated-1b-baseline": ("QwQZh/gated_attention", "1B_baseline",
                          "GA's released '1B' dense baseline (Qwen3 architecture, no gate)"),
    "gated-1b-headwise": ("QwQZh/gated_attention", "1B_gate_headwise",
                          "GA's released '1B' dense model with the G1 headwise sigmoid gate"),
    "gated-1b-elementwise": ("QwQZh/gated_attention", "1B_gate_elementwise",
                             "GA's released '1B' dense model with the G1 elementwise sigmoid gate"),
}
EXTRAS = "pip install huggingface_hub safetensors tokenizers  (or: pip install -r requirements-extra.txt)"
DESCRIPTION = ("config.json", "tokenizer.json")  # fetched by locate: small
WEIGHTS = ("*.safetensors", "*.safetensors.index.json")  # fetched by load_model: large
PICKLED = ("pytorch_model*.bin", "pytorch_model.bin.index.json")  # older checkpoints' weights, when no safetensors


@dataclass
class Checkpoint:
    """A published checkpoint found on this machine: its folder, its family and its model.py config."""
    name: str  # as the user named it
    folder: str
    family: str  # "gpt2" or "qwen3"
    config: GPTConfig
    about: str = ""  # HUB's line, or where it came from
    bos: bool = False  # whether it was trained with a BOS token at each window's start (neither family was)
    hub: tuple = None  # (repository, folder in it) when it comes from the hub: load_model fetches its weights


def require(module):
    """Import an optional extra, or say which one is missing and how to install it."""
    try:
        return __import__(module)
    except ImportError as e:
        raise ImportError(f"published checkpoints need the optional package {module!r}, which is not installed: "
                          f"{EXTRAS}") from e


# ----------------------------------------------------------------------------
# Where a checkpoint is: a local folder, a name of HUB, or a hub repository id (owner/name[/folder])

def locate(name_or_path):
    """The Checkpoint for a name of HUB, a local folder holding config.json and weights, or a hub repository
    id "owner/name" (optionally "/folder" in it). Downloads what is not in the local Hugging Face cache."""
    hub = None
    if os.path.isdir(name_or_path):
        folder, about = name_or_path, f"local folder {name_or_path}"
    elif name_or_path in HUB:
        repo, sub, about = HUB[name_or_path]
        hub = (repo, sub)
    elif "/" in name_or_path and not name_or_path.startswith((".", "/", "~")) \
            and not os.path.isdir(name_or_path.split("/")[0]):  # results/nope is a path that is not there
        owner, repo, *sub = name_or_path.split("/")
        hub, about = (f"{owner}/{repo}", "/".join(sub)), f"hub repository {name_or_path}"
    elif os.path.isfile(name_or_path):
        raise FileNotFoundError(f"{name_or_path} is a file: a published checkpoint is the folder that holds its "
                                "config.json and weights (a train.py checkpoint is named as a run: sample.py "
                                "--out_dir=FOLDER --checkpoint=FILE, lab.analyze --runs=FOLDER)")
    elif "/" in name_or_path:
        raise FileNotFoundError(f"no folder {name_or_path}: a checkpoint's folder holds config.json and its weights")
    else:
        raise ValueError(f"unknown checkpoint {name_or_path!r}: use one of {sorted(HUB)}, a folder with config.json "
                         "and *.safetensors, or a hub repository id such as Qwen/Qwen3-0.6B")
    if hub:
        folder = download(name_or_path, *hub, DESCRIPTION)
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path) and glob.glob(os.path.join(glob.escape(folder), "*.pt")):
        raise FileNotFoundError(f"{folder} holds train.py checkpoints, not a published one: name it as a run "
                                "(sample.py --out_dir=..., lab.analyze --runs=...)")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{folder} has no config.json: it is not a published checkpoint's folder (for a "
                                "download, the repository's layout may have changed: pass the folder that holds it)")
    try:
        with open(path, encoding="utf-8") as f:
            hub_config = json.load(f)
    except ValueError as e:  # not JSON, or not UTF-8
        raise ValueError(f"{path} cannot be read as JSON ({e}): the download was cut short or the file is not a "
                         "config.json; download it again") from None
    if not isinstance(hub_config, dict):
        raise ValueError(f"{path} holds a JSON {type(hub_config).__name__}, not a config.json's object")
    try:
        family, config = map_config(hub_config, where=path)
    except KeyError as e:
        raise ValueError(f"{path} has no {e.args[0]!r}, which a {hub_config.get('model_type')} config needs") from None
    except (TypeError, ValueError) as e:  # a value of the wrong type or out of range (GPTConfig's own checks)
        if str(e).startswith(path):  # map_config's refusals name the file already
            raise
        raise ValueError(f"{path}: a value this mapping cannot use ({e}); is it a published checkpoint's "
                         "config.json as the hub has it?") from None
    require("safetensors")  # what reading it will need, said before gigabytes of weights are downloaded
    if family != "gpt2":
        require("tokenizers")
    return Checkpoint(name_or_path, folder, family, config, about, hub=hub)


def download(name, repo, sub, files):
    """The local folder of repo/sub's files that match `files`: from the Hugging Face cache when they are there,
    else downloaded into it (HF_HOME decides where it is). Weights (WEIGHTS) fall back to PICKLED ones."""
    hub = require("huggingface_hub")

    def snapshot(files, failed=None):  # failed: the download's error already met (a second try would wait as long)
        patterns = [f"{sub}/{p}" if sub else p for p in files]
        try:
            if failed is not None:
                raise failed
            return hub.snapshot_download(repo, allow_patterns=patterns)
        except Exception as e:  # no network, a hub that is down, a repository that moved: the cache may still have it
            try:  # (a cached snapshot of the repository may hold other files of it only: it counts if it has these)
                cached = hub.snapshot_download(repo, allow_patterns=patterns, local_files_only=True)
            except Exception:
                cached = None
            if cached and any(glob.glob(os.path.join(cached, p)) for p in patterns):
                return cached
            raise RuntimeError(f"cannot get {name!r}: downloading {repo} from the Hugging Face Hub failed "
                               f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}) and the local "
                               "cache has no copy. Run this once on a machine with network access (the files stay "
                               f"in {hub.constants.HF_HUB_CACHE}), or download the folder yourself and pass its "
                               "path") from e

    failed = None
    try:
        folder = os.path.join(snapshot(files), sub)
    except RuntimeError as e:
        if files != WEIGHTS:
            raise
        folder, failed = None, e.__cause__  # the hub unreachable: older checkpoints' pickled weights, from the cache
    if files == WEIGHTS and (folder is None or not glob.glob(os.path.join(folder, "*.safetensors"))):
        folder = os.path.join(snapshot(PICKLED, failed), sub)  # none to be had: older checkpoints' pickled weights
    return folder.rstrip(os.sep)


# ----------------------------------------------------------------------------
# config.json -> GPTConfig

def map_config(hub, where="config.json"):
    """(family, GPTConfig) for a GPT-2 or Qwen3 (gated or not) config.json; a ValueError for anything else, or for
    a setting model.py does not compute the same way."""
    kind = hub.get("model_type")

    def refuse(what):
        raise ValueError(f"{where}: {what}; model.py cannot compute this checkpoint as it was trained, so it is "
                         "not loaded")

    if kind == "gpt2":
        act = hub.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
            refuse(f"activation_function={act!r} (GPT-2's is gelu_new)")
        if not hub.get("scale_attn_weights", True) or hub.get("scale_attn_by_inverse_layer_idx", False):
            refuse("attention scores not scaled by 1/sqrt(head_dim) alone")
        if hub.get("add_cross_attention", False):
            refuse("cross-attention layers")
        return "gpt2", GPTConfig(
            block_size=hub["n_positions"], vocab_size=hub["vocab_size"], n_layer=hub["n_layer"],
            n_head=hub["n_head"], n_embd=hub["n_embd"], bias=True, pos_emb="learned", norm="layernorm",
            norm_eps=hub.get("layer_norm_epsilon", 1e-5), mlp="gelu" if act == "gelu" else "gelu_tanh",
            mlp_hidden=hub.get("n_inner") or 4 * hub["n_embd"], gate="none",
            tie_embeddings=hub.get("tie_word_embeddings", True))
    if kind == "qwen3":
        headwise, elementwise = hub.get("headwise_attn_output_gate", False), hub.get("elementwise_attn_output_gate", False)
        if headwise and elementwise:
            refuse("both headwise_attn_output_gate and elementwise_attn_output_gate are set (modeling_qwen3.py "
                   "would use the headwise one)")
        if hub.get("hidden_act", "silu") != "silu":
            refuse(f"hidden_act={hub['hidden_act']!r} (SwiGLU needs silu)")
        if hub.get("use_sliding_window") or any(t != "full_attention" for t in hub.get("layer_types") or []):
            refuse("sliding-window attention layers")
        if hub.get("attention_bias") or hub.get("qkv_bias"):
            refuse("biases in the attention projections")
        rope = hub.get("rope_parameters") or {}  # transformers >= 5 writes rope_theta there
        for scaling in (hub.get("rope_scaling") or {}, rope):
            if scaling.get("rope_type", scaling.get("type", "default")) != "default":
                refuse(f"RoPE scaling {scaling}")
        n_head = hub["num_attention_heads"]  # a key left out: Qwen3Config's default (transformers', the release's)
        gate = dict(gate="g1", gate_granularity="headwise" if headwise else "elementwise") \
            if headwise or elementwise else dict(gate="none")
        return "qwen3", GPTConfig(
            block_size=hub.get("max_position_embeddings", 32768), vocab_size=hub["vocab_size"],
            n_layer=hub["num_hidden_layers"], n_head=n_head, n_kv_head=hub.get("num_key_value_heads", 32) or n_head,
            n_embd=hub["hidden_size"], head_dim=hub.get("head_dim", 128), bias=False,  # 32 and 128 there, not H, C // H
            pos_emb="rope", rope_base=float(hub.get("rope_theta", rope.get("rope_theta", 10000.0))),
            norm="rmsnorm", norm_eps=hub.get("rms_norm_eps", 1e-6), qk_norm=hub.get("use_qk_norm", True),
            mlp="swiglu", mlp_hidden=hub["intermediate_size"],
            tie_embeddings=hub.get("tie_word_embeddings", False), **gate)
    raise ValueError(f"{where}: model_type={kind!r} is not one this project maps (gpt2, qwen3)")


# ----------------------------------------------------------------------------
# weights -> model.py's state dict

def read_weights(folder):
    """Every tensor of the folder's *.safetensors files (a sharded checkpoint has several), or of its
    pytorch_model*.bin files when it has none, read with torch.load(weights_only=True): tensors, never code."""
    weights = {}
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    for index in glob.glob(os.path.join(folder, "*.safetensors.index.json" if files else "pytorch_model*.index.json")):
        _check_shards(folder, index)
    if files:
        require("safetensors")
        from safetensors.torch import load_file
        for path in files:
            try:
                weights.update(load_file(path))
            except Exception as e:  # safetensors' own error types: a header cut short, bytes that are not one
                raise ValueError(f"{path} is not a readable safetensors file ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''}): the download was cut short or the "
                                 "file is corrupt; download it again") from None
        return weights
    files = sorted(glob.glob(os.path.join(folder, "pytorch_model*.bin")))
    if not files:
        raise FileNotFoundError(f"{folder} has no weights (*.safetensors or pytorch_model*.bin)")
    for path in files:
        try:
            try:
                weights.update(torch.load(path, map_location="cpu", weights_only=True, mmap=True))
            except RuntimeError:  # a file in the format before PyTorch 1.6 cannot be memory-mapped
                weights.update(torch.load(path, map_location="cpu", weights_only=True))
        except Exception:  # never torch's advice to load with weights_only=False: that runs the file's code
            raise ValueError(f"{path} is not a readable PyTorch weights file (tensors only): the download was cut "
                             "short, the file is corrupt, or it holds more than tensors; download it again") from None
    return weights


def _check_shards(folder, path):
    """A sharded checkpoint's index (path) names its shard files: all of them must be here (a download cut short, or
    a cache that holds some, would otherwise show up as weights its config implies but lacks)."""
    try:
        with open(path, encoding="utf-8") as f:
            shards = set(json.load(f)["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{path} is not a shard index (JSON with a weight_map): the download was cut short or the "
                         "file is corrupt; download it again") from None
    missing = sorted(str(f) for f in shards if not os.path.isfile(os.path.join(folder, str(f))))
    if missing:
        raise FileNotFoundError(f"{folder} lacks {len(missing)} of the {len(shards)} weight shards "
                                f"{os.path.basename(path)} names, e.g. {missing[0]}: the download was cut short; "
                                "download it again (where the network is at hand) or pass a folder with every shard")


def gpt2_state_dict(w, c):
    """GPT-2's names -> model.py's. Its Conv1D layers hold W transposed (in, out); nn.Linear holds (out, in)."""
    w = {k.removeprefix("transformer."): v for k, v in w.items()
         if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # the causal-mask buffers of old checkpoints
    sd = {"transformer.wte.weight": w.pop("wte.weight"), "transformer.wpe.weight": w.pop("wpe.weight"),
          "transformer.ln_f.weight": w.pop("ln_f.weight"), "transformer.ln_f.bias": w.pop("ln_f.bias")}
    for i in range(c.n_layer):
        for name in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            weight = w.pop(f"h.{i}.{name}.weight")
            sd[f"transformer.h.{i}.{name}.weight"] = weight if name.startswith("ln") else weight.t()
            sd[f"transformer.h.{i}.{name}.bias"] = w.pop(f"h.{i}.{name}.bias")
    sd["lm_head.weight"] = lm_head(w, sd["transformer.wte.weight"], c)
    return sd, w


def lm_head(w, wte, c):
    """The output matrix: the token embedding's own when config.json ties them (a copy some checkpoints store as well
    is dropped, but one that differs from the embedding is refused: which matrix the model computed with is unknown),
    else the checkpoint's lm_head.weight."""
    if not c.tie_embeddings:
        return w.pop("lm_head.weight")
    copy = w.pop("lm_head.weight", None)
    if copy is not None and not torch.equal(copy, wte):
        raise ValueError("config.json ties the output layer to the token embedding (tie_word_embeddings), but the "
                         "weights hold an lm_head.weight that differs from it: the model was not trained tied "
                         "(set tie_word_embeddings to false in config.json if it was trained untied)")
    return wte


def qwen3_state_dict(w, c):
    """Qwen3's names -> model.py's: q, k, v and the gate rows in one c_attn, SwiGLU's up and gate in one c_fc."""
    w = {k.removeprefix("model."): v for k, v in w.items()}
    H, Hkv, D = c.n_head, c.n_kv_head, c.head_dim
    width = c.gate_logits_width() // H  # gate logits per head: D elementwise, 1 headwise, 0 without a gate
    sd = {"transformer.wte.weight": w.pop("embed_tokens.weight"), "transformer.ln_f.weight": w.pop("norm.weight")}
    for i in range(c.n_layer):
        a, h = f"layers.{i}.self_attn.", f"transformer.h.{i}."
        q = w.pop(a + "q_proj.weight")
        if q.shape[0] != H * (D + width):
            raise ValueError(f"layer {i}: q_proj has {q.shape[0]} rows, but config.json's heads and gate flags give "
                             f"{H} heads x ({D} query + {width} gate) = {H * (D + width)}")
        # modeling_qwen3.py: q_proj's rows per KV head: its G query heads' rows, then their G gate rows
        G, C = H // Hkv, q.shape[1]
        q, g = q.view(Hkv, G * (D + width), C).split([G * D, G * width], dim=1)
        sd[h + "attn.c_attn.weight"] = torch.cat([q.reshape(H * D, C), w.pop(a + "k_proj.weight"),
                                                  w.pop(a + "v_proj.weight"), g.reshape(H * width, C)])
        sd[h + "attn.c_proj.weight"] = w.pop(a + "o_proj.weight")
        if c.qk_norm:
            sd[h + "attn.q_norm.weight"], sd[h + "attn.k_norm.weight"] = w.pop(a + "q_norm.weight"), w.pop(a + "k_norm.weight")
        m = f"layers.{i}.mlp."
        sd[h + "mlp.c_fc.weight"] = torch.cat([w.pop(m + "up_proj.weight"), w.pop(m + "gate_proj.weight")])  # value, gate
        sd[h + "mlp.c_proj.weight"] = w.pop(m + "down_proj.weight")
        sd[h + "ln_1.weight"] = w.pop(f"layers.{i}.input_layernorm.weight")
        sd[h + "ln_2.weight"] = w.pop(f"layers.{i}.post_attention_layernorm.weight")
    w = {k: v for k, v in w.items() if not k.endswith("rotary_emb.inv_freq")}  # a buffer some checkpoints keep
    sd["lm_head.weight"] = lm_head(w, sd["transformer.wte.weight"], c)
    return sd, w


def load_model(ckpt, device="cpu", dtype=torch.float32):
    """The checkpoint's weights in a model.py GPT (eval mode), checked name by name and shape by shape."""
    c = ckpt.config
    folder = download(ckpt.name, *ckpt.hub, WEIGHTS) if ckpt.hub else ckpt.folder
    weights = read_weights(folder)
    try:
        sd, left = (gpt2_state_dict if ckpt.family == "gpt2" else qwen3_state_dict)(weights, c)
    except KeyError as e:
        raise ValueError(f"{ckpt.folder}: the weights lack {e.args[0]!r}, which its config.json implies") from None
    except ValueError as e:  # a q_proj of the wrong height, an lm_head that is not the tied copy: name the checkpoint
        raise ValueError(f"{ckpt.folder}: {e}") from None
    if left:
        raise ValueError(f"{ckpt.folder}: {len(left)} weights this mapping does not use, e.g. {sorted(left)[:3]}: "
                         "its architecture is not the one config.json describes to model.py")
    with torch.device("meta"):  # the shapes this config implies, with no memory and no random init
        expected = GPT(c).state_dict()
    wrong = [f"{k}: {tuple(v.shape)} in the checkpoint, {tuple(expected[k].shape)} here"
             for k, v in sd.items() if tuple(v.shape) != tuple(expected[k].shape)]
    if wrong or set(sd) != set(expected):
        raise ValueError(f"{ckpt.folder}: the weights do not fit its config.json: " +
                         "; ".join(wrong[:3] + [f"missing {k}" for k in sorted(set(expected) - set(sd))][:3]))
    del weights  # from here on sd alone holds each tensor, and lets go of it once it is converted
    if c.tie_embeddings:
        del sd["lm_head.weight"]  # wte's tensor under a second name: converted once, below
    state = {k: sd.pop(k).to(dtype) for k in list(sd)}
    if c.tie_embeddings:
        state["lm_head.weight"] = state["transformer.wte.weight"]
    return GPT.with_weights(c, state).to(device)


# ----------------------------------------------------------------------------
# tokenizers

GPT2_VOCAB = 50257


class HubTokenizer:
    """A tokenizer.json (the `tokenizers` package) with the tiktoken methods this project calls."""

    def __init__(self, path):
        tokenizers = require("tokenizers")
        try:
            self.tok = tokenizers.Tokenizer.from_file(path)
        except Exception as e:  # the tokenizers package raises a bare Exception: not JSON, not UTF-8, not its format
            raise ValueError(f"{path} cannot be read as a tokenizer.json ({e}): the download was cut short or the "
                             "file is not one; download it again") from None
        self.eot_token = self.tok.token_to_id("<|endoftext|>")
        self.n_vocab = self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text, allowed_special=()):  # special tokens written in the text are encoded as such
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)


def load_tokenizer(ckpt):
    """GPT-2's BPE (shipped with this repository) for a GPT-2 checkpoint with GPT-2's vocabulary (its folder's
    tokenizer.json, where it has one, holds GPT-2's tokens), else the checkpoint's tokenizer.json; a ValueError when
    the tokenizer has ids the model has no embedding for."""
    path = os.path.join(ckpt.folder, "tokenizer.json")
    if ckpt.family == "gpt2" and ckpt.config.vocab_size >= GPT2_VOCAB and \
            (not os.path.isfile(path) or holds_gpt2_vocab(path)):
        from data.shards import get_tokenizer
        enc = get_tokenizer("gpt2")
    else:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{ckpt.folder} has no tokenizer.json, which its tokenizer is read from (a "
                                    f"{ckpt.family} checkpoint with {ckpt.config.vocab_size} tokens)")
        enc = HubTokenizer(path)
    if enc.n_vocab > ckpt.config.vocab_size:
        raise ValueError(f"{ckpt.folder}: its tokenizer has {enc.n_vocab} tokens, more than the model's vocab_size "
                         f"{ckpt.config.vocab_size}: they do not belong together")
    return enc


def holds_gpt2_vocab(path):
    """Whether a tokenizer.json holds GPT-2's tokens (a GPT-2-shaped model may have been trained on another BPE)."""
    from data.shards import GPT2_ENCODER
    try:
        with open(path, encoding="utf-8") as f, open(GPT2_ENCODER, encoding="utf-8") as g:
            return (json.load(f).get("model") or {}).get("vocab") == json.load(g)
    except (OSError, ValueError, AttributeError):  # unreadable, or not a tokenizer.json: the tokenizers package says
        return False


# ----------------------------------------------------------------------------
# The text they are measured on

SAMPLE_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sample_text.txt")


def text_windows(enc, text, window, n, bos=None):
    """Up to n windows cut one after another from the text, as (x, y) batches of one window each: x holds `window`
    tokens, y the same shifted by one. With a bos id each x starts with it, followed by window - 1 tokens of text,
    as data.shards.TokenWindows anchors train.py's windows. A ValueError when the text holds no whole window."""
    ids = enc.encode(text, allowed_special={"<|endoftext|>"})  # a separator written in the text is one
    length = window + 1 - (bos is not None)  # tokens of text per window, its last one only a target
    count = min(n, len(ids) // length)
    if count < 1:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than one window of {length}; give a longer text "
                         "or a smaller window")
    rows = torch.tensor(ids[:count * length], dtype=torch.long).view(count, 1, length)
    if bos is not None:
        rows = torch.cat([torch.full((count, 1, 1), bos, dtype=torch.long), rows], dim=2)
    return [(r[:, :-1], r[:, 1:]) for r in rows]


# What the literature reports of these models, beside lab/analyze.py's table (the GA numbers are lab/variants.py's rows)
LITERATURE = {
    "gpt2": "Sun et al. 2024 (Massive Activations in Large Language Models, arXiv 2402.17762) find GPT-2's massive "
            "activations on the starting token alone, in a few fixed channels; they call an activation massive when it "
            "exceeds 100 and is about 1000x the median magnitude of its hidden state (M-Act / median here). Xiao et al. 2024 (StreamingLLM, arXiv 2309.17453) show the "
            "initial tokens drawing a large share of attention in most layers of LLMs. Neither gives GPT-2 an "
            "F-Attn number to compare with.",
    "qwen3": "GA Table 4 measured F-Attn, M-Act and the mean gate score on its own 15B-parameter MoE (2B active, "
             "400B tokens), not on the released '1B' dense models this table measures, for which the paper gives "
             "no such numbers: the trend (the gate removes the sink and the massive activations) is "
             "what to compare, not the values.",
}
