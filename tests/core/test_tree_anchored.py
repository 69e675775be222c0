"""The chain-anchored tree (anchor='chain'): its oracle checked against an independent definition, the
native CPU builder equal to the oracle bit for bit, the chain always a path of the tree, and its accept never
shorter than the chain's."""
import heapq
import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ddtree import accept_tree, build_tree, build_tree_from_topk, flags as F
from sglang_ddtree.reference import build_tree_reference

from test_tree_native import MODES, assert_trees_equal, check_invariants
from treegen import random_topk


def node_tuples(tree, b):
    """Ranks tuple of every real node of request b, by node index (root: ())."""
    par, rk = tree.parents[b].tolist(), tree.ranks[b].tolist()
    out = [()]
    for i in range(1, int(tree.num_nodes[b])):
        out.append(out[par[i]] + (rk[i],))
    return out


def top_prefixes_outside_chain(lp, m, count):
    """Independent definition: the `count` highest-weight rank tuples (weight = float64 sum of lp along the
    path) that are not on the chain 0^1 … 0^m, by exhaustive enumeration up to depth L. Ties are excluded by
    the inputs used here."""
    L, k = lp.shape
    chain = {(0,) * d for d in range(1, m + 1)}
    cands = []
    for d in range(1, L + 1):
        for t in itertools.product(range(k), repeat=d):
            if t not in chain:
                cands.append((-sum(float(lp[j, r]) for j, r in enumerate(t)), t))
    return [t for _, t in heapq.nsmallest(count, cands)]


@pytest.mark.parametrize("seed", range(12))
def test_oracle_is_chain_then_best_prefixes(seed):
    rng = np.random.default_rng(seed)
    L, k = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    lp, ids = random_topk(rng, 1, L, 50, k, mode="normal")
    budget = int(rng.integers(0, 25))
    tree = build_tree_from_topk(lp, ids, budget, backend="reference", anchor="chain")
    m = min(budget, L)
    tuples = node_tuples(tree, 0)
    assert tuples[1:m + 1] == [(0,) * d for d in range(1, m + 1)]   # chain first, in depth order
    total = sum(k ** d for d in range(1, L + 1))
    rest = top_prefixes_outside_chain(lp[0].numpy(), m, min(budget, total) - m)
    assert tuples[m + 1:] == rest                                   # then best-first over the rest, in order


def run_case(rng, B, L, V, k, budget, mode, check=False):
    lp, ids = random_topk(rng, B, L, V, k, mode=mode)
    roots = torch.tensor(rng.integers(0, V, B))
    lens = torch.tensor(rng.integers(0, 10_000, B))
    kw = dict(root_tokens=roots, seq_lens=lens, anchor="chain")
    native = build_tree_from_topk(lp, ids, budget, backend="cpu", **kw)
    oracle = build_tree_from_topk(lp, ids, budget, backend="reference", **kw)
    assert_trees_equal(native, oracle, f"(anchored B={B} L={L} V={V} k={k} budget={budget} mode={mode})")
    if check:
        check_invariants(native, lens)
    return native, ids, lp


def assert_chain_is_a_path(tree, ids, lp):
    for b in range(tree.batch_size):
        if int(tree.flags[b]) & (F.NONFINITE_INPUT | F.UNSORTED_INPUT) or tree.topk == 0:
            continue
        m = min(tree.budget, tree.depth_limit)
        masked = (lp[b, :, 0] == float("-inf")).nonzero()   # a fully masked depth ends the chain
        m = min(m, int(masked[0]) if len(masked) else m)
        assert int(tree.num_nodes[b]) >= m + 1
        d = torch.arange(1, m + 1)
        assert tree.parents[b, 1:m + 1].tolist() == list(range(m))
        assert torch.equal(tree.depths[b, 1:m + 1], d.to(torch.int32))
        assert (tree.ranks[b, 1:m + 1] == 0).all()
        assert torch.equal(tree.tokens[b, 1:m + 1], ids[b, :m, 0])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 4), L=st.integers(1, 16), V=st.integers(1, 600), budget=st.integers(0, 200),
       k_cap=st.integers(1, 300), mode=st.sampled_from(MODES), seed=st.integers(0, 2**32 - 1))
def test_native_matches_anchored_oracle_hypothesis(B, L, V, budget, k_cap, mode, seed):
    k = max(1, min(k_cap, budget if budget else 1, V))
    assert_chain_is_a_path(*run_case(np.random.default_rng(seed), B, L, V, k, budget, mode, check=True))


def test_native_matches_anchored_oracle_10k_seeded_cases():
    """≥10,000 seeded random requests with ties and exhausted heaps, 0 mismatches allowed."""
    rng = np.random.default_rng(20261203)
    cases = exhausted = 0
    while cases < 10_000:
        B = int(rng.integers(1, 65))
        L = int(rng.integers(1, 17))
        budget = int(rng.choice([1, 2, 3, 7, 8, 16, 31, 32, 64, 100, 128]))
        V = int(rng.choice([2, 3, 5, 17, 64, 300, 2000]))
        k = min(int(rng.choice([budget, max(1, budget // 4), 1, 2, 4])), V)
        tree, ids, lp = run_case(rng, B, L, V, k, budget, MODES[cases % len(MODES)])
        assert_chain_is_a_path(tree, ids, lp)
        exhausted += int(((tree.flags & F.HEAP_EXHAUSTED) != 0).sum())
        cases += B
    assert exhausted > 0


def test_anchor_changes_the_tree_only_where_the_chain_was_missing():
    """An under-confident drafter: the paper's tree spends the budget on depth-1 siblings and misses the
    chain; the anchored tree holds it. Where the paper's tree already holds the chain, both are equal."""
    flat = torch.log_softmax(torch.zeros(6), -1)                # six equally likely candidates per depth
    lp, ids = flat.expand(1, 4, 6).contiguous(), torch.arange(6).expand(1, 4, 6).contiguous()
    paper = build_tree_from_topk(lp, ids, 6, backend="cpu")
    anchored = build_tree_from_topk(lp, ids, 6, backend="cpu", anchor="chain")
    assert paper.depths[0].tolist() == [0, 1, 1, 1, 1, 1, 1]    # all siblings at depth 1
    assert anchored.depths[0].tolist() == [0, 1, 2, 3, 4, 1, 1]  # chain to depth 4, then the best two
    peaked = torch.log_softmax(torch.tensor([9.0, 0.0, 0.0]), -1).expand(1, 3, 3).contiguous()
    pids = torch.arange(3).expand(1, 3, 3).contiguous()
    assert_trees_equal(build_tree_from_topk(peaked, pids, 8, backend="cpu"),
                       build_tree_from_topk(peaked, pids, 8, backend="cpu", anchor="chain"))


def path_target(tree, salt, V):
    """A target whose token after a node depends only on the node's path of tokens (as a real target's
    greedy choice depends on the context), so the same path gets the same target in any tree."""
    out = torch.zeros_like(tree.tokens)
    for b in range(tree.batch_size):
        paths = {0: ()}
        for i in range(int(tree.num_nodes[b])):
            if i:
                paths[i] = paths[int(tree.parents[b, i])] + (int(tree.tokens[b, i]),)
            out[b, i] = hash((salt, b) + paths[i]) % V
    return out


@pytest.mark.parametrize("budget", [8, 16, 32, 64])
def test_anchored_accept_never_shorter_than_the_chain(budget):
    rng = np.random.default_rng(budget)
    V, L = 4, 7
    worse = better = 0
    for trial in range(30):
        logits = torch.tensor(rng.standard_normal((4, L, V)) * 2, dtype=torch.float32)
        anchored = build_tree(logits, budget, backend="cpu", anchor="chain")
        chain = build_tree(logits, L, topk=1, backend="cpu")
        a = accept_tree(anchored, path_target(anchored, trial, V), backend="cpu").accept_len
        c = accept_tree(chain, path_target(chain, trial, V), backend="cpu").accept_len
        worse += int((a < c).sum())
        better += int((a > c).sum())
    assert worse == 0 and better > 0


def test_bad_anchor_and_chain_pops_are_refused():
    lp, ids = random_topk(np.random.default_rng(0), 1, 3, 10, 4)
    with pytest.raises(ValueError, match="anchor"):
        build_tree_from_topk(lp, ids, 4, anchor="spine")
    with pytest.raises(ValueError, match="anchor"):
        build_tree(torch.zeros(1, 3, 10), 4, anchor=True)
    with pytest.raises(ValueError, match="chain_pops"):
        build_tree_reference(lp[0].numpy(), ids[0].numpy(), 4, chain_pops=-1)
    with pytest.raises(RuntimeError, match="chain_pops"):
        torch.ops.sglang_ddtree.build_tree_from_topk(lp, ids, torch.zeros(1, dtype=torch.long),
                                                     torch.zeros(1, dtype=torch.long), 4, -1)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_anchored_mask_anchors_only_the_requests_it_marks(backend):
    """anchored (bool [B]): each request's tree is the one it gets alone with its own anchor — the anchored tree
    where the mask is set, the paper's tree elsewhere (how a mixed batch anchors its greedy requests only)."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        B, L, V = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.choice([3, 17, 300]))
        budget = int(rng.choice([1, 4, 8, 16, 31]))
        k = min(max(budget, 1), V)
        lp, ids = random_topk(rng, B, L, V, k, mode=MODES[trial % len(MODES)])
        mask = torch.tensor(rng.random(B) < 0.5)
        got = build_tree_from_topk(lp, ids, budget, backend=backend, anchor="chain", anchored=mask)
        for b in range(B):
            alone = build_tree_from_topk(lp[b:b + 1], ids[b:b + 1], budget, backend="reference",
                                         anchor="chain" if bool(mask[b]) else None)
            for name, t in alone.tensors().items():
                if name != "retrive_index":  # b * n + i: the batch position differs
                    assert torch.equal(getattr(got, name)[b:b + 1], t), (trial, b, name)
    with pytest.raises(ValueError, match="anchored"):
        build_tree_from_topk(lp, ids, budget, anchor="chain", anchored=torch.ones(B + 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="anchored"):
        build_tree_from_topk(lp, ids, budget, anchor="chain", anchored=torch.ones(B))
