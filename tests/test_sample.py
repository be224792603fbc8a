"""sample.py's answers to files it cannot sample from."""

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
