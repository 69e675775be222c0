"""Command-line plumbing shared by every `python -m sglang_ddtree ...` entry point.

A user error is one line on stderr (`prog: error: ...`) and exit status 2; `--help` exits 0. Argument
types check values where argparse reads them, so a bad value never reaches the code as a traceback.
"""
from __future__ import annotations

import argparse
import math
import sys


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse's default prints the whole usage block first)."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (--help lists the options)\n")
        sys.exit(2)


def fail(prog: str, message: str, status: int = 2):
    """One-line user error from code that is past argument parsing."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(status)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_int_list(text: str) -> list[int]:
    """'8,32,64' -> [8, 32, 64]; every item a positive integer."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return [positive_int(t) for t in items]


def nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def device(text: str) -> str:
    """'cpu' or 'cuda[:i]', and CUDA only where torch sees a GPU."""
    import torch

    name = text.strip().lower()
    if name != "cpu" and name != "cuda" and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise argparse.ArgumentTypeError(f"expected cpu or cuda (or cuda:N), got {text!r}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        build = ("without CUDA" if torch.version.cuda is None
                 else f"with CUDA {torch.version.cuda}, but no GPU is visible")
        raise argparse.ArgumentTypeError(f"{text!r} is not available: torch {torch.__version__} is built {build}")
    return name
