"""Command-line plumbing shared by every `python -m sglang_ddtree ...` entry point.

A user error is one line on stderr (`prog: error: ...`) and exit status 2; `--help` exits 0. Argument
types check values where argparse reads them, so a bad value never reaches the code as a traceback. Every
command's usage line names it as the top-level help lists it (`prog`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile


PROG = "python -m sglang_ddtree"


def prog(*command: str) -> str:
    """A command's name in its usage and errors: `python -m sglang_ddtree demo`, `... bench tree` (each also runs
    as `python -m MODULE`; one name keeps the help from naming it two ways)."""
    return " ".join((PROG, *command))


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


def int_at_most(limit: int, why: str):
    """A positive integer no larger than `limit` (`why` says where the limit comes from, in the error)."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"at most {limit} ({why}), got {value}")
        return value
    return parse


def positive_int_list(text: str) -> list[int]:
    """'8,32,64' -> [8, 32, 64]; every item a positive integer."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return [positive_int(t) for t in items]


def int_list_at_most(limit: int, why: str):
    """positive_int_list, every item no larger than `limit` (`why` says where the limit comes from)."""
    def parse(text: str) -> list[int]:
        values = positive_int_list(text)
        if max(values) > limit:
            raise argparse.ArgumentTypeError(f"at most {limit} ({why}), got {max(values)}")
        return values
    return parse


def choice_list(*choices: str):
    """'a,b' -> ['a', 'b'], every item one of `choices`."""
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(choices)}, got {text!r}")
        return items
    return parse


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


def _probe_writable(folder: str) -> None:
    """Create and delete a file in `folder` (permission bits do not tell: root passes them, /proc refuses)."""
    fd, name = tempfile.mkstemp(dir=folder or ".", prefix=".write-probe-")
    os.close(fd)
    os.unlink(name)


def output_file(text: str) -> str:
    """A file this run may write: its folder exists and takes a new file (checked before the run, not after)."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, expected a file path")
    try:
        _probe_writable(os.path.dirname(text))
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {e.strerror or e}") from None
    return text


def output_dir(text: str) -> str:
    """A folder this run may write into, created now if missing (so a bad path fails before the run)."""
    try:
        os.makedirs(text, exist_ok=True)
        _probe_writable(text)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: {e.strerror or e}") from None
    return text


def write_json(path: str, obj) -> None:
    """The run's report, written whole (a long run calls it after every row, so one cut short keeps what it
    measured)."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
