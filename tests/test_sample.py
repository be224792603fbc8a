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
