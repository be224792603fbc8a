"""Tests of the shard format, the loaders and the prepare scripts (CPU, a few seconds)."""

import importlib
import json
import os
import socket
import subprocess
import sys
import sysconfig
import types

import numpy as np
import pytest
import torch

import data.shards
from data.shards import (DATA_ROOT, GPT2_ENCODER, HEADER_BYTES, MAGIC, PREPARE_LOCK, ShardWriter, TokenWindows,
    TrainLoader, atomic_write, bos_token, check_prepare_folder, dataset_fingerprint, encode_document, find_shards,
    get_tokenizer, load_gpt2, max_token_id, read_header, read_meta, read_shard, repo_folder_files, scan_max_token,
    val_batches, val_windows_apart, write_dataset, write_meta, write_shard)
from data.textdir.prepare import path_hash, prepare as prepare_textdir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
STDLIB = sysconfig.get_paths()["stdlib"]
MIXED_TEXT = "naïve café — 日本語 🙂 \t tabs\r\n  and\x00 control\x7f bytes\u00ad\u00a0!\n\n\n   \n"


def load_script(name):
    """data/<name>/prepare.py as a module."""
    return importlib.import_module(f"data.{name}.prepare")


def hand_written_shard(path, tokens, magic=MAGIC, version=1):
    """An llm.c-style shard made with numpy alone, not with our writer."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


# ----------------------------------------------------------------------------
# the format

@pytest.mark.parametrize("tokens", [[0, 1, 50256, 65535, 7], []])  # a shard of no tokens is a header alone
def test_shard_round_trip(tmp_path, tokens):
    tokens = np.array(tokens, dtype=np.int64)
    path = tmp_path / "x_train_000000.bin"
    write_shard(path, tokens)
    assert os.path.getsize(path) == HEADER_BYTES + 2 * len(tokens)
    assert read_header(path) == len(tokens)
    assert read_shard(path).tolist() == tokens.tolist()
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[:3].tolist() == [MAGIC, 1, len(tokens)] and not header[3:].any()
    assert [p.name for p in tmp_path.iterdir()] == ["x_train_000000.bin"]  # no temp file left behind


def test_reads_a_shard_written_by_hand(tmp_path):
    tokens = np.arange(1000) % 50257
    hand_written_shard(tmp_path / "fineweb_val_000000.bin", tokens)
    assert read_shard(tmp_path / "fineweb_val_000000.bin").tolist() == tokens.tolist()
    write_meta(tmp_path, "fineweb", source="llm.c")  # what data/fineweb/prepare.py does after checking them
    x, y = val_batches(tmp_path, block_size=10, batch_size=2, n_batches=1)[0]
    assert x.shape == y.shape == (2, 10) and x.dtype == torch.int64
    assert (x[:, 1:] == y[:, :-1]).all()


def test_refuses_ids_over_uint16(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        write_shard(tmp_path / "x.bin", [1, 70000])
    with pytest.raises(ValueError, match="uint16"):
        ShardWriter(tmp_path, "x", "train", 10).add([-1])


def test_bad_magic_and_version(tmp_path):
    hand_written_shard(tmp_path / "a.bin", [1, 2, 3], magic=12345)
    with pytest.raises(ValueError, match="not a token shard: magic number 12345, expected 20240520"):
        read_shard(tmp_path / "a.bin")
    hand_written_shard(tmp_path / "b.bin", [1, 2, 3], version=2)
    with pytest.raises(ValueError, match="version 2"):
        read_shard(tmp_path / "b.bin")


def test_truncated_files(tmp_path):
    path = tmp_path / "t.bin"
    hand_written_shard(path, np.arange(100))
    with open(path, "r+b") as f:
        f.truncate(HEADER_BYTES + 150)  # the last 25 tokens are missing
    with pytest.raises(ValueError, match=r"truncated: its header says 100 tokens .* has 1174 bytes.*again"):
        read_shard(path)
    hand_written_shard(path, np.arange(100))
    with open(path, "ab") as f:
        f.write(b"\0\0")  # one token more than its header says
    with pytest.raises(ValueError, match=r"corrupt \(longer than its header says\): .*100 tokens \(1224 bytes\).*1226"):
        read_shard(path)
    with open(path, "r+b") as f:
        f.truncate(100)  # not even a header
    with pytest.raises(ValueError, match="truncated: 100 bytes, shorter than the 1024-byte header"):
        read_header(path)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def broken(f):
        f.write(b"half of the new conte")
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, broken)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_shard_writer_splits_and_numbers(tmp_path):
    docs = [np.arange(n) for n in (7, 0, 12, 5)]
    writer = ShardWriter(tmp_path, "ds", "train", shard_tokens=10)
    for d in docs:
        writer.add(d)
    paths = writer.close()
    assert [os.path.basename(p) for p in paths] == [f"ds_train_00000{i}.bin" for i in range(3)]
    assert [read_header(p) for p in paths] == [10, 10, 4]
    assert np.concatenate([read_shard(p) for p in paths]).tolist() == np.concatenate(docs).tolist()


def test_a_folder_whose_name_looks_like_a_glob_pattern_is_read(tmp_path):
    folder = tmp_path / "data [v2]*?"
    write_dataset(folder, "d", {"train": [np.arange(30)], "val": [np.arange(10)]}, source="test", shard_tokens=20)
    assert [os.path.basename(p) for p in find_shards(folder, "train")] == ["d_train_000000.bin", "d_train_000001.bin"]


@pytest.mark.parametrize("name", ["wiki_train_small", "notes_val_", "a_val_1_train"])
def test_a_shards_split_is_the_last_in_its_name(tmp_path, name):
    """A dataset whose name holds _train_ or _val_ keeps its splits apart: wiki_train_small_val_000000.bin is
    validation data, though it matches *_train_*.bin (which once counted it as training data too)."""
    write_dataset(str(tmp_path), name, {"train": [np.arange(30)], "val": [np.arange(100, 110)]}, source="test",
                  shard_tokens=20)
    paths = find_shards(str(tmp_path), "train"), find_shards(str(tmp_path), "val")
    assert [[os.path.basename(p) for p in split] for split in paths] == \
        [[f"{name}_train_000000.bin", f"{name}_train_000001.bin"], [f"{name}_val_000000.bin"]]
    meta = read_meta(str(tmp_path))
    assert (meta["train_tokens"], meta["val_tokens"]) == (30, 10)
    assert np.concatenate([read_shard(p) for p in paths[1]]).tolist() == list(range(100, 110))


# ----------------------------------------------------------------------------
# the loaders

@pytest.fixture
def two_shards(tmp_path):
    """Train shards whose tokens tell where they came from: shard 0 holds 0..99, shard 1 holds 1000..1049."""
    write_shard(tmp_path / "d_train_000000.bin", np.arange(100))
    write_shard(tmp_path / "d_train_000001.bin", np.arange(1000, 1050))
    write_shard(tmp_path / "d_val_000000.bin", np.arange(2000, 2300))
    write_meta(tmp_path, "d", source="test")
    return tmp_path


def test_windows_are_contiguous_and_never_span_shards(two_shards):
    windows = TokenWindows(two_shards, "train", length=9)
    assert len(windows) == (100 - 8) + (50 - 8)
    x, y = windows.batch(np.arange(len(windows)))
    rows = torch.cat([x, y[:, -1:]], dim=1)
    assert (rows[:, 1:] - rows[:, :-1] == 1).all()  # consecutive tokens of one shard, none crossing over
    assert rows[0, 0] == 0 and rows[91, -1] == 99 and rows[92, 0] == 1000 and rows[-1, -1] == 1049
    longer = TokenWindows(two_shards, "train", length=60)  # longer than shard 1: its windows all lie in shard 0
    assert len(longer) == 100 - 59 and longer.batch([40])[1][0, -1] == 99


def test_train_loader_is_seeded_and_resumable(two_shards):
    a = TrainLoader(two_shards, block_size=8, batch_size=4, seed=1)
    first = [a.next_batch()[0] for _ in range(3)]
    state = a.state_dict()
    after = [a.next_batch()[0] for _ in range(3)]
    b, again = TrainLoader(two_shards, block_size=8, batch_size=4, seed=1), []
    for _ in range(3):
        b.state_dict()  # saving a checkpoint draws nothing
        again.append(b.next_batch()[0])
    assert all(torch.equal(u, v) for u, v in zip(first, again))
    c = TrainLoader(two_shards, block_size=8, batch_size=4, seed=999)
    c.load_state_dict(state)
    assert all(torch.equal(u, v) for u, v in zip(after, [c.next_batch()[0] for _ in range(3)]))
    assert not torch.equal(first[0], TrainLoader(two_shards, 8, 4, seed=2).next_batch()[0])


def test_train_windows_are_uniform_draws_over_every_window(two_shards):
    """Each batch is batch_size * world_size independent uniform draws of a window number from the seeded generator,
    the last window included: over many steps every window is trained on."""
    loader = TrainLoader(two_shards, block_size=8, batch_size=64, seed=5)
    reference, drawn = torch.Generator().manual_seed(5), set()
    for _ in range(20):
        x, y = loader.next_batch()
        picks = torch.randint(len(loader.windows), (64,), generator=reference)
        expected = loader.windows.batch(picks.numpy())
        assert torch.equal(x, expected[0]) and torch.equal(y, expected[1])
        drawn.update(picks.tolist())
    assert drawn == set(range(len(loader.windows)))


@pytest.mark.parametrize("bos", [7, 0])
def test_bos_windows_start_with_the_bos_token_then_text(two_shards, bos):
    """bos: every window is the BOS token then length - 1 consecutive tokens of one shard, y = x shifted by one, for
    the training loader and the validation windows alike (a token id of 0 too)."""
    windows = TokenWindows(two_shards, "train", length=9, bos=bos)
    assert len(windows) == (100 - 7) + (50 - 7)  # 8 tokens of text a window
    x, y = windows.batch(np.arange(len(windows)))
    assert x.shape == y.shape == (len(windows), 8) and (x[:, 0] == bos).all() and torch.equal(x[:, 1:], y[:, :-1])
    text = torch.cat([x[:, 1:], y[:, -1:]], dim=1)
    assert (text[:, 1:] - text[:, :-1] == 1).all()
    assert text[0, 0] == 0 and text[92, -1] == 99 and text[93, 0] == 1000 and text[-1, -1] == 1049
    x, y = TrainLoader(two_shards, block_size=8, batch_size=4, seed=0, bos=bos).next_batch()
    assert x.shape == (4, 8) and (x[:, 0] == bos).all() and torch.equal(x[:, 1:], y[:, :-1])
    batches = val_batches(two_shards, block_size=8, batch_size=4, n_batches=3, bos=bos)
    assert all((x[:, 0] == bos).all() and torch.equal(x[:, 1:], y[:, :-1]) for x, y in batches)
    assert torch.cat([x[:, 1] for x, _ in batches]).tolist() == [2000 + k * 293 // 12 for k in range(12)]


@pytest.mark.parametrize("bos", [None, 7])
@pytest.mark.parametrize("block_size", [8, 30])
def test_val_windows_apart_is_the_most_that_do_not_overlap(two_shards, bos, block_size):
    """val_windows_apart windows of val_batches overlap nowhere; one more, and two of them share tokens."""
    most = val_windows_apart(two_shards, block_size, bos)
    text = block_size + 1 - (bos is not None)  # tokens of text a window
    for count, apart in ((most, True), (most + 1, False)):
        said = []  # train.py's note, where the windows asked for are more than those apart
        (x, _), = val_batches(two_shards, block_size, batch_size=count, n_batches=1, bos=bos, say=said.append)
        starts = x[:, 0 if bos is None else 1]
        assert bool((starts[1:] - starts[:-1] >= text).all()) == apart, (count, starts.tolist())
        assert said == ([] if apart else [f"note: batch_size x eval_iters = {count} validation windows, but the val "
                                          f"split holds {most} apart (data.shards.val_windows_apart): the val loss "
                                          "may be over overlapping (or repeated) windows; fewer eval_iters or a "
                                          "larger val split keeps them apart"])


def test_ranks_split_one_global_batch(two_shards):
    single = TrainLoader(two_shards, block_size=8, batch_size=6, seed=3)
    ranks = [TrainLoader(two_shards, block_size=8, batch_size=3, seed=3, rank=r, world_size=2) for r in (0, 1)]
    for _ in range(3):
        whole = single.next_batch()[0]
        parts = [loader.next_batch()[0] for loader in ranks]
        assert torch.equal(torch.cat(parts), whole)  # different windows on each rank, the same data overall


def test_val_batches_are_fixed_and_spread_out(two_shards):
    a = val_batches(two_shards, block_size=8, batch_size=4, n_batches=3)
    torch.manual_seed(0)  # no randomness involved: a different global seed changes nothing
    b = val_batches(two_shards, block_size=8, batch_size=4, n_batches=3)
    assert len(a) == 3 and all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))
    starts = torch.cat([x[:, 0] for x, _ in a]).tolist()
    assert starts == [2000 + k * 292 // 12 for k in range(12)]  # evenly over the 292 valid starts
    with pytest.raises(ValueError, match="block_size"):
        val_batches(two_shards, block_size=400, batch_size=1, n_batches=1)
    with pytest.raises(FileNotFoundError, match="no val shards"):
        val_batches(two_shards / "nothing", 8, 1, 1)


@pytest.mark.parametrize("split, index, most", [("val", 0, 4096), ("val", 299, 256), ("val", 172, 256),
                                                ("train", 99, 1100)])
def test_the_fingerprint_notices_a_token_changed_in_the_first_or_last_bytes_of_a_shard(two_shards, monkeypatch, split,
                                                                                       index, most):
    """dataset_fingerprint hashes the first and the last `most` bytes (FINGERPRINT_BYTES) of each shard: a token
    changed in either changes its split's fingerprint and not the other's; the same tokens written again change
    nothing. Shard sizes: train 0 1224 bytes (tail after the first 1100), val 1624 (its last 256 from token 172)."""
    monkeypatch.setattr(data.shards, "FINGERPRINT_BYTES", most)
    before = dataset_fingerprint(two_shards)
    path = find_shards(two_shards, split)[0]
    write_shard(path, np.array(read_shard(path)))
    assert dataset_fingerprint(two_shards) == before
    tokens = np.memmap(path, dtype=np.uint16, mode="r+", offset=HEADER_BYTES)
    tokens[index] = 7
    tokens.flush()
    del tokens
    after = dataset_fingerprint(two_shards)
    other = "train" if split == "val" else "val"
    assert after[split] != before[split] and after[other] == before[other]


# ----------------------------------------------------------------------------
# preparation

def make_text_folder(root):
    files = {
        "a.txt": "alpha beta gamma\n" * 3,
        "b.txt": "def f(x):\n    return x + 1\n",
        "sub/c.txt": "ünïcode text ✓\n",
        "sub/deeper/d.txt": "the quick brown fox\n",
        "sub/copy_of_a.txt": "alpha beta gamma\n" * 3,  # a duplicate: kept once
        "e.md": "# a heading\n",
        "f.txt": "last file\n",
        "g.txt": "windows\r\nline ends\r\n",  # kept as they are
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))  # not UTF-8: skipped
    (root / "notes.log").write_text("not a wanted extension")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.txt").write_text("in a hidden folder")
    return files


def documents(data_dir, split, eot):
    """The documents of a split, cut at <|endoftext|> (which starts each one)."""
    tokens = np.concatenate([read_shard(p) for p in find_shards(data_dir, split)]).tolist()
    docs, current = [], None
    for t in tokens:
        if t == eot:
            current = []
            docs.append(current)
        else:
            current.append(t)
    return docs


def test_an_unknown_tokenizer_is_one_line():
    """A meta.json naming a tokenizer no one knows (edited, or of a newer version): tiktoken's message spans lines
    (the plugins it found); ours is one, with the names there are."""
    with pytest.raises(ValueError) as error:
        get_tokenizer("nonesuch")
    assert "\n" not in str(error.value) and str(error.value).startswith("tokenizer 'nonesuch' is neither 'gpt2'")
    assert "cl100k_base" in str(error.value)


def test_textdir_prepare(tmp_path, capsys):
    src = tmp_path / "src"
    files = make_text_folder(src)
    enc = get_tokenizer()
    meta = prepare_textdir(str(src), str(tmp_path / "out"), "demo", exts=(".txt", ".md"), val_fraction=0.3,
                           shard_tokens=16, workers=2)
    assert "\nnot UTF-8, so not read: latin1.txt\n" in capsys.readouterr().out  # named, to convert if it was meant
    # the command that makes it again, which checkpoints keep: the marker's, kept in the complete meta.json
    assert meta["prepare"] == f"python data/textdir/prepare.py --src {src} --name demo --out_dir {tmp_path / 'out'}"

    kept = sorted(set(files) - {"sub/copy_of_a.txt"})
    val_files = sorted(f for f in kept if path_hash(f) < 0.3) or [min(kept, key=path_hash)]
    train_files = sorted(set(kept) - set(val_files))
    assert val_files and train_files
    for split, names in (("train", train_files), ("val", val_files)):
        # whole files, in sorted order, each once: the split is by file
        assert documents(tmp_path / "out", split, enc.eot_token) == [enc.encode_ordinary(files[f]) for f in names]
        assert meta[f"{split}_files"] == len(names)
        assert meta[f"{split}_tokens"] == sum(len(enc.encode_ordinary(files[f])) + 1 for f in names)
    assert len(find_shards(tmp_path / "out", "train")) > 1  # 16-token shards
    assert meta["duplicates_skipped"] == 1 and meta["not_utf8_skipped"] == 1
    on_disk = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert on_disk == meta and on_disk["tokenizer"] == "gpt2" and on_disk["vocab_size"] == 50257

    # deterministic: a second run writes the same bytes
    prepare_textdir(str(src), str(tmp_path / "again"), "demo", exts=(".txt", ".md"), val_fraction=0.3,
                    shard_tokens=16, workers=1)
    for name in os.listdir(tmp_path / "out"):
        if name == "meta.json":  # the same, but for the command that prepares each folder
            first, again = (json.loads((tmp_path / out / name).read_text()) for out in ("out", "again"))
            assert {**first, "prepare": None} == {**again, "prepare": None} and first["prepare"] != again["prepare"]
        else:
            assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()


def test_textdir_prepare_replaces_an_earlier_preparation(tmp_path):
    make_text_folder(tmp_path / "src")
    prepare_textdir(str(tmp_path / "src"), str(tmp_path / "out"), "demo", shard_tokens=8, workers=1)
    many = len(find_shards(tmp_path / "out", "train"))
    prepare_textdir(str(tmp_path / "src"), str(tmp_path / "out"), "demo", shard_tokens=10_000, workers=1)
    assert many > 1 and len(find_shards(tmp_path / "out", "train")) == 1  # no left-over shards mixed in


def test_textdir_cli_errors(tmp_path):
    script = load_script("textdir")
    (tmp_path / "one.txt").write_text("only one file")
    with pytest.raises(SystemExit, match="need at least 2"):
        script.main(["--src", str(tmp_path), "--out_dir", str(tmp_path / "out")])
    (tmp_path / "two.txt").write_text("a second file")
    with pytest.raises(SystemExit, match=r"found 1 distinct .* among the first 1 \(--max_files\); need at least 2"):
        script.main(["--src", str(tmp_path), "--out_dir", str(tmp_path / "out"), "--max_files", "1"])
    (tmp_path / "two.txt").write_bytes("caf\u00e9 in latin-1".encode("latin-1"))  # the second file is not UTF-8: why
    with pytest.raises(SystemExit, match=r"found 1 distinct UTF-8 .* \(1 not UTF-8, e.g. two.txt: convert them, e.g. "
                                         r"iconv -f latin1 -t utf-8\); need at least 2"):
        script.main(["--src", str(tmp_path), "--out_dir", str(tmp_path / "out")])
    (tmp_path / "two.txt").write_text("a second file")
    with pytest.raises(SystemExit, match="is not a folder"):
        script.main(["--src", str(tmp_path / "missing"), "--out_dir", str(tmp_path / "out")])
    # a folder named as one of the repo's datasets (~/fineweb): its shards would replace data/fineweb's
    (tmp_path / "fineweb").mkdir()
    with pytest.raises(SystemExit, match=r"^error: 'fineweb' is the name of this repo's folder data/fineweb/, .*--name"):
        script.main(["--src", str(tmp_path / "fineweb"), "--out_dir", str(tmp_path / "out")])
    (tmp_path / "gpt2_bpe").mkdir()  # data/gpt2_bpe holds the tokenizer: no advice to move its files away
    with pytest.raises(SystemExit, match=r"^error: 'gpt2_bpe' is the name of this repo's folder data/gpt2_bpe/, .*--name"):
        script.main(["--src", str(tmp_path / "gpt2_bpe"), "--out_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_pystdlib_prepare(tmp_path):
    import sysconfig
    meta = load_script("pystdlib").prepare(out_dir=str(tmp_path), max_files=40, workers=2)
    assert "standard library" in meta["source"] and meta["max_files"] == 40
    assert meta["train_files"] + meta["val_files"] + meta["duplicates_skipped"] + meta["not_utf8_skipped"] == 40
    # the split is by file: which 40 files come first, and so how many tokens each split gets, is the Python's own
    # (3.13's first 40 put 13% of the tokens in its one validation file)
    assert meta["train_files"] > meta["val_files"] >= 1 and meta["train_tokens"] > meta["val_tokens"] > 0
    enc = get_tokenizer()
    docs = documents(tmp_path, "train", enc.eot_token) + documents(tmp_path, "val", enc.eot_token)
    stdlib = sysconfig.get_paths()["stdlib"]
    first = sorted(f for f in os.listdir(stdlib) if f.endswith(".py"))[0]  # e.g. __future__.py
    with open(os.path.join(stdlib, first), encoding="utf-8") as f:
        assert enc.encode_ordinary(f.read()) in docs


def test_write_dataset_and_meta(tmp_path):
    """The path the OpenWebText script takes after its download: token arrays -> shards + meta.json."""
    owt = load_script("openwebtext")
    texts = {"train": ["first document", "second one", "a third"], "val": ["held out"]}
    tokenized = {split: owt.tokenize_batch({"text": t})["ids"] for split, t in texts.items()}
    enc = get_tokenizer()
    assert tokenized["val"][0].tolist() == [enc.eot_token] + enc.encode_ordinary("held out")
    meta = write_dataset(tmp_path, "openwebtext", tokenized, source="test", shard_tokens=5)
    assert meta["train_tokens"] == sum(len(t) for t in tokenized["train"])
    assert documents(tmp_path, "val", enc.eot_token) == [enc.encode_ordinary("held out")]
    assert meta["train_shards"][0] == "openwebtext_train_000000.bin" and len(meta["train_shards"]) > 1


REAL_UNREACHABLE = load_script("fineweb").unreachable


@pytest.fixture(autouse=True)
def _the_hub_is_found(monkeypatch):
    """The tests that stand in for the hub (fake_hub) stand in for the network too: data/fineweb/prepare.py's check
    that the hub's host can be found is left out here, but in the test of that check."""
    monkeypatch.setattr(load_script("fineweb"), "unreachable", lambda: None)


def test_an_offline_machine_is_one_line_at_once_and_the_folder_is_left_as_it_was(tmp_path, monkeypatch):
    """With no network, huggingface_hub retried for half a minute, printing a line a try, then blamed the connection
    in its own words: the host's name is looked up first, and its failure is one line of what to do instead."""
    fineweb = load_script("fineweb")
    monkeypatch.setattr(fineweb, "unreachable", REAL_UNREACHABLE)
    for var in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)

    def no_dns(host, port):
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(fineweb.socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(fineweb, "fetch", lambda name, folder: pytest.fail("fetched with no network"))
    with pytest.raises(SystemExit) as stop:
        fineweb.main(["--shards", "1", "--out_dir", str(tmp_path / "fineweb")])
    assert str(stop.value) == (
        "error: cannot download fineweb_val_000000.bin: huggingface.co cannot be found (Name or service not known): "
        f"no network here? FineWeb needs the network; on a machine without one, copy the shards into "
        f"{tmp_path / 'fineweb'} and run this again, or train on data/pystdlib or data/textdir")
    assert not (tmp_path / "fineweb").exists()  # the folders it made for the download are gone (before: .cache/)
    (tmp_path / "fineweb" / "notes").mkdir(parents=True)  # a folder that was there stays, as it was
    with pytest.raises(SystemExit):
        fineweb.main(["--shards", "1", "--out_dir", str(tmp_path / "fineweb")])
    assert os.listdir(tmp_path / "fineweb") == ["notes"]
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # a proxy finds the host itself: not asked
    assert fineweb.unreachable() is None
    monkeypatch.delenv("HTTPS_PROXY")
    hosts = []
    monkeypatch.setattr(fineweb.socket, "getaddrinfo", lambda host, port: hosts.append(host))
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example")  # a mirror: its host is the one looked up
    assert fineweb.unreachable() is None and hosts == ["hf-mirror.example"]


def fake_hub(fail_after=None):
    """Stands in for data/fineweb/prepare.py's fetch from the hub: llm.c-format shards, as the real ones are (shard i
    of shard_names holds 100 + i tokens), into the folder it is given; fail_after=n: the fetches after the first n
    raise the OSError of a network that is gone."""
    fetched = []

    def fetch(name, folder):
        if fail_after is not None and len(fetched) >= fail_after:
            raise OSError("[Errno -3] Temporary failure in name resolution (huggingface.co)")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        index = load_script("fineweb").shard_names(103).index(name)
        hand_written_shard(path, np.arange(100 + index))
        fetched.append(name)
        return path
    return fetch


def test_fineweb_prepare_without_the_network(tmp_path, monkeypatch):
    fineweb = load_script("fineweb")
    assert fineweb.shard_names(2) == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    monkeypatch.setattr(fineweb, "fetch", fake_hub())
    fineweb.main(["--shards", "2", "--out_dir", str(tmp_path)])
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert (meta["train_tokens"], meta["val_tokens"]) == (101 + 102, 100)
    assert meta["train_shards"] == ["fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert TrainLoader(tmp_path, block_size=50, batch_size=2, seed=0).next_batch()[0].shape == (2, 50)

    with pytest.raises(SystemExit, match="between 1 and 103"):
        fineweb.main(["--shards", "0", "--out_dir", str(tmp_path)])
    # fewer shards than the folder holds: the others would be read too, so the command refuses and deletes nothing
    before = sorted(os.listdir(tmp_path)), (tmp_path / "meta.json").read_bytes()
    with pytest.raises(SystemExit):
        fineweb.main(["--shards", "1", "--out_dir", str(tmp_path)])
    assert (sorted(os.listdir(tmp_path)), (tmp_path / "meta.json").read_bytes()) == before


def test_fineweb_takes_1_to_103_shards(tmp_path, monkeypatch):
    """The hub holds 103 train shards: --shards 103 is all of them, 104 is refused with one line before anything."""
    fineweb = load_script("fineweb")
    assert fineweb.shard_names(103)[-1] == "fineweb_train_000103.bin" and len(fineweb.shard_names(103)) == 104
    asked = []
    monkeypatch.setattr(fineweb, "prepare", lambda out_dir, shards: asked.append(shards))
    fineweb.main(["--shards", "103", "--out_dir", str(tmp_path)])
    assert asked == [103]
    with pytest.raises(SystemExit, match=r"^error: --shards must be between 1 and 103, got 104$"):
        fineweb.main(["--shards", "104", "--out_dir", str(tmp_path)])
    assert asked == [103]


def test_fineweb_downloads_again_a_shard_cut_short(tmp_path, monkeypatch):
    """A shard in the folder that is not whole (a download or copy cut short, shorter than its header says or than a
    header) is fetched again and replaced; a whole one is kept."""
    fineweb = load_script("fineweb")
    hub, fetched = fake_hub(), []
    monkeypatch.setattr(fineweb, "fetch", lambda name, folder: fetched.append(name) or hub(name, folder))
    hand_written_shard(tmp_path / "fineweb_val_000000.bin", np.arange(100))  # whole: kept
    hand_written_shard(tmp_path / "fineweb_train_000001.bin", np.arange(101))
    with open(tmp_path / "fineweb_train_000001.bin", "r+b") as f:
        f.truncate(HEADER_BYTES + 50)  # its header says 101 tokens
    (tmp_path / "fineweb_train_000002.bin").write_bytes(b"\0" * 10)  # not even a header
    fineweb.main(["--shards", "2", "--out_dir", str(tmp_path)])
    assert fetched == ["fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    meta = read_meta(tmp_path)
    assert (meta["complete"], meta["train_tokens"], meta["val_tokens"]) == (True, 101 + 102, 100)


def test_a_fineweb_download_that_fails_leaves_a_complete_dataset_usable(tmp_path, monkeypatch):
    """--shards 2 over a complete 1-shard folder, without the network: the download fails before any shard arrived,
    and the folder is as it was, still a dataset training reads (it was marked unfinished first, and refused with
    advice that needs the network). Once a new shard has arrived, a failure leaves it marked unfinished."""
    fineweb = load_script("fineweb")
    monkeypatch.setattr(fineweb, "fetch", fake_hub())
    fineweb.main(["--shards", "1", "--out_dir", str(tmp_path)])
    files = {name: (tmp_path / name).read_bytes() for name in sorted(os.listdir(tmp_path)) if name != ".cache"}
    assert set(files) == {"meta.json", "fineweb_val_000000.bin", "fineweb_train_000001.bin"}

    monkeypatch.setattr(fineweb, "fetch", fake_hub(fail_after=0))  # no network
    with pytest.raises(SystemExit, match=r"^error: .*Temporary failure in name resolution"):
        fineweb.main(["--shards", "2", "--out_dir", str(tmp_path)])
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name != ".cache"} == files
    assert [os.path.basename(p) for p in find_shards(tmp_path, "train")] == ["fineweb_train_000001.bin"]
    assert TrainLoader(tmp_path, block_size=50, batch_size=2, seed=0).next_batch()[0].shape == (2, 50)

    monkeypatch.setattr(fineweb, "fetch", fake_hub(fail_after=1))  # train 2 arrives, then the network goes
    with pytest.raises(SystemExit, match=r"^error: .*Temporary failure in name resolution"):
        fineweb.main(["--shards", "3", "--out_dir", str(tmp_path)])
    assert (tmp_path / "fineweb_train_000002.bin").exists() and not (tmp_path / "fineweb_train_000003.bin").exists()
    with pytest.raises(ValueError, match=r"did not finish.*python data/fineweb/prepare.py --shards 3 --out_dir"):
        find_shards(tmp_path, "train")
    monkeypatch.setattr(fineweb, "fetch", fake_hub())  # the network is back: the same command finishes it
    fineweb.main(["--shards", "3", "--out_dir", str(tmp_path)])
    assert read_meta(tmp_path)["train_shards"] == [f"fineweb_train_00000{i}.bin" for i in (1, 2, 3)]
    # nothing left to fetch: the temporary file of a killed meta.json write goes all the same
    (tmp_path / ".meta.json.a1b2.tmp").write_text("{")
    monkeypatch.setattr(fineweb, "fetch", fake_hub(fail_after=0))
    fineweb.main(["--shards", "3", "--out_dir", str(tmp_path)])
    assert not (tmp_path / ".meta.json.a1b2.tmp").exists() and read_meta(tmp_path)["complete"] is True


def test_fineweb_meta_names_the_command_that_made_it_even_where_nothing_was_fetched(tmp_path, monkeypatch):
    """meta.json's command is the one that made the folder as it is (a checkpoint keeps it, and a run whose data
    changed is told it): --shards 2 after the third shard of a --shards 3 was deleted, as the refusal says, names
    --shards 2, not the command before; shards copied in by hand get the command that checked them."""
    fineweb = load_script("fineweb")
    monkeypatch.setattr(fineweb, "fetch", fake_hub())
    fineweb.main(["--shards", "3", "--out_dir", str(tmp_path / "a")])
    os.remove(tmp_path / "a" / "fineweb_train_000003.bin")
    monkeypatch.setattr(fineweb, "fetch", lambda name, folder: pytest.fail(f"fetched {name}: it is there"))
    fineweb.main(["--shards", "2", "--out_dir", str(tmp_path / "a")])
    meta = read_meta(tmp_path / "a")
    assert meta["train_shards"] == ["fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert meta["prepare"].endswith(f"prepare.py --shards 2 --out_dir {tmp_path / 'a'}"), meta["prepare"]
    (tmp_path / "b").mkdir()
    for i, name in enumerate(fineweb.shard_names(1)):  # copied in by hand, as a machine without the network does
        hand_written_shard(tmp_path / "b" / name, np.arange(100 + i))
    fineweb.main(["--shards", "1", "--out_dir", str(tmp_path / "b")])
    assert read_meta(tmp_path / "b")["prepare"].endswith(f"prepare.py --shards 1 --out_dir {tmp_path / 'b'}")


def test_a_fineweb_shard_that_arrived_but_did_not_move_in_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """Ctrl-C the moment a shard's download is whole, before it moved in (and before the folder was marked
    unfinished): the complete dataset there is as it was, and training still reads it."""
    fineweb = load_script("fineweb")
    hub = fake_hub()
    monkeypatch.setattr(fineweb, "fetch", hub)
    fineweb.main(["--shards", "1", "--out_dir", str(tmp_path)])
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name != ".cache"}

    def whole_then_ctrl_c(name, folder):
        hub(name, folder)
        raise KeyboardInterrupt
    monkeypatch.setattr(fineweb, "fetch", whole_then_ctrl_c)
    with pytest.raises(SystemExit):
        fineweb.main(["--shards", "2", "--out_dir", str(tmp_path)])
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name != ".cache"} == before
    assert [os.path.basename(p) for p in find_shards(tmp_path, "train")] == ["fineweb_train_000001.bin"]


@pytest.mark.parametrize("name, package", [("fineweb", "huggingface_hub"), ("openwebtext", "datasets")])
def test_missing_optional_dependency_names_the_pip_command(tmp_path, monkeypatch, name, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail, installed or not
    with pytest.raises(SystemExit, match=f"pip install {package}"):
        load_script(name).main(["--out_dir", str(tmp_path)])


# ----------------------------------------------------------------------------
# the GPT-2 tokenizer shipped in data/gpt2_bpe

def test_gpt2_tokenizer_known_ids():
    enc = get_tokenizer()
    assert enc is get_tokenizer("gpt2")  # built once per process
    assert enc.encode("Hello world") == [15496, 995]
    assert (enc.eot_token, enc.n_vocab) == (50256, 50257)
    assert enc.encode("<|endoftext|>", allowed_special="all") == [50256]
    # GPT-2's single-byte tokens: printable bytes first, in byte order, then the others (NUL, ..., space, ...)
    assert [enc.encode_single_token(bytes([b])) for b in (ord("!"), 0xFF, 0, ord(" "), 0xAD)] == [0, 187, 188, 220, 255]
    with open(os.path.join(STDLIB, "textwrap.py"), encoding="utf-8", newline="") as f:
        text = f.read()
    for t in (text, MIXED_TEXT):
        assert enc.decode(enc.encode_ordinary(t)) == t


def test_gpt2_pre_tokenizer_is_gpt2s():
    """GPT-2's pre-tokenizer, checked without GPT-2's downloaded files: our encoding gives the tokens of an encoding
    with the same BPE and the pattern tiktoken ships for GPT-2 (contractions, numbers, runs of spaces and new lines)."""
    import tiktoken
    r50k_pat_str = getattr(importlib.import_module("tiktoken_ext.openai_public"), "r50k_pat_str", None)
    if r50k_pat_str is None:  # an older tiktoken writes the pattern inside gpt2(), which downloads the BPE
        pytest.skip("this tiktoken has no r50k_pat_str to compare with")
    ours = get_tokenizer()
    reference = tiktoken.Encoding(name="reference", pat_str=r50k_pat_str, mergeable_ranks=ours._mergeable_ranks,
                                  special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    texts = ["it's they'll we've I'm you'd they're don't IT'S", "x = 1234567 +  3.14e-5\n\n\n    y=-2\t\t z  \n",
             MIXED_TEXT]
    with open(os.path.join(STDLIB, "textwrap.py"), encoding="utf-8", newline="") as f:
        texts.append(f.read())
    for text in texts:
        assert ours.encode_ordinary(text) == reference.encode_ordinary(text), text[:40]


def test_a_document_is_the_eot_token_then_its_text_even_if_it_holds_the_eot_string():
    """<|endoftext|> written in a document (a tokenizer's source, a web page about GPT-2) is text, not a delimiter."""
    enc = get_tokenizer()
    text = "a <|endoftext|> b"
    tokens = encode_document(enc, text).tolist()
    assert tokens == [50256] + enc.encode_ordinary(text) and tokens.count(50256) == 1


def test_a_symbol_tokenizer_has_n_symbols_and_its_bos_token():
    enc = get_tokenizer("symbols-4")
    assert (enc.n_vocab, enc.eot_token) == (5, 4)
    assert enc.encode("s0 s3 <|endoftext|>", allowed_special={"<|endoftext|>"}) == [0, 3, 4]
    with pytest.raises(ValueError, match="'s4' is not a token of symbols-4: write s0 ... s3"):
        enc.encode("s3 s4")  # id 4 is the BOS token, not a symbol


def test_gpt2_tokenizer_matches_tiktokens(monkeypatch):
    """The same tokens as tiktoken's own GPT-2 encoding, when its downloaded files are at hand: in the folder
    GPT2_TIKTOKEN_CACHE names (a tiktoken cache that holds GPT-2's files, e.g. one made on a machine online)."""
    cache = os.environ.get("GPT2_TIKTOKEN_CACHE", "")
    if not os.path.isdir(cache):
        pytest.skip("set GPT2_TIKTOKEN_CACHE to a tiktoken cache folder holding GPT-2's files, to compare with them")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", os.path.abspath(cache))
    import tiktoken
    theirs, ours = tiktoken.get_encoding("gpt2"), get_tokenizer()
    assert ours.n_vocab == theirs.n_vocab
    assert all(ours.decode_single_token_bytes(i) == theirs.decode_single_token_bytes(i) for i in range(ours.n_vocab))
    for rel in ("textwrap.py", "json/decoder.py", "html/entities.py", "locale.py"):
        with open(os.path.join(STDLIB, rel), encoding="utf-8", newline="") as f:
            text = f.read()
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), rel
    assert ours.encode_ordinary(MIXED_TEXT) == theirs.encode_ordinary(MIXED_TEXT)


def test_gpt2_tokenizer_needs_no_network(tmp_path):
    """With an empty tiktoken cache and every download bound to fail, GPT-2 still loads (and writes no
    cache); another tiktoken encoding fails with a message saying what to download."""
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update(TIKTOKEN_CACHE_DIR=str(tmp_path), HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9")
    code = ("from data.shards import get_tokenizer\n"
            "print(get_tokenizer().encode_ordinary('x'))\n"
            "try:\n"
            "    get_tokenizer('r50k_base')\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "[87]"
    assert "r50k_base.tiktoken" in lines[1] and "needs internet once" in lines[1]
    assert os.listdir(tmp_path) == []


def test_gpt2_encoder_file_is_checked(tmp_path):
    changed = bytearray(open(GPT2_ENCODER, "rb").read())
    changed[100:101] = b"7" if changed[100:101] != b"7" else b"8"
    (tmp_path / "encoder.json").write_bytes(changed)
    with pytest.raises(ValueError, match=r"encoder.json is not GPT-2's encoder.json \(sha256 .*changed or is corrupt"):
        load_gpt2(str(tmp_path / "encoder.json"))
    with pytest.raises(FileNotFoundError, match="missing"):
        load_gpt2(str(tmp_path / "gone.json"))


# ----------------------------------------------------------------------------
# settings and meta.json

def test_shard_tokens_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="shard_tokens must be at least 1.*got 0"):
        ShardWriter(tmp_path, "x", "train", shard_tokens=0)
    with pytest.raises(ValueError, match="shard_tokens must be at least 1.*got -5"):
        write_dataset(tmp_path / "out", "x", {"train": []}, source="test", shard_tokens=-5)
    with pytest.raises(ValueError, match=r"below 2\*\*31 .*int32\), got 2147483648"):  # said before hours of work
        write_dataset(tmp_path / "out", "x", {"train": []}, source="test", shard_tokens=2**31)
    assert not (tmp_path / "out").exists()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "one.txt").write_text("one file: too few to prepare, but the setting is checked first")
    with pytest.raises(SystemExit, match="^error: shard_tokens must be at least 1"):
        load_script("textdir").main(["--src", str(tmp_path / "src"), "--out_dir", str(tmp_path / "out"),
                                     "--shard_tokens", "0"])


@pytest.mark.parametrize("val_fraction", [0, 1, -0.1, 1.5, float("nan")])
def test_val_fraction_must_lie_between_0_and_1(tmp_path, val_fraction):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "one.txt").write_text("one file: too few to prepare, but the setting is checked first")
    with pytest.raises(ValueError, match="val_fraction must lie strictly between 0 and 1"):
        prepare_textdir(str(tmp_path / "src"), str(tmp_path / "out"), "demo", val_fraction=val_fraction)
    with pytest.raises(SystemExit, match="^error: val_fraction must lie strictly between 0 and 1"):
        load_script("textdir").main(["--src", str(tmp_path / "src"), "--out_dir", str(tmp_path / "out"),
                                     "--val_fraction", str(val_fraction)])
    assert not (tmp_path / "out").exists()


def offline_openwebtext(monkeypatch, docs=None, asked=None):
    """data/openwebtext/prepare.py with the download replaced by docs (asked collects load_splits' arguments) and
    datasets' tokenizing map by the same tokenizer run in this process."""
    owt = load_script("openwebtext")
    docs = docs or {"train": ["one page", "two pages", "three"], "val": ["held out"]}
    monkeypatch.setattr(owt, "load_splits", lambda *args: (asked.append(args) if asked is not None else None) or docs)
    monkeypatch.setattr(owt, "tokenized_documents", lambda ds, num_proc: owt.tokenize_batch({"text": ds})["ids"])
    return owt


def test_openwebtext_records_what_it_downloaded_and_warns_of_a_partial_corpus(tmp_path, monkeypatch):
    """meta.json says which hub dataset and revision the shards came from and how many documents it gave; a default
    dataset with fewer documents than OpenWebText's (the hub's partial Parquet copy of a large dataset) is said."""
    owt = offline_openwebtext(monkeypatch)
    owt.main(["--out_dir", str(tmp_path / "out"), "--hf_revision", "refs/convert/parquet", "--num_proc", "1"])
    meta = read_meta(str(tmp_path / "out"))
    assert (meta["hf_name"], meta["hf_revision"], meta["hf_documents"]) == \
        ("Skylion007/openwebtext", "refs/convert/parquet", 4)
    assert owt.check_documents("Skylion007/openwebtext", owt.DOCUMENTS) is None
    assert owt.check_documents("someone/else", 12) is None  # another dataset: its own count
    said = owt.check_documents("Skylion007/openwebtext", 1_234_567)
    assert said.startswith("warning: Skylion007/openwebtext gave 1,234,567 documents, not its 8,013,769: this is "
                           "part of the corpus"), said


def test_openwebtext_passes_on_its_settings_and_records_them(tmp_path, monkeypatch):
    """--val_fraction and --hf_name reach the download; meta.json records the split (fraction and seed) and the
    command that prepares the same dataset again, with the options given."""
    asked = []
    owt = offline_openwebtext(monkeypatch, {"train": ["one", "two"], "val": ["held out"]}, asked)
    out = tmp_path / "out"
    owt.main(["--out_dir", str(out), "--num_proc", "2", "--val_fraction", "0.01", "--hf_name", "me/docs"])
    assert asked == [("me/docs", None, 0.01, 2, False)]
    meta = read_meta(str(out))
    assert (meta["val_fraction"], meta["split_seed"]) == (0.01, owt.SPLIT_SEED)
    assert meta["prepare"] == \
        f"python data/openwebtext/prepare.py --val_fraction 0.01 --hf_name me/docs --out_dir {out}"


def test_openwebtext_loading_script_and_a_dead_worker_are_one_line(tmp_path, monkeypatch):
    """datasets 2.20-3.x runs the hub's loading script only when allowed (without a terminal to ask, it refuses with a
    ValueError): --trust_remote_code passes the permission, and the refusal is one line naming it. A tokenizing
    process killed (out of memory) is one line too."""
    owt = load_script("openwebtext")
    asked = []

    def load_dataset(name, split, revision, num_proc, **kw):  # as datasets 3.x answers a script-based repository
        asked.append(kw)
        if not kw.get("trust_remote_code"):
            raise ValueError("The repository for Skylion007/openwebtext contains custom code which must be executed "
                             "to correctly load the dataset. Please pass the argument `trust_remote_code=True`")
        raise ValueError("and then something else")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(SystemExit, match="^error: Skylion007/openwebtext is read by a loading script .* add "
                                         "--trust_remote_code to run it"):
        owt.main(["--out_dir", str(tmp_path / "out"), "--num_proc", "1"])
    with pytest.raises(SystemExit, match="^error: and then something else$"):
        owt.main(["--out_dir", str(tmp_path / "out"), "--num_proc", "1", "--trust_remote_code"])
    assert asked == [{}, {"trust_remote_code": True}]

    class Dying:  # a split whose map loses a worker
        column_names = ["text"]

        def map(self, *args, **kwargs):
            raise RuntimeError("One of the subprocesses has abruptly died during map operation.To debug the error, "
                               "disable multiprocessing.")
    with pytest.raises(ValueError, match=r"a tokenizing process died \(One of the subprocesses has abruptly died.*"
                                         r"smaller --num_proc"):
        next(owt.tokenized_documents(Dying(), 2))


def test_openwebtext_passes_on_other_errors_of_datasets_as_they_are(tmp_path, monkeypatch):
    """--trust_remote_code given and the loading script still refused (its message naming trust_remote_code): datasets'
    own error, not advice to add the flag already there; a map that fails for another reason than a dead worker is
    not called a dead worker."""
    owt = load_script("openwebtext")

    def load_dataset(name, split, revision, num_proc, **kw):
        raise ValueError("trust_remote_code=True was given, but the loading script failed: no module named 'lzma'")
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(ValueError, match="^trust_remote_code=True was given, but the loading script failed"):
        owt.load_splits("Skylion007/openwebtext", None, 0.0005, 1, trust_remote_code=True)

    class FullCache:  # a split whose map fails: the Hugging Face cache's disk is full
        column_names = ["text"]

        def map(self, *args, **kwargs):
            raise RuntimeError("No space left on device while writing the cache file")
    with pytest.raises(RuntimeError, match="^No space left on device"):
        next(owt.tokenized_documents(FullCache(), 2))


def test_openwebtext_ctrl_c_while_tokenizing_is_a_ctrl_c(tmp_path, monkeypatch, capsys):
    """Ctrl-C during datasets' map reaches the script as the pool's TimeoutError, raised while handling the
    KeyboardInterrupt: it was a traceback and exit status 1; it is the Ctrl-C line (exit status 130)."""
    real = load_script("openwebtext").tokenized_documents
    owt = offline_openwebtext(monkeypatch)

    class PoolTimeout(Exception):  # multiprocess.context.TimeoutError, which is no builtin TimeoutError
        pass

    class Interrupted:  # a split whose map is stopped by Ctrl-C
        column_names = ["text"]

        def map(self, *args, **kwargs):
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt:
                raise PoolTimeout()
    monkeypatch.setattr(owt, "tokenized_documents", lambda ds, num_proc: real(Interrupted(), num_proc))
    with pytest.raises(SystemExit) as e:
        owt.main(["--out_dir", str(tmp_path / "out"), "--num_proc", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 130 and err.strip().startswith("stopped (Ctrl-C)") and err.strip().count("\n") == 0, err


def test_openwebtext_writes_shards_of_the_size_asked(tmp_path, monkeypatch):
    owt = offline_openwebtext(monkeypatch)
    owt.main(["--out_dir", str(tmp_path / "out"), "--num_proc", "1", "--shard_tokens", "3"])
    meta = read_meta(str(tmp_path / "out"))
    sizes = [read_header(tmp_path / "out" / name) for name in meta["train_shards"]]
    assert sum(sizes) == meta["train_tokens"] and max(sizes) == 3 and len(sizes) == -(-meta["train_tokens"] // 3)


def test_openwebtext_splits_the_download_with_its_fixed_seed(monkeypatch, capsys):
    """The one split the hub gives is cut into train and val by datasets' train_test_split with SPLIT_SEED (the same
    validation documents every time), at the revision asked for; a count of documents above OpenWebTexts' is said
    too, and datasets >= 4's refusal of a loading script is one line with the way out."""
    owt = load_script("openwebtext")
    asked = {}

    class Split(list):
        def train_test_split(self, **kw):
            asked["split"] = kw
            return {"train": "the train part", "test": "the test part"}

    def load_dataset(name, split, revision, num_proc, **kw):
        asked["load"] = (name, split, revision, num_proc)
        return Split(range(5))
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert owt.load_splits("me/docs", "refs/convert/parquet", 0.25, 3) == {"train": "the train part",
                                                                           "val": "the test part"}
    assert asked == {"load": ("me/docs", "train", "refs/convert/parquet", 3),
                     "split": {"test_size": 0.25, "seed": owt.SPLIT_SEED, "shuffle": True}}
    assert capsys.readouterr().out == ""  # another dataset: no warning
    owt.load_splits("Skylion007/openwebtext", "refs/convert/parquet", 0.25, 3)  # 5 documents: a partial copy, said
    assert capsys.readouterr().out.startswith("warning: Skylion007/openwebtext gave 5 documents, not its 8,013,769")
    said = owt.check_documents("Skylion007/openwebtext", owt.DOCUMENTS + 1)
    assert said.startswith("warning: Skylion007/openwebtext gave 8,013,770 documents, not its 8,013,769: this is not "
                           "the corpus"), said

    def no_scripts(*args, **kw):
        raise RuntimeError("Dataset scripts are no longer supported, but found openwebtext.py")
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=no_scripts))
    with pytest.raises(SystemExit, match=r"(?s)^error: Dataset scripts are no longer supported.*"
                                         r"--hf_revision=refs/convert/parquet"):
        owt.load_splits("Skylion007/openwebtext", None, 0.0005, 1)


def test_openwebtext_checks_its_settings_before_the_download(tmp_path, monkeypatch):
    owt = load_script("openwebtext")
    monkeypatch.setattr(owt, "load_splits", lambda *args: pytest.fail("downloaded despite a bad setting"))
    with pytest.raises(SystemExit, match="^error: val_fraction must lie strictly between 0 and 1.*got 0.0"):
        owt.main(["--out_dir", str(tmp_path), "--val_fraction", "0"])
    with pytest.raises(SystemExit, match="^error: shard_tokens must be at least 1"):
        owt.main(["--out_dir", str(tmp_path), "--shard_tokens", "0"])
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="^error: will not prepare dataset 'openwebtext'.*notes.txt"):
        owt.main(["--out_dir", str(tmp_path)])
    (tmp_path / "encoder.json").write_text("{}")  # a corrupt tokenizer file: said before the download, not after
    monkeypatch.setattr(data.shards, "GPT2_ENCODER", str(tmp_path / "encoder.json"))
    with pytest.raises(SystemExit, match="^error: .*not GPT-2's encoder.json"):
        owt.main(["--out_dir", str(tmp_path / "fresh")])


def test_the_bos_token_is_the_eot_token_of_the_datasets_tokenizer(tmp_path):
    """meta.json records the tokenizer's <|endoftext|> id, which anchors BOS windows: a synthetic task's is its
    number of symbols, GPT-2's 50256, and 50256 too for shards without a meta.json (llm.c's)."""
    docs = {"train": [np.array([300, 1, 2, 3])], "val": [np.array([300, 4, 5])]}
    write_dataset(tmp_path / "task", "task", docs, source="test", tokenizer="symbols-300")
    meta = read_meta(tmp_path / "task")
    assert meta["tokenizer"] == "symbols-300" and meta["vocab_size"] == 301  # what sample.py decodes with
    assert meta["eot_token"] == bos_token(tmp_path / "task") == 300
    small_dataset(tmp_path / "text")
    assert bos_token(tmp_path / "text") == bos_token(tmp_path / "no meta") == 50256


@pytest.mark.parametrize("text", ["{not json", '{"name": "demo", "train_tok', "[1, 2]", '"demo"', "\udcff"])
def test_malformed_meta_json(tmp_path, text):
    (tmp_path / "meta.json").write_bytes(text.encode("utf-8", "surrogateescape"))  # the last is not UTF-8
    with pytest.raises(ValueError, match=r"meta.json is malformed: .*Delete it and prepare the dataset again"):
        read_meta(tmp_path)
    assert read_meta(tmp_path / "missing") is None


# ----------------------------------------------------------------------------
# one dataset per folder

def folder_state(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def test_prepare_refuses_a_folder_with_other_files(tmp_path):
    make_text_folder(tmp_path / "src")
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "notes.txt").write_text("my own notes")
    (out / ".plan").write_text("hidden, and not one of our temporary files (.*.tmp)")
    (out / "demo_train_000000.bin").write_bytes(b"an earlier preparation's shard: may be replaced")
    before = folder_state(out)
    with pytest.raises(ValueError, match=r"will not prepare dataset 'demo' into .*out: it holds other files "
                                         r"\(.plan, notes.txt, runs\)\. Choose an empty folder .*or move those files "
                                         r"away"):
        prepare_textdir(str(tmp_path / "src"), str(out), "demo", workers=1)
    with pytest.raises(ValueError, match=r"other files \(.plan, notes.txt, runs\)"):
        write_dataset(out, "demo", {"train": [np.arange(5)]}, source="test")
    with pytest.raises(SystemExit, match=r"^error: will not prepare dataset 'pystdlib'.*notes.txt"):
        load_script("pystdlib").main(["--out_dir", str(out), "--max_files", "3"])  # train.py --data_dir=DIR
    assert folder_state(out) == before


def test_prepare_refuses_another_datasets_folder(tmp_path):
    make_text_folder(tmp_path / "src")
    other = tmp_path / "other"
    write_dataset(other, "demo_v2", {"train": [np.arange(5)], "val": [np.arange(3)]}, source="test")
    before = folder_state(other)
    with pytest.raises(ValueError, match=r"other files \(demo_v2_train_000000.bin, demo_v2_val_000000.bin, "
                                         r"meta.json \(of dataset 'demo_v2'\)\)"):
        prepare_textdir(str(tmp_path / "src"), str(other), "demo", workers=1)
    assert folder_state(other) == before  # demo_v2_*.bin starts like demo_*.bin, yet nothing was deleted


def test_prepare_accepts_its_own_folder(tmp_path):
    out = tmp_path / "out"
    write_dataset(out, "demo", {"train": [np.arange(5)], "val": [np.arange(3)]}, source="test")
    (out / ".demo_train_000001.bin.x1y2.tmp").write_bytes(b"left by a killed run")
    (out / "keep.txt").write_text("")
    check_prepare_folder(out, "demo", allow=("keep.txt",))
    check_prepare_folder(tmp_path / "not yet made", "demo")
    with pytest.raises(ValueError, match=r"other files \(keep.txt\)"):
        check_prepare_folder(out, "demo")
    with pytest.raises(ValueError, match="it is a file, not a folder"):
        check_prepare_folder(out / "keep.txt", "demo")
    # the repo's own data/<name>/ folders keep their prepare.py beside the shards; other folders do not
    assert repo_folder_files(os.path.join(DATA_ROOT, "pystdlib")) == ("prepare.py", "__pycache__")
    assert repo_folder_files(os.path.join(DATA_ROOT, "new_dataset")) == ("prepare.py", "__pycache__")
    assert repo_folder_files(DATA_ROOT) == repo_folder_files(tmp_path / "pystdlib") == ()
    repo_pystdlib = os.path.join(DATA_ROOT, "pystdlib")  # prepare.py, __pycache__, maybe shards: accepted
    check_prepare_folder(repo_pystdlib, "pystdlib", repo_folder_files(repo_pystdlib))


def test_fineweb_checks_the_folder_before_downloading(tmp_path, monkeypatch):
    fineweb = load_script("fineweb")
    monkeypatch.setattr(fineweb, "fetch", lambda name, folder: pytest.fail("downloaded into a foreign folder"))
    (tmp_path / "model.pt").write_bytes(b"")
    with pytest.raises(SystemExit, match=r"^error: will not prepare dataset 'fineweb'.*\(model.pt\)"):
        fineweb.main(["--shards", "1", "--out_dir", str(tmp_path)])
    (tmp_path / "model.pt").unlink()
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)  # huggingface_hub's bookkeeping: allowed
    monkeypatch.setattr(fineweb, "fetch", fake_hub())
    fineweb.main(["--shards", "1", "--out_dir", str(tmp_path)])
    assert read_meta(tmp_path)["name"] == "fineweb"


def test_reading_refuses_two_datasets_in_one_folder(tmp_path):
    write_shard(tmp_path / "a_train_000000.bin", np.arange(100))
    write_shard(tmp_path / "a_val_000000.bin", np.arange(100))
    write_meta(tmp_path, "a", source="test")
    assert find_shards(tmp_path, "train") == [str(tmp_path / "a_train_000000.bin")]
    write_shard(tmp_path / "b_val_000000.bin", np.arange(100))
    for split in ("train", "val"):
        with pytest.raises(ValueError, match=r"holds the shards of 2 datasets \(a, b\): keep one dataset per folder"):
            find_shards(tmp_path, split)
    with pytest.raises(ValueError, match="keep one dataset per folder"):
        TrainLoader(tmp_path, block_size=8, batch_size=2, seed=0)


# ----------------------------------------------------------------------------
# the largest token id, to check against vocab_size

def all_tokens(folder):
    return np.concatenate([read_shard(p) for s in ("train", "val") for p in find_shards(folder, s)])


def test_max_token_recorded_at_preparation(tmp_path, monkeypatch):
    monkeypatch.setattr(data.shards, "SCAN_TOKENS", 3)  # several slices per shard
    docs = {"train": [np.array([5, 9, 1]), np.array([40000, 2])], "val": [np.array([7, 65000, 3, 3, 3, 3, 3])]}
    meta = write_dataset(tmp_path, "x", docs, source="test", shard_tokens=4, tokenizer="symbols-65535")
    assert meta["max_token"] == int(all_tokens(tmp_path).max()) == 65000
    assert read_meta(tmp_path)["max_token"] == 65000 and max_token_id(tmp_path) == 65000

    # meta.json's max_token is a record, not what training checks: a shard changed in place keeps its length
    (tmp_path / "meta.json").write_text(json.dumps(dict(read_meta(tmp_path), max_token=11)))
    assert max_token_id(tmp_path) == 65000


@pytest.mark.parametrize("length", [8, 9])
def test_the_largest_token_is_found_wherever_it_lies_in_the_slices(tmp_path, monkeypatch, length):
    monkeypatch.setattr(data.shards, "SCAN_TOKENS", 4)
    for at in range(length):  # first, inside, last of a slice, and alone in the last slice
        tokens = np.zeros(length, dtype=np.int64)
        tokens[at] = 5
        write_shard(tmp_path / "s.bin", tokens)
        assert scan_max_token([tmp_path / "s.bin"]) == 5, at


def test_max_token_scans_in_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(data.shards, "SCAN_TOKENS", 4)
    hand_written_shard(tmp_path / "fineweb_val_000000.bin", [1, 2, 3, 4, 5, 6, 7, 8, 9, 50256])  # max in the last slice
    hand_written_shard(tmp_path / "fineweb_train_000001.bin", [9, 8, 7])
    write_meta(tmp_path, "fineweb", source="llm.c")
    assert max_token_id(tmp_path) == 50256
    assert max_token_id(tmp_path / "empty") == -1


# ----------------------------------------------------------------------------
# complete datasets only: meta.json, written last, must describe the shards on disk

def small_dataset(folder, name="x", shard_tokens=4):
    """A dataset of GPT-2 ids in several shards a split, as the OpenWebText script writes it after its download."""
    docs = {"train": [np.arange(1, 9), np.arange(100, 107)], "val": [np.arange(200, 206)]}
    return write_dataset(folder, name, docs, source="test", shard_tokens=shard_tokens)


def test_a_textdir_preparation_stopped_part_way_is_refused(tmp_path, monkeypatch):
    make_text_folder(tmp_path / "src")
    textdir = load_script("textdir")

    def stopped(*args, **kwargs):  # Ctrl-C after the shards, before meta.json
        raise KeyboardInterrupt
    monkeypatch.setattr(textdir, "write_meta", stopped)
    with pytest.raises(KeyboardInterrupt):
        textdir.prepare(str(tmp_path / "src"), str(tmp_path / "out"), "demo", shard_tokens=8, workers=1)
    assert len(os.listdir(tmp_path / "out")) > 2  # the shards are there ...
    for split in ("train", "val"):  # ... and refused, with the command that prepares them again
        with pytest.raises(ValueError, match=r"preparation of dataset 'demo' in .*out did not finish.*"
                                             r"python data/textdir/prepare.py --src .*src --name demo --out_dir"):
            find_shards(tmp_path / "out", split)
    with pytest.raises(ValueError, match="did not finish"):
        val_batches(tmp_path / "out", block_size=4, batch_size=1, n_batches=1)
    monkeypatch.undo()
    textdir.prepare(str(tmp_path / "src"), str(tmp_path / "out"), "demo", shard_tokens=8, workers=1)
    assert len(find_shards(tmp_path / "out", "train")) > 1


def test_shards_without_meta_json_are_refused(tmp_path):
    """What a preparation killed before this check existed leaves: shards, no meta.json."""
    small_dataset(tmp_path, "pystdlib")
    (tmp_path / "meta.json").unlink()
    with pytest.raises(ValueError, match=r"holds 6 shards of dataset 'pystdlib' but no meta.json.*"
                                         r"Prepare it again: python data/pystdlib/prepare.py --out_dir "):
        find_shards(tmp_path, "train")
    assert find_shards(tmp_path / "empty", "train") == []  # no shards at all: "not prepared", as before


def test_meta_json_must_match_the_shards(tmp_path):
    small_dataset(tmp_path)
    assert len(find_shards(tmp_path, "train")) == 4
    (tmp_path / "x_train_000002.bin").rename(tmp_path / "keep.bin")  # one shard lost
    with pytest.raises(ValueError, match=r"x_train_000002.bin is missing \(3 train shards on disk, 4 in meta.json\)"
                                         r".*Prepare it again: python data/textdir/prepare.py"):
        find_shards(tmp_path, "val")
    (tmp_path / "keep.bin").rename(tmp_path / "x_train_000002.bin")
    write_shard(tmp_path / "x_train_000004.bin", [1, 2])  # one shard too many
    with pytest.raises(ValueError, match=r"x_train_000004.bin is not one of its shards"):
        find_shards(tmp_path, "train")
    (tmp_path / "x_train_000004.bin").unlink()
    write_shard(tmp_path / "x_val_000001.bin", [1, 2, 3])  # a val shard rewritten longer
    with pytest.raises(ValueError, match=r"the val shards in .* hold 7 tokens but its meta.json records 6"):
        find_shards(tmp_path, "train")


def test_a_refused_dataset_names_the_command_its_meta_json_records(tmp_path, monkeypatch):
    """A dataset refused for a shard lost or changed is prepared again by the command that made it, with its options
    (FineWeb's --shards: the defaults' 8 would download shards never asked for), as meta.json records it."""
    fineweb = load_script("fineweb")
    monkeypatch.setattr(fineweb, "fetch", fake_hub())
    fineweb.main(["--shards", "2", "--out_dir", str(tmp_path)])
    os.remove(tmp_path / "fineweb_train_000002.bin")
    with pytest.raises(ValueError, match=r"fineweb_train_000002.bin is missing.*Prepare it again: python "
                                         r"data/fineweb/prepare.py --shards 2 --out_dir"):
        find_shards(tmp_path, "train")
    copy = tmp_path / "copy"  # copied elsewhere: the command names this folder, not the one it was copied from
    copy.mkdir()
    for name in ("meta.json", "fineweb_val_000000.bin", "fineweb_train_000001.bin"):
        os.replace(tmp_path / name, copy / name)
    with pytest.raises(ValueError, match=rf"Prepare it again: python data/fineweb/prepare.py --out_dir {copy}$"):
        find_shards(copy, "train")


def test_shards_of_another_tokenizer_are_never_written_up_as_complete(tmp_path):
    """Shards copied in by hand holding an id past the tokenizer's vocabulary (another tokenizer's): write_meta refuses
    them, leaving the folder refused, instead of a complete meta.json that training then calls changed after its
    preparation, naming a preparation that would write the same."""
    hand_written_shard(tmp_path / "fineweb_val_000000.bin", [50256, 1, 2])
    hand_written_shard(tmp_path / "fineweb_train_000001.bin", [50256, 60000, 2])
    with pytest.raises(SystemExit, match=r"^error: the shards in .* hold token id 60000, past the vocabulary of "
                                         r"tokenizer 'gpt2' \(ids 0..50256\): they were made with another tokenizer"):
        load_script("fineweb").main(["--shards", "1", "--out_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="did not finish"):
        find_shards(tmp_path, "train")


def test_meta_json_from_before_the_complete_flag(tmp_path):
    """Accepted with the checks of the time (meta.json was written last then too); with no token counts, refused."""
    small_dataset(tmp_path)
    meta = read_meta(tmp_path)
    assert meta["complete"] is True
    old = {k: v for k, v in meta.items() if k != "complete"}
    (tmp_path / "meta.json").write_text(json.dumps(old))
    assert len(find_shards(tmp_path, "train")) == 4
    older = {k: v for k, v in old.items() if not k.endswith("_shards")}
    (tmp_path / "meta.json").write_text(json.dumps(older))
    assert len(find_shards(tmp_path, "train")) == 4
    (tmp_path / "x_train_000003.bin").unlink()  # the token totals still catch a missing shard
    with pytest.raises(ValueError, match="hold 12 tokens but its meta.json records 15"):
        find_shards(tmp_path, "train")
    small_dataset(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"name": "x", "tokenizer": "gpt2"}))
    with pytest.raises(ValueError, match="meta.json records no train_tokens.*Prepare it again"):
        find_shards(tmp_path, "train")


def test_an_interrupted_download_and_tokenize_is_refused(tmp_path, monkeypatch):
    def documents_then_a_kill():
        yield np.arange(10)
        yield np.arange(10)
        raise KeyboardInterrupt  # the network drops, or Ctrl-C, hours into tokenizing
    out = tmp_path / "owt"
    with pytest.raises(KeyboardInterrupt):
        write_dataset(out, "openwebtext", {"train": documents_then_a_kill(), "val": [np.arange(5)]}, "test",
                      shard_tokens=4)
    assert os.listdir(out)
    with pytest.raises(ValueError, match=r"did not finish.*python data/openwebtext/prepare.py --out_dir .*owt"):
        find_shards(out, "train")

    fineweb = load_script("fineweb")
    fetch, fetched = fake_hub(), []

    def download_then_a_kill(name, folder):  # one shard arrives (the folder is marked unfinished), then Ctrl-C
        if fetched:
            raise KeyboardInterrupt
        fetched.append(name)
        return fetch(name, folder)
    monkeypatch.setattr(fineweb, "fetch", download_then_a_kill)
    with pytest.raises(SystemExit) as stop:  # Ctrl-C: the one line that says the folder is unfinished, exit 130
        fineweb.main(["--shards", "2", "--out_dir", str(tmp_path / "fw")])
    assert stop.value.code == 130
    with pytest.raises(ValueError, match=r"did not finish.*python data/fineweb/prepare.py --shards 2 --out_dir"):
        find_shards(tmp_path / "fw", "val")


def test_train_refuses_a_cut_short_dataset(tmp_path):
    import train
    small_dataset(tmp_path, "toy")
    (tmp_path / "meta.json").unlink()
    (tmp_path / "toy_train_000003.bin").unlink()
    with pytest.raises(SystemExit, match="no meta.json.*Prepare it again"):
        train.main(["--dataset=toy", f"--data_dir={tmp_path}", f"--out_dir={tmp_path / 'run'}", "--device=cpu",
                    "--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=2", "--batch_size=1", "--max_iters=1"])
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------
# a restarted preparation: no temporary file stays, and a killed one is refused until it is redone

KILL_HALF_WAY = """
import os, signal, sys
import numpy as np
from data.shards import write_dataset
calls = []
def fsync(fd):  # the 5th fsync (a shard's, before its rename) dies: SIGKILL, no clean-up runs
    calls.append(fd)
    if len(calls) == 5:
        os.kill(os.getpid(), signal.SIGKILL)
os.fsync = fsync
write_dataset(sys.argv[1], "demo", {"train": [np.arange(40)], "val": [np.arange(6)]}, "test", shard_tokens=8)
"""


def test_a_killed_preparation_is_refused_then_cleaned_up(tmp_path):
    out = tmp_path / "out"
    write_dataset(out, "demo", {"train": [np.arange(9)], "val": [np.arange(6)]}, "test")  # an earlier, complete one
    (out / ".other_train_000000.bin.abc.tmp").write_bytes(b"another dataset's: not ours to delete")
    result = subprocess.run([sys.executable, "-c", KILL_HALF_WAY, str(out)], cwd=REPO, timeout=120)
    assert result.returncode == -9
    assert any(n.startswith(".demo_train_") and n.endswith(".tmp") for n in os.listdir(out))  # what a kill leaves
    with pytest.raises(ValueError, match="did not finish"):
        find_shards(out, "train")
    write_dataset(out, "demo", {"train": [np.arange(40)], "val": [np.arange(6)]}, "test", shard_tokens=8)
    assert sorted(n for n in os.listdir(out) if n.startswith(".")) == [".other_train_000000.bin.abc.tmp"]
    assert len(find_shards(out, "train")) == 5 and read_meta(out)["train_tokens"] == 40


@pytest.mark.parametrize("name", ["bigram_backcopy", "pystdlib", "wiki"])  # prepared on first use, or not
def test_a_data_dir_that_is_a_file_is_named_so(tmp_path, name):
    """Before, a file as --data_dir was told to prepare the dataset into it (prepare.py --out_dir FILE), which
    cannot work."""
    from data import check_training_data, prepare_if_missing
    path = tmp_path / name
    path.write_text("not a folder\n")
    for call in (lambda: prepare_if_missing(name, str(path)), lambda: check_training_data(name, str(path), 65, True)):
        with pytest.raises(SystemExit) as refused:
            call()
        assert str(refused.value.code) == f"error: {path} is a file, not a folder: data_dir names the folder a " \
            "dataset's shards are in (data/<name>/ when only --dataset is given)"
    assert path.read_text() == "not a folder\n"


def test_train_prepares_on_first_use_only_in_a_folder_meant_for_it_and_finishes_a_stopped_one(tmp_path, capsys):
    """data.prepare_if_missing, train.py's first use: a --data_dir with a typo (no shards, not named after the dataset)
    is refused in one line with the command that prepares it there, and nothing is made; in a folder named after
    the dataset, a preparation of its defaults that stopped part-way (Ctrl-C on first use: meta.json says it is under
    way, and no process holds the folder's lock) is done again, not refused; one stopped with options of its own is
    refused with its own command, which the defaults would not make."""
    from data import prepare_if_missing
    typo = tmp_path / "my_dat"
    with pytest.raises(SystemExit) as refused:
        prepare_if_missing("bigram_backcopy", str(typo))
    err = str(refused.value.code)
    assert "\n" not in err and err.startswith(f"error: no bigram_backcopy shards in {typo}"), err
    assert f"python data/bigram_backcopy/prepare.py --out_dir {typo}" in err and not typo.exists(), err
    task = tmp_path / "bigram_backcopy"

    def stopped(command):  # a preparation's first step, in a process that then ends (it held the lock, no longer)
        code = ("import sys; from data.shards import start_preparation; "
                "start_preparation(sys.argv[1], 'bigram_backcopy', sys.argv[2])")
        subprocess.run([sys.executable, "-c", code, str(task), command], cwd=REPO, check=True, timeout=120)
        with pytest.raises(ValueError, match="did not finish"):  # as the next reader would have found it
            find_shards(str(task), "train")

    stopped(f"python data/bigram_backcopy/prepare.py --vocab 32 --out_dir {task}")
    with pytest.raises(SystemExit, match="did not finish.* Run it again: python data/bigram_backcopy/prepare.py "
                                         "--vocab 32"):
        prepare_if_missing("bigram_backcopy", str(task))
    stopped(data.shards.prepare_command(str(task), "bigram_backcopy"))
    prepare_if_missing("bigram_backcopy", str(task))
    assert "preparing the dataset bigram_backcopy" in capsys.readouterr().out
    assert read_meta(str(task))["complete"] is True and find_shards(str(task), "train")
    assert sorted(os.listdir(task)) == sorted(["meta.json"] + [os.path.basename(p) for split in ("train", "val")
                                                               for p in find_shards(str(task), split)])  # no lock


def test_a_dataset_prepared_before_the_complete_flag_is_not_prepared_again_on_first_use(tmp_path, capsys):
    from data import prepare_if_missing
    task = tmp_path / "bigram_backcopy"
    small_dataset(task, "bigram_backcopy")
    (task / "meta.json").write_text(json.dumps({k: v for k, v in read_meta(task).items() if k != "complete"}))
    before = folder_state(task)
    prepare_if_missing("bigram_backcopy", str(task))
    assert folder_state(task) == before and "preparing" not in capsys.readouterr().out


def test_a_first_use_preparation_waits_for_the_one_another_process_is_running(tmp_path):
    """Two train.py runs started together on a dataset not yet prepared (exercise 08's two commands, say): the second
    waits for the first's preparation and uses it, never starting one of its own under it."""
    task = tmp_path / "bigram_backcopy"
    first = subprocess.Popen([sys.executable, "-c", "import sys, time; from data.shards import hold_preparation; "
                              "from data.bigram_backcopy.prepare import prepare; hold_preparation(sys.argv[1]); "
                              "print('held', flush=True); time.sleep(3); prepare(out_dir=sys.argv[1])", str(task)],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline() == "held\n"
    second = subprocess.run([sys.executable, "-c", "import sys; from data import prepare_if_missing; "
                             "prepare_if_missing('bigram_backcopy', sys.argv[1])", str(task)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert first.wait(timeout=120) == 0 and second.returncode == 0, second.stdout + second.stderr
    assert "waiting for the preparation" in second.stdout and "preparing the dataset" not in second.stdout, second
    assert read_meta(str(task))["complete"] is True and PREPARE_LOCK not in os.listdir(task)


def test_a_preparation_killed_with_its_worker_processes_alive_leaves_the_folder_free(tmp_path):
    """A preparation killed outright (kill -9, the out-of-memory killer) while processes it forked live on (datasets'
    map workers, for OpenWebText, are left waiting for work that never comes): the folder's lock goes with the
    preparation, so the same command run again prepares the folder, instead of waiting for ever for the orphans."""
    task = tmp_path / "task"
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time; from data.shards import hold_preparation; "
                               "hold_preparation(sys.argv[1]); child = os.fork()\n"
                               "if child == 0: time.sleep(60); os._exit(0)\n"
                               "print(child, flush=True); time.sleep(60)", str(task)],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    orphan = int(holder.stdout.readline())
    try:
        holder.kill()
        holder.wait()
        again = subprocess.run([sys.executable, "-c", "import sys; from data.shards import hold_preparation; "
                                "print(hold_preparation(sys.argv[1]))", str(task)], cwd=REPO, capture_output=True,
                               text=True, timeout=20)
        assert again.stdout == "True\n", again.stdout + again.stderr  # taken at once: no "waiting for ..."
    except subprocess.TimeoutExpired:
        pytest.fail("the lock of a killed preparation is still held by the process it forked")
    finally:
        os.kill(orphan, 9)


def test_textdir_warns_when_the_validation_share_of_tokens_is_far_from_asked(tmp_path, capsys):
    """val_fraction splits whole files: when the one validation file is the large one, validation holds most tokens,
    and the preparation says so (it still writes the dataset: the split is fixed by the paths)."""
    src = tmp_path / "src"
    src.mkdir()
    big, small = sorted(["a.txt", "b.txt"], key=path_hash)  # the lowest hash is the validation file
    (src / big).write_text("many words here\n" * 400, encoding="utf-8")
    (src / small).write_text("few words\n", encoding="utf-8")
    meta = prepare_textdir(str(src), str(tmp_path / "out"), "demo", val_fraction=0.02, workers=1)
    said = capsys.readouterr().out
    assert meta["val_tokens"] > meta["train_tokens"] and "warning: validation holds 99" in said, said
    assert "not the 2.0% asked for" in said and "1 of 2 here" in said, said
    (src / small).write_text("many words here\n" * 400, encoding="utf-8")  # now the one validation file is small
    (src / big).write_text("few words\n", encoding="utf-8")
    meta = prepare_textdir(str(src), str(tmp_path / "out3"), "demo", val_fraction=0.02, workers=1)
    said = capsys.readouterr().out
    assert meta["val_tokens"] < meta["train_tokens"] / 100 and "warning: validation holds 0.2%" in said, said
    make_text_folder(tmp_path / "even")
    prepare_textdir(str(tmp_path / "even"), str(tmp_path / "out2"), "demo", exts=(".txt", ".md"), val_fraction=0.3,
                    workers=1)
    assert "warning" not in capsys.readouterr().out


class Stopped(Exception):
    pass


def command_to_finish(monkeypatch, script, argv):
    """The command a preparation started with these options records, to finish it if it is killed."""
    module = load_script(script)
    said = []

    def stop(out_dir, name, prepare, keep_shards=False):
        said.append(prepare)
        raise Stopped
    monkeypatch.setattr(data.shards, "start_preparation", stop)
    if hasattr(module, "start_preparation"):
        monkeypatch.setattr(module, "start_preparation", stop)
    monkeypatch.setattr(load_script("textdir"), "start_preparation", stop)  # pystdlib prepares through textdir
    with pytest.raises(Stopped):
        module.main(argv)
    return said[0]


def test_the_command_that_finishes_a_preparation_keeps_the_options_given(tmp_path, monkeypatch):
    """A killed preparation is refused until a command finishes it: that command makes the same dataset, with the
    options the user gave (not the defaults), and leaves out only those that change no token (workers)."""
    make_text_folder(tmp_path / "src")
    out = str(tmp_path / "out")
    said = command_to_finish(monkeypatch, "textdir", ["--src", str(tmp_path / "src"), "--exts", ".py,.txt",
                                                      "--shard_tokens", "1000", "--val_fraction", "0.3",
                                                      "--workers", "1", "--out_dir", out])
    assert said.startswith("python data/textdir/prepare.py --src ") and "--name src" in said, said
    assert "--exts .py,.txt --val_fraction 0.3 --shard_tokens 1000" in said and "--workers" not in said, said
    said = command_to_finish(monkeypatch, "textdir", ["--src", str(tmp_path / "src"), "--out_dir", out])
    assert "--exts" not in said and "--shard_tokens" not in said, said  # the defaults: nothing to repeat
    said = command_to_finish(monkeypatch, "pystdlib", ["--max_files", "5", "--exclude_tests", "--workers", "1",
                                                       "--out_dir", out])
    assert said == f"python data/pystdlib/prepare.py --max_files 5 --exclude_tests --out_dir {out}", said
    said = command_to_finish(monkeypatch, "bigram_backcopy", ["--vocab", "16", "--seed", "3", "--out_dir", out])
    assert said == f"python data/bigram_backcopy/prepare.py --vocab 16 --seed 3 --out_dir {out}", said


def test_textdir_removes_its_stale_temporary_files(tmp_path):
    make_text_folder(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    stale = [".demo_train_000003.bin.k2j4h5.tmp", ".meta.json.q8w7e6.tmp", ".demo_val_000000.bin.a1b2c3.tmp"]
    for name in stale:
        (out / name).write_bytes(b"\0" * 1000)  # a killed run's half-written shard and meta.json
    (out / ".mine.tmp").write_bytes(b"not a preparation's file")
    prepare_textdir(str(tmp_path / "src"), str(out), "demo", workers=1)
    assert not set(stale) & set(os.listdir(out)) and (out / ".mine.tmp").exists()


# ----------------------------------------------------------------------------
# token ids past the vocabulary

@pytest.mark.parametrize("shard, token", [("x_train_000001.bin", 60000), ("x_train_000001.bin", 50257),
                                          ("x_val_000000.bin", 50257)])  # 50257: the first id past GPT-2's
def test_a_shard_edited_past_the_vocabulary_is_refused(tmp_path, shard, token):
    small_dataset(tmp_path)
    assert max_token_id(tmp_path) == 205
    tokens = np.memmap(tmp_path / shard, dtype=np.uint16, mode="r+", offset=HEADER_BYTES)
    tokens[2] = token  # same length, same token count in the header: only the ids tell
    tokens.flush()
    del tokens
    with pytest.raises(ValueError, match=rf"{shard} holds token id {token}, past the vocabulary of "
                                         r"tokenizer 'gpt2' \(ids 0..50256\).*Prepare it again"):
        find_shards(tmp_path, "val")
    with pytest.raises(ValueError, match=f"holds token id {token}"):
        TrainLoader(tmp_path, block_size=2, batch_size=1, seed=0)


# ----------------------------------------------------------------------------
# textdir and files that are not regular readable files

def test_textdir_skips_fifos_broken_links_and_unreadable_files(tmp_path, capsys):
    import signal
    src = tmp_path / "src"
    files = make_text_folder(src)
    os.mkfifo(src / "pipe.txt")  # opening it would wait for a writer forever
    os.symlink(src / "gone.txt", src / "broken.txt")
    os.symlink(src / "f.txt", src / "link_to_f.txt")  # a link to a regular file is read (here: a duplicate)
    unreadable = os.geteuid() != 0  # root reads a chmod 000 file all the same
    if unreadable:
        (src / "secret.txt").write_text("no access")
        os.chmod(src / "secret.txt", 0)

    def hung(*args):
        raise TimeoutError("prepare hung")
    signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        meta = prepare_textdir(str(src), str(tmp_path / "out"), "demo", workers=1)
    finally:
        signal.alarm(0)
        if unreadable:
            os.chmod(src / "secret.txt", 0o600)
    assert meta["special_skipped"] == 1 and meta["broken_links_skipped"] == 1
    assert meta["unreadable_skipped"] == int(unreadable) and meta["duplicates_skipped"] == 2
    assert meta["train_files"] + meta["val_files"] == len(files) - 2  # e.md (not .txt) and the copy of a.txt out
    out = capsys.readouterr().out
    assert "1 broken link" in out and "1 special file (not a regular file)" in out
    assert f"{int(unreadable)} unreadable" in out


def test_a_killed_preparation_leaves_no_worker_behind_and_no_traceback(tmp_path):
    """Kill textdir's preparation while its pool tokenizes: its workers end at once and in silence, instead of
    finishing their batch as orphans and printing BrokenPipeError tracebacks into the terminal."""
    import signal
    import time
    src = sysconfig.get_paths()["stdlib"]  # thousands of .py files: the pool is busy for a while
    proc = subprocess.Popen([sys.executable, os.path.join(DATA_ROOT, "textdir", "prepare.py"), "--src", src,
                             "--exts", ".py", "--workers", "2", "--out_dir", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("reading")
    time.sleep(2.0)  # the workers are hashing or tokenizing files now
    assert proc.poll() is None, "the preparation ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    try:  # stderr closes when the last process holding it (the orphans) has ended
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the pool's workers outlived the killed preparation by 15 s")
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


WORKER_KILLED = """
import multiprocessing, os, signal, sys
sys.path.insert(0, sys.argv[1])
multiprocessing.set_start_method("fork")  # the workers inherit the replaced reader below
sys.argv = sys.argv[:1] + sys.argv[2:]
import data.textdir.prepare as prepare
read = prepare._encode_file
def killed_on_one_file(path):  # the kernel's OOM killer, on a huge file
    if path.endswith("c.txt"):
        os.kill(os.getpid(), signal.SIGKILL)
    return read(path)
prepare._encode_file = killed_on_one_file
prepare.main()
"""


def test_a_worker_killed_while_tokenizing_stops_the_preparation_in_one_line(tmp_path):
    """A multiprocessing.Pool waits forever for the files a killed worker held: the preparation must stop, in one
    line that says what to do, and leave a folder that training refuses until it is prepared again."""
    make_text_folder(tmp_path / "src")
    out = subprocess.run([sys.executable, "-c", WORKER_KILLED, REPO, "--src", str(tmp_path / "src"), "--out_dir",
                          str(tmp_path / "out"), "--workers", "2", "--shard_tokens", "4"],
                         capture_output=True, text=True, timeout=120)
    assert_one_line(out.returncode, out.stderr, "a worker process died", "run the same command again")
    with pytest.raises(ValueError, match="did not finish"):
        find_shards(tmp_path / "out", "train")


SLOW_READER = """
import multiprocessing, sys, time
sys.path.insert(0, sys.argv[1])
multiprocessing.set_start_method(sys.argv[2])
sys.argv = sys.argv[:1] + sys.argv[3:]
import data.textdir.prepare as prepare
read = prepare._encode_file
def slow(path):  # a large file: the worker is busy with it when Ctrl-C comes
    time.sleep(30)
    return read(path)
prepare._encode_file = slow
prepare.main()
"""


def test_ctrl_c_ends_a_preparation_at_once_even_while_its_workers_are_busy(tmp_path):
    """A real SIGINT while each worker holds a slow file: the preparation ends in a second, with its one line, and
    its workers with it (not after the files they hold, nor never: a second Ctrl-C once hung the pool's shutdown)."""
    import signal
    import time
    make_text_folder(tmp_path / "src")
    proc = subprocess.Popen([sys.executable, "-c", SLOW_READER, REPO, "fork", "--src", str(tmp_path / "src"),
                             "--out_dir", str(tmp_path / "out"), "--workers", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # Ctrl-C as in a terminal: a suite started in the background (`cmd &` in a script) ignores
                            # SIGINT and its children inherit that; the child takes the default back
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().startswith("reading")
    time.sleep(1.0)  # the workers are in the middle of their first files
    start = time.time()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # impatient: a second Ctrl-C
    try:
        _, err = proc.communicate(timeout=25)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the preparation did not end within 25 s of Ctrl-C")
    # (waiting for the files the workers held would take 30 s or more: a bound far below it, for a loaded machine)
    assert time.time() - start < 10 and proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)


@pytest.mark.parametrize("method", ["forkserver"])
def test_the_preparation_runs_under_every_start_method(tmp_path, method):
    """Python 3.14 starts workers from a forkserver on Linux: a worker's parent is then not the preparation, and a
    worker that took it for an orphan ended itself (the pool hung, or said one died). (fork, the default before,
    runs in every other test; spawn, macOS's and Windows', makes the preparation the parent, as fork does.)"""
    make_text_folder(tmp_path / "src")
    script = ("import multiprocessing, sys\nsys.path.insert(0, sys.argv[1])\nmultiprocessing.set_start_method(sys.argv[2])"
              "\nsys.argv = sys.argv[:1] + sys.argv[3:]\nimport data.textdir.prepare as prepare\nprepare.main()\n")
    out = subprocess.run([sys.executable, "-c", script, REPO, method, "--src", str(tmp_path / "src"), "--out_dir",
                          str(tmp_path / "out"), "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "wrote " in out.stdout, out.stderr
    assert read_meta(str(tmp_path / "out"))["complete"] is not False


def test_a_preparation_and_its_workers_never_import_torch(tmp_path):
    """Preparing needs numpy and the tokenizer, not torch (a second to import, and some 200 MB in each worker a
    spawning start method starts): with a `torch` that refuses to be imported first on the path, every local
    preparation runs, workers started by spawn too, and a bad option is still one line."""
    blocker = tmp_path / "no_torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("the preparation imported torch")\n')
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    make_text_folder(tmp_path / "src")
    script = ("import multiprocessing, sys\nsys.path.insert(0, sys.argv[1])\nmultiprocessing.set_start_method('spawn')"
              "\nsys.argv = sys.argv[:1] + sys.argv[2:]\nimport data.textdir.prepare as prepare\nprepare.main()\n")
    out = subprocess.run([sys.executable, "-c", script, REPO, "--src", str(tmp_path / "src"), "--out_dir",
                          str(tmp_path / "textdir"), "--workers", "2"], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0 and "wrote " in out.stdout, out.stderr
    for name, args in (("pystdlib", ["--max_files", "5", "--workers", "1"]),
                       ("bigram_backcopy", ["--train_tokens", "2000", "--val_tokens", "1000"])):
        code, said, err = run_prepare(name, *args, "--out_dir", str(tmp_path / name), env=env)
        assert code == 0 and "wrote " in said, err
    code, _, err = run_prepare("textdir", "--src", str(tmp_path / "src"), "--workers=0", env=env)
    assert_one_line(code, err, "workers=0")
    assert subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True).returncode != 0


# ----------------------------------------------------------------------------
# the prepare scripts' command lines, as a careless user runs them: one line, never a traceback

def run_prepare(name, *args, env=None):
    """python data/<name>/prepare.py args, from the repository's root: (exit status, stdout, stderr)."""
    out = subprocess.run([sys.executable, os.path.join(DATA_ROOT, name, "prepare.py"), *args], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=env)
    return out.returncode, out.stdout, out.stderr


def assert_one_line(code, err, *words):
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], (word, lines[0])


def unwritable_folder(tmp_path):
    """A folder no file can be made in: read-only for a user, /sys's for root (whom permissions do not stop)."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    os.chmod(folder, 0o555)
    for candidate in (folder, "/sys"):
        try:
            os.mkdir(os.path.join(candidate, "probe"))
            os.rmdir(os.path.join(candidate, "probe"))
        except OSError:
            return str(candidate)
    pytest.skip("no folder here refuses writing")


@pytest.mark.parametrize("name", ["textdir", "bigram_backcopy", "fineweb"])
@pytest.mark.parametrize("where", ["read_only", "under_a_file", "dangling_link"])
def test_a_folder_that_cannot_be_written_stops_with_one_line(tmp_path, name, where):
    make_text_folder(tmp_path / "src")
    (tmp_path / "a_file").write_text("mine")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    out_dir = {"read_only": lambda: os.path.join(unwritable_folder(tmp_path), "sub"),
               "under_a_file": lambda: str(tmp_path / "a_file" / "sub"),
               "dangling_link": lambda: str(tmp_path / "dangling")}[where]()
    args = {"textdir": ["--src", str(tmp_path / "src"), "--workers", "1"], "fineweb": ["--shards", "1"],
            "bigram_backcopy": ["--train_tokens", "100", "--val_tokens", "100"]}[name]
    try:
        code, _, err = run_prepare(name, *args, f"--out_dir={out_dir}")
    finally:
        if (tmp_path / "read_only").exists():
            os.chmod(tmp_path / "read_only", 0o755)
    assert_one_line(code, err, "--out_dir")
    assert (tmp_path / "a_file").read_text() == "mine" and not os.path.lexists(tmp_path / "nowhere")


@pytest.mark.parametrize("name", ["pystdlib", "bigram_backcopy", "fineweb"])
def test_an_empty_out_dir_is_one_line_before_any_work(tmp_path, name):
    """--out_dir= with its value forgotten: "[Errno 2] No such file or directory: ''" after the work (pystdlib read
    every file first); refused as every empty value is (data.PrepareParser), textdir's too."""
    code, out, err = run_prepare(name, "--out_dir=")
    assert_one_line(code, err, "--out_dir= is empty: name a value, or leave --out_dir out for its default; --help")
    assert not out


@pytest.mark.parametrize("name, option", [("textdir", "--max_files"), ("textdir", "--workers"),
                                          ("pystdlib", "--max_files"), ("pystdlib", "--workers")])
@pytest.mark.parametrize("value", ["-1", "0"])
def test_a_count_below_one_is_refused(tmp_path, name, option, value):
    """--max_files=-1 was Python's files[:-1]: every file but the last, without a word."""
    make_text_folder(tmp_path / "src")
    args = ["--src", str(tmp_path / "src")] if name == "textdir" else []
    code, _, err = run_prepare(name, *args, "--out_dir", str(tmp_path / "out"), f"{option}={value}")
    assert_one_line(code, err, f"{option[2:]}={value}: must be at least 1")
    assert not (tmp_path / "out").exists()


def test_a_leading_tilde_in_a_prepare_scripts_paths_is_the_home_folder(tmp_path):
    """--src=~/x and --out_dir=~/x: no shell expands the ~ after '=', and the script made a folder named ~."""
    make_text_folder(tmp_path / "src")
    (tmp_path / "cwd").mkdir()
    out = subprocess.run([sys.executable, os.path.join(DATA_ROOT, "textdir", "prepare.py"), "--src=~/src",
                          "--out_dir=~/out", "--workers=1"], cwd=tmp_path / "cwd", capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, HOME=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert find_shards(tmp_path / "out", "train") and os.listdir(tmp_path / "cwd") == []


@pytest.mark.parametrize("name", ["a/b", "..", "/abs"])
def test_a_dataset_name_with_a_slash_is_refused(tmp_path, name):
    """--name=a/b wrote its shards into a sub-folder a/ that the dataset never reads: 0 tokens, and exit status 0."""
    make_text_folder(tmp_path / "src")
    code, _, err = run_prepare("textdir", "--src", str(tmp_path / "src"), f"--name={name}", "--workers=1",
                               "--out_dir", str(tmp_path / "out"))
    assert_one_line(code, err, "must be a plain name")
    assert not (tmp_path / "out").exists()


def test_a_model_must_hold_every_token_id_of_the_data_and_the_bos_token(two_shards):
    """check_training_data: the largest id in two_shards is 2299, and its BOS token GPT-2's 50256."""
    from data import check_training_data
    assert check_training_data("d", str(two_shards), 2300, bos=False) is None
    with pytest.raises(SystemExit, match=r"hold token id 2299 but the model has vocab_size=2299: .* at least 2300$"):
        check_training_data("d", str(two_shards), 2299, bos=False)
    assert check_training_data("d", str(two_shards), 50257, bos=True) == 50256
    with pytest.raises(SystemExit, match=r"anchors windows with token 50256, but the model has vocab_size=50256: "
                                         r"vocab_size must be at least 50257, or --bos=False"):
        check_training_data("d", str(two_shards), 50256, bos=True)
    with pytest.raises(SystemExit, match=r"vocab_size=2299: .* at least 50257 \(the BOS token, 50256, included\)"):
        check_training_data("d", str(two_shards), 2299, bos=True)
    (two_shards / "d_val_000000.bin").unlink()
    write_meta(two_shards, "d", source="test")
    with pytest.raises(SystemExit, match=r"dataset 'd' is not prepared: no d_train_\*.bin and _val_\*.bin shards"):
        check_training_data("d", str(two_shards), 50257, bos=True)


def test_the_folders_of_data_name_the_datasets_and_textdir_prepares_a_folder_of_text(tmp_path):
    """textdir and gpt2_bpe are no datasets (no --dataset=textdir is suggested); a dataset named textdir is made by
    data/textdir/prepare.py from the folder of text it names."""
    from data import known_datasets
    known = known_datasets()
    assert "pystdlib" in known and "bigram_backcopy" in known and "textdir" not in known and "gpt2_bpe" not in known
    assert data.shards.prepare_command(tmp_path, "textdir", src=tmp_path / "txt") == \
        f"python data/textdir/prepare.py --src {tmp_path / 'txt'} --name textdir --out_dir {tmp_path}"


@pytest.mark.parametrize("where, said", [(".", "cannot write the dataset into"), ("x.bin", "cannot write the dataset"),
                                         ("..", "cannot write the dataset into"), ("../elsewhere", "cannot read")])
def test_an_os_error_of_a_preparation_says_whether_it_was_writing_or_reading(tmp_path, where, said):
    """Making the dataset's folder can fail on a folder above it (a read-only disk, where permissions do not stop
    root): that is writing too."""
    from data import _os_error
    out = tmp_path / "a" / "out"
    error = OSError(30, "Read-only file system", os.path.normpath(out / where))
    assert _os_error(error, str(out)).startswith(said)


def test_no_file_ending_to_read_is_refused(tmp_path):
    make_text_folder(tmp_path / "src")
    code, _, err = run_prepare("textdir", "--src", str(tmp_path / "src"), "--exts=,", "--out_dir", str(tmp_path / "o"))
    assert_one_line(code, err, "exts names no file ending")


@pytest.mark.parametrize("option, words", [("--seed=-1", "seed=-1 must be 0 or more"),
                                           ("--alpha=inf", "alpha=inf must be a positive number"),
                                           ("--vocab=70000", "at most 65535")])
def test_bigram_backcopy_settings_out_of_range_stop_with_one_line(tmp_path, option, words):
    code, _, err = run_prepare("bigram_backcopy", option, "--train_tokens=100", "--val_tokens=100",
                               "--out_dir", str(tmp_path / "out"))
    assert_one_line(code, err, words)
    assert not (tmp_path / "out").exists()


def test_bigram_backcopy_out_of_memory_stops_with_one_line(tmp_path, monkeypatch, capsys):
    script = load_script("bigram_backcopy")

    def no_memory(*args):
        raise MemoryError()
    monkeypatch.setattr(script, "make_chain", no_memory)
    with pytest.raises(SystemExit, match=r"^error: out of memory: vocab=64 .* GiB at once; use a smaller --vocab"):
        script.main(["--out_dir", str(tmp_path / "out"), "--train_tokens=100", "--val_tokens=100"])
    # what it needs: the float64 matrix (vocab**2 * 8 bytes) or the int64 walks of the larger split, whole walks of 8192
    with pytest.raises(SystemExit, match=r"vocab=65535 and 100 tokens need about 32.0 GiB at once"):
        script.main(["--out_dir", str(tmp_path / "out"), "--vocab=65535", "--train_tokens=100", "--val_tokens=100"])
    with pytest.raises(SystemExit, match=r"vocab=64 and 1,073,741,000 tokens need about 8.0 GiB at once"):
        script.main(["--out_dir", str(tmp_path / "out"), "--train_tokens=100", "--val_tokens=1073741000"])


def test_bigram_backcopy_main_passes_every_setting_on(tmp_path):
    script = load_script("bigram_backcopy")
    script.main(["--out_dir", str(tmp_path), "--vocab=16", "--triggers=2", "--alpha=0.5", "--seed=3",
                 "--train_tokens=3000", "--val_tokens=1000"])
    meta = read_meta(tmp_path)
    assert (meta["train_tokens"], meta["val_tokens"], meta["symbols"], meta["alpha"], meta["seed"]) == \
        (3000, 1000, 16, 0.5, 3)
    assert meta["triggers"] == script.make_chain(16, 2, 0.5, 3)[1] and meta["tokenizer"] == "symbols-16"


def test_preparing_a_dataset_again_with_other_options_says_it_replaces_one(tmp_path, capsys):
    """A complete dataset prepared again with other options is other data, which the runs trained on it will refuse:
    the preparation says so in one line, naming the command that made it; the same command again says nothing."""
    script = load_script("bigram_backcopy")
    small = ["--out_dir", str(tmp_path), "--vocab=16", "--train_tokens=3000", "--val_tokens=1000"]
    script.main(small)
    script.main(small)
    assert "replacing" not in capsys.readouterr().out
    script.main(small + ["--seed=1"])
    assert f"note: replacing the dataset in {tmp_path}, made by `python data/bigram_backcopy/prepare.py --vocab 16 " \
        "--train_tokens 3000 --val_tokens 1000 --out_dir " in capsys.readouterr().out
    assert read_meta(tmp_path)["seed"] == 1


def test_openwebtext_checks_num_proc_before_the_download(tmp_path, monkeypatch):
    owt = load_script("openwebtext")
    monkeypatch.setattr(owt, "load_splits", lambda *args: pytest.fail("downloaded despite a bad setting"))
    with pytest.raises(SystemExit, match="^error: num_proc=0: must be at least 1"):
        owt.main(["--out_dir", str(tmp_path), "--num_proc", "0"])


def test_ctrl_c_during_a_preparation_says_what_it_left_and_a_rerun_finishes_it(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the shards are written: one line (not a traceback) that says the folder is unfinished; the same
    command again prepares it. Ctrl-C before anything is written leaves the folder as it was."""
    script = load_script("textdir")
    make_text_folder(tmp_path / "src")
    argv = ["--src", str(tmp_path / "src"), "--out_dir", str(tmp_path / "out"), "--workers=1", "--shard_tokens=4"]
    script.main(argv)
    before = folder_state(tmp_path / "out")
    add = data.shards.ShardWriter.add
    calls = []

    def interrupted(self, tokens):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        add(self, tokens)
    def stopped():
        """main's exit status, where Ctrl-C (a KeyboardInterrupt) must end it with SystemExit."""
        try:
            script.main(argv)
        except SystemExit as e:
            return e.code
        except KeyboardInterrupt:
            pytest.fail("Ctrl-C ends the preparation with a traceback")
        pytest.fail("the preparation went on after Ctrl-C")
    monkeypatch.setattr(script, "list_files", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert stopped() == 130 and folder_state(tmp_path / "out") == before
    assert capsys.readouterr().err.strip() == f"stopped (Ctrl-C): {tmp_path / 'out'} is as it was; run the same " \
                                              "command again to prepare the dataset"
    monkeypatch.undo()
    monkeypatch.setattr(data.shards.ShardWriter, "add", interrupted)
    assert stopped() == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("stopped (Ctrl-C): the dataset in") and "\n" not in err
    with pytest.raises(ValueError, match="did not finish"):
        find_shards(tmp_path / "out", "train")
    monkeypatch.undo()
    script.main(argv)
    assert folder_state(tmp_path / "out") == before


def test_textdir_keeps_a_training_file_and_refuses_a_hidden_name(tmp_path):
    """However large val_fraction, one file trains (else 'wrote 0 train tokens' and train.py calls it unprepared);
    a name starting with '.' would make hidden shards, which reading never sees."""
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (("a.txt", "hello world"), ("b.py", "def f(): pass"), ("c.md", "second file here")):
        (src / name).write_text(text)
    meta = prepare_textdir(str(src), str(tmp_path / "out"), "de", exts=(".txt", ".py", ".md"), val_fraction=0.99,
                           workers=1)
    assert meta["train_files"] == 1 and meta["train_tokens"] > 0 and find_shards(tmp_path / "out", "train")
    with pytest.raises(ValueError, match="not starting with '.'"):
        prepare_textdir(str(src), str(tmp_path / "hid"), ".hidden", exts=(".txt",), workers=1)


def test_textdir_follows_a_link_to_a_folder_but_not_a_loop(tmp_path, monkeypatch):
    from data.textdir.prepare import list_files
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "e.txt").write_text("linked")
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "l.txt").write_text("local")
    (src / "sub" / "s.txt").write_text("in sub")
    os.symlink(tmp_path / "elsewhere", src / "linked")
    os.symlink(src, src / "loop")
    os.symlink(src / "sub", src / "sub" / "deeper" / "back")  # a loop to a folder inside src, above the link
    os.symlink(tmp_path, src / "up")  # a folder above src: it would read src's siblings (elsewhere/ again, and more)
    assert list_files(str(src), (".txt",))[0] == ["l.txt", "linked/e.txt", "sub/s.txt"]
    monkeypatch.chdir(src)  # --src . : the folders above are the real ones, not those of the path '.'
    assert list_files(".", (".txt",))[0] == ["l.txt", "linked/e.txt", "sub/s.txt"]


def test_the_split_of_a_path_is_the_same_in_every_process_and_version():
    """path_hash is sha256's, not Python's hash() (salted afresh in each process): a dataset prepared again, on any
    machine, puts each file on the same side."""
    assert (path_hash("a.txt"), path_hash("sub/c.txt")) == (0.09655446037742849, 0.3486161617206705)


def test_textdir_main_reads_src_dot_and_records_what_it_read(tmp_path, monkeypatch):
    """--src . names the dataset after the folder (not '.', a hidden name), --exts may hold spaces, and meta.json
    records the endings read and the folder's absolute path."""
    src = tmp_path / "mycode"
    make_text_folder(src)
    monkeypatch.chdir(src)
    load_script("textdir").main(["--src", ".", "--exts", ".txt, .md", "--out_dir", str(tmp_path / "out"),
                                 "--workers", "1"])
    meta = read_meta(tmp_path / "out")
    assert (meta["name"], meta["exts"], meta["source"]) == ("mycode", [".txt", ".md"], str(src))
    assert meta["train_files"] + meta["val_files"] == 7  # e.md read, the copy of a.txt and latin1.txt not


def test_textdir_counts_a_file_gone_since_the_listing_as_unreadable(tmp_path, monkeypatch):
    textdir = load_script("textdir")
    src = tmp_path / "src"
    make_text_folder(src)
    listed = textdir.list_files(str(src), (".txt",))
    monkeypatch.setattr(textdir, "list_files", lambda *args: (["0_gone.txt"] + listed[0], listed[1]))
    meta = textdir.prepare(str(src), str(tmp_path / "out"), "demo", workers=1)
    assert meta["unreadable_skipped"] == 1 and meta["train_files"] + meta["val_files"] == 6


def test_textdir_writes_into_data_name_again_but_not_into_a_scripts_folder(tmp_path, monkeypatch):
    """A dataset of the user's in data/NAME/ (no prepare.py there) is prepared again into it; a folder of data/ with
    its own prepare.py is refused, except textdir's own name (a dataset named textdir)."""
    textdir = load_script("textdir")
    monkeypatch.setattr(textdir, "DATA_ROOT", str(tmp_path))
    (tmp_path / "mycode").mkdir()  # an earlier preparation's shards
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "prepare.py").write_text("")
    (tmp_path / "textdir").mkdir()
    (tmp_path / "textdir" / "prepare.py").write_text("")
    textdir.check_not_the_repos("mycode")
    textdir.check_not_the_repos("textdir")
    with pytest.raises(ValueError, match="'theirs' is the name of this repo's folder data/theirs/"):
        textdir.check_not_the_repos("theirs")


def test_pystdlib_leaves_out_installed_packages_and_on_request_the_tests(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    for rel in ("os.py", "json/__init__.py", "test/test_os.py", "idlelib/idle_test/t.py", "tests/t.py",
                "site-packages/pkg/m.py", "dist-packages/d.py", "readme.txt"):
        (lib / rel).parent.mkdir(parents=True, exist_ok=True)
        (lib / rel).write_text(f"# {rel}\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(lib)})
    pystdlib = load_script("pystdlib")
    meta = pystdlib.prepare(out_dir=str(tmp_path / "all"), workers=1)
    assert meta["train_files"] + meta["val_files"] == 5 and not meta["source"].endswith("(without tests)")
    pystdlib.main(["--out_dir", str(tmp_path / "no_tests"), "--exclude_tests", "--workers", "1"])
    meta = read_meta(tmp_path / "no_tests")
    assert meta["train_files"] + meta["val_files"] == 2 and meta["source"].endswith("(without tests)")


def test_a_corrupt_encoder_json_leaves_the_prepared_dataset_as_it_was(tmp_path, monkeypatch):
    src = tmp_path / "src"
    make_text_folder(src)
    out = tmp_path / "out"
    prepare_textdir(str(src), str(out), "demo", exts=(".txt", ".md"), val_fraction=0.3, workers=1)
    before = sorted(os.listdir(out))
    (tmp_path / "encoder.json").write_text("{}")
    monkeypatch.setattr(data.shards, "GPT2_ENCODER", str(tmp_path / "encoder.json"))
    with pytest.raises(ValueError, match="not GPT-2's encoder.json"):
        prepare_textdir(str(src), str(out), "demo", exts=(".txt", ".md"), val_fraction=0.3, workers=1)
    assert sorted(os.listdir(out)) == before and read_meta(out)["complete"] is True


HALF_SENT_RESULT = """
import sys
import data.shards
import data.textdir.prepare as textdir

def big(path):  # far more than a pipe holds: a worker ended while sending it leaves half a message in the pipe
    return [1] * 300_000

def interrupted(self, tokens):  # Ctrl-C at the first result, while the other worker is sending its own
    raise KeyboardInterrupt

textdir._encode_file = big
data.shards.ShardWriter.add = interrupted
try:
    textdir.prepare(sys.argv[1], sys.argv[2], "half", workers=2)
except KeyboardInterrupt:
    print("stopped")
"""


def test_ctrl_c_while_a_worker_sends_its_result_ends_the_preparation(tmp_path):
    """end_workers ends a worker in the middle of sending a large result back: the pool must not wait for the rest,
    and its thread prints no traceback (Python 3.11 sets an error on the futures Ctrl-C cancelled)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(64):
        (src / f"f{i}.txt").write_text(f"file {i}\n")
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        try:
            done = subprocess.run([sys.executable, "-c", HALF_SENT_RESULT, str(src), str(out)], cwd=REPO,
                                  capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the preparation hung after Ctrl-C (pool.shutdown waits for a half-sent result)")
        assert done.stdout.strip().endswith("stopped") and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["bigram_backcopy", "fineweb", "openwebtext", "pystdlib", "textdir"])
def test_a_prepare_scripts_mistakes_are_one_line_and_no_option_is_guessed(name, tmp_path, capsys):
    """Every prepare.py: a mistake is one line, as every other command's (argparse printed its usage block first);
    an option is never taken from its first letters (--out_d for --out_dir prepared into the folder it named); an
    empty value (--out_dir=, a shell variable left unset) is refused, not taken for the working folder or for
    nothing. Each is refused before any work, exit status 1 (as every other command's refusal; argparse's was 2)."""
    main = importlib.import_module(f"data.{name}.prepare").main
    src = [] if name != "textdir" else ["--src=/nonexistent-folder"]
    for argv, says in (([f"--out_d={tmp_path}"], f"unrecognized arguments: --out_d={tmp_path}"),
                       (["--out_dir="], "--out_dir= is empty: name a value")):
        with pytest.raises(SystemExit) as e:
            main(src + argv)
        said = str(e.value.code)
        assert said.startswith(f"error: {says}") and said.endswith("; --help lists the options"), said
        assert "\n" not in said and not capsys.readouterr().err  # no usage block
