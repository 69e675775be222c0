"""The drafter's attention through DDTree's verify cascade (SGLANG_DDTREE_DRAFT_ATTENTION=ddtree).

DFlash drafts a block in one TARGET_VERIFY forward of the draft runner: every query of the block attends the
drafter's context KV (the committed prefix, from req_to_token) and every key of the block (its layers are
bidirectional: ENCODER_ONLY). That is the tree verify with a tail mask of all ones, so the same
tree_attention.TreeVerifyAttention serves it: a library (FlashInfer's paged prefill, or FA3's on fa3) over the
context, our kernel over the block, merged by LSE, the metadata written on the device (graph-safe at any length).
Why: on triton the draft backend's extend kernel reads a long context with few blocks, and its time grows with the
context (docs/benchmarks/round-cost-h200-2026-12-05-8k-profile.md).
"""
from __future__ import annotations

import torch

from . import tree_attention


def all_visible_bits(bs: int, n: int, device) -> torch.Tensor:
    """int32 [bs, n, ⌈n/32⌉]: every one of the n block keys visible to every query (bit j%32 of word j//32)."""
    words = [-1] * (n // 32) + ([(1 << n % 32) - 1] if n % 32 else [])  # -1: the int32 of 32 bits set
    row = torch.tensor(words, dtype=torch.int32, device=device)
    return row.expand(bs, n, len(words)).contiguous()


def unsupported(draft_runner, layers_why: str | None) -> str | None:
    """Why the cascade cannot take the drafter's attention (None: it can). `layers_why` is the adapter's answer
    for the drafter's layers (adapters/dflash_v2.DFlashV2Adapter.draft_layers_unsupported)."""
    if layers_why is not None:
        return layers_why
    if tree_attention.is_mla(draft_runner):
        return "the drafter is an MLA model"
    return tree_attention.unsupported(draft_runner)


class DraftBlockAttention(tree_attention.TreeVerifyAttention):
    """The draft backend's TARGET_VERIFY: the tree cascade at width `block`, its mask all ones (module docstring)."""

    def __init__(self, draft_runner, *, block: int, max_bs: int, tp: int = 1):
        super().__init__(draft_runner, n=block, max_bs=max_bs, prefix="auto", tp=tp)
        self._fill()

    def _fill(self) -> None:
        mask = self.masks[self.n]
        mask.copy_(all_visible_bits(mask.shape[0], self.n, mask.device))

    def _grow(self, bs: int) -> None:
        super()._grow(bs)
        self._fill()

    def load_mask(self, mask_bits: torch.Tensor) -> None:
        raise RuntimeError("the drafter's block mask is fixed (all visible): nothing is loaded a round")

    def describe(self) -> str:
        return (f"the drafter's attention through the cascade on {type(self.backend).__name__} (the context through "
                f"{self.lib.name}, the block of {self.n} through the tree kernel)")
