"""Rejection sampling of one drafted path (rejection.py): equal to its definition
(reference.chain_rejection_reference) on identical inputs and random numbers, committed by the round's walk as
defined, and exact in law (the emitted tokens follow the target whatever the draft law is)."""
import numpy as np
import pytest
import torch
from scipy import stats

from sglang_ddtree import accept_tree, rejection
from sglang_ddtree.accept import gumbel_noise, uniform_noise
from sglang_ddtree.reference import chain_rejection_reference
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import NodeLaw
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


@pytest.mark.parametrize("seed", range(4))
def test_equals_the_reference_on_the_same_random_numbers(seed):
    """Random laws (float64 target logits, a draft law over K of V candidates; most targets far from the draft,
    with masked entries, a third equal to it), the Philox streams the module documents: the committed count and bonus equal the
    reference's for every request, and the walk over the path commits exactly drafted[:a] + [bonus]."""
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
    targets = rejection.rejection_targets(OPS, logits, law(B, T), path_tree(drafted).tokens, (cand, qk), seeds, step)

    u = uniform_noise(seeds, step, torch.full_like(seeds, rejection.ACCEPT_STREAM), L).double().numpy()
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
    out = rejection.rejection_targets(OPS, logits, mixed, path_tree(cand[:, :, 0]).tokens, (cand, qk), seeds, seeds)
    assert torch.equal(out[0::2], logits.argmax(-1)[0::2])
    assert torch.equal(rejection.rejection_targets(OPS, logits, None, path_tree(cand[:, :, 0]).tokens, (cand, qk),
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
    targets = rejection.rejection_targets(OPS, logits, law(N), path_tree(drafted).tokens,
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


def _gof_pvalue(cells: np.ndarray) -> float:
    first, second, _, _ = _laws()
    joint = (torch.softmax(first, -1)[:, None] * torch.softmax(second, -1)).flatten().numpy()
    return stats.chisquare(np.bincount(cells, minlength=V * V), joint * len(cells)).pvalue


def test_emitted_tokens_follow_the_target():
    assert _gof_pvalue(_emitted_pairs()) > 1e-3


@pytest.mark.parametrize("bias", ["bonus from p", "accept all"])
def test_the_law_test_catches_a_seeded_bias(monkeypatch, bias):
    if bias == "bonus from p":
        monkeypatch.setattr(rejection, "bonus_law", lambda p, q, a: p[torch.arange(p.shape[0]), a])
    else:
        monkeypatch.setattr(rejection, "accepted_count", lambda p, q, drafted, u: torch.full(
            (p.shape[0],), q.shape[1], dtype=torch.int64))
    assert _gof_pvalue(_emitted_pairs()) < 1e-3
