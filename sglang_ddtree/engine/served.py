"""The served default as Engine.generate arguments, and the round costs the tiny pair's SGLang server measured on the
H200: what the demo (tools/demo.py) and `bench sampled` price the auto budget with on a CPU."""
from __future__ import annotations

import os

from ..calibration import FILE as CALIBRATION_FILE
from ..round_config import AUTO_LADDER, RoundConfig
from ..sizes import verify_width

# The auto budget weighs predicted tokens against each width's round cost. On a CPU a tree of n nodes costs about
# n one-token forwards, so costs measured here would pick the chain's width every round; a GPU verifies a wide
# tree for little more than a narrow one. On the CPU the demo therefore uses the costs the tiny pair's SGLang
# server measured on the H200 at start-up (CUDA-graph replay, ms, per batch bucket and verify width):
# docs/benchmarks/sglang-h200-2026-12-04-auto-log.txt, line "call3 ... start-up round cost (ms)".
H200_GRAPH_MS = {1: {8: 0.291, 16: 0.285, 32: 0.285, 64: 0.299}, 2: {8: 0.294, 16: 0.294, 32: 0.297, 64: 0.306},
                 4: {8: 0.288, 16: 0.298, 32: 0.296, 64: 0.32}, 8: {8: 0.306, 16: 0.312, 32: 0.321, 64: 0.348},
                 16: {8: 0.318, 16: 0.326, 32: 0.346, 64: 0.38}, 32: {8: 0.335, 16: 0.353, 32: 0.388, 64: 0.462}}


def h200_costs(batch: int, budgets) -> list[float]:
    """The H200 start-up costs for this batch (the smallest logged bucket that holds it) at each budget's width."""
    bucket = min((b for b in H200_GRAPH_MS if b >= batch), default=max(H200_GRAPH_MS))
    return [H200_GRAPH_MS[bucket][verify_width(b)] for b in budgets]


def served_default(engine, costs: str) -> dict:
    """Engine.generate arguments of DDTree as the plugin serves it by default: the chain anchor and the drafter's
    greedy calibration for greedy requests; a sampled request's tree under its own law (keys.py, the raw draft) with
    its children drawn (rejection.py), shaped by the drafter's shape table (keys.DraftKeys.shape_keys); the auto
    budget over the served ladder; costs 'h200' (the tiny pair's H200
    table, resolved per batch by the caller: h200_costs) or 'here' (measured)."""
    L = engine.block_size - 1
    ladder = tuple(sorted({L, *AUTO_LADDER}))
    calibrated = engine.draft_dir is not None and os.path.exists(os.path.join(engine.draft_dir, CALIBRATION_FILE))
    tree = RoundConfig()  # the served tree's anchor, keys and children
    served = {"method": "ddtree", "anchor": tree.anchor, "budget": "auto", "auto_budgets": ladder, "keys": tree.keys,
              "children": tree.children, "draft_temperature": "drafter" if calibrated else None,
              "drawn_shape": "drafter" if calibrated else None}
    if costs == "h200" and all(verify_width(b) in H200_GRAPH_MS[1] for b in ladder):
        served["round_cost"] = "h200"  # resolved per batch by the caller; another block size measures here
    return served
