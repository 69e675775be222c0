"""Losslessness in law: sampled DDTree output is distributed as AR's, under the request's whole law.

Null hypothesis: for each prompt, the joint law of the first three generated tokens is the same under DDTree
(the served default — chain-anchored for greedy requests, each request's tree under its own law with the
shipped calibration, the auto budget — and the paper's tree at a fixed budget) as under plain AR sampling, at
T = 1 and at T = 0.6 with top-p 0.9, top-k 20 and min-p 0.02 together. Test: a chi-square homogeneity test
of the 3-token tuples (tuples seen < 10 times pooled), N_PER_PROMPT draws per prompt and method on 3 held-out
prompts with disjoint seeds, the prompts' statistics summed; each of the 4 (law, method) cases must keep
p > 1e-3 / 4 (Bonferroni). The first token comes from the prefill; the second and third are the tree walk's,
so their joint law is what a biased tree sampler would change.

Power: the same test must reject a sampler where every tree node draws with its parent's Philox counter, i.e.
reuses its parent's Gumbel noise (a mutation of RoundOps.sample_tokens made here): a child's token is then
not a fresh draw given its path — with the default at T = 1 its p-value is below 1e-6 (asserted).
"""
import pytest
import torch
from scipy import stats

from sglang_ddtree.accept import sample_rows_torch
from sglang_ddtree.engine import Engine
from sglang_ddtree.engine import engine as engine_mod
from sglang_ddtree.engine.data import heldout_prompts
from sglang_ddtree.engine.demo import H200_GRAPH_MS
from sglang_ddtree.round import RoundOps
from two_sample import chi2_homogeneity

N_PER_PROMPT, NEW, PROMPT_BYTES = 600, 3, 48
LAWS = {"T1": {"temperature": 1.0}, "T0.6-filtered": {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.02}}
AUTO = (7, 15, 31, 63)
METHODS = {
    "default": {"method": "ddtree", "budget": "auto", "auto_budgets": AUTO, "anchor": "chain", "keys": "law",
                "draft_temperature": "drafter", "sampling_temperature": "drafter",
                "round_cost": [H200_GRAPH_MS[32][b + 1] for b in AUTO]},  # a fixed table: no timing in a test
    "paper": {"method": "ddtree", "budget": 15},
}
ALPHA = 1e-3 / (len(LAWS) * len(METHODS))


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return Engine.from_pretrained(device="cpu")


@pytest.fixture(scope="module")
def prompts():
    """Three held-out prompts (the calibrations' fit prompts excluded) whose first three tokens at T = 1 spread over
    ~50-80 tuples: varied enough to test, concentrated enough for a few hundred draws."""
    return [heldout_prompts()[i][-PROMPT_BYTES:] for i in (102, 107, 112)]


def draws(engine, prompts, seed0, **kwargs) -> list[torch.Tensor]:
    """Per prompt, N_PER_PROMPT joint draws of the first NEW tokens as one category id each."""
    reqs = [p for p in prompts for _ in range(N_PER_PROMPT)]
    res = engine.generate(reqs, NEW, seed=list(range(seed0, seed0 + len(reqs))), stop_token_ids=[], **kwargs)
    V = engine.target.config.vocab_size
    tok = torch.tensor([r.token_ids for r in res])
    ids = (tok * torch.tensor([V ** (NEW - 1 - j) for j in range(NEW)])).sum(1)
    return list(ids.view(len(prompts), N_PER_PROMPT))


def pvalue(a: list, b: list) -> float:
    """The prompts' homogeneity statistics summed (independent samples): one p-value."""
    parts = [chi2_homogeneity(x, y) for x, y in zip(a, b)]
    return float(stats.chi2.sf(sum(s for s, _ in parts), sum(d for _, d in parts)))


_ar: dict = {}


def ar_draws(engine, prompts, law):
    if law not in _ar:
        _ar[law] = draws(engine, prompts, 0, method="ar", **LAWS[law])
    return _ar[law]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("law", LAWS)
def test_ddtree_samples_follow_ar_law(engine, prompts, law, method):
    ar = ar_draws(engine, prompts, law)
    assert all(len(x.unique()) > 20 for x in ar), "degenerate: too little variety to test"
    got = draws(engine, prompts, 10_000_000, **METHODS[method], **LAWS[law])
    p = pvalue(got, ar)
    assert p > ALPHA, (law, method, p)


def test_the_test_catches_a_node_reusing_its_parents_noise(engine, prompts, monkeypatch):
    """The mutation: node i's Gumbel noise is its parent's (Philox counter = the parent's index); the root's is
    its own. Everything else is the default's T = 1 run."""
    parents = {}
    monkeypatch.setattr(engine_mod._EngineBatch, "adjust_logits",
                        lambda self, logits, tree: parents.__setitem__("p", tree.parents))

    def sample_with_parents_noise(self, logits, seed, step):
        B, n, V = logits.shape
        if n == 1:  # the prefill's root draw
            nodes = torch.zeros(B, dtype=torch.int64)
        else:
            nodes = parents["p"][:, :n].clamp(min=0).to(torch.int64).reshape(-1)
        return sample_rows_torch(logits.reshape(B * n, V), 1.0, seed.repeat_interleave(n), step.repeat_interleave(n),
                                 nodes).view(B, n)

    monkeypatch.setattr(RoundOps, "sample_tokens", sample_with_parents_noise)
    got = draws(engine, prompts, 20_000_000, **METHODS["default"], **LAWS["T1"])
    p = pvalue(got, ar_draws(engine, prompts, "T1"))
    assert p < 1e-6, p
