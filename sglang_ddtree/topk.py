"""Stage 1 of the tree: per-(request, depth) top-k log-probs in the canonical order.

lp = topk(x) − logsumexp(x) over the float32-upcast draft logits x, rows ordered by value descending and
ties by token id ascending (torch.topk leaves tie order unspecified; the tree's tokens depend on it).
The CPU path below is the canonical definition; the CUDA op `topk_lse` must agree with it (ids equal up
to permutation inside exact-tie groups, log-normaliser within 2 ulp).
"""
from __future__ import annotations

import torch

from . import ops

_ROWS_PER_CHUNK = 64  # bounds the int64 key temporaries to ~64·V·8 bytes


def _order_key(x: torch.Tensor) -> torch.Tensor:
    """int64 key whose descending order is (value desc, token id asc) for float32 rows x."""
    bits = (x + 0.0).view(torch.int32).to(torch.int64)  # + 0.0 folds −0.0 into +0.0
    # IEEE-754 → monotone integer: flip the magnitude bits of negatives.
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    ids = torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return ordered * (1 << 32) + ((1 << 32) - 1 - ids)


def topk_logprobs_torch(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical top-k + log-normaliser with plain torch ops (any device; the CPU backend's stage 1)."""
    V = logits.shape[-1]
    rows = logits.reshape(-1, V)
    lp = torch.empty(rows.shape[0], k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(rows.shape[0], k, dtype=torch.int64, device=logits.device)
    for s in range(0, rows.shape[0], _ROWS_PER_CHUNK):
        x = rows[s:s + _ROWS_PER_CHUNK].float()
        lse = torch.logsumexp(x, dim=-1, keepdim=True)
        _, idx = torch.topk(_order_key(x), k, dim=-1, sorted=True)
        ids[s:s + _ROWS_PER_CHUNK] = idx
        lp[s:s + _ROWS_PER_CHUNK] = torch.gather(x, -1, idx) - lse
    return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)


def topk_logprobs(logits: torch.Tensor, k: int, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1 on the chosen native backend ('cpu' or 'cuda'; see tree.build_tree for 'auto')."""
    if backend == "cuda":
        V = logits.shape[-1]
        lp, ids = ops.op("topk_lse")(logits.reshape(-1, V).contiguous(), k)
        return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)
    return topk_logprobs_torch(logits, k)
