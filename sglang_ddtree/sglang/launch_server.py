"""`python -m sglang_ddtree.launch_server`: SGLang's launch_server plus DDTree's own flags.

  --speculative-ddtree-budget B   tree budget (sets --speculative-num-draft-tokens B+1 via SGLANG_DDTREE_BUDGET)
  --speculative-ddtree-topk K     per-depth candidate cap (SGLANG_DDTREE_TOPK; default min(B, vocab))

The flags travel as environment variables, which SGLang's spawned scheduler processes inherit; every other
argument goes to SGLang unchanged. `--speculative-algorithm ddtree` is added when absent.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys


def split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--speculative-ddtree-budget", type=int, default=None)
    parser.add_argument("--speculative-ddtree-topk", type=int, default=None)
    ours, rest = parser.parse_known_args(argv)
    for name in ("speculative_ddtree_budget", "speculative_ddtree_topk"):
        value = getattr(ours, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not any(a == "--speculative-algorithm" or a.startswith("--speculative-algorithm=") for a in rest):
        rest = ["--speculative-algorithm", "DDTREE", *rest]
    return ours, rest


def main(argv=None) -> None:
    from .args import ENV_BUDGET, ENV_TOPK

    ours, rest = split_args(sys.argv[1:] if argv is None else argv)
    if ours.speculative_ddtree_budget is not None:
        os.environ[ENV_BUDGET] = str(ours.speculative_ddtree_budget)
    if ours.speculative_ddtree_topk is not None:
        os.environ[ENV_TOPK] = str(ours.speculative_ddtree_topk)
    sys.argv = [sys.argv[0], *rest]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
