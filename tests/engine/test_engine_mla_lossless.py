"""DDTree and the DFlash chain are lossless on the shipped MLA pair (DeepSeek-V3 target, bf16 weights
computed in fp32 on the CPU, verify through tree_verify_attention's MLA form): greedy output
token-identical to AR on held-out prompts. Fewer prompts than the Qwen3 pair's test: an MLA verify costs
~15x a Qwen3-tiny one per token (16 heads over a 576-wide latent); the 200-prompt run is
`python -m sglang_ddtree.bench engine --pair mla` (docs/benchmarks/engine-mla-cpu-2026-12-03.json)."""
import pytest
import torch

from sglang_ddtree.engine import Engine, summarize
from sglang_ddtree.engine.data import heldout_prompts

N_PROMPTS, MAX_NEW = 12, 32


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    eng = Engine.from_pretrained(pair="mla", device="cpu")
    assert eng.attention == "tree"
    return eng


@pytest.fixture(scope="module")
def prompts():
    p = heldout_prompts(N_PROMPTS)
    assert len(p) == N_PROMPTS
    return p


@pytest.fixture(scope="module")
def ar(engine, prompts):
    return engine.generate(prompts, MAX_NEW, method="ar")


def assert_identical(got, want):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g.token_ids != w.token_ids]
    assert not bad, f"{len(bad)} of {len(want)} outputs differ from AR, first at prompt {bad[0]}"


def test_chain_greedy_identical_to_ar(engine, prompts, ar):
    chain = engine.generate(prompts, MAX_NEW, method="chain")
    assert_identical(chain, ar)
    assert summarize(chain)["tau"] > 1.0  # the drafter does predict the target


@pytest.mark.parametrize("anchor", [None, "chain"], ids=["paper-tree", "served-anchored-tree"])
@pytest.mark.parametrize("budget", [8, 32])
def test_ddtree_greedy_identical_to_ar(engine, prompts, ar, budget, anchor):
    assert_identical(engine.generate(prompts, MAX_NEW, method="ddtree", budget=budget, anchor=anchor), ar)


def test_sdpa_verify_path_identical_to_ar(prompts, ar):
    """The same decode with the verify over the latent cache by SDPA and a dense mask (no verify op)."""
    eng = Engine.from_pretrained(pair="mla", device="cpu", attention="mask")
    assert_identical(eng.generate(prompts, MAX_NEW, method="ddtree", budget=8, anchor="chain"), ar)
