"""Native CPU builder == oracle, field by field and bit for bit, on identical (lp, ids)."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ddtree import build_tree, build_tree_from_topk, flags as F
from sglang_ddtree.tree import pack_mask

from treegen import random_topk

MODES = ["normal", "bf16", "ties", "peaked", "masked"]


def assert_trees_equal(a, b, context=""):
    for name, ta in a.tensors().items():
        tb = getattr(b, name)
        assert ta.dtype == tb.dtype and ta.shape == tb.shape, f"{name} {context}"
        if not torch.equal(ta, tb):
            bad = (ta != tb).reshape(ta.shape[0], -1).any(1).nonzero().flatten().tolist()
            raise AssertionError(f"field {name} differs for requests {bad[:5]} {context}")


def check_invariants(tree, seq_lens):
    """Structural facts every valid TreeBatch satisfies, checked independently of any builder."""
    n = tree.n
    for b in range(tree.batch_size):
        m = int(tree.num_nodes[b])
        par, dep = tree.parents[b].tolist(), tree.depths[b].tolist()
        assert 1 <= m <= n and par[0] == -1 and dep[0] == 0
        children = {i: [] for i in range(m)}
        for i in range(1, m):
            assert 0 <= par[i] < i                         # parent before child
            assert dep[i] == dep[par[i]] + 1 <= tree.depth_limit
            children[par[i]].append(i)
        expected_mask = torch.eye(n, dtype=torch.bool)
        for i in range(1, m):
            expected_mask[i] |= expected_mask[par[i]]          # ancestor closure
        assert torch.equal(tree.tree_mask[b], expected_mask)
        for i in range(m):                                  # linked lists = children in index order
            kids, c = [], int(tree.retrive_next_token[b, i])
            while c != -1:
                kids.append(c)
                c = int(tree.retrive_next_sibling[b, c])
            assert kids == children[i]
            toks = [int(tree.tokens[b, c]) for c in kids]
            assert len(set(toks)) == len(toks)              # siblings carry distinct tokens
        assert torch.equal(tree.positions[b], seq_lens[b] + tree.depths[b].to(torch.int64))
        assert torch.equal(tree.retrive_index[b], b * n + torch.arange(n))
        assert (tree.tokens[b, m:] == 0).all() and (tree.parents[b, m:] == -1).all()
    assert torch.equal(tree.mask_bits, pack_mask(tree.tree_mask, (n + 31) // 32))


def run_case(rng, B, L, V, k, budget, mode, check=False):
    lp, ids = random_topk(rng, B, L, V, k, mode=mode)
    roots = torch.tensor(rng.integers(0, V, B))
    lens = torch.tensor(rng.integers(0, 10_000, B))
    native = build_tree_from_topk(lp, ids, budget, root_tokens=roots, seq_lens=lens, backend="cpu")
    oracle = build_tree_from_topk(lp, ids, budget, root_tokens=roots, seq_lens=lens, backend="reference")
    assert_trees_equal(native, oracle, f"(B={B} L={L} V={V} k={k} budget={budget} mode={mode})")
    if check:
        check_invariants(native, lens)
    return native


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 4), L=st.integers(1, 16), V=st.integers(1, 600), budget=st.integers(0, 256),
       k_cap=st.integers(1, 300), mode=st.sampled_from(MODES), seed=st.integers(0, 2**32 - 1))
def test_native_matches_oracle_hypothesis(B, L, V, budget, k_cap, mode, seed):
    k = max(1, min(k_cap, budget if budget else 1, V))
    run_case(np.random.default_rng(seed), B, L, V, k, budget, mode, check=True)


def test_native_matches_oracle_10k_seeded_cases():
    """≥10,000 seeded random requests (in batches sharing a shape), 0 mismatches allowed."""
    rng = np.random.default_rng(20261202)
    cases = 0
    exhausted = 0
    while cases < 10_000:
        B = int(rng.integers(1, 65))
        L = int(rng.integers(1, 17))
        budget = int(rng.choice([1, 2, 3, 8, 16, 31, 32, 64, 100, 128, 256]))
        V = int(rng.choice([2, 3, 5, 17, 64, 300, 2000]))
        k = min(int(rng.choice([budget, max(1, budget // 4), 1, 2, 4])), V)
        tree = run_case(rng, B, L, V, k, budget, MODES[cases % len(MODES)])
        exhausted += int(((tree.flags & F.HEAP_EXHAUSTED) != 0).sum())
        cases += B
    assert exhausted > 0  # the sweep really covered exhausted heaps


def test_forced_exact_ties_across_depths():
    # identical rows at every depth: many equal path weights, ordering rests on the ranks tuple
    row = torch.log_softmax(torch.tensor([2.0, 2.0, 1.0, 1.0, 1.0, 0.0]), -1)
    lp = row.expand(3, 5, 6).contiguous()
    ids = torch.arange(6).expand(3, 5, 6).contiguous()
    for budget in (1, 5, 17, 64, 200):
        a = build_tree_from_topk(lp, ids, budget, backend="cpu")
        b = build_tree_from_topk(lp, ids, budget, backend="reference")
        assert_trees_equal(a, b)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_request_flagged_others_untouched(bad):
    rng = np.random.default_rng(1)
    lp, ids = random_topk(rng, 3, 4, 50, 8)
    lp[1, 2, 3] = bad
    a = build_tree_from_topk(lp, ids, 12, backend="cpu")
    b = build_tree_from_topk(lp, ids, 12, backend="reference")
    assert_trees_equal(a, b)
    f = a.flags.tolist()
    assert f[0] == f[2] == 0 and f[1] & F.NONFINITE_INPUT and int(a.num_nodes[1]) == 1  # +inf also breaks order


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_masked_tokens_are_never_emitted(backend):
    """-inf is a masked token (grammar, banned ids), not a broken input: the request is built from what is
    left, no -inf node is emitted, and a fully masked depth ends the tree (and the anchored chain) there."""
    row = torch.log_softmax(torch.tensor([3.0, 2.0, 1.0, 0.0]), -1)
    lp = row.expand(2, 4, 4).clone()
    lp[0, :, 2:] = float("-inf")               # request 0: two tokens left per depth
    lp[1, 2, :] = float("-inf")                # request 1: depth 3 fully masked
    ids = torch.arange(4).expand(2, 4, 4).contiguous()
    for anchor in (None, "chain"):
        t = build_tree_from_topk(lp, ids, 40, backend=backend, anchor=anchor)
        assert t.flags.tolist() == [F.HEAP_EXHAUSTED, F.HEAP_EXHAUSTED]
        assert int(t.num_nodes[0]) == 1 + 2 + 4 + 8 + 16 and (t.ranks[0] < 2).all()
        assert int(t.num_nodes[1]) == 1 + 4 + 16 and int(t.depths[1].max()) == 2
        assert torch.isfinite(t.logw[:, : int(t.num_nodes.min())]).all()


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_unsorted_rows_are_flagged(backend):
    lp, ids = random_topk(np.random.default_rng(3), 3, 4, 50, 8)
    lp[1, 2] = lp[1, 2].flip(0)                # ascending: best-first over it would not be best-first
    t = build_tree_from_topk(lp, ids, 12, backend=backend)
    assert t.flags.tolist() == [0, F.UNSORTED_INPUT, 0] and int(t.num_nodes[1]) == 1


def test_build_tree_end_to_end_matches_oracle_and_chain():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 1000).bfloat16()
    a = build_tree(logits, 40, backend="cpu")
    b = build_tree(logits, 40, backend="reference")
    assert_trees_equal(a, b)
    chain = build_tree(logits, 7, topk=1, backend="cpu")   # DFlash chain: one node per depth
    assert chain.num_nodes.tolist() == [8] * 5
    assert torch.equal(chain.depths, torch.arange(8).expand(5, 8).to(torch.int32))
    assert torch.equal(chain.tokens[:, 1:], logits.float().argmax(-1))


def test_budget_zero_and_empty_batch():
    lp, ids = random_topk(np.random.default_rng(2), 2, 3, 10, 4)
    t = build_tree_from_topk(lp, ids, 0, backend="cpu")
    assert t.num_nodes.tolist() == [1, 1] and t.tokens.shape == (2, 1) and t.flags.tolist() == [0, 0]
    e = build_tree_from_topk(lp[:0], ids[:0], 8, backend="cpu")
    assert e.tokens.shape == (0, 9)


def test_scratch_memory_does_not_grow_with_depth_limit_beyond_the_budget():
    """A node is at most `budget` deep, so the builder's per-node path table is n x min(L, budget): a
    300k-deep request with budget 4096 once took 4.9 GB; it must stay far below that (peak RSS of a child)."""
    import subprocess
    import sys

    code = ("import resource, torch, sglang_ddtree as s\n"
            "lp = torch.full((1, 300_000, 1), -0.1); ids = torch.zeros(1, 300_000, 1, dtype=torch.long)\n"
            "t = s.build_tree_from_topk(lp, ids, 4096, backend='cpu')\n"
            "assert int(t.num_nodes[0]) == 4097 and int(t.depths[0].max()) == 4096\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    peak_mb = int(out.stdout.split()[-1]) / 1024
    assert peak_mb < 1500, peak_mb
