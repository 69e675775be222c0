"""A drawn tree's CUDA ops (kernels/tree_rejection.cu: draw_tree, drawn_targets; kernels/law_rows.cu) against the
CPU backend on the same inputs, and the law test of tests/core/test_rejection.py through the CUDA ops
(docs/DESIGN.md §3.12).

The CUDA Gumbel noise takes logf where the CPU takes its libm log (kernels/tree_accept.cu: within 1 ulp), and the
float64 sums run in another order, so a draw or a test can differ where two values lie within a few ulp of each
other: the tests bound the share of rows that differ."""
import pytest
import torch

from gpu_tree_util import load
from sglang_ddtree import accept_tree, build_tree_from_topk, rejection
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import NodeLaw

pytestmark = pytest.mark.gpu


def _case(B, L, K, V, budget, seed, filtered=False):
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(torch.randn(B, L, K, generator=g) * 2, -1).sort(-1, descending=True).values
    if K > 1:
        lp[:, :, -1][torch.rand(B, L, generator=g) < 0.3] = float("-inf")  # a candidate the law drops
    ids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(B * L)]).view(B, L, K)
    tree = build_tree_from_topk(lp, ids, budget, root_tokens=0, seq_lens=11)
    temps = torch.where(torch.arange(B) % 4 == 0, 0.0, 0.7)
    law = NodeLaw(temps, torch.where(torch.arange(B) % 3 == 0, 40, 0), torch.full((B,), 0.9 if filtered else 1.0),
                  torch.full((B,), 0.01 if filtered else 0.0), filtered=filtered)
    seed_, step = torch.arange(B, dtype=torch.int64) + 5 + seed, torch.full((B,), 2, dtype=torch.int64)
    logits = torch.randn(B, tree.n, V, generator=g) * 3
    logits[:, :, ids[0, 0, :8]] += 6.0  # the draft's candidates likely under the target
    return tree, lp, ids, law, seed_, step, logits


def _on(dev, *tensors):
    return [t.to(dev) for t in tensors]


@pytest.mark.parametrize("K,budget", [(1, 7), (15, 15), (63, 63), (257, 255)])
def test_draw_tree_equals_its_definition(K, budget):
    """The op's drawn tokens against the CPU definition's (rejection.draw_children) on the same keys and seeds."""
    load()
    tree, lp, ids, law, seed, step, _ = _case(24, 7, K, 50000, budget, K)
    want, _ = rejection.draw_children(RoundOps("cpu"), tree, lp, ids, law, seed, step)
    lw = NodeLaw(*_on("cuda", law.temperatures, law.top_ks, law.top_ps, law.min_ps))
    got, _ = rejection.draw_children(RoundOps("cuda"), tree.to("cuda"), *_on("cuda", lp, ids), lw,
                                     *_on("cuda", seed, step))
    same = (got.tokens.cpu() == want.tokens)
    assert same.all(-1).float().mean() > 0.99, float(same.float().mean())  # near-ties of the noise aside
    assert K == 1 or not torch.equal(want.tokens, tree.tokens)  # something was drawn (one candidate: itself)


@pytest.mark.parametrize("filtered", [False, True])
def test_cuda_round_targets_equal_the_cpu_backend(filtered):
    """Drawn trees of real shape (budget 31 over k 31 keys, V 32k, a mixed greedy / sampled batch, filters):
    the CUDA backend's draws and walk (the ops draw_tree, law_rows, drawn_targets) against the CPU backend's (the
    native CPU ops) on the same float32 logits: the same commit (accepted nodes and bonus)."""
    load()
    tree, lp, ids, law, seed, step, logits = _case(16, 7, 31, 32000, 31, int(filtered), filtered)
    out = {}
    for dev in ("cpu", "cuda"):
        ops = RoundOps(dev)
        lw = NodeLaw(*_on(dev, law.temperatures, law.top_ks, law.top_ps, law.min_ps), filtered=filtered)
        drawn, draft = rejection.draw_children(ops, tree.to(dev), *_on(dev, lp, ids), lw, *_on(dev, seed, step))
        targets = rejection.rejection_targets(ops, logits.to(dev), lw, drawn, draft, *_on(dev, seed, step))
        res = accept_tree(drawn, targets)
        out[dev] = (drawn.tokens.cpu(), res.accept_len.cpu(), res.accepted_tokens.cpu())
    rows = (out["cuda"][0] == out["cpu"][0]).all(-1)
    assert rows.float().mean() > 0.9
    same = (out["cuda"][1] == out["cpu"][1]) & (out["cuda"][2] == out["cpu"][2]).all(-1)
    assert same[rows].float().mean() > 0.99, float(same[rows].float().mean())
    sampled = ~law.greedy()
    assert (out["cpu"][2][sampled, 0] != logits[sampled, 0].argmax(-1)).any()  # sampled: not always the argmax


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_drawn_law_through_the_cuda_ops(top_p):
    """tests/core/test_rejection.py's law test (N = 30,000 two-level rounds, chi-square goodness of fit to the
    exact joint law, unfiltered and under top-p 0.8) with the CUDA ops."""
    load()
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    import test_rejection as T

    assert T._gof_pvalue(T._drawn_pairs(RoundOps("cuda"), dtype=torch.float32, top_p=top_p), top_p) > 1e-3
