"""Rejection sampling of a drafted tree (rejection.py). One drafted path (a DFlash2 selector's walk): equal to its
definition (reference.chain_rejection_reference) on identical inputs and random numbers, committed by the round's
walk as defined, exact in law. A drawn tree (DDTree's sampled requests): the node rule
(reference.node_rejection_reference) exact in law by enumeration, the round's draws and targets equal to their
definitions on the same random numbers, and the emitted tokens following the target (a chi-square test that
catches three seeded biases)."""
import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from sglang_ddtree import accept_tree, reference, rejection
from sglang_ddtree.sampling import gumbel_noise, uniform_noise
from sglang_ddtree.reference import chain_rejection_reference, node_rejection_reference
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import NodeLaw, law_rows_torch
from sglang_ddtree.tree import build_tree_from_topk

OPS = RoundOps("cpu")


def law(B, T=1.0):
    return NodeLaw(torch.full((B,), T), torch.zeros(B, dtype=torch.int64), torch.ones(B), torch.zeros(B),
                   filtered=False)


def path_tree(drafted):
    """The chain of drafted tokens [B, L] as a tree (node e + 1 holds drafted[:, e])."""
    B, L = drafted.shape
    return build_tree_from_topk(torch.zeros(B, L, 1), drafted.unsqueeze(-1), L, root_tokens=0, seq_lens=0)


def draft_from(q_logits, g):
    """Each slot's token drawn from softmax(q_logits[:, e]) over K candidates (ids cand), and that law."""
    B, L, K = q_logits.shape
    q = torch.softmax(q_logits, -1)
    pick = torch.multinomial(q.reshape(B * L, K), 1, generator=g).view(B, L)
    return pick, q


@pytest.mark.parametrize("seed,dtype", [(0, torch.float64), (1, torch.float64), (2, torch.float32), (3, torch.float32)])
def test_equals_the_reference_on_the_same_random_numbers(seed, dtype):
    """Random laws (target logits, a draft law over K of V candidates; most targets far from the draft, with masked
    entries, a third equal to it), the Philox streams the module documents: the committed count and bonus equal the
    reference's for every request, and the walk over the path commits exactly drafted[:a] + [bonus]. float64 logits
    take the torch definition, float32 ones the native CPU ops (the reference's law in float64 either way)."""
    g = torch.Generator().manual_seed(seed)
    B, L, K, V = 400, 5, 6, 11
    logits = torch.randn(B, L + 1, V, generator=g, dtype=torch.float64) * (1 + 3 * torch.rand(B, 1, 1, generator=g,
                                                                                              dtype=torch.float64))
    logits[torch.rand(B, L + 1, V, generator=g) < 0.1] = float("-inf")
    logits[:, :, 0] = 0.0  # every row keeps a finite entry
    cand = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(B * L)]).view(B, L, K)
    pick, qk = draft_from(torch.randn(B, L, K, generator=g) * 2, g)
    drafted = cand.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
    seeds, step = torch.arange(B, dtype=torch.int64) * 7 + seed, torch.full((B,), 3, dtype=torch.int64)
    T = 0.7
    same = torch.arange(B) % 3 == 0  # a third of the targets equal to the draft (p = q: every token accepted)
    dense = torch.zeros(B, L, V, dtype=torch.float64).scatter_(-1, cand, qk.double())
    logits[same, :L] = (dense[same].log() * T)
    logits = logits.to(dtype).double()  # the law the ops read
    targets = rejection.rejection_targets(OPS, logits.to(dtype), law(B, T), path_tree(drafted), (cand, qk), seeds, step)

    u = torch.stack([uniform_noise(seeds, step, torch.full_like(seeds, rejection.ACCEPT_STREAM + i), 1)[:, 0]
                     for i in range(L)], 1).double().numpy()
    noise = torch.stack([gumbel_noise(seeds, step, torch.full_like(seeds, rejection.BONUS_STREAM + i), V)
                         for i in range(L + 1)], 1).double().numpy()
    p = torch.softmax(logits / T, -1).numpy()
    q = dense.numpy()
    res = accept_tree(path_tree(drafted), targets)
    counts = []
    for b in range(B):
        a, bonus = chain_rejection_reference(p[b], q[b], drafted[b].numpy(), u[b], noise[b])
        counts.append(a)
        assert int(res.accept_len[b]) == a + 1 and int(res.bonus[b]) == bonus, b
        assert res.accepted_tokens[b, :a + 1].tolist() == drafted[b, :a].tolist() + [bonus]
    assert 0 < np.mean(counts) < L and max(counts) == L and min(counts) == 0  # every branch was exercised


def test_greedy_rows_take_the_argmax():
    g = torch.Generator().manual_seed(5)
    B, L, K, V = 6, 3, 4, 9
    logits = torch.randn(B, L + 1, V, generator=g)
    cand = torch.arange(K).expand(B, L, K)
    qk = torch.softmax(torch.randn(B, L, K, generator=g), -1)
    mixed = NodeLaw(torch.tensor([0.0, 1.0] * 3), torch.zeros(B, dtype=torch.int64), torch.ones(B), torch.zeros(B),
                    filtered=False)
    seeds = torch.arange(B, dtype=torch.int64)
    out = rejection.rejection_targets(OPS, logits, mixed, path_tree(cand[:, :, 0]), (cand, qk), seeds, seeds)
    assert torch.equal(out[0::2], logits.argmax(-1)[0::2])
    assert torch.equal(rejection.rejection_targets(OPS, logits, None, path_tree(cand[:, :, 0]), (cand, qk),
                                                   seeds, seeds), logits.argmax(-1))


# --- the law --------------------------------------------------------------------------------------------------
# A two-slot target over V = 5 tokens whose second law depends on the first token, and a draft law far from it
# (each slot's q its own random softmax, the second after the first pick). Null: the first two emitted tokens
# follow the target's joint law. N = 30,000 requests; the chi-square goodness of fit over the 25 cells against
# the exact joint law. The seeded biases it must catch: the bonus drawn from p instead of (p − q)⁺ (the classic
# bug) and every drafted token accepted (the draft's law emitted).
V, N = 5, 30_000


def _laws():
    g = torch.Generator().manual_seed(42)
    first = torch.randn(V, generator=g, dtype=torch.float64) * 1.5          # target logits at node 0
    second = torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5      # row y1: at node 1 after y1
    draft0 = torch.randn(V, generator=g) * 1.5
    draft1 = torch.randn(V, V, generator=g) * 1.5
    return first, second, draft0, draft1


def _emitted_pairs() -> np.ndarray:
    """The first two emitted tokens of N rounds (slot 2 drafted too, so node 2's bonus is in play)."""
    first, second, draft0, draft1 = _laws()
    g = torch.Generator().manual_seed(7)
    q0 = torch.softmax(draft0, -1).expand(N, V)
    x0 = torch.multinomial(q0, 1, generator=g)[:, 0]
    q1 = torch.softmax(draft1[x0], -1)
    x1 = torch.multinomial(q1, 1, generator=g)[:, 0]
    q2 = torch.full((N, V), 1.0 / V)
    x2 = torch.multinomial(q2, 1, generator=g)[:, 0]
    drafted = torch.stack([x0, x1, x2], 1)
    logits = torch.stack([first.expand(N, V), second[x0], second[x1], torch.zeros(N, V, dtype=torch.float64)], 1)
    cand = torch.arange(V).expand(N, 3, V)
    seeds = torch.arange(N, dtype=torch.int64)
    targets = rejection.rejection_targets(OPS, logits, law(N), path_tree(drafted),
                                          (cand, torch.stack([q0, q1, q2], 1)), seeds, torch.zeros_like(seeds))
    res = accept_tree(path_tree(drafted), targets)
    assert bool((res.accept_len >= 1).all())
    toks = res.accepted_tokens
    # a second token exists where the first was accepted (then it is drafted[1] or node 1's bonus); else the
    # first emitted token is node 0's bonus and the second comes from the next round: drawn here from node 1's
    # law after it, exactly as a round rooted there would (a fresh draw from the target)
    nxt = torch.multinomial(torch.softmax(second[toks[:, 0]], -1), 1, generator=g)[:, 0]
    y2 = torch.where(res.accept_len >= 2, toks[:, 1], nxt)
    return (toks[:, 0] * V + y2).numpy()


def _gof_pvalue(cells: np.ndarray, top_p: float = 1.0) -> float:
    """Chi-square p-value of the emitted pairs against the target's joint law (each node's law filtered by top_p)."""
    first, second, _, _ = _laws()
    law_of = lambda x: reference.filtered_law(x.numpy(), 1.0, 0, top_p, 0.0)  # noqa: E731
    joint = (law_of(first)[:, None] * np.stack([law_of(row) for row in second])).flatten()
    counts = np.bincount(cells, minlength=V * V)
    assert counts[joint == 0].sum() == 0  # nothing the law drops is ever emitted
    return stats.chisquare(counts[joint > 0], joint[joint > 0] * len(cells)).pvalue


def test_emitted_tokens_follow_the_target():
    assert _gof_pvalue(_emitted_pairs()) > 1e-3


@pytest.mark.parametrize("bias", ["bonus from p", "accept all"])
def test_the_law_test_catches_a_seeded_bias(monkeypatch, bias):
    seed_bias(monkeypatch, bias)
    assert _gof_pvalue(_emitted_pairs()) < 1e-3


def seed_bias(monkeypatch, bias: str) -> None:
    """The seeded biases: the residual drawn from p instead of (p − q)⁺ (the classic bug), every first child
    accepted (the draft's law emitted), a rejected child left in the next draw's law (q never renormalised without
    it: the draws are without replacement, the verify as with)."""
    if bias == "bonus from p":
        monkeypatch.setattr(rejection, "residual_logits", lambda scaled, lse, nc, pc, rest: scaled)
    elif bias == "accept all":
        monkeypatch.setattr(rejection, "accept_children", lambda pc, rest, q, kids, pos, seed, step: (kids[..., 0], pc))
    else:
        monkeypatch.setattr(rejection, "without", lambda q, at: q)


# --- drawn trees ----------------------------------------------------------------------------------------------

def law_given_draws(p, qfull, seq, renormalise=True):
    """The law of the node's token for one sequence of drawn children, from the rule as documented (not its code):
    child i accepted with probability min(1, p_i(x) / q_i(x)), the rest of the mass to the last residual
    (renormalise False: q_i = q throughout)."""
    out, reach, qv, pi = np.zeros(len(p)), 1.0, qfull.copy(), p / p.sum()
    for x in seq:
        qi = qv / qv.sum()
        a = min(1.0, pi[x] / qi[x])
        out[x] += reach * a
        reach *= 1.0 - a
        r = np.maximum(pi - qi, 0.0)
        if r.sum() <= 0:
            break
        pi = r / r.sum()
        if renormalise:
            qv[x] = 0.0
    return out + reach * pi


def node_law_by_enumeration(p, q, cand, m, renormalise=True):
    """The exact law of reference.node_rejection_reference's token: law_given_draws over every ordered draw of m
    children without replacement from q, weighted by its probability."""
    out = np.zeros(len(p))
    qfull = np.zeros(len(p))
    qfull[cand] = q
    support = [c for c in cand if qfull[c] > 0]
    for seq in itertools.permutations(support, min(m, len(support))):
        weight, qi_mass = 1.0, qfull.copy()
        for x in seq:  # the draw's probability
            weight *= qi_mass[x] / qi_mass.sum()
            qi_mass[x] = 0.0
        out += weight * law_given_draws(p, qfull, seq, renormalise)
    return out


@pytest.mark.parametrize("case", range(12))
def test_outcome_law_is_the_rule_given_the_draws(case):
    """rejection.outcome_law (the bench's exact score of a drawn tree) equals law_given_draws at each child's token,
    for random p, q (with zeros) and drawn sequences, batched."""
    rng = np.random.default_rng(100 + case)
    V, K, R = 8, 5, 16
    pcs, rests, qs, kids, poss, want = [], [], [], [], [], []
    for _ in range(R):
        p = rng.dirichlet(np.ones(V) * 0.6)
        cand = rng.permutation(V)[:K]
        q = rng.dirichlet(np.ones(K) * 0.6)
        q[rng.random(K) < 0.2] = 0.0
        q = q / q.sum() if q.sum() > 0 else np.full(K, 1.0 / K)
        support = [i for i in range(K) if q[i] > 0]
        m = int(rng.integers(1, len(support) + 1))
        order = list(rng.permutation(support)[:m])
        qfull = np.zeros(V)
        qfull[cand] = q
        law_ = law_given_draws(p, qfull, [int(cand[i]) for i in order])
        pcs.append(p[cand]), rests.append(1.0 - p[cand].sum()), qs.append(q)
        kids.append([int(cand[i]) for i in order] + [-1] * (K - m)), poss.append(order + [0] * (K - m))
        want.append([law_[int(cand[i])] for i in order] + [0.0] * (K - m))
    t = lambda x, dt=torch.float64: torch.tensor(np.array(x), dtype=dt).unsqueeze(0)  # noqa: E731
    got = rejection.outcome_law(t(pcs), t(rests), t(qs), t(kids, torch.int64), t(poss, torch.int64))[0]
    np.testing.assert_allclose(got.numpy(), np.array(want), atol=1e-12)


@pytest.mark.parametrize("case", range(24))
def test_the_node_rule_is_exact(case):
    """The token's law equals p for any q: random p (some zeros), q over K of V candidates (some zeros, so the
    draws can run out of mass), every number of children; and p = q (no residual mass)."""
    rng = np.random.default_rng(case)
    V, K = 7, 4
    p = rng.dirichlet(np.ones(V) * 0.7)
    p[rng.random(V) < 0.2] = 0.0
    p[rng.integers(V)] += 0.1
    p /= p.sum()
    cand = rng.permutation(V)[:K]
    q = rng.dirichlet(np.ones(K) * 0.7)
    if case % 3 == 0:
        q[rng.integers(K)] = 0.0
        q /= q.sum()
    if case % 8 == 7:  # p = q on the candidates
        p = np.zeros(V)
        p[cand] = q
    for m in range(1, K + 1):
        np.testing.assert_allclose(node_law_by_enumeration(p, q, cand, m), p, atol=1e-12)


def test_the_enumeration_sees_a_wrong_rule():
    """The check above can fail: a verify that keeps testing against the first draw's law (q never renormalised
    without the rejected children) gives another law."""
    rng = np.random.default_rng(0)
    p, q, cand = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6)), np.arange(6)
    assert np.abs(node_law_by_enumeration(p, q, cand, 3, renormalise=False) - p).max() > 1e-3


def drawn_case(seed, B=64, L=3, K=5, V=9, budget=10):
    """A batch of drawn trees over random keys, random float64 target logits at every node, a mixed law."""
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(torch.randn(B, L, K, generator=g) * 1.5, -1).sort(-1, descending=True).values
    lp[:, :, -1][torch.rand(B, L, generator=g) < 0.3] = float("-inf")  # a candidate the law drops
    ids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(B * L)]).view(B, L, K)
    tree = build_tree_from_topk(lp, ids, budget, root_tokens=0, seq_lens=3)
    temps = torch.where(torch.arange(B) % 4 == 0, 0.0, 0.8)
    mixed = NodeLaw(temps, torch.zeros(B, dtype=torch.int64), torch.ones(B), torch.zeros(B), filtered=False)
    seeds, step = torch.arange(B, dtype=torch.int64) * 11 + seed, torch.full((B,), 5, dtype=torch.int64)
    logits = torch.randn(B, tree.n, V, generator=g, dtype=torch.float64) * 2
    return tree, lp, ids, mixed, seeds, step, logits


@pytest.mark.parametrize("seed", range(3))
def test_draws_equal_their_definition(seed):
    """Node v's children, in index order, are the first draws of the Gumbel top-k of its children's keys times
    DRAW_SHARPNESS with stream DRAW_STREAM + v; the shape is the tree's; greedy rows keep their tokens."""
    tree, lp, ids, mixed, seeds, step, _ = drawn_case(seed)
    s = rejection.DRAW_SHARPNESS
    drawn, (cand, q) = rejection.draw_children(OPS, tree, lp, ids, mixed, seeds, step)
    assert torch.equal(cand, ids) and torch.allclose(q, torch.softmax(lp * s, -1))
    for name in ("parents", "depths", "num_nodes", "retrive_next_token", "retrive_next_sibling", "tree_mask"):
        assert torch.equal(getattr(drawn, name), getattr(tree, name)), name
    B, n = tree.tokens.shape
    K = lp.shape[-1]
    for b in range(B):
        if mixed.temperatures[b] == 0:
            assert torch.equal(drawn.tokens[b], tree.tokens[b])
            continue
        kids: dict = {}
        for j in range(1, int(tree.num_nodes[b])):
            kids.setdefault(int(tree.parents[b, j]), []).append(j)
        for v, js in kids.items():
            d = int(tree.depths[b, v])
            noise = gumbel_noise(seeds[b:b + 1], step[b:b + 1], torch.tensor([rejection.DRAW_STREAM + v]), K)[0]
            keys = (lp[b, d] * s + noise).tolist()  # float32, as the draw adds them
            order = sorted(range(K), key=lambda c: (-keys[c], c))
            assert [int(drawn.tokens[b, j]) for j in js] == [int(ids[b, d, c]) for c in order[:len(js)]]


@pytest.mark.parametrize("seed", range(3))
def test_drawn_targets_equal_the_node_reference(seed):
    """Every node's target token equals reference.node_rejection_reference on the same p, q, children and random
    numbers (uniform i of node v: entry i of stream ACCEPT_STREAM + v; residual noise: stream BONUS_STREAM + v);
    greedy rows the argmax."""
    tree, lp, ids, mixed, seeds, step, logits = drawn_case(seed)
    drawn, draft = rejection.draw_children(OPS, tree, lp, ids, mixed, seeds, step)
    targets = rejection.rejection_targets(OPS, logits, mixed, drawn, draft, seeds, step)
    B, n, V = logits.shape
    K = lp.shape[-1]
    T = mixed.temperatures.double().clamp(min=1e-6).view(B, 1, 1)
    p = torch.softmax(logits / T, -1).numpy()
    q = draft[1].double().numpy()
    accepted = 0
    for b in range(B):
        if mixed.temperatures[b] == 0:
            assert torch.equal(targets[b], logits[b].argmax(-1))
            continue
        for v in range(int(tree.num_nodes[b])):
            kids = [int(drawn.tokens[b, j]) for j in range(1, int(tree.num_nodes[b])) if int(tree.parents[b, j]) == v]
            d = min(int(tree.depths[b, v]), lp.shape[1] - 1)
            u = uniform_noise(seeds[b:b + 1], step[b:b + 1], torch.tensor([rejection.ACCEPT_STREAM + v]),
                              max(1, len(kids)))[0].double().numpy()
            noise = gumbel_noise(seeds[b:b + 1], step[b:b + 1], torch.tensor([rejection.BONUS_STREAM + v]),
                                 V)[0].double().numpy()
            want = node_rejection_reference(p[b, v], q[b, d], ids[b, d].numpy(), kids, u, noise)
            assert int(targets[b, v]) == want, (b, v)
            accepted += want in kids
    assert accepted > 20  # children were accepted as well as residuals drawn


# The law through the round's draws, verify and walk: a two-level target over V = 5 tokens (node 0's law, and the
# law after each first token), keys far from it (one per depth, over 4 of the 5 tokens, so the residual reaches
# a token no child can hold), budget 6 (the root has several children, some have their own). Null: the first two
# emitted tokens follow the target's joint law; N = 30,000 requests, chi-square goodness of fit over the 25 cells.
# The seeded biases it must catch: seed_bias's three.

def _drawn_pairs(round_ops=OPS, dtype=torch.float64, top_p=1.0) -> np.ndarray:
    """The first two emitted tokens of N drawn rounds, on round_ops' device and backend: float64 logits take the
    torch definition, 16/32-bit ones the native ops; top_p < 1 filters every node's law."""
    dev = round_ops.device
    first, second, _, _ = (t.to(dev) for t in _laws())
    g = torch.Generator().manual_seed(11)
    lp = torch.log_softmax(torch.tensor([[2.0, 1.2, 0.3, -0.5], [1.5, 1.0, 0.2, -1.0]]), -1).expand(N, 2, 4)
    ids = torch.tensor([[3, 0, 4, 1], [1, 2, 0, 4]]).expand(N, 2, 4)
    lp, ids = lp.contiguous().to(dev), ids.contiguous().to(dev)
    tree = build_tree_from_topk(lp, ids, 6, root_tokens=0, seq_lens=0)
    seeds = torch.arange(N, dtype=torch.int64, device=dev)
    step = torch.zeros_like(seeds)
    rule = law(N)
    rule = NodeLaw(*(t.to(dev) for t in (rule.temperatures, rule.top_ks, rule.top_ps.fill_(top_p), rule.min_ps)),
                   filtered=top_p < 1)
    drawn, draft = rejection.draw_children(round_ops, tree, lp, ids, rule, seeds, step)
    # node logits: the root's law, a depth-1 node's law after its token; deeper nodes (unread here) uniform
    logits = torch.where((drawn.depths == 1).unsqueeze(-1), second[drawn.tokens.clamp(max=V - 1)],
                         torch.zeros(N, drawn.n, V, dtype=torch.float64, device=dev))
    logits[:, 0] = first
    targets = rejection.rejection_targets(round_ops, logits.to(dtype), rule, drawn, draft, seeds, step)
    res = accept_tree(drawn, targets)
    toks = res.accepted_tokens.cpu()
    after = torch.tensor(np.stack([reference.filtered_law(row.numpy(), 1.0, 0, top_p, 0.0) for row in second.cpu()]))
    nxt = torch.multinomial(after[toks[:, 0]], 1, generator=g)[:, 0]
    y2 = torch.where(res.accept_len.cpu() >= 2, toks[:, 1], nxt)
    return (toks[:, 0] * V + y2).numpy()


def test_drawn_tree_emits_the_target():
    assert _gof_pvalue(_drawn_pairs()) > 1e-3


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_drawn_tree_emits_the_target_through_the_native_ops(top_p):
    """The same law test through the native CPU ops (law_rows, drawn_targets: float32 logits), unfiltered and under
    top-p 0.8 (the joint law of the filtered target; a dropped token never emitted). The ops equal the definition
    the seeded biases are shown on (test_native_walk_equals_the_definition)."""
    assert _gof_pvalue(_drawn_pairs(dtype=torch.float32, top_p=top_p), top_p) > 1e-3


@pytest.mark.parametrize("seed", range(4))
def test_native_walk_equals_the_definition(seed):
    """The native ops (the walk from the root, each node's tests, one bonus where it stops) and the definition
    (every node's target: drawn_targets_torch) on the same float32 logits, mixed laws (greedy, temperature only,
    top-k, top-p, min-p) and random numbers: the same target at every node of the walk, so the same commit."""
    tree, lp, ids, _, seeds, step, logits = drawn_case(seed)
    B = tree.tokens.shape[0]
    pick = lambda *v: torch.tensor([v[i % len(v)] for i in range(B)])  # noqa: E731
    mixed = NodeLaw(pick(0.0, 0.8, 1.0, 0.6, 1.2).float(), pick(0, 0, 3, 0, 0), pick(1.0, 1.0, 1.0, 0.7, 1.0).float(),
                    pick(0.0, 0.0, 0.0, 0.0, 0.2).float())
    drawn, draft = rejection.draw_children(OPS, tree, lp, ids, mixed, seeds, step)
    x = logits.float()
    native = rejection.rejection_targets(OPS, x, mixed, drawn, draft, seeds, step)
    rows = law_rows_torch(x, mixed)
    want = rejection.drawn_targets_torch(x, mixed, rows, drawn, draft, seeds, step)
    a, b = accept_tree(drawn, native), accept_tree(drawn, want)
    assert torch.equal(a.accept_len, b.accept_len) and torch.equal(a.accepted_tokens, b.accepted_tokens)
    assert torch.equal(a.bonus, b.bonus)
    walked = torch.zeros_like(native, dtype=torch.bool)
    for r in range(B):
        walked[r, a.accept_index[r, :int(a.accept_len[r])].long()] = True
    assert torch.equal(native[walked], want[walked])
    sampled = ~mixed.greedy()
    assert (a.accept_len[sampled] >= 2).sum() > 10 and (a.accept_len[sampled] == 1).sum() > 5  # both branches


@pytest.mark.parametrize("bias", ["bonus from p", "accept all", "q kept"])
def test_the_drawn_law_test_catches_a_seeded_bias(monkeypatch, bias):
    seed_bias(monkeypatch, bias)
    assert _gof_pvalue(_drawn_pairs()) < 1e-3
