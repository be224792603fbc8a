import os

import numpy as np
import pytest
import torch

# Without a GPU, run the Triton kernels through Triton's CPU interpreter (must be set before triton is imported).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from data.shards import write_dataset  # noqa: E402  (after TRITON_INTERPRET: nothing here imports triton, but keep it so)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """A small dataset of random GPT-2 token ids (dataset name 'toy'): analysis and the study need windows, not meaning."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    docs = {split: [rng.integers(0, 50000, n, dtype=np.uint16) for n in (3000, 2000)] for split in ("train", "val")}
    write_dataset(str(root), "toy", docs, source="random tokens")
    return str(root)
