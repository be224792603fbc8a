"""
The default dataset, needing no download: the Python standard library's own .py files on this machine
(about 15M GPT-2 tokens for CPython 3.11 with its test suite), tokenized as data/textdir does it.

    python data/pystdlib/prepare.py [--max_files N] [--exclude_tests]

train.py runs this by itself the first time it is asked for dataset=pystdlib. The text depends on the
Python version that runs it; meta.json records which.
"""

import os
import platform
import sys
import sysconfig

# Runnable as `python data/pystdlib/prepare.py` from anywhere: put the repo root on the path for `data`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data import PrepareParser, path_arg, run_preparation  # noqa: E402
from data.shards import given_options, prepare_command  # noqa: E402
from data.textdir.prepare import prepare as prepare_textdir  # noqa: E402

DATA_DIR = os.path.dirname(os.path.abspath(__file__))
NOT_STDLIB = ("site-packages", "dist-packages")  # installed packages live inside the stdlib folder
TEST_DIRS = ("test", "tests", "idle_test")


def prepare(out_dir=DATA_DIR, max_files=None, exclude_tests=False, workers=None, command=None):
    src = sysconfig.get_paths()["stdlib"]
    skip = NOT_STDLIB + (TEST_DIRS if exclude_tests else ())
    source = f"Python {platform.python_version()} standard library, {src}" + (" (without tests)" if exclude_tests else "")
    return prepare_textdir(src, out_dir, "pystdlib", exts=(".py",), skip_dirs=skip, max_files=max_files,
                           workers=workers, source=source, command=command)


def main(argv=None):
    parser = PrepareParser("Tokenize this Python's standard library into train/val shards.")
    parser.add_argument("--out_dir", default=DATA_DIR, type=path_arg, help="where to write (default: data/pystdlib)")
    parser.add_argument("--max_files", type=int, help="read only the first N files (sorted), e.g. for a quick test")
    parser.add_argument("--exclude_tests", action="store_true", help="leave out the test suites (about two thirds of the tokens)")
    parser.add_argument("--workers", type=int, help="tokenizer processes (default: all cores)")
    args = parser.parse_args(argv)
    again = prepare_command(args.out_dir, "pystdlib", options=given_options(parser, args, ("out_dir", "workers")))
    run_preparation(lambda: prepare(args.out_dir, args.max_files, args.exclude_tests, args.workers, again),
                    args.out_dir)


if __name__ == "__main__":
    main()
