"""CUDA builder (kernels/tree_build.cu) == the oracle, bit for bit, on identical (lp, ids).

>= 10,000 random requests (SGLANG_DDTREE_GPU_TREE_CASES) with bf16 ties, forced exact ties, peaked rows
and tiny vocabularies that exhaust the heap; budgets up to 1023; every TreeBatch field compared, float64
weights by bit pattern.
"""
import os

import numpy as np
import pytest
import torch

from gpu_tree_util import assert_identical, cuda_matches, draw, load, random_topk, seeded_cases, seeded_requests
from sglang_ddtree import build_tree, build_tree_from_topk, flags as F

pytestmark = pytest.mark.gpu
MODES = ["normal", "bf16", "ties", "peaked", "masked"]
CASES = int(os.environ.get("SGLANG_DDTREE_GPU_TREE_CASES", "10000"))


def run_case(rng, B, L, V, k, budget, mode, anchor=None):
    lp, ids = random_topk(rng, B, L, V, k, mode=mode)
    roots = torch.tensor(rng.integers(0, max(V, 1), B))
    lens = torch.tensor(rng.integers(0, 100_000, B))
    return cuda_matches(build_tree_from_topk, lp, ids, budget, root_tokens=roots, seq_lens=lens, anchor=anchor,
                        context=f"(B={B} L={L} V={V} k={k} budget={budget} mode={mode})")


@pytest.mark.parametrize("anchor", [None, "chain"])
def test_cuda_builder_matches_oracle_10k_cases(anchor):
    load()

    def case(rng, mode):
        B, L, budget, V = draw(rng, (1, 129), (1, 17), [1, 2, 3, 8, 16, 31, 32, 33, 63, 64, 100, 128, 255, 256],
                               [2, 3, 5, 17, 64, 300, 2000])
        k = min(int(rng.choice([budget, max(1, budget // 4), 1, 2, 4])), V)
        return run_case(rng, B, L, V, k, budget, mode, anchor)

    assert seeded_requests(20261202, CASES, MODES, case) > 0


@pytest.mark.parametrize("budget,L,k,V", [(512, 16, 512, 4096), (511, 8, 64, 600), (1023, 32, 1023, 2000),
                                         (300, 40, 5, 5), (700, 3, 700, 900)])
def test_large_budgets_and_depths(budget, L, k, V):
    load()
    rng = np.random.default_rng(budget + L)
    for mode in MODES:
        run_case(rng, 4, L, V, k, budget, mode)
        run_case(rng, 4, L, V, k, budget, mode, anchor="chain")


def test_the_anchored_mask_matches_the_oracle():
    """anchored (bool [B]) anchors only the requests it marks, bit for bit the oracle's per-request trees."""
    load()
    for trial, rng, case in seeded_cases(41, 200):
        B, L, budget, V = draw(rng, (1, 33), (1, 17), [1, 7, 15, 31, 63, 127], [3, 64, 2000])
        lp, ids = random_topk(rng, B, L, V, min(budget, V), mode=MODES[trial % len(MODES)])
        cuda_matches(build_tree_from_topk, lp, ids, budget, anchor="chain", anchored=torch.tensor(rng.random(B) < 0.5),
                     context=case)


def test_forced_exact_ties_across_depths():
    load()
    row = torch.log_softmax(torch.tensor([2.0, 2.0, 1.0, 1.0, 1.0, 0.0]), -1)
    lp = row.expand(3, 5, 6).contiguous()
    ids = torch.arange(6).expand(3, 5, 6).contiguous()
    for budget in (1, 5, 17, 64, 200, 512):
        cuda_matches(build_tree_from_topk, lp, ids, budget, context=f"budget={budget}")


def test_zero_weights_and_signed_zero():
    # lp rows of exact zeros (and -0.0): every path weight ties at 0; the output keeps the reference's signs
    load()
    lp = torch.zeros(2, 4, 3)
    lp[1] = -0.0
    ids = torch.arange(3).expand(2, 4, 3).contiguous()
    cuda_matches(build_tree_from_topk, lp, ids, 30)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "unsorted", "masked"])
def test_nonfinite_request_flagged_others_untouched(bad):
    load()
    rng = np.random.default_rng(1)
    lp, ids = random_topk(rng, 3, 4, 50, 8)
    if bad == "unsorted":
        lp[1, 2] = lp[1, 2].flip(0)
    elif bad == "masked":
        lp[1, 2, 3:] = float("-inf")
    else:
        lp[1, 2, 3] = bad
    for anchor in (None, "chain"):
        a = cuda_matches(build_tree_from_topk, lp, ids, 12, anchor=anchor, context=f"anchor={anchor}")
    want = {"unsorted": F.UNSORTED_INPUT, "masked": 0}.get(bad, F.NONFINITE_INPUT)
    f = a.flags.tolist()
    assert f[0] == f[2] == 0 and (f[1] & want) == want and (int(a.num_nodes[1]) == 1) == (want != 0)


def test_budget_zero_empty_batch_and_repeatability():
    load()
    rng = np.random.default_rng(2)
    lp, ids = random_topk(rng, 2, 3, 10, 4)
    t = build_tree_from_topk(lp.cuda(), ids.cuda(), 0, backend="cuda")
    assert t.num_nodes.tolist() == [1, 1] and t.tokens.shape == (2, 1) and t.flags.tolist() == [0, 0]
    e = build_tree_from_topk(lp[:0].cuda(), ids[:0].cuda(), 8, backend="cuda")
    assert e.tokens.shape == (0, 9)
    lp, ids = random_topk(rng, 64, 15, 3000, 64, mode="bf16")
    first = build_tree_from_topk(lp.cuda(), ids.cuda(), 64, backend="cuda")
    for _ in range(5):
        assert_identical(build_tree_from_topk(lp.cuda(), ids.cuda(), 64, backend="cuda"), first)


def test_end_to_end_from_logits_large_vocab():
    # CUDA stage 1 + CUDA build vs the oracle fed the same CUDA (lp, ids)
    ops = load()
    torch.manual_seed(0)
    logits = (torch.randn(8, 15, 151936, device="cuda") * 3).bfloat16()
    tree = build_tree(logits, 64, backend="cuda")
    lp, ids = ops.topk_lse(logits.reshape(-1, 151936), 64)
    ref = build_tree_from_topk(lp.reshape(8, 15, 64).cpu(), ids.reshape(8, 15, 64).cpu(), 64, backend="reference")
    assert_identical(tree, ref)
