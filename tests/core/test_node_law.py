"""Request-level sampling and penalties on tree nodes, against the reference's definitions (reference.py):
the law of filtered sampling (top-k / top-p / min-p, chi-square; the kept set itself: test_law_rows.py), the
independence of requests' streams, and per-node penalties equal to the plain server's penalty of the node's whole
output."""
import numpy as np
import pytest
import torch
from scipy import stats

from sglang_ddtree import build_tree, penalties, reference
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import NodeLaw, gumbel_noise, node_tokens, request_seeds

OPS = RoundOps("cpu", "cpu")


def law(B, t=1.0, k=0, p=1.0, m=0.0):
    full = lambda v, dt: torch.full((B,), v, dtype=dt)
    return NodeLaw(full(t, torch.float32), full(k, torch.int64), full(p, torch.float32), full(m, torch.float32))


@pytest.mark.parametrize("k,p,m,t", [(4, 1.0, 0.0, 1.0), (0, 0.7, 0.0, 1.5), (0, 1.0, 0.1, 0.8), (6, 0.9, 0.02, 1.2)])
def test_node_draws_follow_the_filtered_law(k, p, m, t):
    V, draws = 12, 6000
    x = torch.tensor(np.random.default_rng(1).standard_normal(V) * 1.5, dtype=torch.float32)
    logits = x.expand(draws, 1, V).contiguous()   # one node per request, each request its own stream
    tok = node_tokens(OPS, logits, law(draws, t, k, p, m), request_seeds(0, torch.arange(draws)),
                      torch.full((draws,), 5)).flatten()
    q = reference.filtered_law(x.numpy(), t, k, p, m)
    counts = np.bincount(tok.numpy(), minlength=V)
    assert counts[q == 0].sum() == 0
    _, pval = stats.chisquare(counts[q > 0], q[q > 0] * draws)
    assert pval > 1e-4


@pytest.mark.parametrize("t", [0.4, 1.3])
def test_temperature_only_draws_follow_the_law(t):
    """A law without filters (filtered=False) has the sampler divide by each row's temperature (no scaled copy):
    the draws still follow softmax(x / t) (chi-square over 6000 streams; a sampler that ignored the per-row
    temperature, i.e. drew at T = 1, fails both cases at p < 1e-20)."""
    V, draws = 12, 6000
    x = torch.tensor(np.random.default_rng(2).standard_normal(V) * 1.5, dtype=torch.float32)
    lw = law(draws, t)
    lw.filtered = False
    tok = node_tokens(OPS, x.expand(draws, 1, V).contiguous(), lw, request_seeds(0, torch.arange(draws)),
                      torch.full((draws,), 5)).flatten()
    q = reference.filtered_law(x.numpy(), t, 0, 1.0, 0.0)
    _, pval = stats.chisquare(np.bincount(tok.numpy(), minlength=V), q * draws)
    assert pval > 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_temperature_only_draws_equal_the_scaled_copys(dtype):
    """The sampler's division is the scaled copy's (float32 of the logits over the float32 temperature): each
    node's token is argmax(float32(x) / T + g), g its Philox stream's Gumbel noise, whatever row the temperature
    comes from; greedy rows (T = 0) take the argmax."""
    B, n, V = 6, 3, 50
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(B, n, V, generator=gen) * 3).to(dtype)
    t = torch.tensor([0.6, 1.0, 0.0, 1.7, 0.05, 1.0])
    lw = law(B)
    lw.temperatures, lw.filtered = t, False
    seeds, step = request_seeds(11, torch.arange(B)), torch.arange(B) * 3
    got = node_tokens(OPS, x, lw, seeds, step)
    g = gumbel_noise(seeds.repeat_interleave(n), step.repeat_interleave(n), torch.arange(n).repeat(B), V)
    want = torch.argmax(x.float() / t.clamp(min=1e-6).view(B, 1, 1) + g.view(B, n, V), dim=-1)
    want[2] = x[2].float().argmax(-1)
    assert torch.equal(got, want)


def test_greedy_rows_and_tiny_top_p_give_the_argmax():
    x = torch.randn(3, 5, 30)
    lw = law(3, 1.5, 0, 1.0, 0.0)
    lw.top_ks[0] = 1                  # SGLang carries temperature 0 as top_k 1
    lw.top_ps[1] = 1e-6               # only the most likely token survives
    lw.min_ps[2] = 0.9999
    got = node_tokens(OPS, x, lw, request_seeds(3, torch.arange(3)), torch.zeros(3, dtype=torch.int64))
    assert torch.equal(got, x.argmax(-1))


def test_requests_without_seeds_draw_independently():
    """Requests sampled in the same round from the same logits (n copies of a prompt): their draws are
    independent (chi-square of the joint), and a request's successive rounds too."""
    V, rounds = 5, 3000
    x = torch.zeros(2, 1, V)
    seeds = request_seeds(0, torch.tensor([3, 4]))
    pairs = np.array([node_tokens(OPS, x, law(2), seeds, torch.full((2,), r)).flatten().tolist()
                      for r in range(rounds)])
    _, pval = stats.chisquare(np.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V))
    assert pval > 1e-4
    assert (pairs[:, 0] == pairs[:, 1]).mean() < 0.3  # 1/V = 0.2 when independent; 1.0 with one shared stream
    _, pval = stats.chisquare(np.bincount(pairs[:-1, 0] * V + pairs[1:, 0], minlength=V * V))
    assert pval > 1e-4


def test_a_nan_row_never_yields_minus_one():
    x = torch.randn(2, 3, 9)
    x[1, 2, 4] = float("nan")
    got = node_tokens(OPS, x, law(2, 1.0, 0, 0.9, 0.0), request_seeds(0, torch.arange(2)), torch.zeros(2, dtype=torch.int64))
    assert bool((got >= 0).all()) and bool((got < 9).all())


@pytest.mark.parametrize("seed", range(6))
def test_node_penalties_equal_the_plain_penalty_of_the_whole_output(seed):
    """Every node of a real tree: its penalised logits equal reference.penalized_logits of (the committed
    output + the node's path), for frequency, presence, repetition and min_new_tokens together."""
    rng = np.random.default_rng(seed)
    B, L, V, budget = 3, 5, 11, 14
    draft = torch.tensor(rng.standard_normal((B, L, V)) * 2, dtype=torch.float32)
    tree = build_tree(draft, budget=budget, root_tokens=torch.tensor(rng.integers(0, V, B)), backend="cpu")
    n = tree.n
    logits = torch.tensor(rng.standard_normal((B, n, V)) * 3, dtype=torch.float64)
    outputs = [rng.integers(0, V, int(rng.integers(1, 6))).tolist() for _ in range(B)]  # root last
    freq, pres, rep = rng.uniform(0, 1, B), rng.uniform(0, 1, B), rng.uniform(1, 2, B)
    min_new = rng.integers(0, 8, B)
    stop = [sorted(set(rng.integers(0, V, 2).tolist())) for _ in range(B)]
    counts = torch.zeros(B, V, dtype=torch.float64)
    for b, out in enumerate(outputs):
        for t in out:
            counts[b, t] += 1
    stop_mask = torch.zeros(B, V, dtype=torch.bool)
    for b, s in enumerate(stop):
        stop_mask[b, s] = True
    params = penalties.PenaltyParams(torch.tensor(freq), torch.tensor(pres), torch.tensor(rep),
                                     torch.tensor(min_new), stop_mask)
    got = logits.clone()
    path = penalties.path_tokens(tree.tokens, tree.parents, tree.depths, tree.depth_limit)
    penalties.apply(got, counts, torch.tensor([len(o) for o in outputs]), path, tree.depths, params)
    for b in range(B):
        for i in range(int(tree.num_nodes[b])):
            chain, j = [], i
            while int(tree.depths[b, j]) >= 1:
                chain.append(int(tree.tokens[b, j]))
                j = int(tree.parents[b, j])
            want = reference.penalized_logits(logits[b, i].numpy(), outputs[b] + chain[::-1], frequency=freq[b],
                                              presence=pres[b], repetition=rep[b], min_new_tokens=int(min_new[b]),
                                              stop_tokens=stop[b])
            np.testing.assert_allclose(got[b, i].numpy(), want, rtol=1e-12, atol=1e-12)


def test_penalty_counts_follow_resets_and_rounds():
    pc = penalties.PenaltyCounts(4, 7, "cpu")
    pc.reset(2, torch.tensor([1, 1, 3, 6, 6]), torch.tensor(3))   # the first 3 tokens are committed output
    assert pc.counts[2].tolist() == [0, 2, 0, 1, 0, 0, 0] and int(pc.lengths[2]) == 3
    pc.add(torch.tensor([2, 0]), torch.tensor([[5, 5, 0], [4, 4, 4]]), torch.tensor([2, 1]))
    assert pc.counts[2].tolist() == [0, 2, 0, 1, 0, 2, 0] and pc.counts[0].tolist() == [0, 0, 0, 0, 1, 0, 0]
    assert pc.lengths.tolist() == [1, 0, 5, 0]
