"""Random verify-attention problems on real DDTree trees (build_tree), shared by the attention tests/bench."""
from __future__ import annotations

import math

import torch

from sglang_ddtree.tree import build_tree

MLA_DIMS = (512, 64)


def make_tree(B: int, budget: int, *, depth: int = 8, vocab: int = 64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, depth, vocab, generator=g) * 3.0
    return build_tree(logits, budget, backend="reference")


def make_case(layout: str, B: int, budget: int, prefix_lens, *, page_size: int = 1, dtype=torch.float64,
              device="cpu", heads: int = 4, kv_heads: int = 2, head_dim: int = 128, seed: int = 0,
              depth: int = 8, spare_pages: int = 3):
    """Returns (args tuple for tree_verify_attention, the TreeBatch). Pages are scattered at random."""
    g = torch.Generator().manual_seed(seed + 1)
    tree = make_tree(B, budget, depth=depth, seed=seed)
    n = budget + 1
    T = B * n
    lens = torch.as_tensor(prefix_lens, dtype=torch.int32)
    pages_per = [(int(x) + page_size - 1) // page_size for x in lens]
    max_pages = max(1, max(pages_per))
    total = sum(pages_per) + spare_pages
    perm = torch.randperm(total, generator=g).to(torch.int32)
    table = torch.zeros(B, max_pages, dtype=torch.int32)
    at = 0
    for b, p in enumerate(pages_per):
        table[b, :p] = perm[at:at + p]
        at += p
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float32)
    if layout == "mla":
        dl, dr = MLA_DIMS
        q = (rnd(T, heads, dl).to(dtype), rnd(T, heads, dr).to(dtype))
        cache = rnd(total, page_size, dl + dr).to(dtype)
        tree_kv = rnd(T, dl + dr).to(dtype)
        scale = 1.0 / math.sqrt(192)
    else:
        q = rnd(T, heads, head_dim).to(dtype)
        cache = (rnd(total, page_size, kv_heads, head_dim).to(dtype), rnd(total, page_size, kv_heads, head_dim).to(dtype))
        tree_kv = (rnd(T, kv_heads, head_dim).to(dtype), rnd(T, kv_heads, head_dim).to(dtype))
        scale = 1.0 / math.sqrt(head_dim)
    mv = lambda x: tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)
    args = (mv(q), mv(cache), table.to(device), lens.to(device), mv(tree_kv), tree.mask_bits.to(device), scale)
    return args, tree


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    if not torch.isfinite(out).all():
        return math.inf
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))
