"""The sampled round's law ops on the GPU (kernels/law_rows.cu, the sampler's boundary in kernels/tree_accept.cu)
against the native CPU ops and the definition (sampling.law_rows_torch) on the same rows, at the served vocabulary
(151,936, bf16 logits: long runs of equal logits) and at shapes that take every level of the kernel's descent."""
import pytest
import torch

from gpu_tree_util import load
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import KEEP_ALL, NodeLaw, law_rows, law_rows_torch

pytestmark = pytest.mark.gpu
CPU, CUDA = RoundOps("cpu", "cpu"), None


def cuda_ops():
    global CUDA
    load()
    CUDA = CUDA or RoundOps("cuda", "cuda")
    return CUDA


def mixed_law(B):
    pick = lambda *v: [v[i % len(v)] for i in range(B)]  # noqa: E731
    return NodeLaw(torch.tensor(pick(0.6, 1.0, 0.0, 1.3, 0.6, 0.8)), torch.tensor(pick(0, 0, 0, 20, 1, 0)),
                   torch.tensor(pick(0.95, 1.0, 1.0, 0.9, 1.0, 0.3)), torch.tensor(pick(0.0, 0.0, 0.0, 0.0, 0.0, 0.05)))


def on(law, dev):
    return NodeLaw(*(t.to(dev) for t in (law.temperatures, law.top_ks, law.top_ps, law.min_ps)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("kind", ["normal", "flat", "ties"])
def test_law_rows_equal_the_cpu_op(dtype, kind):
    """B 6 × n 8 rows of V 151,936 under mixed laws: the CUDA op's argmax and boundary equal the CPU op's, lse within
    rounding. 'flat': logits near one value (a dummy-weight model's: the first levels keep almost the whole row);
    'ties': logits on a coarse grid (every run of ties long)."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(hash(kind) % 1000)
    B, n, V = 6, 8, 151936
    x = torch.randn(B, n, V, generator=g) * 3
    if kind == "flat":
        x = x * 1e-3 + 5.0
    elif kind == "ties":
        x = torch.round(x * 4) / 4
    x = x.to(dtype)
    law = mixed_law(B)
    want = law_rows(CPU, x, law)
    got = law_rows(ops, x.cuda(), on(law, "cuda"))
    assert torch.equal(got.greedy.cpu(), want.greedy)
    assert torch.equal(got.boundary.cpu(), want.boundary), (got.boundary.cpu() != want.boundary).nonzero()[:8]
    torch.testing.assert_close(got.lse.cpu(), want.lse, rtol=1e-6, atol=1e-6)
    assert (want.boundary[~law.greedy()] != KEEP_ALL).any()


def test_law_rows_equal_the_definition_at_small_vocabularies():
    """Small rows (V 7 to 3000) where the gather holds the whole boundary bucket at once, against the torch
    definition."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(1)
    for V in (7, 64, 513, 3000):
        x = (torch.randn(6, 5, V, generator=g) * 2).to(torch.bfloat16)
        law = mixed_law(6)
        want = law_rows_torch(x, law)
        got = law_rows(ops, x.cuda(), on(law, "cuda"))
        assert torch.equal(got.boundary.cpu(), want.boundary) and torch.equal(got.greedy.cpu(), want.greedy), V
        torch.testing.assert_close(got.lse.cpu(), want.lse, rtol=1e-6, atol=1e-6)


def test_sample_rows_draw_inside_the_boundary():
    """The sampler with law_rows' boundary: the CUDA draws equal the CPU op's (near-ties of the noise aside) and none
    falls outside the kept set."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(2)
    B, n, V = 8, 16, 151936
    x = (torch.randn(B, n, V, generator=g) * 3).to(torch.bfloat16)
    law = mixed_law(B)
    seed, step = torch.arange(B, dtype=torch.int64) * 3, torch.full((B,), 7, dtype=torch.int64)
    temps = law.temperatures.float().clamp(min=1e-6)
    rows = law_rows(CPU, x, law)
    want = CPU.sample_tokens(x, seed, step, temperatures=temps, boundary=rows.boundary)
    got = ops.sample_tokens(x.cuda(), seed.cuda(), step.cuda(), temperatures=temps.cuda(),
                            boundary=rows.boundary.cuda()).cpu()
    assert (got == want).float().mean() > 0.99
    from sglang_ddtree.sampling import law_keys
    keys = law_keys(x.float()).gather(-1, got.unsqueeze(-1)).squeeze(-1)
    assert bool((keys >= rows.boundary).all())


def test_the_auto_budgets_tail_timer():
    """budget.time_sampled_tail on the GPU: a positive time that grows with the width, and past max_rows rows the
    time of the rows it ran, in proportion to the requests."""
    from sglang_ddtree.budget import time_sampled_tail

    ops = cuda_ops()
    narrow = time_sampled_tail(ops, 4, 16, 151936, 15, 16)
    wide = time_sampled_tail(ops, 4, 64, 151936, 15, 16)
    assert 0 < narrow < wide
    one = time_sampled_tail(ops, 8, 64, 151936, 15, 16, max_rows=64)
    assert one > 0
