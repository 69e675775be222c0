"""Random (lp, ids) inputs for differential tests: real-looking draft distributions, bf16 ties, forced
exact ties and tiny vocabularies that exhaust the heap."""
from __future__ import annotations

import numpy as np
import torch

from sglang_ddtree.topk import topk_logprobs_torch


def random_topk(rng: np.random.Generator, B: int, L: int, V: int, k: int, *, mode: str = "normal"):
    """(lp f32 [B,L,k], ids i64 [B,L,k]) through the canonical stage-1 path on random logits.

    mode: 'normal' (float32 logits), 'bf16' (bf16-quantised: many exact ties), 'ties' (logits drawn from a
    handful of values: nearly everything ties), 'peaked' (one dominant token per row, as a good drafter),
    'masked' (a random tail of each row at -inf, whole rows sometimes: a grammar or banned-token mask).
    """
    scale = float(rng.choice([0.5, 1.0, 3.0, 8.0]))
    x = rng.standard_normal((B, L, V)) * scale
    if mode == "ties":
        x = rng.integers(0, 4, size=(B, L, V)).astype(np.float64)
    elif mode == "peaked":
        x[..., 0] += 10.0
        x = x[..., rng.permutation(V)]
    t = torch.tensor(x, dtype=torch.float32)
    if mode == "bf16":
        t = t.bfloat16()
    lp, ids = topk_logprobs_torch(t, k)
    if mode == "masked":  # the tail of a row at -inf (sorted order kept), whole rows sometimes
        keep = rng.integers(0, k + 1, size=(B, L, 1))
        keep[rng.random((B, L, 1)) < 0.5] = k
        lp = lp.masked_fill(torch.from_numpy(np.arange(k)[None, None, :] >= keep), float("-inf"))
    return lp, ids
