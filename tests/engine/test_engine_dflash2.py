"""The engine with the shipped tiny DFlash2 drafter (pair 'dflash2': tiny-target + tiny-dflash2) is lossless in each
of its methods: DDTree over the selector's lattice ('lattice'), the selector's own walk ('walk', rejection-sampled
at T > 0 as SGLang's DFLASH verifies it) and DDTree over the same drafter's marginals ('ddtree'): greedy output
token-identical to AR on held-out prompts (fp32, CPU), sampled output distributed like AR's."""
import pytest
import torch
from test_engine_lossless import SAMPLE_PROMPT, chi2_two_sample

from sglang_ddtree import rejection
from sglang_ddtree.engine import Engine, summarize
from sglang_ddtree.engine import dflash2 as D2
from sglang_ddtree.engine.data import heldout_prompts
from sglang_ddtree.tree import build_tree_from_lattice

# Greedy identity on 100 held-out prompts x 32 new tokens (5 to 7 rounds each: greedy tau 5 to 6.3): 3,200 tokens
# per method (CI budget; tests/engine/test_engine_lossless.py runs the tiny pair's trees on 200 x 48).
N_PROMPTS, MAX_NEW, BATCH = 100, 32, 100


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained(device="cpu", pair="dflash2")


@pytest.fixture(scope="module")
def prompts():
    return heldout_prompts(N_PROMPTS)


_runs: dict = {}


def greedy(engine, prompts, method, budget=None, anchor=None):
    key = (method, budget, anchor)
    if key not in _runs:
        _runs[key] = engine.generate(prompts, MAX_NEW, method=method, budget=budget, anchor=anchor, batch_size=BATCH,
                                     paper=True)
    return _runs[key]


def test_the_pair_loads_a_selector_drafter(engine):
    assert isinstance(engine.drafter, D2.DFlash2DraftModel)
    assert engine.drafter.candidate_selector.top_k >= 2 and engine.block_size == 8


# The lattice at a small budget unanchored and a large one anchored (the builder against its oracle at every
# budget is tests/core/test_tree_lattice.py's); DDTree over the same drafter's marginals.
@pytest.mark.parametrize("method,budget,anchor", [("walk", None, None), ("lattice", 8, None), ("lattice", 32, "chain"),
                                                  ("ddtree", 32, "chain")])
def test_greedy_identical_to_ar(engine, prompts, method, budget, anchor):
    got, want = greedy(engine, prompts, method, budget, anchor), greedy(engine, prompts, "ar")
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g.token_ids != w.token_ids]
    assert not bad, f"{len(bad)} of {len(want)} outputs differ from AR, first at prompt {bad[0]}"
    assert summarize(got)["tau"] > 1.0


def test_the_anchored_lattice_tree_holds_the_selectors_greedy_walk(engine):
    """The lattice tree's forced chain is the selector's greedy walk (so an anchored lattice tree accepts at
    least what the walk accepts from the same state): at budget L the two trees are one path, equal."""
    g = torch.Generator().manual_seed(0)
    B, L = 16, engine.block_size - 1
    h = torch.randn(B, L, engine.target.config.hidden_size, generator=g)
    roots = torch.randint(0, 256, (B,), generator=g)
    with torch.no_grad():
        cand, scores = engine.drafter.lattice(h, engine.target.lm_head(h), roots, "cpu")
    zeros = torch.zeros(B)
    path, q = D2.walk(scores, zeros, torch.arange(B), torch.zeros(B, dtype=torch.int64))
    walked = D2.walk_tree(cand, path, roots, 5)
    anchored = build_tree_from_lattice(cand, scores, L, temperature=zeros, root_tokens=roots, seq_lens=5,
                                       anchor="chain")
    for field in ("num_nodes", "tokens", "parents", "depths"):
        assert torch.equal(getattr(walked, field), getattr(anchored, field)), field
    assert torch.equal(q, torch.nn.functional.one_hot(path, cand.shape[-1]).float())


def test_ragged_batch_equals_one_at_a_time(engine, prompts):
    picks = sorted(prompts[:40], key=len)[::10]
    assert len({len(p) for p in picks}) > 1
    for method, kw in (("walk", {}), ("walk", {"temperature": 1.0, "seed": 5}), ("lattice", {"budget": 16})):
        batched = engine.generate(picks, 16, method=method, paper=True, **kw)
        for i, (p, b) in enumerate(zip(picks, batched)):
            alone_kw = dict(kw, seed=kw["seed"] + i) if "seed" in kw else kw
            alone = engine.generate([p], 16, method=method, paper=True, **alone_kw)[0]
            assert alone.token_ids == b.token_ids and alone.accept_lengths == b.accept_lengths, (method, i)


def test_bad_arguments(engine):
    plain = Engine.from_pretrained(device="cpu")
    with pytest.raises(ValueError, match="needs a DFlash2 drafter"):
        plain.generate(["x"], 4, method="lattice")
    with pytest.raises(ValueError, match="budget='auto'"):
        engine.generate(["x"], 4, method="lattice", budget="auto")
    with pytest.raises(ValueError, match="anchor"):
        engine.generate(["x"], 4, method="walk", anchor="chain")
    with pytest.raises(ValueError, match="draft_temperature"):
        engine.generate(["x"], 4, method="lattice", draft_temperature=[1.0] * 7)


# --- T > 0 ---------------------------------------------------------------------------------------------------
# Null: per generated position, the method's samples and AR's come from one distribution (two-sample chi-square
# homogeneity, rare tokens pooled, Bonferroni over the 8 positions, rejected below 1e-3, as
# tests/engine/test_engine_lossless.py); 600 samples each of one prompt at T = 1, disjoint seed ranges. 8 positions
# reach past the first round (tau ~ 2.8 at T = 1), so the state a sampled round commits is under test too.
# The bias it must catch, seeded: the walk's verify accepting every drafted token (the drafter's law emitted);
# at 600 samples it is rejected at p ~ 1e-49 after Bonferroni (the threshold is 1e-3).
# The lattice is sampled once (budget 8, unanchored: a branching tree): DDTree's per-node verify is lossless
# whatever tree it is given (docs/DESIGN.md §3.5), so this checks the lattice's tree reaches that verify intact; the
# anchored lattice is greedy-tested above.
N_SAMPLES, POSITIONS = 600, 8


def samples(engine, method, seed0, **kw):
    res = engine.generate([SAMPLE_PROMPT] * N_SAMPLES, POSITIONS, method=method, temperature=1.0,
                          seed=list(range(seed0, seed0 + N_SAMPLES)), stop_token_ids=[], paper=True, **kw)
    return torch.tensor([r.token_ids for r in res])


@pytest.fixture(scope="module")
def ar_samples(engine):
    return samples(engine, "ar", 0)


def min_pvalue_bonferroni(got, want) -> float:
    assert got.shape == want.shape and (want[:, 1:] != want[:, 1:2]).any(), "degenerate: no variety to test"
    return min(chi2_two_sample(got[:, j], want[:, j]) for j in range(got.shape[1])) * got.shape[1]


@pytest.mark.parametrize("method,kw", [("walk", {}), ("lattice", {"budget": 8})])
def test_sampling_matches_ar_distribution(engine, ar_samples, method, kw):
    assert min_pvalue_bonferroni(samples(engine, method, 10_000_000, **kw), ar_samples) > 1e-3


def test_sampling_test_catches_a_walk_that_accepts_every_draft(engine, ar_samples, monkeypatch):
    """The mutation reaches the definition (rejection.drawn_targets_torch), which the round takes here; the native
    ops equal it (tests/core/test_rejection.py: test_native_walk_equals_the_definition)."""
    monkeypatch.setattr(rejection, "_native", lambda round_ops, logits: False)
    monkeypatch.setattr(rejection, "accept_children", lambda pc, rest, q, kids, pos, seed, step: (kids[..., 0], pc))
    assert min_pvalue_bonferroni(samples(engine, "walk", 20_000_000), ar_samples) < 1e-3


def test_same_seed_same_sample(engine):
    for method in ("walk", "lattice"):
        a, b = (engine.generate([SAMPLE_PROMPT] * 3, 12, method=method, temperature=1.0, seed=7, paper=True)
                for _ in range(2))
        assert [r.token_ids for r in a] == [r.token_ids for r in b]
