"""The lattice tree (docs/DESIGN.md §3.10): its oracle against an independent definition (every path of the lattice
enumerated), the native CPU builder equal to the oracle bit for bit on thousands of seeded random lattices and
on hypothesis cases, a DFlash-1 lattice giving build_tree_from_topk's tree, stage 1 against its definition, the
flags, the chain and the argument checks."""
import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ddtree import (accept_tree, build_tree_from_lattice, build_tree_from_lattice_rows, build_tree_from_topk,
                           flags as F)
from sglang_ddtree.budget import truncate
from sglang_ddtree.lattice import key_temperatures, lattice_logprobs
from sglang_ddtree.reference import build_lattice_tree_reference, lattice_rows_reference

from test_tree_native import assert_trees_equal, check_invariants
from treegen import LATTICE_MODES, random_lattice

INF = float("inf")


# --- the oracle against an independent definition ---------------------------------------------------------------

def dyadic_rows(rng, L, K):
    """Sorted rows of quarter-integer log-probs in [-3, 0] (every float64 sum of a few is exact, so weights tie
    exactly and no rounding order matters), masked tails, and random candidate orders."""
    lp = -rng.integers(0, 13, size=(L, K, K)).astype(np.float32) / 4
    lp[rng.random((L, K, K)) < 0.15] = -np.inf
    lp = -np.sort(-lp, axis=-1)
    order = np.argsort(rng.random((L, K, K)), axis=-1).astype(np.int32)
    return lp, order


def all_paths(lp, order):
    """Every unmasked path of candidate indices: (weight, ranks tuple, candidates tuple), weight the sum of the
    conditional log-probs along it (exact here), a child's row the one of its parent's candidate."""
    L, K, _ = lp.shape
    out = []

    def grow(depth, row, w, ranks, cands):
        if depth == L:
            return
        for r in range(K):
            if lp[depth, row, r] == -np.inf:
                continue
            c = int(order[depth, row, r])
            entry = (w + float(lp[depth, row, r]), ranks + (r,), cands + (c,))
            out.append(entry)
            grow(depth + 1, c, *entry)

    grow(0, 0, 0.0, (), ())
    return out


def expected_nodes(paths, budget, chain_pops):
    """The best `budget` paths by (weight desc, ranks tuple asc) after the forced chain (the rank-0 walk, cut
    at the first masked depth): the tree's nodes in index order."""
    by_ranks = {p[1]: p for p in paths}
    chain = []
    while len(chain) < min(chain_pops, budget) and (0,) * (len(chain) + 1) in by_ranks:
        chain.append(by_ranks[(0,) * (len(chain) + 1)])
    rest = sorted((p for p in paths if p not in chain), key=lambda p: (-p[0], p[1]))
    return chain + rest[:budget - len(chain)]


@pytest.mark.parametrize("seed", range(60))
def test_oracle_is_the_best_paths_of_the_lattice(seed):
    rng = np.random.default_rng(seed)
    L, K = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    lp, order = dyadic_rows(rng, L, K)
    cand = rng.permutation(1000)[: L * K].reshape(L, K)
    paths = all_paths(lp, order)
    for anchor in (0, L):
        for budget in {0, 1, 2, int(rng.integers(0, len(paths) + 3)), len(paths), len(paths) + 2}:
            t = build_lattice_tree_reference(lp, order, cand, budget, chain_pops=anchor)
            want = expected_nodes(paths, budget, anchor)
            assert t["num_nodes"] == 1 + len(want)
            assert bool(t["flags"] & F.HEAP_EXHAUSTED) == (len(want) < budget)
            assert t["flags"] & ~F.HEAP_EXHAUSTED == 0
            got = [()]
            for i in range(1, t["num_nodes"]):
                got.append(got[t["parents"][i]] + (int(t["ranks"][i]),))
            assert got[1:] == [p[1] for p in want]                         # nodes, in pop order
            for i, (w, _, cands) in enumerate(want, start=1):
                assert t["logw"][i] == w                                   # exact: dyadic weights
                assert t["tokens"][i] == cand[len(cands) - 1, cands[-1]]   # the candidate's own token
                assert t["depths"][i] == len(cands)


def test_oracle_ties_follow_the_ranks_tuple():
    """Every row uniform over two candidates: all paths of a depth tie, so the order is the ranks tuple's
    (breadth first), and each node's token is the candidate its parent's row ranks there."""
    lp = np.full((2, 2, 2), np.log(0.5), np.float32)
    order = np.array([[[1, 0], [1, 0]], [[0, 1], [1, 0]]], np.int32)
    cand = np.array([[10, 11], [20, 21]])
    t = build_lattice_tree_reference(lp, order, cand, 6)
    assert t["tokens"].tolist() == [0, 11, 10, 21, 20, 20, 21]
    assert t["parents"].tolist() == [-1, 0, 0, 1, 1, 2, 2] and t["ranks"].tolist() == [-1, 0, 1, 0, 1, 0, 1]


# --- the CPU builder against the oracle ----------------------------------------------------------------------------

def run_case(rng, B, L, K, budget, mode, anchor, check=False, rows=True):
    """Both backends on one random lattice: from stage 1's rows (computed once), or from the scores (rows=False)."""
    cand, scores, temperature = random_lattice(rng, B, L, K, mode=mode)
    roots = torch.tensor(rng.integers(0, 5000, B))
    lens = torch.tensor(rng.integers(0, 10_000, B))
    kw = dict(root_tokens=roots, seq_lens=lens, anchor=anchor)
    if rows:
        lp, order = lattice_logprobs(scores, temperature)
        build = lambda backend: build_tree_from_lattice_rows(lp, order, cand, budget, backend=backend, **kw)
    else:
        build = lambda backend: build_tree_from_lattice(cand, scores, budget, temperature=temperature,
                                                        backend=backend, **kw)
    native, oracle = build("cpu"), build("reference")
    assert_trees_equal(native, oracle, f"(B={B} L={L} K={K} budget={budget} mode={mode} anchor={anchor})")
    if check:
        check_invariants(native, lens)
    return native


def test_native_matches_oracle_on_3000_seeded_lattices():
    """>= 3,000 seeded random requests: every lattice mode, forced ties, masks, exhausted heaps, K = 1, L = 1,
    budgets 0 and 1, anchored and not; 0 mismatches allowed, every field bit for bit."""
    rng = np.random.default_rng(20261206)
    cases = exhausted = masked = 0
    seen = set()
    while cases < 3000:
        B = int(rng.integers(1, 33))
        L = int(rng.choice([1, 2, 3, 5, 7, 15]))
        K = int(rng.choice([1, 2, 3, 4, 8, 16]))
        budget = int(rng.choice([0, 1, 2, 3, 7, 8, 15, 16, 31, 63, 100]))
        mode = LATTICE_MODES[(cases // 7) % len(LATTICE_MODES)]
        anchor = "chain" if rng.random() < 0.5 else None
        tree = run_case(rng, B, L, K, budget, mode, anchor)
        exhausted += int(((tree.flags & F.HEAP_EXHAUSTED) != 0).sum())
        masked += mode == "masked"
        seen |= {("K1", K == 1), ("L1", L == 1), ("b0", budget == 0), ("b1", budget == 1), ("anchor", anchor)}
        cases += B
    assert exhausted > 0 and masked > 0
    assert {("K1", True), ("L1", True), ("b0", True), ("b1", True), ("anchor", "chain"), ("anchor", None)} <= seen


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 4), L=st.integers(0, 9), K=st.integers(1, 9), budget=st.integers(0, 120),
       mode=st.sampled_from(LATTICE_MODES), anchor=st.sampled_from([None, "chain"]), seed=st.integers(0, 2**32 - 1))
def test_native_matches_oracle_hypothesis(B, L, K, budget, mode, anchor, seed):
    run_case(np.random.default_rng(seed), B, L, K, budget, mode, anchor, check=True, rows=False)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_anchored_mask_anchors_only_the_requests_it_marks(backend):
    """anchored (bool [B], docs/DESIGN.md §3.11) in the lattice builder: each request's tree is the oracle's
    (reference.build_lattice_tree_reference) for that request alone, anchored where the mask is set and the paper's
    tree elsewhere; without a mask every request is anchored, as before."""
    rng = np.random.default_rng(44)
    differs = 0
    for trial in range(60):
        B, L, K = int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.choice([1, 2, 3, 5, 8]))
        budget = int(rng.choice([1, 3, 8, 15, 31]))
        cand, scores, temperature = random_lattice(rng, B, L, K, mode=LATTICE_MODES[trial % len(LATTICE_MODES)])
        lp, order = lattice_logprobs(scores, temperature)
        roots, lens = torch.tensor(rng.integers(0, 5000, B)), torch.tensor(rng.integers(0, 10_000, B))
        mask = torch.tensor(rng.random(B) < 0.5)
        got = build_tree_from_lattice_rows(lp, order, cand, budget, root_tokens=roots, seq_lens=lens, backend=backend,
                                           anchor="chain", anchored=mask)
        every = build_tree_from_lattice_rows(lp, order, cand, budget, root_tokens=roots, seq_lens=lens,
                                             backend=backend, anchor="chain")
        for b in range(B):
            want = build_lattice_tree_reference(lp[b].numpy(), order[b].numpy(), cand[b].numpy(), budget,
                                                root_token=int(roots[b]), seq_len=int(lens[b]), request_index=b,
                                                chain_pops=L if bool(mask[b]) else 0)
            for name in ("num_nodes", "tokens", "parents", "depths", "ranks", "logw", "positions",
                         "retrive_next_token", "retrive_next_sibling", "tree_mask", "flags"):
                assert np.array_equal(getattr(got, name)[b].numpy(), np.asarray(want[name])), (trial, b, name)
            anchored_alone = build_lattice_tree_reference(lp[b].numpy(), order[b].numpy(), cand[b].numpy(), budget,
                                                          root_token=int(roots[b]), seq_len=int(lens[b]),
                                                          request_index=b, chain_pops=L)
            assert np.array_equal(every.tokens[b].numpy(), anchored_alone["tokens"]), (trial, b)
            differs += not bool(mask[b]) and not np.array_equal(got.tokens[b].numpy(), anchored_alone["tokens"])
    assert differs > 0  # the unmarked requests did get trees other than the anchored ones
    with pytest.raises(ValueError, match="anchored"):
        build_tree_from_lattice_rows(lp, order, cand, budget, anchor="chain",
                                     anchored=torch.ones(B + 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="anchored"):
        build_tree_from_lattice(cand, scores, budget, anchor="chain", anchored=torch.ones(B))


def test_rows_with_forced_exact_ties():
    """Identical rows everywhere (two tied pairs): many equal path weights, the order rests on the ranks tuple."""
    row = torch.log_softmax(torch.tensor([2.0, 2.0, 1.0, 1.0, 0.0]), -1)
    lp = row.expand(2, 4, 5, 5).contiguous()
    order = torch.stack([torch.randperm(5, generator=torch.Generator().manual_seed(i)) for i in range(2 * 4 * 5)])
    order = order.reshape(2, 4, 5, 5)
    cand = torch.arange(40).reshape(2, 4, 5)
    for budget in (1, 5, 17, 64, 200):
        for anchor in (None, "chain"):
            a = build_tree_from_lattice_rows(lp, order, cand, budget, backend="cpu", anchor=anchor)
            b = build_tree_from_lattice_rows(lp, order, cand, budget, backend="reference", anchor=anchor)
            assert_trees_equal(a, b, f"budget={budget} anchor={anchor}")


# --- a DFlash-1 lattice is the top-k tree --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_rows_independent_of_the_predecessor_give_the_topk_tree(seed):
    """Scores that ignore the predecessor (a DFlash-1 drafter's marginals over K candidates): every field equal to
    build_tree_from_topk's tree from one row per depth (ranks, weights, links, mask), both backends."""
    rng = np.random.default_rng(seed)
    B, L, K = 6, int(rng.integers(1, 8)), int(rng.integers(1, 9))
    cand, scores, temperature = random_lattice(rng, B, L, K, mode=["dflash1", "dflash1", "ties"][seed % 3])
    scores = scores[:, :, :1].expand(B, L, K, K).contiguous()   # 'ties' too: every row equal to the first
    lp, order = lattice_logprobs(scores, key_temperatures(temperature, B, torch.device("cpu")))
    ids = torch.gather(cand, -1, order[:, :, 0].long())
    for budget in (0, 1, 5, 40):
        for anchor in (None, "chain"):
            for backend in ("cpu", "reference"):
                want = build_tree_from_topk(lp[:, :, 0].contiguous(), ids, budget, backend=backend, anchor=anchor)
                got = build_tree_from_lattice(cand, scores, budget, temperature=temperature, backend=backend,
                                              anchor=anchor)
                assert_trees_equal(got, want, f"budget={budget} anchor={anchor} backend={backend}")


# --- stage 1 ------------------------------------------------------------------------------------------------------

def lp_tolerance(ref_lp, scores, temperature):
    """One float32 ulp of the value plus the float64 rounding of the row's log-sum-exp (libm and sum order)."""
    t = np.float64(np.float32(temperature)) if temperature > 0 else 1.0
    zmax = np.abs(np.where(np.isfinite(scores), scores, 0).astype(np.float64) / t).max(-1, keepdims=True)
    return np.spacing(np.abs(np.where(np.isfinite(ref_lp), ref_lp, 0))) + 16 * np.spacing(np.maximum(zmax, 1.0))


@pytest.mark.parametrize("mode", LATTICE_MODES)
def test_stage1_matches_its_definition(mode):
    rng = np.random.default_rng(LATTICE_MODES.index(mode))
    for _ in range(20):
        B, L, K = 3, int(rng.integers(1, 5)), int(rng.integers(1, 20))
        cand, scores, temperature = random_lattice(rng, B, L, K, mode=mode)
        lp, order = lattice_logprobs(scores, key_temperatures(temperature, B, torch.device("cpu")))
        assert lp.dtype == torch.float32 and order.dtype == torch.int32
        for b in range(B):
            ref_lp, ref_order = lattice_rows_reference(scores[b].numpy(), float(temperature[b]))
            assert np.array_equal(order[b].numpy(), ref_order)
            got = lp[b].numpy()
            assert np.array_equal(np.isneginf(got), np.isneginf(ref_lp)) and not np.isnan(got).any()
            fin = np.isfinite(ref_lp)
            tol = lp_tolerance(ref_lp, np.take_along_axis(scores[b].numpy(), ref_order, -1), float(temperature[b]))
            assert (np.abs(got[fin].astype(np.float64) - ref_lp[fin]) <= tol[fin]).all()


def test_stage1_definition_sorts_by_score_then_candidate_and_normalises():
    """The reference's rows: the order is a lexsort (score desc, candidate index asc; -0.0 ties +0.0), lp is
    sorted and each row's law sums to 1 (masked entries 0, a fully masked row -inf throughout)."""
    rng = np.random.default_rng(5)
    s = (rng.integers(-3, 3, size=(4, 6, 6)) / 2).astype(np.float32)
    s[0, 0, :3] = [-0.0, 0.0, -0.0]
    s[1, 2, 4] = -np.inf
    s[2, 3] = -np.inf
    for T in (0.0, 0.5, 3.0):
        lp, order = lattice_rows_reference(s, T)
        for e, p in itertools.product(range(4), range(6)):
            assert order[e, p].tolist() == np.lexsort((np.arange(6), -(s[e, p] + 0.0))).tolist()
        assert (lp[..., 1:] <= lp[..., :-1]).all()
        mass = np.exp(lp.astype(np.float64)).sum(-1)
        assert np.allclose(np.delete(mass.reshape(-1), 2 * 6 + 3), 1.0, atol=1e-6) and np.isneginf(lp[2, 3]).all()
        assert np.isneginf(lp[1, 2, -1])


def test_greedy_keys_are_the_drafters_law_and_temperature_scales():
    """T = 0 (greedy) gives the keys of T = 1; T = 2 gives the keys of scores / 2 at T = 1 (exact: halving is)."""
    rng = np.random.default_rng(0)
    _, scores, _ = random_lattice(rng, 4, 5, 7)
    cpu = torch.device("cpu")
    at = lambda s, T: lattice_logprobs(s, key_temperatures(T, 4, cpu))
    assert all(torch.equal(a, b) for a, b in zip(at(scores, 0.0), at(scores, 1.0)))
    assert all(torch.equal(a, b) for a, b in zip(at(scores, 2.0), at(scores / 2, 1.0)))
    mixed = torch.tensor([0.0, 2.0, 1.0, 0.0])
    lp, _ = at(scores, mixed)
    assert torch.equal(lp[1], at(scores, 2.0)[0][1]) and torch.equal(lp[3], at(scores, 1.0)[0][3])


def test_nonfinite_score_rows_have_no_law():
    s = torch.zeros(1, 2, 3, 3)
    s[0, 1, 2, 0] = float("nan")
    s[0, 1, 0, 1] = INF
    lp, order = lattice_logprobs(s, torch.zeros(1))
    assert torch.isnan(lp[0, 1, 0]).all() and torch.isnan(lp[0, 1, 2]).all() and not torch.isnan(lp[0, 1, 1]).any()
    assert order[0, 1, 2].tolist() == [0, 1, 2]
    ref_lp, ref_order = lattice_rows_reference(s[0].numpy(), 0.0)
    assert np.array_equal(np.isnan(ref_lp), torch.isnan(lp[0]).numpy()) and np.array_equal(ref_order, order[0])


# --- the chain, flags, truncation, accept ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", LATTICE_MODES)
def test_anchored_chain_is_the_selectors_greedy_walk(mode):
    """The chain the anchor forces is the walk SGLang's selector takes for a greedy request: argmax (first index
    on ties) of slot 0's row, then of the row of each chosen candidate; it stops at a fully masked row."""
    rng = np.random.default_rng(1 + LATTICE_MODES.index(mode))
    B, L, K = 8, 7, 5
    cand, scores, _ = random_lattice(rng, B, L, K, mode=mode)
    tree = build_tree_from_lattice(cand, scores, 20, backend="cpu", anchor="chain")
    for b in range(B):
        walk, row = [], 0
        for e in range(L):
            r = scores[b, e, row]
            if bool(torch.isneginf(r).all()):
                break
            row = int(torch.argmax(r))
            walk.append(int(cand[b, e, row]))
        m = len(walk)
        assert tree.tokens[b, 1:m + 1].tolist() == walk and tree.parents[b, 1:m + 1].tolist() == list(range(m))


def test_flags_per_request():
    """NaN / +inf scores: that request is root-only and NONFINITE_INPUT; -inf scores are masked candidates, never
    emitted; a rising row is UNSORTED_INPUT; an order entry that names no candidate is UNSORTED_INPUT (raw op:
    the public function refuses it on the CPU)."""
    rng = np.random.default_rng(3)
    cand, scores, _ = random_lattice(rng, 4, 3, 4)
    scores[1, 1, 2, 3] = float("nan")
    scores[2, 2, 0, 0] = INF
    scores[3, 1] = float("-inf")                                   # slot 1 fully masked: depth 1 only
    for backend in ("cpu", "reference"):
        t = build_tree_from_lattice(cand, scores, 30, backend=backend)
        assert t.flags.tolist() == [0, F.NONFINITE_INPUT, F.NONFINITE_INPUT, F.HEAP_EXHAUSTED]
        assert t.num_nodes.tolist()[1:] == [1, 1, 1 + 4] and int(t.depths[3].max()) == 1
    lp, order = lattice_logprobs(scores[:1], torch.zeros(1))
    rising = lp.clone()
    rising[0, 2, 1] = rising[0, 2, 1].flip(0)
    bad_order = order.clone()
    bad_order[0, 2, 3, 1] = 4
    roots = lens = torch.zeros(1, dtype=torch.long)
    for backend in ("cpu", "reference"):
        assert build_tree_from_lattice_rows(rising, order, cand[:1], 9, backend=backend).flags.tolist() == \
            [F.UNSORTED_INPUT]
    raw = torch.ops.sglang_ddtree.build_tree_from_lattice(lp, bad_order, cand[:1], roots, lens, 9, 0)
    ref = build_lattice_tree_reference(lp[0].numpy(), bad_order[0].numpy(), cand[0].numpy(), 9)
    assert raw[-1].tolist() == [F.UNSORTED_INPUT] == [ref["flags"]] and raw[0].tolist() == [1]


def test_masked_rows_end_the_tree_and_the_chain():
    """A masked candidate's subtree and a fully masked row's children never appear; the anchored chain stops."""
    s = torch.log_softmax(torch.tensor([3.0, 2.0, 1.0]), -1).expand(1, 3, 3, 3).clone()
    s[0, 1, :, 2] = float("-inf")                                  # slot 1: candidate 2 masked after anything
    s[0, 2, 0] = float("-inf")                                     # slot 2 after candidate 0 of slot 1: nothing
    cand = torch.arange(9).reshape(1, 3, 3)
    for anchor in (None, "chain"):
        for backend in ("cpu", "reference"):
            t = build_tree_from_lattice(cand, s, 40, backend=backend, anchor=anchor)
            assert t.flags.tolist() == [F.HEAP_EXHAUSTED] and int(t.num_nodes[0]) == 1 + 3 + 3 * 2 + 3 * 1 * 3
            toks = t.tokens[0, 1:int(t.num_nodes[0])]
            assert 5 not in toks.tolist() and torch.isfinite(t.logw[0, :int(t.num_nodes[0])]).all()


def test_truncated_lattice_tree_is_the_smaller_budgets_tree():
    """The builders pop in one order whatever the budget, so budget.truncate gives the smaller tree exactly (what
    the served auto budget relies on)."""
    rng = np.random.default_rng(11)
    cand, scores, temperature = random_lattice(rng, 5, 7, 6, mode="ties")
    for anchor in (None, "chain"):
        big = build_tree_from_lattice(cand, scores, 63, temperature=temperature, backend="cpu", anchor=anchor)
        for b in (0, 1, 3, 15, 40):
            small = build_tree_from_lattice(cand, scores, b, temperature=temperature, backend="cpu", anchor=anchor)
            assert_trees_equal(truncate(big, b), small, f"budget {b} anchor {anchor}")


def test_budget_zero_and_empty_batch():
    cand, scores, temperature = random_lattice(np.random.default_rng(2), 2, 3, 4)
    for backend in ("cpu", "reference"):
        t = build_tree_from_lattice(cand, scores, 0, temperature=temperature, root_tokens=torch.tensor([7, 9]),
                                    backend=backend)
        assert t.num_nodes.tolist() == [1, 1] and t.tokens.tolist() == [[7], [9]] and t.flags.tolist() == [0, 0]
        e = build_tree_from_lattice(cand[:0], scores[:0], 8, temperature=temperature[:0], backend=backend)
        assert e.tokens.shape == (0, 9) and e.topk == 4


def test_a_target_that_follows_the_selectors_greedy_walk_accepts_the_whole_chain():
    rng = np.random.default_rng(4)
    B, L, K = 4, 6, 4
    cand, scores, _ = random_lattice(rng, B, L, K, mode="peaked")
    tree = build_tree_from_lattice(cand, scores, 12, backend="cpu", anchor="chain")
    target = torch.full_like(tree.tokens, 7)
    target[:, 0] = tree.tokens[:, 1]
    target[:, 1:L] = tree.tokens[:, 2:L + 1]                        # chain node d's target: chain node d + 1
    res = accept_tree(tree, target, backend="cpu")
    assert res.accept_len.tolist() == [L + 1] * B and res.bonus.tolist() == [7] * B


# --- argument checks -------------------------------------------------------------------------------------------------

CAND = torch.arange(24).reshape(2, 3, 4)
SCORES = torch.randn(2, 3, 4, 4)
LP, ORDER = lattice_logprobs(SCORES, torch.zeros(2))

SCORES_CASES = [  # build_tree_from_lattice
    (lambda: build_tree_from_lattice(CAND.float(), SCORES, 4), TypeError, "candidate_ids"),
    (lambda: build_tree_from_lattice(CAND[0], SCORES, 4), ValueError, "candidate_ids"),
    (lambda: build_tree_from_lattice(CAND, SCORES[:, :, :3], 4), ValueError, "scores"),
    (lambda: build_tree_from_lattice(CAND[:, :, :0], SCORES[:, :, :0, :0], 4), ValueError, "candidate_ids"),
    (lambda: build_tree_from_lattice(CAND, SCORES.long(), 4), TypeError, "scores"),
    (lambda: build_tree_from_lattice(CAND - 1, SCORES, 4), ValueError, "candidate_ids"),
    (lambda: build_tree_from_lattice(CAND, SCORES.numpy(), 4), TypeError, "scores"),
    (lambda: build_tree_from_lattice(CAND, SCORES, -1), ValueError, "budget"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 2.0), TypeError, "budget"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=-0.5), ValueError, "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=float("nan")), ValueError, "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=INF), ValueError, "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature="hot"), TypeError, "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=True), TypeError, "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=torch.ones(3)), ValueError, "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=torch.ones(2, dtype=torch.long)), TypeError,
     "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, temperature=torch.tensor([1.0, -1.0])), ValueError,
     "temperature"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, anchor="spine"), ValueError, "anchor"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, backend="gpu"), ValueError, "backend"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, backend="cuda"), ValueError, "backend"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, root_tokens=-1), ValueError, "root_tokens"),
    (lambda: build_tree_from_lattice(CAND, SCORES, 4, seq_lens=torch.tensor([3, -1])), ValueError, "seq_lens"),
]
ARG_CASES = SCORES_CASES + [  # build_tree_from_lattice_rows
    (lambda: build_tree_from_lattice_rows(LP.double(), ORDER, CAND, 4), TypeError, "row_logprobs"),
    (lambda: build_tree_from_lattice_rows(LP[:, :, :3], ORDER, CAND, 4), ValueError, "row_logprobs"),
    (lambda: build_tree_from_lattice_rows(LP[:, :, :0, :0], ORDER[:, :, :0, :0], CAND[:, :, :0], 4), ValueError,
     "row_logprobs"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER.float(), CAND, 4), TypeError, "row_order"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER[:1], CAND, 4), ValueError, "row_order"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER.clamp(max=2), CAND, 4), ValueError, "row_order"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER, CAND[:, :, :3], 4), ValueError, "candidate_ids"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER, CAND - 1, 4), ValueError, "candidate_ids"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER, CAND.to("meta"), 4), ValueError, "candidate_ids"),
    (lambda: build_tree_from_lattice_rows(LP, ORDER, CAND, 10**9), ValueError, "budget"),
]


@pytest.mark.parametrize("i", range(len(ARG_CASES)))
def test_bad_arguments_name_themselves(i):
    fn, exc, name = ARG_CASES[i]
    with pytest.raises(exc, match=name):
        fn()


def test_bad_arguments_are_refused_before_any_work(monkeypatch):
    import sglang_ddtree.tree as tree_mod

    def boom(*a, **k):
        raise AssertionError("stage 1 ran before the arguments were checked")

    monkeypatch.setattr(tree_mod, "lattice_logprobs", boom)
    for fn, exc, _ in SCORES_CASES:
        with pytest.raises(exc):
            fn()
