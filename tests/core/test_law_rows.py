"""Every node's law without a sort (sampling.law_rows: the native ops law_rows, the definition law_rows_torch,
kernels/law_rule.h): the kept set equal to reference.filtered_law's support, ties and the top-p boundary included,
its normaliser, the degenerate rows, and the native CPU op equal to the definition on the same inputs."""
import math

import numpy as np
import pytest
import torch

from sglang_ddtree import reference
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import KEEP_ALL, KEEP_NONE, NodeLaw, kept, law_rows, law_rows_torch

OPS = RoundOps("cpu", "cpu")
LAWS = [(3, 1.0, 0.0), (0, 0.6, 0.0), (0, 1.0, 0.2), (5, 0.8, 0.05), (0, 1e-6, 0.0), (0, 1.0, 0.9999),
        (0, 0.95, 0.0), (40, 0.9, 0.0), (2, 0.3, 0.5)]


def node_law(B, t, k, p, m):
    full = lambda v, dt: torch.full((B,), v, dtype=dt)  # noqa: E731
    return NodeLaw(full(t, torch.float32), full(k, torch.int64), full(p, torch.float32), full(m, torch.float32))


def both(logits, lw):
    """(the native CPU op's rows, the definition's rows) of logits [B, n, V]."""
    return law_rows(OPS, logits, lw), law_rows_torch(logits, lw)


def support(x, t, k, p, m):
    return reference.filtered_law(x.astype(np.float64), t, k, p, m) > 0


@pytest.mark.parametrize("k,p,m", LAWS)
@pytest.mark.parametrize("kind", ["normal", "ties"])
def test_kept_set_is_the_references(k, p, m, kind):
    """Random rows (V 40 to 700) at three temperatures: the tokens each law keeps are exactly filtered_law's support,
    by the op and by the definition. 'ties': logits rounded to a coarse grid, so runs of equal logits straddle the
    boundary and the lower ids must win (bf16 logits tie like this)."""
    rng = np.random.default_rng(k * 131 + int(p * 1000) + int(m * 10) + (kind == "ties"))
    for _ in range(12):
        V = int(rng.integers(40, 700))
        x = (rng.standard_normal((1, 3, V)) * rng.uniform(0.5, 4)).astype(np.float32)
        if kind == "ties":
            x = np.round(x * 2) / 2
        t = float(rng.choice([0.5, 1.0, 1.5]))
        logits = torch.from_numpy(x)
        for rows in both(logits, node_law(1, t, k, p, m)):
            got = kept(logits, rows.boundary)[0]
            for v in range(3):
                assert got[v].tolist() == support(x[0, v], t, k, p, m).tolist(), (V, t, v)


def test_the_boundary_and_ties_exactly():
    """Probabilities exact in float64 and fixed point (equal logits: p = 1/4 each): top-p 0.5 keeps the ranks whose
    mass before is <= 0.5, ranks 0, 1 and 2 (the boundary itself kept), the lowest ids of the tie; top-p 0.49 keeps
    two. Two runs of ties: [1, 1, 0, 0, 0] with top-k 3 keeps ids 0, 1 and the lowest of the second run."""
    x = torch.zeros(1, 1, 8)
    x[0, 0, 4:] = float("-inf")  # four equal logits, four tokens of no mass
    for p, want in ((0.5, [0, 1, 2]), (0.49, [0, 1]), (0.75, [0, 1, 2, 3]), (1.0, [0, 1, 2, 3, 4, 5, 6, 7])):
        for rows in both(x, node_law(1, 1.0, 0, p, 0.0)):
            got = torch.nonzero(kept(x, rows.boundary)[0, 0]).flatten().tolist()
            assert got == want, (p, got)
        assert np.nonzero(support(x[0, 0].numpy(), 1.0, 0, p, 0.0))[0].tolist() == (want if p < 1 else [0, 1, 2, 3])
    y = torch.tensor([[[0.0, 1.0, 0.0, 1.0, 0.0]]])
    for rows in both(y, node_law(1, 0.7, 3, 1.0, 0.0)):
        assert torch.nonzero(kept(y, rows.boundary)[0, 0]).flatten().tolist() == [0, 1, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_op_equals_the_definition(dtype):
    """The native CPU op (a sort of the row's keys) and the definition (torch ops) on the same rows, mixed laws per
    request (greedy, temperature only, each filter): the same argmax and boundary, lse within float32 rounding."""
    g = torch.Generator().manual_seed(3)
    B, n, V = 9, 4, 300
    logits = (torch.randn(B, n, V, generator=g) * 3).to(dtype)
    lw = NodeLaw(torch.tensor([0.0, 1.0, 0.6, 1.3, 0.9, 0.6, 2.0, 1.0, 0.4]),
                 torch.tensor([0, 0, 0, 7, 0, 20, 0, 1, 50]), torch.tensor([1.0, 1.0, 0.95, 1.0, 0.5, 0.9, 1.0, 1.0, 0.3]),
                 torch.tensor([0.0, 0.0, 0.0, 0.0, 0.1, 0.02, 0.0, 0.0, 0.0]))
    op, ref = both(logits, lw)
    assert torch.equal(op.greedy, ref.greedy) and torch.equal(op.boundary, ref.boundary)
    torch.testing.assert_close(op.lse, ref.lse, rtol=1e-6, atol=1e-6)
    assert (op.boundary[[0, 7]] == KEEP_ALL).all() and (op.boundary[[1, 6]] == KEEP_ALL).all()
    assert (op.boundary[[2, 3, 4, 5, 8]] != KEEP_ALL).all()


def test_lse_is_the_kept_laws_normaliser():
    """exp(x / T − lse) sums to 1 over the kept tokens (the normaliser of the filtered law, not of the whole row)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 200, generator=g) * 2
    lw = node_law(2, 0.7, 0, 0.8, 0.0)
    for rows in both(x, lw):
        p = torch.where(kept(x, rows.boundary), torch.exp(x / 0.7 - rows.lse.unsqueeze(-1)), torch.zeros_like(x))
        torch.testing.assert_close(p.sum(-1), torch.ones(2, 5), rtol=1e-5, atol=1e-5)


def test_degenerate_rows_are_their_argmax():
    """A row with a NaN, one whose scores overflow (T tiny) and one of −inf only have no law: boundary KEEP_NONE,
    lse NaN, and the argmax as torch.argmax gives it (the NaN; the first maximum; 0)."""
    x = torch.randn(1, 3, 16)
    x[0, 0, 5] = float("nan")
    x[0, 1, 9] = 3e38
    x[0, 2] = float("-inf")
    lw = node_law(1, 1e-6, 0, 0.9, 0.0)
    for rows in both(x, lw):
        assert rows.boundary[0].tolist() == [KEEP_NONE] * 3, rows.boundary
        assert all(math.isnan(v) for v in rows.lse[0].tolist())
        assert rows.greedy[0].tolist() == [5, 9, 0]
