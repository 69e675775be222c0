"""The CUDA lattice builder (kernels/tree_build.cu, docs/DESIGN.md §3.10) == the CPU builder and the oracle, bit for
bit, on identical rows; stage 1 on CUDA against the CPU's; the whole lattice stage inside a CUDA graph.

Random lattices (SGLANG_DDTREE_GPU_LATTICE_CASES requests, default 3000) in every mode of tests/core/treegen.py,
K up to 64 and budgets up to 1023, so both the shared-memory table and the global-memory fallback run.
"""
import os

import numpy as np
import pytest
import torch

from gpu_tree_util import (assert_identical, assert_replay_equals_eager, cuda_matches, draw, load, on, seeded_cases,
                           seeded_requests)
from treegen import LATTICE_MODES, random_lattice
from sglang_ddtree import build_tree_from_lattice, build_tree_from_lattice_rows, build_tree_from_topk, flags as F
from sglang_ddtree.lattice import lattice_logprobs

pytestmark = pytest.mark.gpu
CASES = int(os.environ.get("SGLANG_DDTREE_GPU_LATTICE_CASES", "3000"))


def rows(rng, B, L, K, mode):
    cand, scores, temperature = random_lattice(rng, B, L, K, mode=mode)
    lp, order = lattice_logprobs(scores, temperature)
    roots = torch.tensor(rng.integers(0, 5000, B))
    lens = torch.tensor(rng.integers(0, 100_000, B))
    return lp, order, cand, roots, lens


def run_case(rng, B, L, K, budget, mode, anchor, against="cpu"):
    lp, order, cand, roots, lens = rows(rng, B, L, K, mode)
    return cuda_matches(build_tree_from_lattice_rows, lp, order, cand, budget, root_tokens=roots, seq_lens=lens,
                        anchor=anchor, oracle=against,
                        context=f"(B={B} L={L} K={K} budget={budget} mode={mode} anchor={anchor})")


@pytest.mark.parametrize("anchor", [None, "chain"])
def test_cuda_lattice_builder_matches_cpu_builder(anchor):
    load()

    def case(rng, mode):
        B, L, K, budget = draw(rng, (1, 65), [1, 2, 3, 7, 15], [1, 2, 3, 4, 8, 16, 32],
                               [0, 1, 2, 3, 7, 15, 31, 32, 33, 63, 64, 100, 255])
        return run_case(rng, B, L, K, budget, mode, anchor)

    assert seeded_requests(20261206, CASES, LATTICE_MODES, case) > 0


@pytest.mark.parametrize("budget,L,K", [(1023, 15, 16), (511, 31, 8), (255, 15, 64), (700, 3, 40), (63, 2, 1)])
def test_large_budgets_and_the_global_memory_table(budget, L, K):
    """L·K·min(K, n) float64 rows past the shared-memory cap (K = 40, 64) run from global memory."""
    load()
    rng = np.random.default_rng(budget + L + K)
    for mode in LATTICE_MODES:
        for anchor in (None, "chain"):
            run_case(rng, 3, L, K, budget, mode, anchor)


def test_small_cases_match_the_oracle():
    load()
    for i, rng, _ in seeded_cases(7, 60):
        L, K, budget = draw(rng, (1, 6), (1, 7), (0, 40))
        run_case(rng, 4, L, K, budget, LATTICE_MODES[i % len(LATTICE_MODES)], [None, "chain"][i % 2],
                 against="reference")


def test_the_anchored_mask_matches_the_oracle():
    """anchored (bool [B], docs/DESIGN.md §3.11) in the CUDA lattice builder: only the marked requests anchored,
    bit for bit the oracle's per-request trees, shared and global tables."""
    load()
    for trial, rng, case in seeded_cases(45, 120):
        B, L, K, budget = draw(rng, (1, 17), [1, 3, 7, 15], [1, 3, 8, 16, 40], [1, 7, 31, 63, 255])
        lp, order, cand, roots, lens = rows(rng, B, L, K, LATTICE_MODES[trial % len(LATTICE_MODES)])
        cuda_matches(build_tree_from_lattice_rows, lp, order, cand, budget, root_tokens=roots, seq_lens=lens,
                     anchor="chain", anchored=torch.tensor(rng.random(B) < 0.5), context=case)


@pytest.mark.parametrize("bad", ["nan", "inf", "unsorted", "order", "masked"])
def test_flags_match_and_others_untouched(bad):
    """NaN/+inf rows, a rising row, an order entry that names no candidate (read from device memory: never used to
    index) and masked rows: the flags and trees equal the CPU builder's, the other requests unaffected."""
    load()
    lp, order, cand, roots, lens = rows(np.random.default_rng(1), 3, 4, 6, "normal")
    if bad in ("nan", "inf"):
        lp[1, 2, 3, 1] = float(bad)
    elif bad == "unsorted":
        lp[1, 2, 3] = lp[1, 2, 3].flip(0)
    elif bad == "order":
        order[1, 2, 3, 0] = 1 << 20
    else:
        lp[1, 2, 3, 2:] = float("-inf")
    op = torch.ops.sglang_ddtree.build_tree_from_lattice
    for chain in (0, 4):
        args = (lp, order, cand, roots, lens, 20, chain)
        a = op(*on("cuda", args))
        assert_identical(a, op(*args), f"chain {chain}")
    want = {"nan": F.NONFINITE_INPUT, "inf": F.NONFINITE_INPUT, "unsorted": F.UNSORTED_INPUT,
            "order": F.UNSORTED_INPUT, "masked": 0}[bad]
    f = a[-1].tolist()
    assert f[0] == f[2] == 0 and (f[1] & want) == want


def test_dflash1_lattice_is_the_topk_tree_on_cuda():
    load()
    rng = np.random.default_rng(3)
    B, L, K = 16, 15, 16
    cand, scores, temperature = random_lattice(rng, B, L, K, mode="dflash1")
    lp, order = lattice_logprobs(scores.cuda(), temperature.cuda())
    ids = torch.gather(cand.cuda(), -1, order[:, :, 0].long())
    for budget in (1, 15, 63, 255):
        for anchor in (None, "chain"):
            got = build_tree_from_lattice_rows(lp, order, cand.cuda(), budget, backend="cuda", anchor=anchor)
            want = build_tree_from_topk(lp[:, :, 0].contiguous(), ids, budget, backend="cuda", anchor=anchor)
            assert_identical(got, want, f"budget={budget} anchor={anchor}")


def test_stage1_on_cuda_matches_the_cpu():
    """The order is exact on every device; lp within one float32 ulp plus the float64 log-sum-exp's rounding."""
    rng = np.random.default_rng(4)
    for mode in LATTICE_MODES:
        cand, scores, temperature = random_lattice(rng, 8, 15, 16, mode=mode)
        lp_c, order_c = lattice_logprobs(scores, temperature)
        lp_g, order_g = lattice_logprobs(scores.cuda(), temperature.cuda())
        assert torch.equal(order_g.cpu(), order_c)
        a, b = lp_g.cpu().double(), lp_c.double()
        assert torch.equal(torch.isneginf(a), torch.isneginf(b)) and not torch.isnan(a).any()
        t = torch.where(temperature == 0, 1.0, temperature).double().view(-1, 1, 1, 1)
        zmax = (torch.where(torch.isfinite(scores), scores, 0).double() / t).abs().amax(-1, keepdim=True)
        fin = torch.isfinite(b)
        tol = torch.finfo(torch.float32).eps * b.abs() + 16 * torch.finfo(torch.float64).eps * zmax.clamp(min=1)
        assert ((a - b).abs() <= tol)[fin].all(), mode


def test_end_to_end_on_cuda_matches_the_oracle_on_its_rows():
    load()
    rng = np.random.default_rng(5)
    cand, scores, temperature = random_lattice(rng, 32, 15, 16, mode="bf16")
    cand, scores, temperature = cand.cuda(), scores.cuda(), temperature.cuda()
    for anchor in (None, "chain"):
        tree = build_tree_from_lattice(cand, scores, 64, temperature=temperature, backend="cuda", anchor=anchor)
        lp, order = lattice_logprobs(scores, temperature)
        ref = build_tree_from_lattice_rows(lp.cpu(), order.cpu(), cand.cpu(), 64, backend="reference", anchor=anchor)
        assert_identical(tree, ref, f"anchor={anchor}")


def test_lattice_stage_graph_replay_equals_eager():
    """Stage 1 and the build from the public function, captured once in a CUDA graph (no host sync), replayed on
    new lattices and temperatures: every field equals the eager result."""
    load()
    B, L, K, budget = 16, 15, 16, 63
    gen = np.random.default_rng(6)

    def fresh():
        cand, scores, temperature = random_lattice(gen, B, L, K, mode="normal")
        roots = torch.tensor(gen.integers(0, 5000, B))
        lens = torch.tensor(gen.integers(0, 4096, B))
        return [t.cuda() for t in (cand, scores, temperature, roots, lens)]

    def run(cand, scores, temperature, roots, lens):
        return build_tree_from_lattice(cand, scores, budget, temperature=temperature, root_tokens=roots,
                                       seq_lens=lens, backend="cuda", anchor="chain")

    assert_replay_equals_eager(run, fresh)
