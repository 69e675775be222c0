"""Accepting a verified tree: the bounded greedy walk over the per-node target tokens.

The tokens come from sampling.py (argmax, or at T > 0 an independent sample of the target's law at every node:
the walk's emitted tokens are then exact ancestral samples of the target, docs/DESIGN.md §3.5, with no
[B, n, V] probability tensors and no rejection sampling).
"""
from __future__ import annotations

import dataclasses

import torch

from . import _checks as C
from . import ops
from .tree import TreeBatch


MAX_DEPTH_LIMIT = (1 << 20) - 1  # the CUDA walk's bound (kernels/torch_cuda/accept.cpp); accept_index is [B, L+1]


@dataclasses.dataclass
class AcceptResult:
    accept_index: torch.Tensor     # int32 [B, L+1] accepted node indices (root first), −1 pad
    accept_len: torch.Tensor       # int32 [B] accepted nodes incl. root = tokens committed incl. bonus
    bonus: torch.Tensor            # int64 [B] the target's token after the last accepted node
    accepted_tokens: torch.Tensor  # int64 [B, L+1] committed tokens: accepted nodes' tokens, then bonus; −1 pad
    flags: torch.Tensor            # int32 [B] flags.MALFORMED_TREE (the walk stopped on bad links),
                                   # flags.NONFINITE_TARGET (it reached a node sampled −1; bonus is −1)


def _committed_tokens(tree_tokens, accept_index, accept_len, bonus) -> torch.Tensor:
    """Tokens of accepted nodes 1..len−1 followed by the bonus, −1 padded (pure tensor ops, no sync)."""
    width = accept_index.shape[1]
    nxt = torch.cat([accept_index[:, 1:], accept_index.new_full((accept_index.shape[0], 1), -1)], dim=1)
    toks = torch.gather(tree_tokens, 1, nxt.clamp(min=0).to(torch.int64))
    col = torch.arange(width, device=tree_tokens.device).unsqueeze(0)
    last = (accept_len.to(torch.int64) - 1).unsqueeze(1)
    toks = torch.where(col == last, bonus.unsqueeze(1), toks)
    return torch.where(col <= last, toks, torch.full_like(toks, -1))


def _walk_reference(tree: TreeBatch, target: torch.Tensor):
    from .reference import walk_reference

    B, L = tree.batch_size, tree.depth_limit
    idx = torch.full((B, L + 1), -1, dtype=torch.int32)
    length = torch.zeros(B, dtype=torch.int32)
    bonus = torch.zeros(B, dtype=torch.int64)
    flg = torch.zeros(B, dtype=torch.int32)
    host = {k: v.cpu().numpy() for k, v in (("tokens", tree.tokens), ("nt", tree.retrive_next_token),
                                              ("ns", tree.retrive_next_sibling), ("nn", tree.num_nodes),
                                              ("t", target))}
    for b in range(B):
        acc, bon, f = walk_reference(host["tokens"][b], host["nt"][b], host["ns"][b], int(host["nn"][b]),
                                     host["t"][b], L)
        idx[b, :len(acc)] = torch.tensor(acc, dtype=torch.int32)
        length[b], bonus[b], flg[b] = len(acc), bon, f
    dev = tree.tokens.device
    return idx.to(dev), length.to(dev), bonus.to(dev), flg.to(dev)


def accept_tree(tree: TreeBatch, target_tokens: torch.Tensor, *, vocab_size: int | None = None,
                backend: str = "auto") -> AcceptResult:
    """Greedy walk of `tree` with the target's per-node tokens (int64 [B, n]); bounded by n link reads
    per request whatever the links say (malformed trees are flagged, never followed). A target of −1
    (sampling.sample_node_tokens: no token) ends the walk there and sets flags.NONFINITE_TARGET.
    vocab_size: the target's vocabulary, when known. A target below −1, or at or past vocab_size, is refused
    (for CPU tensors; CUDA tensors are not read on the host): the walk would commit it as the bonus token."""
    if not isinstance(tree, TreeBatch):
        raise TypeError(f"tree must be a TreeBatch, got {type(tree).__name__}")
    device = tree.tokens.device
    C.tensor("target_tokens", target_tokens, ndim=2, dtypes=C.INT_DTYPES, device=device)
    C.shape("target_tokens", target_tokens, (tree.batch_size, tree.n))
    for name in ("tokens", "retrive_next_token", "retrive_next_sibling"):
        C.tensor(f"tree.{name}", getattr(tree, name), ndim=2, dtypes=(torch.int64,), device=device)
        C.shape(f"tree.{name}", getattr(tree, name), (tree.batch_size, tree.n))
    C.tensor("tree.num_nodes", tree.num_nodes, ndim=1, dtypes=(torch.int32,), device=device)
    C.shape("tree.num_nodes", tree.num_nodes, (tree.batch_size,))
    C.integer("tree.depth_limit", tree.depth_limit, minimum=0, maximum=MAX_DEPTH_LIMIT)
    if vocab_size is not None:
        C.integer("vocab_size", vocab_size, minimum=1)
    C.in_range("target_tokens", target_tokens, -1, vocab_size)
    backend = ops.resolve_backend(backend, device)
    target = target_tokens.to(torch.int64).contiguous()
    if backend == "reference":
        idx, length, bonus, flg = _walk_reference(tree, target)
    else:
        idx, length, bonus, flg = ops.op("accept_tree")(
            tree.tokens.contiguous(), tree.retrive_next_token.contiguous(),
            tree.retrive_next_sibling.contiguous(), tree.num_nodes.contiguous(), target, tree.depth_limit)
    return AcceptResult(idx, length, bonus, _committed_tokens(tree.tokens, idx, length, bonus), flg)
