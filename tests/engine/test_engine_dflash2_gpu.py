"""The engine with the tiny DFlash2 drafter on CUDA: the lattice tree (CUDA stage 1 and builder), the selector's walk
and its rejection-sampled verify on the device. fp32 greedy output identical to AR for every method; the sampled
walk and lattice tree reproducible from their seeds, and agreeing with the CPU engine's token for token where the
draws are the same Philox streams (they are: every draw of both methods is a Philox stream keyed by (seed, step,
node)), up to near-ties of a float32 score."""
import pytest
import torch

from sglang_ddtree.engine import Engine
from sglang_ddtree.engine.data import heldout_prompts

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_engine():
    return Engine.from_pretrained(device="cuda", dtype=torch.float32, pair="dflash2")


def test_fp32_greedy_identical_to_ar_on_cuda(cuda_engine):
    prompts = heldout_prompts(100)
    ar = [r.token_ids for r in cuda_engine.generate(prompts, 48, method="ar")]
    for method, kw in (("walk", {}), ("lattice", {"budget": 8}), ("lattice", {"budget": 64, "anchor": "chain"}),
                       ("ddtree", {"budget": 32})):
        got = [r.token_ids for r in cuda_engine.generate(prompts, 48, method=method, paper=True, **kw)]
        assert got == ar, (method, kw)


@pytest.mark.parametrize("method,kw", [("walk", {}), ("lattice", {"budget": 16, "anchor": "chain"})])
def test_sampled_on_cuda_is_reproducible_and_matches_the_cpu(cuda_engine, method, kw):
    prompts = heldout_prompts(32)
    run = lambda eng: [r.token_ids for r in eng.generate(prompts, 24, method=method, temperature=1.0, seed=3,
                                                         paper=True, **kw)]
    first = run(cuda_engine)
    assert first == run(cuda_engine)
    cpu = run(Engine.from_pretrained(device="cpu", pair="dflash2"))
    same = sum(a == b for a, b in zip(first, cpu))
    assert same >= 0.9 * len(prompts), f"{same}/{len(prompts)} sampled outputs equal the CPU engine's"
