"""Stage 1 of the tree: per-(request, depth) top-k log-probs in the canonical order.

lp = topk(x) − logsumexp(x) over the float32-upcast draft logits x, rows ordered by value descending and
ties by token id ascending (torch.topk leaves tie order unspecified; the tree's tokens depend on it).
With a per-row scale s > 0 (a request's temperature and the drafter's calibration, keys.py), the candidates
stay x's and lp = (s ⊗ x)_top − logsumexp(s ⊗ x): reference.law_keys_reference is the definition.
The CPU path below is the canonical definition; the CUDA op `topk_lse` must agree with it (ids equal up
to permutation inside exact-tie groups, log-normaliser within 2 ulp).
"""
from __future__ import annotations

import numbers

import torch

from . import ops

_ROWS_PER_CHUNK = 16  # ~10 MB of float32 per chunk at V=152k: temporaries stay cache-sized (4-8x faster
                      # on a CPU than one pass over a [B·L, V] batch, measured)


def topk_logprobs_torch(logits: torch.Tensor, k: int,
                        scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical top-k + log-normaliser with plain torch ops (any device; the CPU backend's stage 1). scale:
    None, or float32 with one positive value per row (shape logits.shape[:-1])."""
    V = logits.shape[-1]
    rows = logits.reshape(-1, V)
    scales = None if scale is None else scale.reshape(-1, 1).float()
    lp = torch.empty(rows.shape[0], k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(rows.shape[0], k, dtype=torch.int64, device=logits.device)
    for s in range(0, rows.shape[0], _ROWS_PER_CHUNK):
        part = slice(s, s + _ROWS_PER_CHUNK)
        lp[part], ids[part] = _topk_rows(rows[part], k, None if scales is None else scales[part])
    return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)


def _topk_rows(rows: torch.Tensor, k: int, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
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
    _, order = torch.sort(torch.gather(x, -1, idx), dim=-1, descending=True, stable=True)
    idx = torch.gather(idx, -1, order)
    z = x if scale is None else x * scale
    return torch.gather(z, -1, idx) - torch.logsumexp(z, dim=-1, keepdim=True), idx


def topk_logprobs(logits: torch.Tensor, k: int, backend: str, scale: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1 on the chosen native backend ('cpu' or 'cuda'; see tree.build_tree for 'auto'). k in [1, V]: a
    k of 0 would otherwise surface as a shape mismatch deep inside the top-k. scale: None or float32 of shape
    logits.shape[:-1], each row's multiplier (> 0; not checked on the device: keys.py makes it)."""
    V = logits.shape[-1]
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= V:
        raise ValueError(f"k must be an int in [1, {V}] (the vocabulary), got {k!r}")
    if scale is not None and (not isinstance(scale, torch.Tensor) or tuple(scale.shape) != tuple(logits.shape[:-1])):
        raise ValueError(f"scale must be a tensor of shape {tuple(logits.shape[:-1])} (one per row), got "
                         f"{getattr(scale, 'shape', type(scale).__name__)}")
    if backend == "cuda":
        rows = None if scale is None else scale.reshape(-1).float().contiguous()
        lp, ids = ops.op("topk_lse")(logits.reshape(-1, V).contiguous(), k, rows)
        return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)
    return topk_logprobs_torch(logits, k, scale)


def shard_stage1(logits: torch.Tensor, k: int, vocab_start: int, backend: str, scale: torch.Tensor | None = None):
    """One tensor-parallel rank's part of stage 1 over its shard of the vocabulary (logits [..., V_shard]): its top
    min(k, V_shard) (raw logit x as float32, global id) in the canonical order, and the log-sum-exp of its scaled
    row s ⊗ x (scale as topk_logprobs's, one per row, 1 without it), for `merge_shards` with the same scale."""
    ks = min(int(k), logits.shape[-1])
    _, ids = topk_logprobs(logits, ks, backend)  # the candidates are x's whatever the scale (§3.11)
    x = logits.float()
    z = x if scale is None else x * scale.float().unsqueeze(-1)
    return torch.gather(x, -1, ids), ids + int(vocab_start), torch.logsumexp(z, dim=-1)


def merge_shards(values: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor, k: int,
                 scale: torch.Tensor | None = None):
    """Stage 1 of the whole vocabulary from every rank's shard_stage1, all-gathered: values / ids [tp, ..., k_s],
    lse [tp, ...] -> (lp [..., k], ids [..., k]); scale: the one every shard_stage1 took (None: 1). The global top k
    lies in the union of the shards' top k, so the canonical order (raw logit descending, ties by global id
    ascending) of that union's first k is the full row's, exactly; lp = s ⊗ x − log-sum-exp of the shards' (float32,
    so lp can differ from one pass over the row by an ulp or two: the tree is exact for these keys, and every rank
    merges the same gathered bits)."""
    v = values.movedim(0, -2).flatten(-2)      # [..., tp * k_s]
    i = ids.movedim(0, -2).flatten(-2)
    by_id = torch.argsort(i, dim=-1, stable=True)
    v, i = torch.gather(v, -1, by_id), torch.gather(i, -1, by_id)
    order = torch.argsort(v, dim=-1, descending=True, stable=True)[..., :k]
    top = torch.gather(v, -1, order)
    z = top if scale is None else top * scale.float().unsqueeze(-1)
    total = torch.logsumexp(lse, dim=0).unsqueeze(-1)
    return z - total, torch.gather(i, -1, order)
