"""LaggedValue on a CUDA device: the host reads a device-made budget without a synchronisation."""
import pytest
import torch

from sglang_ddtree.budget import LaggedValue

pytestmark = pytest.mark.gpu


def test_lagged_value_lands_after_the_stream_and_is_pinned():
    lag = LaggedValue(torch.tensor(7), "cuda")
    assert all(b.is_pinned() for b in lag._bufs)  # a non-blocking copy into pageable memory would sync
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):  # keep the stream busy so the copy is still queued when current() is asked
        x = x @ x / 64
    lag.publish(torch.tensor(31, device="cuda") + x[0, 0].isfinite().to(torch.int64) * 0)
    first = int(lag.current())
    assert first in (7, 31)  # queued or landed, never blocked on
    torch.cuda.synchronize()
    assert int(lag.current()) == 31


@pytest.mark.parametrize("anchor", [None, "chain"])
def test_the_cuda_truncation_is_the_definition(anchor):
    """The truncate_tree CUDA kernel equals budget.truncate field for field (the served auto round's cut), on
    built trees and on trees with every fault the fields can carry (test_budget.scrambled), at widths across the
    32-bit mask words."""
    import numpy as np
    from gpu_tree_util import assert_identical  # puts tests/core on the path

    from sglang_ddtree.budget import truncate
    from sglang_ddtree.round import RoundOps

    from test_budget import truncation_cases

    ops = RoundOps("cuda")
    for trial, tree, b in truncation_cases(np.random.default_rng(5), anchor, 20, 39, 15, [17, 300, 4096],
                                           [15, 31, 63, 127, 255]):
        dev = tree.to("cuda")
        got = ops.truncate(dev, b)
        assert all(t.is_cuda and t.is_contiguous() for t in got.tensors().values())
        assert_identical(got, truncate(dev, b), f"trial {trial} budget {b}")
