"""Shared helpers of the CUDA tests: loading the extension, the seeded random cases (the random (lp, ids) generator
of the CPU tests, tests/core/treegen.py, one definition), a CUDA op against its oracle, and the comparison of two
results field by field, bit for bit (tests/core/test_gpu_tree_util.py runs these on the CPU)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from treegen import random_topk  # noqa: E402,F401  (re-exported)

from sglang_ddtree import flags as F  # noqa: E402

DEVICE = "cuda"  # where cuda_matches runs the op under test (the CPU test of these helpers sets "cpu")


def load():
    from sglang_ddtree import _build, ops  # noqa: F401  (ops declares the schemas)
    _build.load_cuda()
    return torch.ops.sglang_ddtree


# --- the cases ---------------------------------------------------------------------------------------------------

def draw(rng: np.random.Generator, *laws) -> list[int]:
    """One int per law, drawn from rng in order: a (lo, hi) pair uniformly in [lo, hi), a list one of its values."""
    return [int(rng.integers(*law)) if isinstance(law, tuple) else int(rng.choice(law)) for law in laws]


def seeded_cases(seed: int, n: int):
    """n cases from one seeded stream: (i, rng, the case's name for a failure message) each."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield i, rng, f"seed {seed} case {i}"


def seeded_requests(seed: int, total: int, modes, case) -> int:
    """Seeded random batches until `total` requests are checked (a test's SGLANG_DDTREE_GPU_*_CASES knob):
    case(rng, mode) draws a batch, checks it and returns its tree; the mode cycles every 7 requests. Returns how many
    requests exhausted the heap; a failure names the seed and the request its batch starts at."""
    rng = np.random.default_rng(seed)
    done = exhausted = 0
    while done < total:
        try:
            tree = case(rng, modes[(done // 7) % len(modes)])
        except AssertionError as e:
            raise AssertionError(f"seed {seed}, batch at request {done}: {e}") from e
        exhausted += int(((tree.flags & F.HEAP_EXHAUSTED) != 0).sum())
        done += tree.batch_size
    return exhausted


# --- the comparison ----------------------------------------------------------------------------------------------

def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a tensor (float64 weights compared exactly, -0.0 != +0.0)."""
    return t.view(torch.int64) if t.dtype == torch.float64 else t


def fields(result) -> dict:
    """A result's tensors by name: a TreeBatch's fields, or a sequence's items ('output i')."""
    return result.tensors() if hasattr(result, "tensors") else {f"output {i}": t for i, t in enumerate(result)}


def assert_identical(a, b, context: str = "") -> None:
    """Every field of a equals b's: the same names, dtype and shape, the same bits (float64 by its pattern). The error
    names the field, the first requests (rows) that differ and the context (the case)."""
    fa, fb = fields(a), fields(b)
    assert fa.keys() == fb.keys(), f"fields {list(fa)} vs {list(fb)} {context}"
    for name, ta in fa.items():
        tb = fb[name]
        assert ta.dtype == tb.dtype and ta.shape == tb.shape, f"{name}: {ta.dtype}{tuple(ta.shape)} vs {tb.dtype}{tuple(tb.shape)} {context}"
        x, y = bits(ta.cpu()), bits(tb.cpu())
        if not torch.equal(x, y):
            bad = (x != y).reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist() if x.dim() else []
            raise AssertionError(f"field {name} differs for requests {bad[:8]} {context}")


def on(device, x):
    """x with its tensors on device: a tensor, a tuple or list of values, a dict's values; other values as they are."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(on(device, v) for v in x)
    if isinstance(x, dict):
        return {k: on(device, v) for k, v in x.items()}
    return x


def cuda_matches(op, *args, oracle: str = "reference", context: str = "", **kwargs):
    """op(*args, **kwargs) with backend=oracle on the CPU tensors, and with backend="cuda" on CUDA copies of them:
    every field identical (assert_identical). Returns the CUDA result."""
    want = op(*args, backend=oracle, **kwargs)
    got = op(*on(DEVICE, args), backend="cuda", **on(DEVICE, kwargs))
    assert_identical(got, want, context)
    return got


def assert_replay_equals_eager(run, fresh, replays: int = 3) -> None:
    """run(*inputs) captured once in a CUDA graph on the inputs of one fresh() (two warm-up calls first); `replays`
    times new inputs are copied into those and the graph replayed: every output equals the eager run's on them."""
    from sglang_ddtree.bench.common import capture

    static = fresh()
    graph, out = capture(lambda: run(*static), warmup=2)
    for i in range(replays):
        new = fresh()
        for dst, src in zip(static, new):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        assert_identical(out, run(*new), f"replay {i}: graph vs eager")
