"""Stage 1: canonical order (value desc, id asc) and lp = x − logsumexp(x), against a naive numpy sort."""
import numpy as np
import pytest
import torch

from sglang_ddtree.topk import topk_logprobs_torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("seed", range(6))
def test_canonical_topk_against_lexsort(dtype, seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(1, 3000))
    k = int(rng.integers(1, V + 1))
    x = torch.tensor(rng.standard_normal((3, 4, V)) * rng.choice([0.1, 3.0]), dtype=torch.float32).to(dtype)
    if seed % 2:
        x = (x * 4).round() / 4          # heavy exact ties
    lp, ids = topk_logprobs_torch(x, k)
    xf = x.float().numpy().reshape(-1, V)
    for r in range(xf.shape[0]):
        order = np.lexsort((np.arange(V), -xf[r]))[:k]
        assert ids.reshape(-1, k)[r].tolist() == order.tolist()
    lse = torch.logsumexp(x.float(), -1, keepdim=True)
    assert torch.equal(lp, torch.gather(x.float(), -1, ids) - lse)


def test_negative_zero_ties_with_zero():
    x = torch.tensor([[[-0.0, 0.0, -1.0]]])
    _, ids = topk_logprobs_torch(x, 3)
    assert ids.tolist() == [[[0, 1, 2]]]
