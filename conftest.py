import os

# No internet here: point tiktoken at the GPT-2 BPE files shipped beside the checkout, if present.
_cache = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared", "tiktoken-cache")
if os.path.isdir(_cache):
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.abspath(_cache))

# Without a GPU, run the Triton kernels through Triton's CPU interpreter (must be set before triton is imported).
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass
