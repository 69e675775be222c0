"""`python -m sglang_ddtree.launch_server`: SGLang's launch_server plus DDTree's own flags.

  --speculative-ddtree-budget B   tree budget (sets --speculative-num-draft-tokens B+1 via SGLANG_DDTREE_BUDGET),
                                  or auto: chosen every round among SGLANG_DDTREE_AUTO_BUDGETS (default the
                                  chain's block-1 and 15, 31, 63) from the tree's prediction and measured cost
  --speculative-ddtree-topk K     per-depth candidate cap (SGLANG_DDTREE_TOPK; default min(B, vocab))
  --speculative-ddtree-anchor A   chain (default: the drafter's greedy chain always in the tree) or none (the
                                  paper's tree) (SGLANG_DDTREE_ANCHOR)

The flags travel as environment variables, which SGLang's spawned scheduler processes inherit; every other
argument goes to SGLang unchanged. `--speculative-algorithm ddtree` is added when absent. `--help` shows
these flags, then SGLang's own.
"""
from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys

from .._cli import Parser, fail, positive_int


def budget_arg(text: str):
    """A tree budget (positive integer) or 'auto'."""
    return "auto" if text.strip().lower() == "auto" else positive_int(text)



PROG = "python -m sglang_ddtree.launch_server"


def parser() -> argparse.ArgumentParser:
    from .args import ANCHORS, DEFAULT_BUDGET, ENV_ANCHOR, ENV_AUTO_BUDGETS, ENV_BUDGET, ENV_TOPK, MAX_BUDGET

    p = Parser(prog=PROG, add_help=False, description="DDTree's flags (every other flag goes to SGLang):")
    p.add_argument("--speculative-ddtree-budget", type=budget_arg, default=None, metavar="B",
                   help=f"tree budget, 1..{MAX_BUDGET} (sets {ENV_BUDGET}; verify width B + 1), or auto: chosen "
                        f"every round among {ENV_AUTO_BUDGETS} (default the chain's block-1 and 15, 31, 63); "
                        f"unset: auto for an MHA/GQA target on triton at page size 1, else {DEFAULT_BUDGET}")
    p.add_argument("--speculative-ddtree-topk", type=positive_int, default=None, metavar="K",
                   help=f"per-depth candidate cap (sets {ENV_TOPK}; default min(B, vocab))")
    p.add_argument("--speculative-ddtree-anchor", choices=tuple(ANCHORS), default=None,
                   help=f"chain (default): the drafter's greedy chain is always in the tree; none: the paper's "
                        f"tree (sets {ENV_ANCHOR})")
    return p


def split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    from .args import MAX_BUDGET

    p = parser()
    ours, rest = p.parse_known_args(argv)
    if ours.speculative_ddtree_budget not in (None, "auto") and ours.speculative_ddtree_budget > MAX_BUDGET:
        p.error(f"argument --speculative-ddtree-budget: at most {MAX_BUDGET} (the CUDA tree builder's limit), "
                f"got {ours.speculative_ddtree_budget}")
    if not any(a == "--speculative-algorithm" or a.startswith("--speculative-algorithm=") for a in rest):
        from .args import active_algorithm

        rest = ["--speculative-algorithm", active_algorithm(), *rest]
    return ours, rest


def sglang_import_error() -> str | None:
    """Why SGLang cannot start here (not installed, unsupported, or an import that fails), else None."""
    from . import compat
    from .check import _import_failure

    try:
        rel = compat.check_version()
    except compat.UnsupportedSGLangVersion as e:
        return str(e)
    try:
        importlib.import_module("sglang.srt.plugins")
    except ImportError as e:
        return " ".join(_import_failure(rel, e)).replace("FAIL: ", "")
    return None


def main(argv=None) -> None:
    from .args import ENV_ANCHOR, ENV_BUDGET, ENV_TOPK

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
    if ours.speculative_ddtree_budget is not None:
        os.environ[ENV_BUDGET] = str(ours.speculative_ddtree_budget)
    if ours.speculative_ddtree_topk is not None:
        os.environ[ENV_TOPK] = str(ours.speculative_ddtree_topk)
    if ours.speculative_ddtree_anchor is not None:
        os.environ[ENV_ANCHOR] = ours.speculative_ddtree_anchor
    sys.argv = [sys.argv[0], *rest]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
