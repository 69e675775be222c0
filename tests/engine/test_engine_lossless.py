"""DDTree and the DFlash chain are lossless: greedy output token-identical to AR (fp32, CPU), and sampled
output distributed like AR sampling. Uses the shipped tiny pair on held-out prompts."""
import pytest
import torch

from sglang_ddtree.engine import summarize
from sglang_ddtree.engine.data import heldout_prompts
from two_sample import chi2_two_sample

N_PROMPTS, MAX_NEW, BATCH = 200, 48, 100
BUDGETS = (8, 32, 64)


@pytest.fixture(scope="module")
def prompts():
    p = heldout_prompts(N_PROMPTS)
    assert len(p) == N_PROMPTS
    return p


_runs: dict = {}


def greedy(engine, prompts, method, budget=None, anchor=None):
    key = (method, budget, anchor)
    if key not in _runs:
        _runs[key] = engine.generate(prompts, MAX_NEW, method=method, budget=budget, batch_size=BATCH,
                                     anchor=anchor, paper=True)
    return _runs[key]


def assert_identical(got, want):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g.token_ids != w.token_ids]
    assert not bad, f"{len(bad)} of {len(want)} outputs differ from AR, first at prompt {bad[0]}"


@pytest.mark.parametrize("budget", BUDGETS)
def test_ddtree_greedy_identical_to_ar(engine, prompts, budget):
    assert_identical(greedy(engine, prompts, "ddtree", budget), greedy(engine, prompts, "ar"))


def test_chain_greedy_identical_to_ar(engine, prompts):
    assert_identical(greedy(engine, prompts, "chain"), greedy(engine, prompts, "ar"))


def test_tree_commits_more_per_forward_than_chain(engine, prompts):
    ar = summarize(greedy(engine, prompts, "ar"))
    chain = summarize(greedy(engine, prompts, "chain"))
    best = max(summarize(greedy(engine, prompts, "ddtree", b))["tau"] for b in BUDGETS)
    assert ar["tau"] == 1.0
    assert best > chain["tau"] > 1.0, (best, chain["tau"])


@pytest.mark.parametrize("budget", (8, 16, 32, 64))
def test_chain_anchored_tree_is_lossless_and_accepts_at_least_the_chain(engine, prompts, budget):
    """The chain is a path of the anchored tree, so per round it accepts at least the chain's length; over
    the held-out prompts its tau must not fall below the chain's (the paper's tree does at small budgets)."""
    anchored = greedy(engine, prompts, "ddtree", budget, anchor="chain")
    assert_identical(anchored, greedy(engine, prompts, "ar"))
    tau = summarize(anchored)["tau"]
    assert tau >= summarize(greedy(engine, prompts, "chain"))["tau"], tau


def test_shipped_calibration_is_lossless_and_raises_tau_on_prompts_it_was_not_fitted_on(engine, prompts):
    """The shipped drafter calibration was fitted on the first 100 held-out prompts; on the others the
    calibrated anchored tree must stay identical to AR and accept more than the raw one."""
    test = prompts[100:]
    run = lambda cal: engine.generate(test, MAX_NEW, method="ddtree", budget=32, anchor="chain",
                                      draft_temperature=cal, batch_size=BATCH)
    calibrated = run("drafter")
    ar = {p: r.token_ids for p, r in zip(prompts, greedy(engine, prompts, "ar"))}
    assert [r.token_ids for r in calibrated] == [ar[p] for p in test]
    assert summarize(calibrated)["tau"] > summarize(run(None))["tau"]


def test_auto_budget_is_lossless_and_follows_the_cost_table(engine, prompts):
    """budget='auto' with a given cost table (no timing in a test): identical to AR, every round's budget a
    candidate, a flat table always picks the largest tree and a steep one the smallest."""
    test, ar = prompts[100:160], greedy(engine, prompts, "ar")[100:160]
    run = lambda cost: engine.generate(test, MAX_NEW, method="ddtree", budget="auto", anchor="chain",
                                       draft_temperature="drafter", round_cost=cost, batch_size=BATCH)
    mixed = run([1.0, 1.02, 1.1, 1.3])  # the default candidates: the server's for block 8, 7 15 31 63
    assert [r.token_ids for r in mixed] == [r.token_ids for r in ar]
    chosen = {b for r in mixed for b in r.round_budgets}
    assert chosen <= {7, 15, 31, 63} and len(chosen) > 1
    assert {b for r in run([1.0, 1.0, 1.0, 1.0]) for b in r.round_budgets} == {63}
    assert {b for r in run([1.0, 2.0, 4.0, 8.0]) for b in r.round_budgets} == {7}


def test_accept_lengths_account_for_every_token(engine, prompts):
    for r in greedy(engine, prompts, "ddtree", 32):
        # the prefill emits the first token; every round commits accept_length tokens (<= block size)
        assert 1 <= len(r.token_ids) <= 1 + sum(r.accept_lengths)
        assert all(1 <= a <= engine.block_size for a in r.accept_lengths)


def test_ragged_batch_equals_one_at_a_time(engine, prompts):
    picks = sorted(prompts[:40], key=len)[::8]  # different lengths in one batch
    assert len({len(p) for p in picks}) > 1
    for method in ("ddtree", "chain", "ar"):
        batched = engine.generate(picks, 24, method=method, budget=16, paper=True)
        for p, b in zip(picks, batched):
            alone = engine.generate([p], 24, method=method, budget=16, paper=True)[0]
            assert alone.token_ids == b.token_ids and alone.accept_lengths == b.accept_lengths


def test_stop_tokens_and_max_tokens(engine, prompts):
    nl = ord("\n")
    outs = {m: engine.generate(prompts[:32], 40, method=m, budget=32, stop_token_ids=[nl], paper=True)
            for m in ("ar", "chain", "ddtree")}
    stopped = 0
    for r in outs["ar"]:
        assert len(r.token_ids) <= 40
        assert nl not in r.token_ids[:-1]
        assert (r.finish_reason == "stop") == (r.token_ids[-1] == nl)
        stopped += r.finish_reason == "stop"
    assert stopped > 0
    for m in ("chain", "ddtree"):
        assert [r.token_ids for r in outs[m]] == [r.token_ids for r in outs["ar"]]
        assert [r.finish_reason for r in outs[m]] == [r.finish_reason for r in outs["ar"]]
    for r in engine.generate(prompts[:8], 5, method="ddtree", stop_token_ids=[], paper=True):
        assert len(r.token_ids) == 5 and r.finish_reason == "length"


# --- T > 0 ------------------------------------------------------------------------------------------

def sampled_tokens(engine, prompt, method, temperature, n, seed0, positions=8):
    res = engine.generate([prompt] * n, positions, method=method, budget=8, temperature=temperature,
                          seed=list(range(seed0, seed0 + n)), stop_token_ids=[], paper=True)
    return torch.tensor([r.token_ids for r in res])


SAMPLE_PROMPT = "import os\nimport sys\n\n\ndef main(argv):\n    "
N_SAMPLES = 1000


@pytest.fixture(scope="module")
def ar_samples(engine):
    return sampled_tokens(engine, SAMPLE_PROMPT, "ar", 1.0, N_SAMPLES, 0)


@pytest.mark.parametrize("method", ["ddtree", "chain"])
def test_sampling_matches_ar_distribution(engine, ar_samples, method):
    """Per generated position, DDTree / chain samples and AR samples come from the same distribution
    (Bonferroni over positions); disjoint seed ranges keep the two samples independent."""
    got = sampled_tokens(engine, SAMPLE_PROMPT, method, 1.0, N_SAMPLES, 10_000_000)
    assert got.shape == ar_samples.shape
    assert (ar_samples[:, 1:] != ar_samples[:, 1:2]).any(), "degenerate: no variety to test"
    pvals = [chi2_two_sample(got[:, j], ar_samples[:, j]) for j in range(got.shape[1])]
    assert min(pvals) * len(pvals) > 1e-3, pvals


def test_sampling_test_has_power(engine, ar_samples):
    """The same test rejects a sampler that is off (temperature 0.8 instead of 1.0)."""
    off = sampled_tokens(engine, SAMPLE_PROMPT, "ar", 0.8, N_SAMPLES, 20_000_000)
    pvals = [chi2_two_sample(off[:, j], ar_samples[:, j]) for j in range(off.shape[1])]
    assert min(pvals) * len(pvals) < 1e-3, pvals


def test_same_seed_same_sample(engine):
    a = engine.generate([SAMPLE_PROMPT] * 3, 12, method="ddtree", temperature=1.0, seed=7, paper=True)
    b = engine.generate([SAMPLE_PROMPT] * 3, 12, method="ddtree", temperature=1.0, seed=7, paper=True)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]


def test_bad_arguments(engine):
    with pytest.raises(ValueError, match="method"):
        engine.generate(["x"], 4, method="beam")
    with pytest.raises(ValueError, match="budget"):
        engine.generate(["x"], 4, method="ddtree", budget=0)
    with pytest.raises(ValueError, match="anchor"):
        engine.generate(["x"], 4, method="ddtree", anchor="spine")
    with pytest.raises(ValueError, match="anchor"):
        engine.generate(["x"], 4, method="chain", anchor="chain")
    with pytest.raises(ValueError, match="draft_temperature"):
        engine.generate(["x"], 4, method="ddtree", draft_temperature=[1.0])
    with pytest.raises(ValueError, match="draft_temperature"):
        engine.generate(["x"], 4, method="ddtree", draft_temperature="shipped")
    with pytest.raises(ValueError, match="auto_budgets"):
        engine.generate(["x"], 4, method="ddtree", budget="auto", auto_budgets=[0, 8])
    with pytest.raises(ValueError, match="round_cost"):
        engine.generate(["x"], 4, method="ddtree", budget="auto", round_cost=[1.0])
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate(["x"], 0)
    with pytest.raises(TypeError, match="prompts"):
        engine.generate("x", 4)
    with pytest.raises(ValueError, match="seed"):
        engine.generate(["x", "y"], 4, seed=[1])
