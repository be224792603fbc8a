"""sample.py's answers to files it cannot sample from."""

import os
import shlex
import subprocess
import sys

import pytest
import torch

import sample


class NotATensor:  # an object a weights-only load refuses: what torch's message would advise loading unsafely
    pass


@pytest.mark.parametrize("content", ["text", "object"])
def test_a_file_that_is_not_a_checkpoint_is_named_so_without_unsafe_advice(tmp_path, content):
    """Never torch's advice to reload with weights_only=False (it runs whatever code the file holds): one line saying
    it is not a checkpoint of this project and what is read instead."""
    path = tmp_path / "ckpt.pt"
    if content == "text":
        path.write_text("hello, world\n")
    else:
        torch.save({"model": NotATensor()}, path)
    with pytest.raises(SystemExit) as e:
        sample.main([f"--out_dir={tmp_path}", "--device=cpu"])
    message = str(e.value.code)
    assert message.startswith(f"error: {path} is not a checkpoint of this project") and "\n" not in message, message
    assert "weights_only" not in message and "train.py" in message and "ckpt.pt" in message
    assert ("it is not a file torch.save wrote" if content == "text" else "it holds Python objects other than tensors")\
        in message


@pytest.mark.parametrize("field, value, said", [("config", None, "its config is NoneType, not dict"),
                                                ("iter_num", "abc", "its iter_num is str, not int"),
                                                ("iter_num", True, "its iter_num is bool, not int")])
def test_a_checkpoint_whose_fields_are_of_other_types_is_refused_in_one_line(tmp_path, field, value, said):
    """A file torch.save wrote with the keys but not their types (another program's, or edited) failed far from the
    file, with a traceback: in resume_settings, at iter_num's first comparison, or in sample.py itself."""
    checkpoint = small_run(tmp_path, tmp_path)
    torch.save({**checkpoint, field: value}, tmp_path / "ckpt.pt")
    assert error_of([f"--out_dir={tmp_path}", "--device=cpu"]) == \
        f"error: {tmp_path / 'ckpt.pt'} is not a train.py checkpoint: {said}"


def small_run(run_dir, data_dir, vocab_size=65):
    """A train.py-format checkpoint of a tiny model over vocab_size ids (the sink lab's 65 by default), its data
    named by data_dir."""
    import dataclasses
    import os
    from model import GPT, GPTConfig
    from runfolder import save_checkpoint
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=vocab_size, n_layer=1, n_head=1, n_embd=16)
    os.makedirs(run_dir, exist_ok=True)
    checkpoint = {"model": GPT(cfg).state_dict(), "model_args": dataclasses.asdict(cfg), "iter_num": 1,
                  "config": {"dataset": "bigram_backcopy", "data_dir": str(data_dir), "bos": True}}
    save_checkpoint(checkpoint, os.path.join(run_dir, "ckpt.pt"))
    return checkpoint


def error_of(argv):
    with pytest.raises(SystemExit) as e:
        sample.main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


def test_a_missing_dataset_folder_is_named_with_the_command_that_prepares_it(tmp_path):
    """The run's ids are decoded with its dataset's tokenizer: without the folder, no guess at GPT-2's (whose ids the
    model's 65-entry vocabulary does not hold), but one line naming the folder and the command that prepares it."""
    small_run(tmp_path / "run", tmp_path / "gone")
    message = error_of([f"--out_dir={tmp_path / 'run'}", "--device=cpu", "--max_new_tokens=2", "--num_samples=1"])
    assert f"the dataset folder of {tmp_path / 'run' / 'ckpt.pt'}, {tmp_path / 'gone'}, is missing" in message
    assert f"python data/bigram_backcopy/prepare.py --out_dir {tmp_path / 'gone'}" in message


def test_the_checkpoints_own_tokenizer_decodes_without_the_data_and_after_it_changed(tmp_path, capsys):
    """train.py's checkpoint records its tokenizer: sample.py decodes with it, with no dataset folder at all, and
    after the folder was prepared again with another tokenizer (which would shift the BOS id and decode wrongly)."""
    from data.bigram_backcopy.prepare import prepare
    checkpoint = small_run(tmp_path / "run", tmp_path / "gone")
    checkpoint["tokenizer"] = "symbols-64"  # the sink lab's: 64 symbols and BOS, 65 ids
    torch.save(checkpoint, tmp_path / "run" / "ckpt.pt")
    argv = [f"--out_dir={tmp_path / 'run'}", "--device=cpu", "--dtype=float32", "--max_new_tokens=3", "--num_samples=1"]
    capsys.readouterr()
    sample.main(argv)
    assert capsys.readouterr().out.startswith("<|endoftext|> s")
    prepare(out_dir=str(tmp_path / "gone"), train_tokens=2_000, val_tokens=1_000, vocab=32)  # BOS is id 32 now
    capsys.readouterr()
    sample.main([*argv, "--start=s40"])  # a symbol of the run's 64, not of the folder's 32
    assert capsys.readouterr().out.startswith("s40 s")


def test_a_model_that_is_not_finite_is_named_as_such(tmp_path, capsys):
    from data.bigram_backcopy.prepare import prepare
    prepare(out_dir=str(tmp_path / "data"), train_tokens=2_000, val_tokens=1_000)
    checkpoint = small_run(tmp_path / "run", tmp_path / "data")
    argv = [f"--out_dir={tmp_path / 'run'}", "--device=cpu", "--dtype=float32", "--max_new_tokens=3", "--num_samples=1"]
    capsys.readouterr()
    sample.main(argv)  # finite: it samples the task's symbols
    assert capsys.readouterr().out.startswith("<|endoftext|> s")
    checkpoint["model"]["transformer.wte.weight"][:] = float("nan")
    torch.save(checkpoint, tmp_path / "run" / "ckpt.pt")
    message = error_of(argv)
    assert f"the model in {tmp_path / 'run' / 'ckpt.pt'} is not finite" in message
    assert "transformer.wte.weight" in message and "--checkpoint=best.pt" in message


def test_a_checkpoint_that_is_a_folder_is_named_so(tmp_path):
    (tmp_path / "ckpt.pt").mkdir()
    message = error_of([f"--out_dir={tmp_path}", "--device=cpu"])
    assert message == (f"error: {tmp_path / 'ckpt.pt'} is a folder: --out_dir names the run's folder and "
                       "--checkpoint a file in it (ckpt.pt or best.pt)")


def test_a_dataset_prepared_again_with_a_larger_tokenizer_is_named_not_a_traceback(tmp_path):
    """The sink lab's dataset prepared again with more symbols (or as GPT-2 text): its tokenizer's ids run past the
    model's vocabulary, which would index out of range mid-sample. One line instead, before any sampling."""
    from data.bigram_backcopy.prepare import prepare
    prepare(out_dir=str(tmp_path / "data"), train_tokens=2_000, val_tokens=1_000)
    small_run(tmp_path / "run", tmp_path / "data", vocab_size=33)  # fewer ids than the task's tokenizer has
    message = error_of([f"--out_dir={tmp_path / 'run'}", "--device=cpu", "--max_new_tokens=2", "--num_samples=1"])
    assert message.startswith(f"error: {tmp_path / 'run' / 'ckpt.pt'} was trained with 33 token ids, but its "
                              "dataset's tokenizer now has ") and "prepared again with another tokenizer" in message


def test_a_checkpoint_without_a_tokenizer_on_data_prepared_again_since_gets_a_note(tmp_path, capsys):
    """A checkpoint older than recorded tokenizers but with the data's fingerprint (2026-11-27 to 12-01): the data
    prepared again with a smaller tokenizer (32 symbols for the run's 64) has ids the model holds, so it would sample
    nonsense silently. A note says the data changed since; the data as trained gets none."""
    from data.bigram_backcopy.prepare import prepare
    from data.shards import dataset_fingerprint
    prepare(out_dir=str(tmp_path / "data"), train_tokens=2_000, val_tokens=1_000)
    checkpoint = small_run(tmp_path / "run", tmp_path / "data")
    checkpoint["data_fingerprint"] = dataset_fingerprint(str(tmp_path / "data"))
    torch.save(checkpoint, tmp_path / "run" / "ckpt.pt")
    argv = [f"--out_dir={tmp_path / 'run'}", "--device=cpu", "--dtype=float32", "--max_new_tokens=3", "--num_samples=1"]
    capsys.readouterr()
    sample.main(argv)
    assert capsys.readouterr().out.startswith("<|endoftext|> s")
    prepare(out_dir=str(tmp_path / "data"), train_tokens=2_000, val_tokens=1_000, vocab=32)
    capsys.readouterr()
    sample.main(argv)
    assert capsys.readouterr().out.startswith(
        f"note: the train and val shards in {tmp_path / 'data'} changed since {tmp_path / 'run' / 'ckpt.pt'} was "
        "trained: decoding with the tokenizer its meta.json names now, symbols-32; if the data was prepared with "
        "another tokenizer since, the text is wrong\n<|endoftext|> s")


def test_ctrl_c_is_one_line_and_the_shells_status(monkeypatch, capsys):
    """An interrupted sample.py (or any script run through cli.run_main) says so in one line, exit status 130."""
    import cli

    def interrupted():
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as e:
        cli.run_main(interrupted)
    assert e.value.code == 130 and capsys.readouterr().err == "interrupted (Ctrl-C)\n"


def test_output_into_a_closed_pipe_is_one_line(tmp_path):
    """`python sample.py ... | head -1` (or any script run through cli.run_main): the reader stops reading, and the
    script says so in one line on stderr, never a BrokenPipeError traceback."""
    script = tmp_path / "many.py"
    script.write_text("import cli\n\ndef main():\n    for i in range(10**6):\n        print(i)\n\n"
                      "cli.run_main(main)\n", encoding="utf-8")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} | head -1", shell=True, cwd=repo,
                         env={"PYTHONPATH": repo, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert out.stdout == "0\n" and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("stopped: the program reading this output closed it") and out.stderr.count("\n") == 1


def test_a_checkpoint_given_as_the_folder_is_told_apart(tmp_path):
    """--out_dir=run/ckpt.pt: one line saying which key names what, not the advice to train a run there."""
    (tmp_path / "ckpt.pt").write_bytes(b"x")
    message = error_of([f"--out_dir={tmp_path / 'ckpt.pt'}", "--device=cpu"])
    assert message == (f"error: {tmp_path / 'ckpt.pt'} is a file, not a run's folder: --out_dir names the folder and "
                       f"--checkpoint the file in it (--out_dir={tmp_path} --checkpoint=ckpt.pt)")


def test_a_prompt_file_under_the_home_folder_is_read_as_a_shell_would(tmp_path, monkeypatch):
    """--start=FILE:~/prompt.txt (quoted, or from a config file, no shell expands it): ~ is the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "prompt.txt").write_text("def f(")
    assert sample.read_prompt("FILE:~/prompt.txt") == "def f("


@pytest.mark.parametrize("given", ["--out_dir=out/g1", "--checkpoint=best.pt"])
def test_a_published_model_and_a_run_are_not_both_given(given):
    """--pretrained samples a published model: a run's folder or checkpoint given too is one line, not ignored."""
    with pytest.raises(SystemExit, match="give one or the other"):
        sample.main(["--pretrained=gpt2", given])


# ----------------------------------------------------------------------------
# sample.py's settings, prompt and sampling, each decision on its own

def symbols_run(run_dir, vocab_size=65, **model):
    """small_run's checkpoint recording its tokenizer (the sink lab's 64 symbols and BOS, id 64): no dataset
    needed. Returns the argv that samples it on the CPU."""
    checkpoint = small_run(run_dir, run_dir / "no-data", vocab_size)
    checkpoint["tokenizer"] = "symbols-64"
    for name, change in model.items():
        change(checkpoint["model"][name])
    torch.save(checkpoint, run_dir / "ckpt.pt")
    return [f"--out_dir={run_dir}", "--device=cpu", "--dtype=float32"]


@pytest.mark.parametrize("arg, words", [
    ("--max_new_tokens=0", "max_new_tokens=0 must be at least 1"),
    ("--top_k=-1", "top_k=-1 must be 0 (all tokens) or a positive number of tokens"),
    ("--seed=-1", f"seed=-1 must be in 0..{2**63 - 1}"),
    (f"--seed={2**64}", f"seed={2**64} must be in 0..{2**63 - 1}"),  # torch.manual_seed's overflow, never reached
    (f"--seed={2**63}", f"seed={2**63} must be in 0..{2**63 - 1}"),  # too large, not negative
])
def test_settings_out_of_range_are_refused_before_anything_is_loaded(arg, words):
    assert error_of(["--out_dir=/nonexistent-run", arg]) == f"error: {words}"


def test_a_prompt_file_that_is_not_text_is_one_line(tmp_path):
    (tmp_path / "prompt.txt").write_bytes(b"\xff\xfe\x00binary")
    message = error_of([f"--start=FILE:{tmp_path / 'prompt.txt'}"])
    assert message.startswith(f"error: --start=FILE:{tmp_path / 'prompt.txt'}: cannot read the prompt file (")
    assert "utf-8" in message


def test_prompt_ids_put_one_endoftext_first_for_a_bos_model():
    from data.shards import get_tokenizer
    enc = get_tokenizer("symbols-64")
    assert sample.prompt_ids("s3 s4", enc, True) == ([64, 3, 4], True)
    assert sample.prompt_ids("<|endoftext|> s3", enc, True) == ([64, 3], False)  # already there: not twice
    assert sample.prompt_ids("s3 <|endoftext|>", enc, True) == ([64, 3, 64], True)
    assert sample.prompt_ids("s3 s4", enc, False) == ([3, 4], False)


@pytest.mark.parametrize("start, words", [("", "the prompt is empty"),
                                          ("hello", "--start: 'hello' is not a token of symbols-64")])
def test_a_prompt_the_tokenizer_cannot_read_is_one_line(tmp_path, start, words):
    argv = symbols_run(tmp_path / "run")
    assert words in error_of([*argv, f"--start={start}", "--num_samples=1", "--max_new_tokens=1"])


def test_a_long_prompt_is_counted_without_the_added_endoftext(tmp_path, capsys):
    """block_size 16: a prompt of 15 symbols after the added <|endoftext|> fits (no note); one of 20 is said to be
    20 tokens, of which the model reads <|endoftext|> and the last 15."""
    argv = symbols_run(tmp_path / "run") + ["--num_samples=1", "--max_new_tokens=1"]
    capsys.readouterr()
    sample.main([*argv, "--start=" + " ".join(f"s{i}" for i in range(15))])
    out = capsys.readouterr().out
    assert "note:" not in out and out.startswith("s0 s1 ")
    sample.main([*argv, "--start=" + " ".join(f"s{i}" for i in range(20))])
    assert capsys.readouterr().out.startswith("note: the prompt is 20 tokens after <|endoftext|>, 21 with it, more "
                                              "than the model's block_size, 16: it reads <|endoftext|> and the last "
                                              "15\n")
    # exactly block_size symbols: with the added <|endoftext|> one too many, and said so (not "16 ... more than 16")
    sample.main([*argv, "--start=" + " ".join(f"s{i}" for i in range(16))])
    assert capsys.readouterr().out.startswith("note: the prompt is 16 tokens after <|endoftext|>, 17 with it, more "
                                              "than the model's block_size, 16: it reads <|endoftext|> and the last "
                                              "15\ns0 s1 ")


def test_a_bos_model_keeps_its_endoftext_first_when_the_text_outgrows_its_block(tmp_path, monkeypatch):
    """What sample.py asks of model.generate (tested in test_model): keep position 0, sample the tokenizer's ids."""
    argv = symbols_run(tmp_path / "run") + ["--num_samples=1", "--max_new_tokens=2", "--start=s1 s2"]
    seen = []
    from model import GPT
    real = GPT.generate

    def generate(self, idx, *args, **kwargs):
        seen.append(kwargs)
        return real(self, idx, *args, **kwargs)
    monkeypatch.setattr(GPT, "generate", generate)
    sample.main(argv)
    assert seen[0]["keep_first"] is True and seen[0]["n_vocab"] == 65


def test_one_weight_that_is_not_finite_is_named(tmp_path):
    def one_nan(w):
        w[3, 5] = float("nan")
    argv = symbols_run(tmp_path / "run", **{"transformer.wte.weight": one_nan})
    assert "is not finite (NaN or infinite weights in 1 tensor(s), e.g. transformer.wte.weight)" in error_of(argv)


def test_a_dataset_folder_without_meta_json_is_told_from_a_missing_one(tmp_path):
    (tmp_path / "data").mkdir()
    small_run(tmp_path / "run", tmp_path / "data")
    message = error_of([f"--out_dir={tmp_path / 'run'}", "--device=cpu"])
    assert f"{tmp_path / 'data'}, holds no prepared dataset (no meta.json)" in message


def test_only_the_tokenizers_ids_are_sampled_from_a_padded_vocabulary(tmp_path, capsys):
    """vocab_size 128 pads the tokenizer's 65 ids: at a temperature that makes every id about as likely, the 63
    padding ids (no text: they would print as s64 ... s127) are never sampled."""
    argv = symbols_run(tmp_path / "run", vocab_size=128)
    capsys.readouterr()
    sample.main([*argv, "--start=s1", "--temperature=100", "--top_k=0", "--num_samples=2", "--max_new_tokens=40"])
    words = capsys.readouterr().out.replace("-" * 40, "").split()
    assert len(words) == 2 * 41
    assert all(w == "<|endoftext|>" or int(w[1:]) < 64 for w in words), words


def test_samples_follow_one_seed_one_after_another_and_greedy_ignores_it(tmp_path, capsys):
    """One seed for the whole command: its samples differ from each other. top_k=1 (or a temperature near 0) is
    greedy decoding: the same text whatever the seed."""
    argv = symbols_run(tmp_path / "run") + ["--start=s1", "--max_new_tokens=12"]

    def samples(*args):
        capsys.readouterr()
        sample.main([*argv, *args])
        return capsys.readouterr().out.split("-" * 40 + "\n")[:-1]
    first, second = samples("--num_samples=2", "--temperature=2.0", "--top_k=0")
    assert first != second
    for greedy in ("--top_k=1", "--temperature=1e-6"):
        assert samples("--num_samples=1", greedy, "--seed=1") == samples("--num_samples=1", greedy, "--seed=2")
    assert samples("--num_samples=1", "--temperature=2.0", "--seed=1") != \
        samples("--num_samples=1", "--temperature=2.0", "--seed=2")


def test_a_checkpoint_without_run_settings_is_decoded_with_gpt2s_bpe(tmp_path, capsys):
    """A checkpoint with no train.py settings (no dataset named) and no tokenizer: GPT-2's BPE, said in a note; nor
    does it say it was trained on BOS windows: no <|endoftext|> is put first."""
    checkpoint = small_run(tmp_path, tmp_path / "no-data", vocab_size=50257)
    del checkpoint["config"]
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    capsys.readouterr()
    sample.main([f"--out_dir={tmp_path}", "--device=cpu", "--start=" + " ".join(["Hello"] * 20), "--num_samples=1",
                 "--max_new_tokens=2"])
    out = capsys.readouterr().out
    assert out.startswith(f"note: {tmp_path / 'ckpt.pt'} names no dataset, so no tokenizer: decoding with GPT-2's BPE\n"
                          "note: the prompt is 20 tokens, more than the model's block_size, 16: it reads the last 16\n"
                          "Hello Hello")


def test_a_checkpoint_naming_no_dataset_is_not_said_to_have_had_its_dataset_prepared_again(tmp_path):
    """A checkpoint without train.py's settings and tokenizer, over fewer ids than GPT-2's BPE: it names no dataset,
    so no dataset was 'prepared again'; the line says the checkpoint records no tokenizer to decode it with."""
    checkpoint = small_run(tmp_path, tmp_path / "no-data")
    del checkpoint["config"]
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    message = error_of([f"--out_dir={tmp_path}", "--device=cpu"])
    assert "prepared again" not in message and "records no tokenizer" in message, message
