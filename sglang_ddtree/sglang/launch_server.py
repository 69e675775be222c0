"""`python -m sglang_ddtree.launch_server`: SGLang's launch_server plus DDTree's own flags.

DDTree's flags are the settings table's (settings.py: `--speculative-ddtree-budget`, `-topk`, `-anchor`); each
sets its environment variable, which the argument hooks (args.py) read in this process (the round's into one
RoundConfig, published to the scheduler processes SGLang spawns), and every other argument goes to SGLang
unchanged. `--speculative-algorithm ddtree` is added when absent. `--help` shows these flags, then
SGLang's own.
"""
from __future__ import annotations

import argparse
import runpy
import sys

from .._cli import Parser, fail, positive_int, prog
from .args import ALGORITHM
from .settings import AUTO, TABLE, Var

PROG = prog("launch_server")


def budget_arg(text: str):
    """A tree budget (positive integer) or 'auto'."""
    return AUTO if text.strip().lower() == AUTO else positive_int(text)


def given(ours: argparse.Namespace, var: Var):
    """The value given for a flag of the settings table (None: not given)."""
    return getattr(ours, var.flag.lstrip("-").replace("-", "_"))


def _flag_kwargs(var: Var) -> dict:
    kinds = {"budget": {"type": budget_arg}, "int": {"type": positive_int}, "choice": {"choices": var.choices}}
    return {**kinds[var.kind], "default": None,
            "help": f"{var.help.replace('`', '')} (sets {var.name})"}


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, add_help=False, description="DDTree's flags (every other flag goes to SGLang):")
    for var in TABLE:
        if var.flag:
            p.add_argument(var.flag, metavar=None if var.kind == "choice" else var.metavar, **_flag_kwargs(var))
    return p


def split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    from sglang_ddtree.sizes import MAX_CUDA_BUDGET, budget_error

    p = parser()
    ours, rest = p.parse_known_args(argv)
    budget = ours.speculative_ddtree_budget
    if budget not in (None, AUTO) and budget_error(budget, MAX_CUDA_BUDGET) is not None:
        p.error(f"argument --speculative-ddtree-budget: at most {MAX_CUDA_BUDGET} (the CUDA tree builder's limit), "
                f"got {budget}")
    if not any(a == "--speculative-algorithm" or a.startswith("--speculative-algorithm=") for a in rest):
        from .args import active_algorithm

        rest = ["--speculative-algorithm", active_algorithm(), *rest]
    return ours, rest


def sglang_import_error() -> str | None:
    """Why SGLang cannot start here (not installed, unsupported, or an import that fails), else None."""
    from .adapters import registration, releases
    from .check import _import_failure

    try:
        rel = releases.check_version()
    except releases.UnsupportedSGLangVersion as e:
        return str(e)
    try:
        registration.probe()
    except ImportError as e:
        return " ".join(_import_failure(rel, e)).replace("FAIL: ", "")
    return None


def _device(argv: list[str]) -> str | None:
    """The --device SGLang will be given (None: its default)."""
    for i, a in enumerate(argv):
        if a == "--device" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--device="):
            return a.split("=", 1)[1]
    return None


def main(argv=None) -> None:
    import os

    argv = sys.argv[1:] if argv is None else argv
    wants_help = any(a in ("-h", "--help") for a in argv)
    if wants_help:
        parser().print_help()
        print()
    problem = sglang_import_error()
    if problem is not None:
        if wants_help:
            print(f"(SGLang's own flags are listed once SGLang runs here: {problem})")
            sys.exit(0)
        fail(PROG, problem, 1)
    from .plugin import register

    register()  # decides the algorithm's name (DDTREE, or the alternative if this SGLang reserves it)
    ours, rest = split_args(argv)
    for var in TABLE:  # the settings travel to the scheduler processes as their environment variables
        if var.flag and given(ours, var) is not None:
            os.environ[var.name] = str(given(ours, var))
    sys.argv = [sys.argv[0], *rest]
    try:
        if _device(rest) == "cpu":
            from .args import check_cpu_install

            check_cpu_install()
        runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    except ValueError as e:  # DDTree's start-up refusals (args.py) are one line each, before any model loads
        if not str(e).startswith(ALGORITHM):
            raise
        fail(PROG, str(e), 2)


if __name__ == "__main__":
    main()
