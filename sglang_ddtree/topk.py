"""Stage 1 of the tree: per-(request, depth) top-k log-probs in the canonical order.

lp = topk(x) − logsumexp(x) over the float32-upcast draft logits x, rows ordered by value descending and
ties by token id ascending (torch.topk leaves tie order unspecified; the tree's tokens depend on it).
The CPU path below is the canonical definition; the CUDA op `topk_lse` must agree with it (ids equal up
to permutation inside exact-tie groups, log-normaliser within 2 ulp).
"""
from __future__ import annotations

import numbers

import torch

from . import ops

_ROWS_PER_CHUNK = 16  # ~10 MB of float32 per chunk at V=152k: temporaries stay cache-sized (4-8x faster
                      # on a CPU than one pass over a [B·L, V] batch, measured)


def topk_logprobs_torch(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical top-k + log-normaliser with plain torch ops (any device; the CPU backend's stage 1)."""
    V = logits.shape[-1]
    rows = logits.reshape(-1, V)
    lp = torch.empty(rows.shape[0], k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(rows.shape[0], k, dtype=torch.int64, device=logits.device)
    for s in range(0, rows.shape[0], _ROWS_PER_CHUNK):
        lp[s:s + _ROWS_PER_CHUNK], ids[s:s + _ROWS_PER_CHUNK] = _topk_rows(rows[s:s + _ROWS_PER_CHUNK], k)
    return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)


def _topk_rows(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk gets the values right but not which of several equal values it keeps at the k-th
    boundary, nor their order. Rows where more than k logits reach the k-th value are re-read with a
    larger top-g that holds every tied candidate (an unambiguous set); then (value desc, id asc) comes
    from a stable sort by value over candidates pre-sorted by id.
    """
    x = rows.float()  # -0.0 and +0.0 compare equal everywhere below, so they tie and order by id
    vals, idx = torch.topk(x, k, dim=-1, sorted=True)
    ge = (x >= vals[:, -1:]).sum(-1)
    tie_rows = (ge > k).nonzero().flatten()
    if tie_rows.numel():
        xt = x[tie_rows]
        _, wide = torch.topk(xt, int(ge[tie_rows].max()), dim=-1, sorted=False)
        wide = wide.sort(dim=-1).values
        _, order = torch.sort(torch.gather(xt, -1, wide), dim=-1, descending=True, stable=True)
        idx[tie_rows] = torch.gather(wide, -1, order[:, :k])
    idx = idx.sort(dim=-1).values
    v, order = torch.sort(torch.gather(x, -1, idx), dim=-1, descending=True, stable=True)
    return v - torch.logsumexp(x, dim=-1, keepdim=True), torch.gather(idx, -1, order)


def topk_logprobs(logits: torch.Tensor, k: int, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1 on the chosen native backend ('cpu' or 'cuda'; see tree.build_tree for 'auto'). k in [1, V]: a
    k of 0 would otherwise surface as a shape mismatch deep inside the top-k."""
    V = logits.shape[-1]
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= V:
        raise ValueError(f"k must be an int in [1, {V}] (the vocabulary), got {k!r}")
    if backend == "cuda":
        lp, ids = ops.op("topk_lse")(logits.reshape(-1, V).contiguous(), k)
        return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)
    return topk_logprobs_torch(logits, k)


def shard_stage1(logits: torch.Tensor, k: int, vocab_start: int, backend: str):
    """One tensor-parallel rank's part of stage 1 over its shard of the vocabulary (logits [..., V_shard]):
    its top min(k, V_shard) (value, global id) in the canonical order and its log-sum-exp, for `merge_shards`."""
    ks = min(int(k), logits.shape[-1])
    lp, ids = topk_logprobs(logits, ks, backend)
    lse = torch.logsumexp(logits.float(), dim=-1)
    return lp + lse.unsqueeze(-1), ids + int(vocab_start), lse


def merge_shards(values: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor, k: int):
    """Stage 1 of the whole vocabulary from every rank's shard_stage1, all-gathered: values / ids [tp, ..., k_s],
    lse [tp, ...] -> (lp [..., k], ids [..., k]). The global top k lies in the union of the shards' top k, so the
    canonical order (value descending, ties by global id ascending) of that union's first k is the full row's; the
    log-normaliser is the log-sum-exp of the shards' (float32, so lp can differ from one pass over the row by an ulp
    or two: the tree is exact for these keys, and every rank merges the same gathered bits)."""
    v = values.movedim(0, -2).flatten(-2)      # [..., tp * k_s]
    i = ids.movedim(0, -2).flatten(-2)
    by_id = torch.argsort(i, dim=-1, stable=True)
    v, i = torch.gather(v, -1, by_id), torch.gather(i, -1, by_id)
    order = torch.argsort(v, dim=-1, descending=True, stable=True)[..., :k]
    total = torch.logsumexp(lse, dim=0).unsqueeze(-1)
    return torch.gather(v, -1, order) - total, torch.gather(i, -1, order)
