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
