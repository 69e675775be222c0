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


LATTICE_MODES = ["normal", "bf16", "ties", "peaked", "masked", "dflash1"]


def random_lattice(rng: np.random.Generator, B: int, L: int, K: int, *, mode: str = "normal", V: int = 5000):
    """(candidate_ids i64 [B,L,K], scores f32 [B,L,K,K], temperature f32 [B]) shaped as SGLang's
    CandidateSelector.build_lattice gives them: slot 0's rows all equal (the anchor precedes every row), distinct
    candidates per slot. mode: 'normal', 'bf16' (bf16-quantised: exact ties), 'ties' (a handful of values),
    'peaked' (one dominant candidate per row), 'masked' (random -inf scores, whole rows sometimes), 'dflash1'
    (rows independent of the predecessor: a DFlash-1 drafter's marginals)."""
    scale = float(rng.choice([0.5, 1.0, 3.0, 8.0]))
    x = rng.standard_normal((B, L, K, K)) * scale
    if mode == "ties":
        x = rng.integers(0, 4, size=(B, L, K, K)).astype(np.float64)
    elif mode == "peaked":
        x[np.arange(B)[:, None, None], np.arange(L)[None, :, None], np.arange(K)[None, None, :],
          rng.integers(0, K, size=(B, L, K))] += 10.0
    elif mode == "dflash1":
        x = np.broadcast_to(x[:, :, :1, :], x.shape).copy()
    elif mode == "masked":
        x[rng.random(x.shape) < 0.3] = -np.inf
        x[rng.random((B, L, K)) < 0.1] = -np.inf
    if L:
        x[:, 0] = x[:, 0, :1]
    scores = torch.tensor(x, dtype=torch.float32)
    if mode == "bf16":
        scores = scores.bfloat16().float()
    stride = max(V // K, 1)  # distinct ids in a slot: a shuffled candidate index times a stride, plus an offset
    cand = torch.from_numpy(np.argsort(rng.random((B, L, K)), axis=-1) * stride
                            + rng.integers(0, stride, size=(B, L, 1)))
    temperature = torch.tensor(rng.choice([0.0, 0.0, 0.4, 1.0, 1.7], size=B), dtype=torch.float32)
    return cand, scores, temperature
