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


def assert_rows_equal(got, want, context="", equal_nan=True):
    """The CUDA op's rows against the CPU op's (or the definition's): argmax and boundary equal, lse within rounding
    (NaN where the row is degenerate, unless equal_nan is False)."""
    assert torch.equal(got.greedy.cpu(), want.greedy), f"{context}: argmax differs"
    bad = (got.boundary.cpu() != want.boundary).nonzero()[:8].tolist()
    assert not bad, f"{context}: boundary differs at {bad}"
    torch.testing.assert_close(got.lse.cpu(), want.lse, rtol=1e-6, atol=1e-6, equal_nan=equal_nan,
                               msg=lambda m: f"{context}: lse {m}")


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
    assert_rows_equal(law_rows(ops, x.cuda(), on(law, "cuda")), want, f"{kind} {dtype}", equal_nan=False)
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
        assert_rows_equal(law_rows(ops, x.cuda(), on(law, "cuda")), want, f"V {V}", equal_nan=False)


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


# --- the kernel's split: a row over a cluster of up to 8 CTAs when rows are few (kernels/law_rows.cu) ------------

def law_of(rows):
    """A NodeLaw of one (T, top_k, top_p, min_p) a request."""
    t, k, p, m = zip(*rows)
    return NodeLaw(torch.tensor(t, dtype=torch.float32), torch.tensor(k, dtype=torch.int64),
                   torch.tensor(p, dtype=torch.float32), torch.tensor(m, dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("B,n", [(1, 1), (2, 4), (5, 8), (4, 16), (16, 16)])
def test_law_rows_at_every_row_count_equal_the_cpu_op(dtype, B, n):
    """R = 1 to 256 rows of V 151,936: few rows are split over clusters of up to 8 CTAs, 256 are not (the GPU holds
    them one a CTA); every row count's argmax and boundary equal the CPU op's, lse within rounding."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(B * 100 + n)
    x = (torch.randn(B, n, 151936, generator=g) * 3).to(dtype)
    law = mixed_law(B)
    assert_rows_equal(law_rows(ops, x.cuda(), on(law, "cuda")), law_rows(CPU, x, law), f"B {B} n {n}")


def misaligned(x: torch.Tensor) -> torch.Tensor:
    """x on the GPU, contiguous, its data one element past a 16-byte boundary (the kernel's unvectorised path)."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")
    y = flat[1:].view(x.shape)
    y.copy_(x)
    assert y.is_contiguous() and y.data_ptr() % 16 != 0
    return y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("V", [1, 7, 33, 4097, 40008, 151939])
def test_law_rows_odd_vocabularies_equal_the_definition(dtype, V):
    """Vocabularies no multiple of the 16-byte vector (1, 7, 33, 4097, 151,939) or whose split over a cluster leaves
    unequal chunks (40,008), one row and 30, aligned and one element off alignment: against the torch definition and
    the CPU op."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(V)
    for B, n in ((1, 1), (6, 5)):
        x = (torch.randn(B, n, V, generator=g) * 2).to(dtype)
        law = mixed_law(B)
        want = law_rows_torch(x, law)
        assert_rows_equal(law_rows(CPU, x, law), want, f"cpu V {V}")
        for dev_x in (x.cuda(), misaligned(x)):
            got = law_rows(ops, dev_x, on(law, "cuda"))
            assert_rows_equal(got, want, f"V {V} R {B * n} ptr {dev_x.data_ptr() % 16}")


SPECIAL_LAWS = [(0.6, 0, 0.95, 0.0), (1.0, 0, 0.3, 0.0), (1.0, 5000, 1.0, 0.0), (0.8, 100000, 0.99, 0.0),
                (1.3, 0, 1.0, 0.01), (0.7, 20, 0.9, 0.05), (1.0, 0, 1.0, 0.0), (0.0, 0, 1.0, 0.0)]


def special_rows(kind, B, n, V, g):
    x = torch.randn(B, n, V, generator=g) * 3
    if kind == "equal":        # every token ties: the descent narrows by the ids alone
        x = torch.full_like(x, 1.5)
    elif kind == "half_neg_inf":  # no mass in half the row, in runs and scattered
        x[..., V // 2:] = float("-inf")
        x[..., ::3] = float("-inf")
    elif kind == "neg_inf":    # a row of -inf has no law (degenerate), its neighbours do
        x[:, 0] = float("-inf")
    elif kind == "nan":        # degenerate rows, the NaN anywhere
        x[:, 0, V // 3] = float("nan")
    elif kind == "ties":       # a coarse grid: long runs of equal logits straddle every boundary
        x = torch.round(x)
    elif kind == "flat":       # a dummy-weight model's rows: the first levels keep almost the whole row
        x = x * 1e-3 + 5.0
    elif kind == "spread":     # a wide row: most tokens far below the top (no mass in fixed point)
        x = x * 20
    return x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("kind", ["equal", "half_neg_inf", "neg_inf", "nan", "ties", "flat", "spread"])
def test_law_rows_special_rows_equal_the_cpu_op(dtype, kind):
    """Rows that take the descent's deep levels (all-equal rows, runs of ties, top-k 5,000 and 100,000), rows of -inf
    and NaN (degenerate), rows mostly without mass, under filters of every kind, at V 151,936 split over clusters
    (16 rows) and at V 3,000: equal to the CPU op."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(hash(kind) % 1000)
    law = law_of(SPECIAL_LAWS)
    for V in (151936, 3000):
        x = special_rows(kind, len(SPECIAL_LAWS), 2, V, g).to(dtype)
        assert_rows_equal(law_rows(ops, x.cuda(), on(law, "cuda")), law_rows(CPU, x, law), f"{kind} V {V}")


def test_law_rows_are_the_same_bits_at_any_split():
    """The same 64 rows alone (a cluster of 8 CTAs each), together (64 rows) and among 256 (one CTA a row): the same
    argmax, boundary and lse bits, every sum that reaches them being of integers."""
    ops = cuda_ops()
    g = torch.Generator().manual_seed(5)
    B, n, V = 8, 8, 151936
    x = (torch.randn(B, n, V, generator=g) * 3).bfloat16().cuda()
    law = on(mixed_law(B), "cuda")
    whole = law_rows(ops, x, law)
    big = law_rows(ops, x.repeat(4, 1, 1), NodeLaw(*(t.repeat(4) for t in (law.temperatures, law.top_ks, law.top_ps,
                                                                            law.min_ps))))
    for b in range(B):
        one = NodeLaw(*(t[b:b + 1] for t in (law.temperatures, law.top_ks, law.top_ps, law.min_ps)))
        for v in range(n):
            alone = law_rows(ops, x[b:b + 1, v:v + 1], one)
            for name in ("greedy", "lse", "boundary"):
                a, w, o = (getattr(r, name) for r in (alone, whole, big))
                bits = (lambda t: t.view(torch.int32)) if name == "lse" else (lambda t: t)
                assert bits(a[0, 0]) == bits(w[b, v]) == bits(o[b, v]), (name, b, v)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_drawn_targets_bonus_pass_aligned_or_not(dtype):
    """drawn_targets' bonus pass (kernels/tree_rejection.cu) reads the row in 16-byte vectors where it is aligned and
    one element a thread where it is not (the law_rows rows too): drawn trees at V 151,936 give the same targets bit
    for bit either way, and the CPU backend's but for near-ties of the noise."""
    from test_gpu_rejection import _case, _on

    from sglang_ddtree import rejection

    cuda_ops()
    tree, lp, ids, law, seed, step, logits = _case(8, 7, 15, 151936, 15, 3, filtered=True)
    x = logits.to(dtype)
    out = {}
    for dev in ("cpu", "cuda"):
        ops = RoundOps(dev)
        lw = NodeLaw(*_on(dev, law.temperatures, law.top_ks, law.top_ps, law.min_ps), filtered=True)
        drawn, draft = rejection.draw_children(ops, tree.to(dev), *_on(dev, lp, ids), lw, *_on(dev, seed, step))
        inputs = [x.to(dev)] + ([misaligned(x)] if dev == "cuda" else [])
        out[dev] = [drawn.tokens.cpu()] + [rejection.rejection_targets(ops, xi, lw, drawn, draft,
                                                                       *_on(dev, seed, step)).cpu() for xi in inputs]
    tokens, aligned, unaligned = out["cuda"]
    assert torch.equal(aligned, unaligned)
    rows = (tokens == out["cpu"][0]).all(-1)  # the same drawn tree (the noise's near-ties aside)
    assert rows.float().mean() > 0.9
    assert (aligned == out["cpu"][1])[rows].float().mean() > 0.99
