"""Native CPU walk == oracle walk, on valid trees with realistic targets and on corrupted trees."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_ddtree import accept_tree, build_tree_from_topk, flags as F

from treegen import random_topk

FIELDS = ("accept_index", "accept_len", "bonus", "accepted_tokens", "flags")


def targets_following_tree(tree, rng, p_follow):
    """Per-node targets that often equal a child's token, so walks go deep."""
    B, n = tree.tokens.shape
    t = torch.tensor(rng.integers(0, 50, (B, n)))
    for b in range(B):
        for i in range(n):
            c = int(tree.retrive_next_token[b, i])
            kids = []
            while c != -1:
                kids.append(c)
                c = int(tree.retrive_next_sibling[b, c])
            if kids and rng.random() < p_follow:
                t[b, i] = tree.tokens[b, kids[rng.integers(len(kids))]]
    return t


def assert_same(a, b):
    for f in FIELDS:
        assert torch.equal(getattr(a, f), getattr(b, f)), f


@settings(max_examples=120, deadline=None)
@given(B=st.integers(1, 6), L=st.integers(1, 12), budget=st.integers(0, 80), p=st.floats(0, 1),
       seed=st.integers(0, 2**32 - 1))
def test_walk_native_matches_oracle(B, L, budget, p, seed):
    rng = np.random.default_rng(seed)
    lp, ids = random_topk(rng, B, L, 50, max(1, min(budget, 50)), mode="peaked")
    tree = build_tree_from_topk(lp, ids, budget, backend="cpu")
    tgt = targets_following_tree(tree, rng, p)
    a, b = accept_tree(tree, tgt, backend="cpu"), accept_tree(tree, tgt, backend="reference")
    assert_same(a, b)
    assert (a.flags == 0).all()
    # the committed tokens are the accepted path's tokens, then the bonus
    for r in range(B):
        m = int(a.accept_len[r])
        path = a.accept_index[r, :m].tolist()
        assert a.accepted_tokens[r, :m].tolist() == [int(tree.tokens[r, i]) for i in path[1:]] + [int(a.bonus[r])]
        for j in range(1, m):
            assert int(tree.parents[r, path[j]]) == path[j - 1]
            assert int(tree.tokens[r, path[j]]) == int(tgt[r, path[j - 1]])


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), depth_limit=st.integers(0, 10))
def test_walk_on_garbage_links_terminates_and_agrees(seed, n, depth_limit):
    """Random link arrays (cycles, self links, out-of-range, negative) — never hangs, never reads out of
    bounds, and both implementations flag the same requests."""
    from sglang_ddtree.tree import TreeBatch
    rng = np.random.default_rng(seed)
    B = 3
    links = lambda: torch.tensor(rng.integers(-3, n + 3, (B, n)))
    tokens = torch.tensor(rng.integers(0, 3, (B, n)))
    tree = TreeBatch(num_nodes=torch.tensor(rng.integers(-1, n + 2, B), dtype=torch.int32), tokens=tokens,
                     parents=torch.zeros(B, n, dtype=torch.int32), depths=torch.zeros(B, n, dtype=torch.int32),
                     ranks=torch.zeros(B, n, dtype=torch.int32), logw=torch.zeros(B, n, dtype=torch.float64),
                     positions=torch.zeros(B, n, dtype=torch.int64), retrive_index=torch.zeros(B, n, dtype=torch.int64),
                     retrive_next_token=links(), retrive_next_sibling=links(),
                     tree_mask=torch.zeros(B, n, n, dtype=torch.bool), mask_bits=torch.zeros(B, n, 1, dtype=torch.int32),
                     flags=torch.zeros(B, dtype=torch.int32), budget=n - 1, depth_limit=depth_limit, topk=1)
    tgt = torch.tensor(rng.integers(0, 3, (B, n)))
    a, b = accept_tree(tree, tgt, backend="cpu"), accept_tree(tree, tgt, backend="reference")
    assert_same(a, b)
    assert (a.accept_len >= 1).all() and (a.accept_len <= depth_limit + 1).all()


def test_cyclic_tree_is_flagged():
    lp, ids = random_topk(np.random.default_rng(3), 1, 3, 20, 2, mode="peaked")
    tree = build_tree_from_topk(lp, ids, 6, backend="cpu")
    first = int(tree.retrive_next_token[0, 0])
    tree.retrive_next_token[0, first] = 0               # child link pointing back to the root
    tgt = tree.tokens.clone()
    tgt[0, 0] = tree.tokens[0, first]
    tgt[0, first] = tree.tokens[0, 0]
    res = accept_tree(tree, tgt, backend="cpu")
    assert int(res.flags[0]) & F.MALFORMED_TREE and int(res.accept_len[0]) == 2
