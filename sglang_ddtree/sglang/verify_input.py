"""The tree-verify inputs SGLang's attention backends read: the FULL_MASK layout, written without a sync.

FULL_MASK (what flashinfer and triton read in TARGET_VERIFY): per request, n rows of (prefix + n) columns,
the prefix all visible and the last n columns the tree's ancestor-or-self mask, concatenated over requests.
Offsets follow the exact device prefix lengths (the backends index with the same device lengths); the
buffer is sized from a host bound, so no device value is ever read on the host.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class HostBound:
    seq_lens_cpu: torch.Tensor  # per-request host upper bound of the prefix during this verify
    seq_lens_sum: int
    total: int                  # FULL_MASK cells for that bound


def host_mask_bound(seq_lens_cpu, draft_kv_lens_cpu, n: int) -> HostBound:
    """Committed host lengths lag the device by at most one round (<= block <= n tokens) under overlap;
    without them, the draft input's next-round KV lengths (the adapter's `draft_kv_lens`) bound the prefix."""
    if seq_lens_cpu is not None:
        bound = seq_lens_cpu.to(torch.int64) + n
    else:
        bound = draft_kv_lens_cpu.to(torch.int64)
    total_prefix = int(bound.sum())
    return HostBound(bound, total_prefix, n * (total_prefix + n * int(bound.numel())))


def full_tree_mask(tree_mask: torch.Tensor, prefix_lens: torch.Tensor, total: int) -> torch.Tensor:
    """bool [B, n, n] tree mask + device prefix lengths [B] -> flat FULL_MASK bool [total].

    Cells past the real layout (the bound's slack) stay True and are never read.
    """
    if tree_mask.dim() != 3 or tree_mask.shape[1] != tree_mask.shape[2]:
        raise ValueError(f"tree_mask must be [B, n, n], got {tuple(tree_mask.shape)}")
    if prefix_lens.dim() != 1 or prefix_lens.shape[0] != tree_mask.shape[0]:
        raise ValueError(f"prefix_lens must be [B] with B = {tree_mask.shape[0]}, got {tuple(prefix_lens.shape)}")
    B, n, _ = tree_mask.shape
    device = tree_mask.device
    p = prefix_lens.to(device=device, dtype=torch.int64)
    row = p + n
    start = n * (torch.cumsum(row, 0) - row)
    ar = torch.arange(n, device=device, dtype=torch.int64)
    flat = start[:, None, None] + ar[None, :, None] * row[:, None, None] + p[:, None, None] + ar[None, None, :]
    out = torch.ones(total + 1, dtype=torch.bool, device=device)
    out[flat.clamp(max=total).reshape(-1)] = tree_mask.reshape(-1).to(torch.bool)
    return out[:total]
