"""The shipped tiny pair on the CPU, loaded once per test module that asks for `engine` (a module may define its
own: another pair or device)."""
import pytest
import torch

from sglang_ddtree.engine import Engine


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return Engine.from_pretrained(device="cpu")
