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
    from gpu_tree_util import assert_trees_identical, random_topk  # puts tests/core on the path

    from sglang_ddtree import build_tree_from_topk
    from sglang_ddtree.budget import truncate
    from sglang_ddtree.round import RoundOps

    from test_budget import scrambled
    from test_tree_native import MODES

    ops = RoundOps("cuda")
    rng = np.random.default_rng(5)
    for trial in range(20):
        B, L, V = int(rng.integers(1, 40)), int(rng.integers(1, 16)), int(rng.choice([17, 300, 4096]))
        big_b = int(rng.choice([15, 31, 63, 127, 255]))
        lp, ids = random_topk(rng, B, L, V, min(big_b, V), mode=MODES[trial % len(MODES)])
        big = build_tree_from_topk(lp, ids, big_b, backend="cpu", anchor=anchor)
        for tree in (big, scrambled(big, rng)):
            dev = tree.to("cuda")
            for b in sorted({0, 1, 15, 31, 32, 63, big_b - 1} & set(range(big_b + 1))):
                got = ops.truncate(dev, b)
                assert all(t.is_cuda and t.is_contiguous() for t in got.tensors().values())
                assert_trees_identical(got, truncate(dev, b), f"trial {trial} budget {b}")
