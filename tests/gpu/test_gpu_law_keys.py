"""The tree's keys under each request's law on CUDA (keys.py through the topk_lse op with a per-row scale) against
the CPU path, eagerly and inside a captured CUDA graph whose laws live in static buffers (as the served draft
graph holds them), with the per-request anchor of the CUDA builder."""
import pytest
import torch

from gpu_tree_util import assert_identical, load
from sglang_ddtree import build_tree_from_topk
from sglang_ddtree.bench.common import capture
from sglang_ddtree.keys import Calibration, DraftKeys
from sglang_ddtree.sampling import NodeLaw

pytestmark = pytest.mark.gpu
ROWS = [(1.0, 1, 1.0, 0.0), (1.0, -1, 1.0, 0.0), (0.6, 20, 0.9, 0.02), (0.8, -1, 0.95, 0.0), (0.0, 0, 1.0, 0.0),
        (1.4, 5, 1.0, 0.1)]
CAL = Calibration(tuple(0.4 + 0.05 * d for d in range(15)), tuple(1.2 - 0.02 * d for d in range(15)))


def law(bs, shift=0, device="cuda"):
    t, k, p, m = zip(*[ROWS[(i + shift) % len(ROWS)] for i in range(bs)])
    return NodeLaw(torch.tensor(t, device=device), torch.tensor(k, device=device), torch.tensor(p, device=device),
                   torch.tensor(m, device=device))


def check_keys(lp, ids, ref_lp, ref_ids):
    assert torch.equal(ids.cpu(), ref_ids)
    assert torch.equal(torch.isneginf(lp.cpu()), torch.isneginf(ref_lp))
    fin = torch.isfinite(ref_lp)
    torch.testing.assert_close(lp.cpu()[fin], ref_lp[fin], rtol=0, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("V,k", [(151936, 31), (3000, 63), (259, 15)])
def test_cuda_keys_equal_the_cpu_keys_in_a_mixed_batch(dtype, V, k):
    load()
    g = torch.Generator(device="cuda").manual_seed(V + k)
    bs, L = 12, 15
    logits = (torch.randn(bs, L, V, generator=g, device="cuda") * 2).to(dtype)
    keys = DraftKeys(L, CAL, "cuda")
    lp, ids = keys(logits, k, "cuda", law(bs))
    ref_lp, ref_ids = DraftKeys(L, CAL)(logits.cpu(), k, "cpu", law(bs, device="cpu"))
    check_keys(lp, ids, ref_lp, ref_ids)


def test_keys_and_anchored_build_inside_a_cuda_graph():
    """Captured once with static logits and law buffers; each replay after new logits and laws (the round's
    load before the replay) equals the eager CPU keys fed to the oracle, anchored for the greedy requests."""
    load()
    g = torch.Generator(device="cuda").manual_seed(9)
    bs, L, V, budget = 8, 7, 3000, 31
    keys = DraftKeys(L, Calibration(CAL.greedy[:L], CAL.sampling[:L]), "cuda")
    logits = torch.randn(bs, L, V, generator=g, device="cuda")
    static = law(bs)
    roots = torch.zeros(bs, dtype=torch.int64, device="cuda")
    lens = torch.zeros(bs, dtype=torch.int64, device="cuda")

    def step():
        lp, ids = keys(logits, budget, "cuda", static)
        return build_tree_from_topk(lp, ids, budget, root_tokens=roots, seq_lens=lens, backend="cuda", anchor="chain",
                                    anchored=keys.anchored(static))

    graph, out = capture(step)
    for trial in range(4):
        logits.copy_(torch.randn(bs, L, V, generator=g, device="cuda"))
        new = law(bs, shift=trial + 1)
        for buf, src in zip((static.temperatures, static.top_ks, static.top_ps, static.min_ps),
                            (new.temperatures, new.top_ks, new.top_ps, new.min_ps)):
            buf.copy_(src)
        graph.replay()
        cpu_law = law(bs, shift=trial + 1, device="cpu")
        lp, ids = keys(logits, budget, "cuda", new)  # eager CUDA keys: the oracle's input (stage-1 ulps aside)
        check_keys(lp, ids, *DraftKeys(L, keys.calibration)(logits.cpu(), budget, "cpu", cpu_law))
        ref = build_tree_from_topk(lp.cpu(), ids.cpu(), budget, backend="reference", anchor="chain",
                                   anchored=cpu_law.greedy())
        assert_identical(out, ref, f"trial {trial}")
