"""CUDA accept walk and per-node sampler (kernels/tree_accept.cu).

Walk: == reference.walk_reference on real trees (targets that follow random paths) and on malformed ones
(random, cyclic, backward and out-of-range links, bad num_nodes). Sampler: argmax semantics at T = 0
(first index on ties, NaN as maximum), the law of softmax(logits / T) at T > 0 (chi-square), determinism in
(seed, step, node), and agreement with the CPU mirror of the RNG.
"""
import pytest
import torch

from gpu_tree_util import draw, load, random_topk, seeded_cases
from sglang_ddtree import accept_tree, build_tree_from_topk, flags as F
from sglang_ddtree.sampling import sample_rows_torch
from sglang_ddtree.reference import walk_reference

pytestmark = pytest.mark.gpu


def walk_all(tokens, nt, ns, nn, target, L):
    out = []
    for b in range(tokens.shape[0]):
        out.append(walk_reference(tokens[b], nt[b], ns[b], int(nn[b]), target[b], L))
    return out


def compare(tokens, nt, ns, nn, target, L, case):
    ops = load()
    idx, length, bonus, flg = ops.accept_tree(tokens.cuda(), nt.cuda(), ns.cuda(), nn.cuda(), target.cuda(), L)
    idx, length, bonus, flg = idx.cpu(), length.cpu(), bonus.cpu(), flg.cpu()
    ref = walk_all(tokens.numpy(), nt.numpy(), ns.numpy(), nn.numpy(), target.numpy(), L)
    for b, (acc, bon, f) in enumerate(ref):
        want = acc + [-1] * (L + 1 - len(acc))
        assert idx[b].tolist() == want and int(length[b]) == len(acc), f"{case} request {b}: accept index / length"
        assert int(bonus[b]) == bon and int(flg[b]) == f, f"{case} request {b}: bonus / flags"


def following_targets(rng, tree):
    """Targets that make the walk follow the path to a random node, then random tokens elsewhere."""
    B, n = tree.tokens.shape
    target = torch.tensor(rng.integers(0, 50, (B, n)))
    par, tok = tree.parents.cpu(), tree.tokens.cpu()
    for b in range(B):
        node = int(rng.integers(0, int(tree.num_nodes[b])))
        while node > 0:
            p = int(par[b, node])
            target[b, p] = tok[b, node]
            node = p
    return target


def test_walk_matches_oracle_on_real_trees():
    load()
    for it, rng, case in seeded_cases(5, 60):
        B, L, budget, V = draw(rng, (1, 65), (1, 17), [1, 8, 32, 64, 128, 256], [3, 50, 400])
        lp, ids = random_topk(rng, B, L, V, min(budget, V), mode=["normal", "bf16", "ties", "peaked"][it % 4])
        tree = build_tree_from_topk(lp.cuda(), ids.cuda(), budget, backend="cuda")
        target = following_targets(rng, tree)
        compare(tree.tokens.cpu(), tree.retrive_next_token.cpu(), tree.retrive_next_sibling.cpu(),
                tree.num_nodes.cpu(), target, L, case)
        res = accept_tree(tree, target.cuda(), backend="cuda")
        assert int(((res.flags & F.MALFORMED_TREE) != 0).sum()) == 0


def test_walk_matches_oracle_on_malformed_trees():
    for it, rng, case in seeded_cases(6, 200):
        B, n, L = draw(rng, (1, 33), (1, 70), (0, 12))
        tokens = torch.tensor(rng.integers(0, 3, (B, n)))
        nt = torch.tensor(rng.integers(-3, n + 3, (B, n)))
        ns = torch.tensor(rng.integers(-3, n + 3, (B, n)))
        if it % 3 == 0:                      # cycles: siblings pointing back, children pointing to self
            ns = torch.tensor(rng.integers(0, 2, (B, n))) * (n - 1)
            nt = torch.arange(n).expand(B, n).contiguous()
        nn = torch.tensor(rng.integers(-1, n + 3, B), dtype=torch.int32)
        if it % 2:
            nn = torch.full((B,), n, dtype=torch.int32)
        if it % 5 == 0:
            nt[:, 0] = torch.tensor(rng.integers(-10**12, 10**12, B))
        target = torch.tensor(rng.integers(0, 3, (B, n)))
        compare(tokens, nt, ns, nn, target, L, case)


def test_sample_greedy_is_argmax_first_index():
    ops = load()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for V in (1, 7, 1000, 151936):
            x = torch.randint(0, 5, (64, V), generator=gen, device="cuda").to(dtype)  # many tied maxima
            x[3, V // 2] = float("nan")
            seeds = torch.zeros(64, dtype=torch.int64, device="cuda")
            got = ops.sample_rows(x, 0.0, seeds, seeds, torch.arange(64, device="cuda"))
            assert torch.equal(got, torch.argmax(x.float(), -1)), (dtype, V)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sample_law_chi_square(dtype):
    from scipy.stats import chi2
    ops = load()
    V, R, T = 24, 40000, 0.7
    logits = (torch.randn(V, generator=torch.Generator().manual_seed(1)) * 1.5).to(dtype)
    rows = logits.cuda().expand(R, V).contiguous()
    seed = torch.full((R,), 1234, dtype=torch.int64, device="cuda")
    step = torch.full((R,), 9, dtype=torch.int64, device="cuda")
    node = torch.arange(R, device="cuda")
    s = ops.sample_rows(rows, T, seed, step, node)
    counts = torch.bincount(s, minlength=V).double().cpu()
    p = torch.softmax(logits.double() / T, -1)
    expected = p * R
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert chi2.sf(stat, V - 1) > 1e-4, f"chi-square {stat:.1f} with {V - 1} dof"
    # fresh draws for a new step: the same law, different samples
    s2 = ops.sample_rows(rows, T, seed, step + 1, node)
    assert (s2 != s).float().mean() > 0.3


def test_sample_deterministic_and_matches_cpu_mirror():
    ops = load()
    R, V = 256, 5000
    x = torch.randn(R, V, device="cuda") * 2
    seed = torch.randint(-2**62, 2**62, (R,), device="cuda")
    step = torch.randint(0, 2**40, (R,), device="cuda")
    node = torch.randint(0, 600, (R,), device="cuda")
    a = ops.sample_rows(x, 0.8, seed, step, node)
    assert torch.equal(a, ops.sample_rows(x, 0.8, seed, step, node))
    assert torch.equal(a, ops.sample_rows(x.clone(), 0.8, seed.clone(), step.clone(), node.clone()))
    mirror = sample_rows_torch(x, 0.8, seed, step, node)
    agree = (a == mirror).float().mean().item()
    assert agree >= 0.99, f"CUDA sampler and the CPU RNG mirror agree on only {agree:.3f} of rows"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sample_row_temperatures_divide_in_the_kernel(dtype):
    """row_temperature (each row's T, f32 [R]) gives exactly the draws of the rows divided in float32 beforehand
    and sampled at T = 1 (the same IEEE division, the same stream), rows at T = 0 the argmax; the CPU mirror with
    the same per-row temperatures agrees on >= 99% of rows (its log differs in the last bits); a wrong
    row_temperature is refused naming it."""
    ops = load()
    R, V = 300, 4099
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = (torch.randn(R, V, generator=gen, device="cuda") * 3).to(dtype)
    t = torch.rand(R, generator=gen, device="cuda") * 1.5 + 0.05
    t[::7] = 0.0
    seed = torch.randint(-2**62, 2**62, (R,), device="cuda", generator=gen)
    step = torch.randint(0, 2**40, (R,), device="cuda", generator=gen)
    node = torch.randint(0, 600, (R,), device="cuda", generator=gen)
    got = ops.sample_rows(x, 1.0, seed, step, node, t)
    want = ops.sample_rows(x.float() / torch.where(t > 0, t, 1.0).unsqueeze(1), 1.0, seed, step, node)
    greedy = t == 0
    want[greedy] = x.float().argmax(-1)[greedy]
    assert torch.equal(got, want)
    agree = (got == sample_rows_torch(x, t, seed, step, node)).float().mean().item()
    assert agree >= 0.99, f"per-row temperatures: CUDA and the CPU mirror agree on only {agree:.3f} of rows"
    for bad in (t.double(), t[:-1], t.cpu()):
        with pytest.raises(RuntimeError, match="row_temperature"):
            ops.sample_rows(x, 1.0, seed, step, node, bad)


@pytest.mark.parametrize("temperature", [1e-30, 1e-39, 1e-45])
def test_public_sampler_on_cuda_mends_overflow_and_nan(temperature):
    """sample_node_tokens on CUDA tensors: logits / T overflowing float32 gives the argmax, a NaN row -1,
    float64 logits keep their precision (the torch path): the same answers as on the CPU."""
    from sglang_ddtree import sample_node_tokens

    load()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 9, 1000, generator=gen) * 4
    x[1, 2, 17] = float("nan")
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        got = sample_node_tokens(xd.cuda(), temperature, seed=5).cpu()
        want = xd.float().argmax(-1)
        want[1, 2] = -1
        assert torch.equal(got, want), dtype
        assert torch.equal(got, sample_node_tokens(xd, temperature, seed=5))
    big = torch.tensor([[[1e300, 2e300]]], dtype=torch.float64)
    assert sample_node_tokens(big.cuda(), 0.0).tolist() == [[1]]
    assert sample_node_tokens(big.cuda(), 1.0, seed=1).tolist() == [[1]]
