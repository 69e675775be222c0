"""The round's commit plan (sglang_ddtree.round / the commit_tree op) against its definition, computed here
from the oracle walk (reference.walk_reference): valid trees with deep walks, garbage links, budgets below
the depth limit (more plan columns than tree slots), int32 and int64 prefix lengths."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_ddtree import build_tree_from_topk
from sglang_ddtree.reference import walk_reference
from sglang_ddtree.round import RoundOps
from sglang_ddtree.tree import TreeBatch

from test_accept_native import targets_following_tree
from treegen import random_topk


def expected_plan(tree, target, prefix, slots):
    """The plan's definition, column by column, from the oracle's walk."""
    B, n = tree.tokens.shape
    W = tree.depth_limit + 1
    out = {k: np.zeros((B, W), np.int64) for k in ("tokens", "kv_src", "kv_dst", "hidden_index", "positions")}
    out["accept_index"] = np.full((B, W), -1, np.int64)
    lens, bonus, flags = np.zeros(B, np.int64), np.zeros(B, np.int64), np.zeros(B, np.int64)
    for b in range(B):
        acc, bon, flg = walk_reference(tree.tokens[b].numpy(), tree.retrive_next_token[b].numpy(),
                                       tree.retrive_next_sibling[b].numpy(), int(tree.num_nodes[b]),
                                       target[b].numpy(), tree.depth_limit)
        m = len(acc)
        lens[b], bonus[b], flags[b] = m, bon, flg
        out["accept_index"][b, :m] = acc
        committed = [int(tree.tokens[b, i]) for i in acc[1:]] + [bon]
        for k in range(W):
            own = int(slots[b, min(k, n - 1)])
            out["tokens"][b, k] = committed[k] if k < m else 0
            out["kv_src"][b, k] = int(slots[b, acc[k]]) if k < m else own
            out["kv_dst"][b, k] = int(slots[b, k]) if k < m else own
            out["hidden_index"][b, k] = b * n + (acc[k] if k < m else 0)
            out["positions"][b, k] = int(prefix[b]) + k
    out.update(commit_lens=lens, bonus=bonus, flags=flags, new_seq_lens=prefix.numpy().astype(np.int64) + lens)
    return out


def check(plan, want, prefix):
    for name, value in want.items():
        got = getattr(plan, name)
        assert got.shape[0] == value.shape[0], name
        assert np.array_equal(got.to(torch.int64).numpy(), value), name
    assert plan.new_seq_lens.dtype == prefix.dtype
    assert plan.accept_index.dtype == torch.int32 and plan.commit_lens.dtype == torch.int32


@settings(max_examples=120, deadline=None)
@given(B=st.integers(1, 5), L=st.integers(1, 12), budget=st.integers(0, 60), p=st.floats(0, 1),
       seed=st.integers(0, 2**32 - 1), wide=st.booleans())
def test_plan_matches_definition_on_built_trees(B, L, budget, p, seed, wide):
    rng = np.random.default_rng(seed)
    lp, ids = random_topk(rng, B, L, 40, max(1, min(budget, 40)), mode="peaked")
    tree = build_tree_from_topk(lp, ids, budget, backend="cpu")
    tgt = targets_following_tree(tree, rng, p)
    prefix = torch.tensor(rng.integers(0, 2**40 if wide else 5000, B), dtype=torch.int64 if wide else torch.int32)
    slots = torch.tensor(rng.permutation(10 * B * tree.n)[:B * tree.n].reshape(B, tree.n), dtype=torch.int64)
    plan = RoundOps("cpu").commit(tree, tgt, prefix, slots)
    check(plan, expected_plan(tree, tgt, prefix, slots), prefix)
    assert (plan.flags == 0).all()


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), depth_limit=st.integers(0, 10))
def test_plan_on_garbage_links_is_bounded_and_agrees(seed, n, depth_limit):
    rng = np.random.default_rng(seed)
    B = 3
    links = lambda: torch.tensor(rng.integers(-3, n + 3, (B, n)))
    z32, z64 = (lambda *s: torch.zeros(*s, dtype=torch.int32)), (lambda *s: torch.zeros(*s, dtype=torch.int64))
    tree = TreeBatch(num_nodes=torch.tensor(rng.integers(-1, n + 2, B), dtype=torch.int32),
                     tokens=torch.tensor(rng.integers(0, 3, (B, n))), parents=z32(B, n), depths=z32(B, n),
                     ranks=z32(B, n), logw=torch.zeros(B, n, dtype=torch.float64), positions=z64(B, n),
                     retrive_index=z64(B, n), retrive_next_token=links(), retrive_next_sibling=links(),
                     tree_mask=torch.zeros(B, n, n, dtype=torch.bool), mask_bits=z32(B, n, 1), flags=z32(B),
                     budget=n - 1, depth_limit=depth_limit, topk=1)
    tgt = torch.tensor(rng.integers(0, 3, (B, n)))
    prefix = torch.tensor(rng.integers(0, 100, B), dtype=torch.int64)
    slots = torch.tensor(rng.integers(0, 1000, (B, n)), dtype=torch.int64)
    plan = RoundOps("cpu").commit(tree, tgt, prefix, slots)
    check(plan, expected_plan(tree, tgt, prefix, slots), prefix)
    assert (plan.commit_lens >= 1).all() and (plan.commit_lens <= depth_limit + 1).all()


def test_moves_are_a_permutation_of_the_reserved_slots():
    """Applying the plan's KV moves to a cache where each slot holds its own id leaves, in committed slot k,
    the KV of accepted node k — whatever the overlap between read and written slots (gather, then scatter)."""
    rng = np.random.default_rng(7)
    lp, ids = random_topk(rng, 8, 7, 30, 8, mode="peaked")
    tree = build_tree_from_topk(lp, ids, 40, backend="cpu")
    tgt = targets_following_tree(tree, rng, 0.95)
    slots = torch.arange(8 * tree.n).view(8, tree.n) + 100
    plan = RoundOps("cpu").commit(tree, tgt, torch.zeros(8, dtype=torch.int64), slots)
    cache = torch.arange(1000)
    cache[plan.kv_dst.reshape(-1)] = cache[plan.kv_src.reshape(-1)].clone()
    assert plan.commit_lens.max() > 2  # the walks go deep
    for b in range(8):
        for k in range(int(plan.commit_lens[b])):
            assert int(cache[slots[b, k]]) == int(slots[b, int(plan.accept_index[b, k])])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU by scripts/gpu_check.sh)")
@pytest.mark.parametrize("wide", [False, True])
def test_cuda_plan_matches_cpu(wide):
    rng = np.random.default_rng(11)
    for B, L, budget in ((1, 7, 8), (33, 15, 64), (64, 15, 15), (5, 3, 1), (7, 15, 255)):
        lp, ids = random_topk(rng, B, L, 60, max(1, min(budget, 60)), mode="peaked")
        tree = build_tree_from_topk(lp, ids, budget, backend="cpu")
        tgt = targets_following_tree(tree, rng, 0.9)
        prefix = torch.tensor(rng.integers(0, 2**40 if wide else 5000, B), dtype=torch.int64 if wide else torch.int32)
        slots = torch.tensor(rng.integers(0, 10**6, (B, tree.n)), dtype=torch.int64)
        want = RoundOps("cpu").commit(tree, tgt, prefix, slots)
        got = RoundOps("cuda").commit(tree.to("cuda"), tgt.cuda(), prefix.cuda(), slots.cuda())
        for f in want.__dataclass_fields__:
            assert torch.equal(getattr(got, f).cpu(), getattr(want, f)), f
