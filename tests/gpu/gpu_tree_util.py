"""Shared helpers of the CUDA tree-stage tests: loading the extension, comparing TreeBatches bit for bit,
and the random (lp, ids) generator of the CPU tests (tests/core/treegen.py, one definition)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from treegen import random_topk  # noqa: E402,F401  (re-exported)


def load():
    from sglang_ddtree import _build, ops  # noqa: F401  (ops declares the schemas)
    _build.load_cuda()
    return torch.ops.sglang_ddtree


def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a tensor (float64 weights compared exactly, -0.0 != +0.0)."""
    return t.view(torch.int64) if t.dtype == torch.float64 else t


def assert_trees_identical(a, b, context: str = "") -> None:
    for name, ta in a.tensors().items():
        tb = getattr(b, name)
        assert ta.dtype == tb.dtype and ta.shape == tb.shape, f"{name}: {ta.dtype}{tuple(ta.shape)} vs {tb.dtype}{tuple(tb.shape)} {context}"
        x, y = bits(ta.cpu()), bits(tb.cpu())
        if not torch.equal(x, y):
            bad = (x != y).reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist()
            raise AssertionError(f"field {name} differs for requests {bad[:8]} {context}")
