"""The engine's trees under each request's law (keys='law', sglang_ddtree/keys.py) on the shipped tiny pair:
what the definition implies end to end, a mixed greedy / sampled batch, and the arguments."""
import pytest

from sglang_ddtree.engine.data import heldout_prompts


@pytest.fixture(scope="module")
def prompts():
    return heldout_prompts()[100:106]


def test_at_temperature_one_without_filters_the_law_is_the_draft(engine, prompts):
    """T = 1, no filter, no calibration: the request's law over the draft is the draft itself, so keys='law'
    gives the paper's tree round for round (same tokens, same accept lengths)."""
    run = lambda keys: engine.generate(prompts, 24, method="ddtree", budget=15, temperature=1.0, seed=5,  # noqa: E731
                                       keys=keys, paper=True)
    law, draft = run("law"), run("draft")
    assert [r.token_ids for r in law] == [r.token_ids for r in draft]
    assert [r.accept_lengths for r in law] == [r.accept_lengths for r in draft]


def test_a_mixed_batch_decodes_each_request_as_alone(engine, prompts):
    """Greedy and sampled requests in one batch, each ranked under its own law (greedy ones anchored): every
    request's output and accept lengths equal its decode alone with the same seed, and the greedy ones are AR's."""
    temps = [0.0, 1.0, 0.6, 0.0, 0.8, 1.0]
    kw = dict(method="ddtree", budget=31, anchor="chain", keys="law", draft_temperature="drafter",
              sampling_temperature="drafter", top_p=0.9, top_k=30, paper=True)
    seeds = list(range(40, 46))
    mixed = engine.generate(prompts, 24, temperature=temps, seed=seeds, **kw)
    for p, t, s, got in zip(prompts, temps, seeds, mixed):
        alone = engine.generate([p], 24, temperature=t, seed=s, **kw)[0]
        assert got.token_ids == alone.token_ids and got.accept_lengths == alone.accept_lengths
        if t == 0:
            assert got.token_ids == engine.generate([p], 24, method="ar")[0].token_ids


def test_bad_law_arguments(engine):
    with pytest.raises(ValueError, match="keys"):
        engine.generate(["x"], 4, method="ddtree", keys="target")
    with pytest.raises(ValueError, match="keys"):
        engine.generate(["x"], 4, method="chain", keys="law")
    with pytest.raises(ValueError, match="top_p"):
        engine.generate(["x"], 4, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="min_p"):
        engine.generate(["x"], 4, temperature=1.0, min_p=1.5)
    with pytest.raises(ValueError, match="top_k"):
        engine.generate(["x"], 4, temperature=1.0, top_k=2.5)
    with pytest.raises(ValueError, match="temperature"):
        engine.generate(["x", "y"], 4, temperature=[1.0])
    with pytest.raises(ValueError, match="temperature"):
        engine.generate(["x"], 4, temperature=-1.0)
    with pytest.raises(ValueError, match="sampling_temperature"):
        engine.generate(["x"], 4, method="ddtree", keys="law", sampling_temperature=[1.0])
