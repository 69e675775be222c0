"""CUDA top-k + log-normaliser (kernels/topk_lse.cu) vs the canonical definition (sglang_ddtree.topk).

The canonical order (value desc, token id asc) is a strict total order, so the CUDA ids must equal the
canonical ids exactly, tie groups and the k-th boundary included. lp = top - lse: the implied
log-normaliser must be within 2 ulp (float32) of the float64 logsumexp.
"""
import numpy as np
import pytest
import torch

from gpu_tree_util import load
from sglang_ddtree.topk import topk_logprobs_torch

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def make_rows(kind: str, R: int, V: int, dtype, gen):
    if kind == "normal":
        x = torch.randn(R, V, generator=gen, device="cuda") * 3
    elif kind == "ties":          # a handful of values: huge exact-tie groups at the k-th boundary
        x = torch.randint(0, 4, (R, V), generator=gen, device="cuda").float()
    elif kind == "equal":         # every logit equal: the smallest ids win
        x = torch.zeros(R, V, device="cuda")
    elif kind == "ascending":     # adversarial for threshold filters: every element raises the bar
        x = torch.linspace(-5, 5, V, device="cuda").expand(R, V).contiguous()
    elif kind == "peaked":
        x = torch.randn(R, V, generator=gen, device="cuda")
        x[:, torch.randint(0, V, (1,), generator=gen, device="cuda")] += 15
    elif kind == "masked":        # most of the vocabulary at -inf (grammar masks), >= k finite
        x = torch.randn(R, V, generator=gen, device="cuda")
        keep = torch.rand(R, V, generator=gen, device="cuda") < 0.3
        keep[:, :1024] = True
        x = torch.where(keep, x, torch.full_like(x, float("-inf")))
    else:
        raise ValueError(kind)
    return x.to(dtype)


def kinds(V):
    """The row kinds a vocabulary takes ('masked' keeps the first 1024 tokens)."""
    return ("normal", "ties", "peaked", "masked") if V >= 1024 else ("normal", "ties")


def check(logits, k, scale=None, kind=""):
    """The op's (lp, ids) on logits (times a per-row scale) against the canonical definition: the same ids, lp =
    z - logsumexp(z) of z = scale * x within 2 ulp of the float32 log-normaliser plus 1 ulp of lp (twice that with a
    scale, whose product rounds again), -inf where the definition's is."""
    ops = load()
    lp, ids = ops.topk_lse(logits, k, scale)
    ref_lp, ref_ids = topk_logprobs_torch(logits, k, scale)
    assert lp.dtype == torch.float32 and ids.dtype == torch.int64 and lp.shape == (logits.shape[0], k)
    assert torch.equal(ids, ref_ids), \
        f"ids differ in rows {(ids != ref_ids).any(1).nonzero().flatten()[:8].tolist()} ({kind})"
    z64, top, slack = logits.double(), torch.gather(logits.float(), 1, ids), 1
    if scale is not None:
        z64, top, slack = z64 * scale.double()[:, None], top * scale[:, None], 2
    lse64, top = torch.logsumexp(z64, -1, keepdim=True), top.double()
    ulp_lse = torch.from_numpy(np.spacing(np.abs(lse64.cpu().numpy()).astype(np.float32)).astype(np.float64)).cuda()
    ulp_lp = torch.from_numpy(np.spacing(np.abs(lp.cpu().numpy())).astype(np.float64)).cuda()
    err = (lp.double() - (top - lse64)).abs()
    finite = torch.isfinite(top)
    worst = (err - slack * (2 * ulp_lse + ulp_lp))[finite].max().item() if finite.any() else -1.0
    assert worst <= 0, f"lp off by more than {slack * 2} ulp of the log-normaliser: excess {worst} ({kind})"
    assert torch.equal(torch.isneginf(lp), torch.isneginf(ref_lp)), kind


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("R,V,k", [(1, 151936, 64), (16, 151936, 256), (64, 151936, 8), (3, 262144, 512),
                                   (2, 151937, 100), (7, 5, 5), (9, 33, 7), (130, 4096, 1024), (1, 1, 1)])
def test_topk_lse_matches_canonical(dtype, R, V, k):
    gen = torch.Generator(device="cuda").manual_seed(R * 7 + V + k)
    for kind in kinds(V):
        check(make_rows(kind, R, V, dtype, gen), k, kind=kind)


@pytest.mark.parametrize("kind", ["equal", "ascending"])
@pytest.mark.parametrize("V,k", [(151936, 64), (151936, 1000), (50000, 3)])
def test_topk_lse_adversarial_rows(kind, V, k):
    gen = torch.Generator(device="cuda").manual_seed(3)
    check(make_rows(kind, 4, V, torch.bfloat16, gen), k)


def test_topk_lse_nonfinite_rows_poison_lp():
    ops = load()
    x = torch.randn(4, 5000, device="cuda")
    x[1, 17] = float("nan")
    x[2, 99] = float("inf")
    lp, _ = ops.topk_lse(x, 16)
    assert torch.isfinite(lp[0]).all() and torch.isfinite(lp[3]).all()
    assert not torch.isfinite(lp[1]).any() and not torch.isfinite(lp[2]).all()


def test_topk_lse_repeatable():
    ops = load()
    x = torch.randn(32, 151936, device="cuda").bfloat16()
    a = ops.topk_lse(x, 128)
    for _ in range(3):
        b = ops.topk_lse(x, 128)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("R,V,k", [(1, 151936, 64), (16, 151936, 32), (64, 151936, 8), (7, 5, 5), (130, 4096, 256)])
def test_topk_lse_scaled_rows_match_the_cpu_stage(dtype, R, V, k):
    """A per-row scale (a request's temperature and the drafter's calibration, keys.py): the candidates stay
    the raw logits' canonical ids, lp = scale * x - logsumexp(scale * x) within 2 ulp of the float64 value."""
    ops = load()
    gen = torch.Generator(device="cuda").manual_seed(R + V + k)
    for kind in kinds(V):
        x = make_rows(kind, R, V, dtype, gen)
        scale = torch.exp(torch.randn(R, generator=gen, device="cuda")).float()  # 0.1 to 10, one per row
        check(x, k, scale, kind)
    ones = torch.ones(R, device="cuda")
    x = make_rows("normal", R, V, dtype, gen)
    assert all(torch.equal(a, b) for a, b in zip(ops.topk_lse(x, k, ones), ops.topk_lse(x, k)))
