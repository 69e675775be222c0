"""Per-call overhead of the public build API against the bare op: `python -m sglang_ddtree bench api_overhead`.

One request, budget 64, depth 15, k 64, on the CPU with one thread; best of 7 × 20,000 calls each (what the
Python wrapper costs a caller beyond the op itself). Prints one JSON line.
"""
from __future__ import annotations

import json
import time

import torch

from .. import _cli


def best_us(fn, calls: int, reps: int = 7) -> float:
    """The fastest of `reps` runs of `calls` back-to-back calls, µs a call (after 500 warm-up calls)."""
    for _ in range(500):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return round(best, 2)


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "api_overhead"),
                     description="Per-call overhead of the public build API against the bare op (one request, budget "
                                 "64, the CPU, one thread): what the Python wrapper costs a caller.")
    ap.add_argument("--calls", type=_cli.positive_int, default=20_000, help="calls a timed run (default 20000)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from .. import build_tree_from_topk, ops

    lp = torch.randn(1, 15, 64).log_softmax(-1).sort(-1, descending=True).values.float()
    ids = torch.arange(64).expand(1, 15, 64).contiguous()
    z = torch.zeros(1, dtype=torch.long)
    op = ops.op("build_tree_from_topk")
    print(json.dumps({"api_us": best_us(lambda: build_tree_from_topk(lp, ids, 64, backend="cpu"), a.calls),
                      "op_us": best_us(lambda: op(lp, ids, z, z, 64), a.calls)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
