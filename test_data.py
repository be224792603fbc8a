"""Tests of the shard format, the loaders and the prepare scripts (CPU, a few seconds)."""

import importlib
import json
import os
import sys

import numpy as np
import pytest
import torch

from data.shards import (HEADER_BYTES, MAGIC, ShardWriter, TokenWindows, TrainLoader, atomic_write, find_shards,
                         get_tokenizer, read_header, read_shard, val_batches, write_dataset, write_shard)
from data.textdir.prepare import path_hash, prepare as prepare_textdir

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

def test_shard_round_trip(tmp_path):
    tokens = np.array([0, 1, 50256, 65535, 7], dtype=np.int64)
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


# ----------------------------------------------------------------------------
# the loaders

@pytest.fixture
def two_shards(tmp_path):
    """Train shards whose tokens tell where they came from: shard 0 holds 0..99, shard 1 holds 1000..1049."""
    write_shard(tmp_path / "d_train_000000.bin", np.arange(100))
    write_shard(tmp_path / "d_train_000001.bin", np.arange(1000, 1050))
    write_shard(tmp_path / "d_val_000000.bin", np.arange(2000, 2300))
    return tmp_path


def test_windows_are_contiguous_and_never_span_shards(two_shards):
    windows = TokenWindows(two_shards, "train", length=9)
    assert len(windows) == (100 - 8) + (50 - 8)
    x, y = windows.batch(np.arange(len(windows)))
    rows = torch.cat([x, y[:, -1:]], dim=1)
    assert (rows[:, 1:] - rows[:, :-1] == 1).all()  # consecutive tokens of one shard, none crossing over
    assert rows[0, 0] == 0 and rows[91, -1] == 99 and rows[92, 0] == 1000 and rows[-1, -1] == 1049


def test_train_loader_is_seeded_and_resumable(two_shards):
    a = TrainLoader(two_shards, block_size=8, batch_size=4, seed=1)
    first = [a.next_batch()[0] for _ in range(3)]
    state = a.state_dict()
    after = [a.next_batch()[0] for _ in range(3)]
    b = TrainLoader(two_shards, block_size=8, batch_size=4, seed=1)
    assert all(torch.equal(u, v) for u, v in zip(first, [b.next_batch()[0] for _ in range(3)]))
    c = TrainLoader(two_shards, block_size=8, batch_size=4, seed=999)
    c.load_state_dict(state)
    assert all(torch.equal(u, v) for u, v in zip(after, [c.next_batch()[0] for _ in range(3)]))
    assert not torch.equal(first[0], TrainLoader(two_shards, 8, 4, seed=2).next_batch()[0])


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


def test_textdir_prepare(tmp_path):
    src = tmp_path / "src"
    files = make_text_folder(src)
    enc = get_tokenizer()
    meta = prepare_textdir(str(src), str(tmp_path / "out"), "demo", exts=(".txt", ".md"), val_fraction=0.3,
                           shard_tokens=16, workers=2)

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
    with pytest.raises(SystemExit, match="is not a folder"):
        script.main(["--src", str(tmp_path / "missing"), "--out_dir", str(tmp_path / "out")])


def test_pystdlib_prepare(tmp_path):
    import sysconfig
    meta = load_script("pystdlib").prepare(out_dir=str(tmp_path), max_files=40, workers=2)
    assert "standard library" in meta["source"] and meta["max_files"] == 40
    assert meta["train_files"] + meta["val_files"] + meta["duplicates_skipped"] + meta["not_utf8_skipped"] == 40
    assert meta["val_files"] >= 1 and meta["train_tokens"] > 10 * meta["val_tokens"] > 0
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


def test_fineweb_prepare_without_the_network(tmp_path, monkeypatch):
    fineweb = load_script("fineweb")
    assert fineweb.shard_names(2) == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"]

    def fake_download(names, out_dir):  # stands in for the hub: llm.c-format shards, as the real ones are
        for i, name in enumerate(names):
            hand_written_shard(os.path.join(out_dir, name), np.arange(100 + i))
    monkeypatch.setattr(fineweb, "download", fake_download)
    fineweb.main(["--shards", "2", "--out_dir", str(tmp_path)])
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert (meta["train_tokens"], meta["val_tokens"]) == (101 + 102, 100)
    assert meta["train_shards"] == ["fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert TrainLoader(tmp_path, block_size=50, batch_size=2, seed=0).next_batch()[0].shape == (2, 50)

    with pytest.raises(SystemExit, match="between 1 and 103"):
        fineweb.main(["--shards", "0", "--out_dir", str(tmp_path)])


@pytest.mark.parametrize("name, package", [("fineweb", "huggingface_hub"), ("openwebtext", "datasets")])
def test_missing_optional_dependency_names_the_pip_command(tmp_path, monkeypatch, name, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail, installed or not
    with pytest.raises(SystemExit, match=f"pip install {package}"):
        load_script(name).main(["--out_dir", str(tmp_path)])
