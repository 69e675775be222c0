"""A drawn tree's CUDA ops (kernels/tree_rejection.cu: draw_order, accept_children) against their definitions in
rejection.py on the same inputs, the round's targets on the CUDA backend against the CPU backend's, and the law
test of tests/core/test_rejection.py through the CUDA ops (docs/DESIGN.md §3.12).

The CUDA Gumbel noise takes logf where the CPU takes its libm log (kernels/tree_accept.cu: within 1 ulp), so an
order or a test can differ only where two values lie within a few ulp of each other; every differing row must
show such a near-tie."""
import pytest
import torch

from gpu_tree_util import load
from sglang_ddtree import build_tree_from_topk, rejection
from sglang_ddtree.accept import gumbel_noise
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import NodeLaw

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("K", [1, 7, 31, 63, 257])
def test_draw_order_equals_its_definition(K):
    load()
    g = torch.Generator().manual_seed(K)
    R = 4096
    keys = torch.log_softmax(torch.randn(R, K, generator=g) * 2, -1)
    keys[torch.rand(R, K, generator=g) < 0.1] = float("-inf")
    seed, step = torch.randint(0, 2**62, (R,), generator=g), torch.randint(0, 2**40, (R,), generator=g)
    node = rejection.DRAW_STREAM + torch.arange(R) % 97
    got = torch.ops.sglang_ddtree.draw_order(keys.cuda(), seed.cuda(), step.cuda(), node.cuda()).cpu()
    scores = keys + gumbel_noise(seed, step, node, K)
    want = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    bad = (got != want).any(-1).nonzero().flatten()
    for r in bad.tolist():  # a near-tie between the first two positions that differ
        j = int((got[r] != want[r]).nonzero()[0])
        a, b = scores[r, got[r, j]], scores[r, want[r, j]]
        assert torch.isclose(a, b, rtol=1e-6, atol=1e-6), (r, j, float(a), float(b))
    assert len(bad) <= R // 1000


def test_accept_children_equals_its_definition():
    load()
    torch.manual_seed(3)
    g = torch.Generator().manual_seed(3)
    B, n, K, W = 32, 64, 31, 12
    pc = torch.distributions.Dirichlet(torch.full((K + 1,), 0.5)).sample((B, n))[..., :K].double()
    rest = (1.0 - pc.sum(-1)).clamp(min=0.0)
    q = torch.softmax(torch.randn(B, n, K, generator=g, dtype=torch.float64) * 2, -1)
    q[torch.rand(B, n, K, generator=g) < 0.15] = 0.0
    pos = torch.stack([torch.randperm(K, generator=g)[:W] for _ in range(B * n)]).view(B, n, W)
    kids = torch.where(torch.arange(W).view(1, 1, W) < torch.randint(0, W + 1, (B, n, 1), generator=g), pos + 100,
                       torch.full_like(pos, -1))
    seed, step = torch.arange(B, dtype=torch.int64) * 3 + 1, torch.full((B,), 9, dtype=torch.int64)
    want_out, want_pc = rejection.accept_children(pc, rest, q, kids, pos, seed, step)
    got_out, got_pc = rejection._accept(RoundOps("cuda"), pc.cuda(), rest.cuda(), q.cuda(), kids.cuda(), pos.cuda(),
                                        seed.cuda(), step.cuda())
    same = got_out.cpu() == want_out
    assert same.float().mean() > 0.999, float(same.float().mean())
    torch.testing.assert_close(got_pc.cpu()[same], want_pc[same], rtol=1e-12, atol=1e-15)
    assert (want_out >= 0).any() and (want_out < 0).any()  # both outcomes exercised


@pytest.mark.parametrize("filtered", [False, True])
def test_cuda_round_targets_equal_the_cpu_backend(filtered):
    """Drawn trees of real shape (budget 31 over k 31 keys, V 32k, a mixed greedy / sampled batch, filters):
    the CUDA backend's draws and targets against the CPU backend's on the same float32 logits."""
    load()
    g = torch.Generator().manual_seed(int(filtered))
    B, L, K, V = 16, 7, 31, 32000
    lp = torch.log_softmax(torch.randn(B, L, K, generator=g) * 2, -1).sort(-1, descending=True).values
    ids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(B * L)]).view(B, L, K)
    tree = build_tree_from_topk(lp, ids, 31, root_tokens=0, seq_lens=11)
    temps = torch.where(torch.arange(B) % 4 == 0, 0.0, 0.7)
    law = NodeLaw(temps, torch.where(torch.arange(B) % 3 == 0, 40, 0), torch.full((B,), 0.9 if filtered else 1.0),
                  torch.full((B,), 0.01 if filtered else 0.0), filtered=filtered)
    seed, step = torch.arange(B, dtype=torch.int64) + 5, torch.full((B,), 2, dtype=torch.int64)
    logits = torch.randn(B, tree.n, V, generator=g) * 3
    logits[:, :, ids[0, 0, :8]] += 6.0  # the draft's candidates likely under the target
    out = {}
    for dev in ("cpu", "cuda"):
        ops = RoundOps(dev)
        mv = lambda t: t.to(dev)  # noqa: E731
        lw = NodeLaw(*(mv(t) for t in (law.temperatures, law.top_ks, law.top_ps, law.min_ps)), filtered=filtered)
        drawn, draft = rejection.draw_children(ops, tree.to(dev), mv(lp), mv(ids), lw, mv(seed), mv(step))
        out[dev] = (drawn.tokens.cpu(), rejection.rejection_targets(ops, mv(logits), lw, drawn, draft, mv(seed),
                                                                   mv(step)).cpu())
    assert (out["cuda"][0] == out["cpu"][0]).float().mean() > 0.999
    rows = (out["cuda"][0] == out["cpu"][0]).all(-1)
    agree = (out["cuda"][1][rows] == out["cpu"][1][rows]).float().mean()
    assert agree > 0.995, float(agree)


def test_drawn_law_through_the_cuda_ops():
    """tests/core/test_rejection.py's law test (N = 30,000 two-level rounds, chi-square goodness of fit to the
    exact joint law) with the CUDA ops."""
    load()
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    import test_rejection as T

    assert T._gof_pvalue(T._drawn_pairs(RoundOps("cuda"))) > 1e-3
