"""One decode round's accept and commit, shared by the standalone engine and the SGLang worker.

From plain tensors — the tree, the target's token at every node, the prefix lengths and the KV slot of every
tree node — `RoundOps.commit` returns the whole commit plan of the round in one op (`commit_tree`: the
bounded walk plus, per committed column k, the accepted node's KV move slots[acc[k]] -> slots[k], the
committed tokens, the rows of the verify's hidden states that become drafter context, positions and new
lengths; kernels/tree_walk.h holds the rule, once, for the CPU and CUDA kernels). Callers only apply it:
move KV, gather hidden rows, hand tokens back. `RoundOps` also chooses the ops backend once per decoder
and owns the one CPU fallback (device tensors round-trip through the CPU ops, with a host sync, when the
CUDA library cannot load).
"""
from __future__ import annotations

import dataclasses
import logging

import torch

from . import flags as F
from . import ops
from .accept import sample_rows_torch
from .tree import TreeBatch, build_tree_from_topk

logger = logging.getLogger("sglang_ddtree")


@dataclasses.dataclass
class CommitPlan:
    """W = depth_limit + 1 columns per request (the drafter's block size in SGLang)."""

    accept_index: torch.Tensor  # int32 [B, W] accepted nodes, root first, -1 pad
    commit_lens: torch.Tensor   # int32 [B] tokens committed incl. the bonus (= accepted nodes incl. the root)
    bonus: torch.Tensor         # int64 [B] the target's token after the last accepted node (the next root)
    flags: torch.Tensor         # int32 [B] flags.MALFORMED_TREE (the walk stopped on bad links),
                                # flags.NONFINITE_TARGET (a target token was -1: bonus -1, never emit it)
    tokens: torch.Tensor        # int64 [B, W] committed tokens (accepted nodes 1.., then the bonus), then 0
    kv_src: torch.Tensor        # int64 [B, W] KV slots to move from (the accepted nodes'; pads: own slot)
    kv_dst: torch.Tensor        # int64 [B, W] committed KV slots, slots[:, k] (pads: own slot)
    hidden_index: torch.Tensor  # int64 [B, W] rows b*n + node of the verify's [B*n, ...] hidden states
    positions: torch.Tensor     # int64 [B, W] prefix + k
    new_seq_lens: torch.Tensor  # [B] prefix + commit_lens, in prefix_lens' dtype

    @classmethod
    def from_outputs(cls, outs) -> "CommitPlan":
        return cls(*outs)


def _ops_backend(requested: str, device: torch.device) -> str:
    if requested not in ops.NATIVE_BACKENDS:
        raise ValueError(f"ops backend must be auto, cuda or cpu, got {requested!r}")
    if device.type != "cuda":
        if requested == "cuda":
            raise ValueError(f"ops backend 'cuda' needs a CUDA device, got {device}")
        ops.ensure_backend("cpu")
        return "cpu"
    if requested in ("auto", "cuda") and ops.cuda_available():
        return "cuda"
    if requested == "cuda":
        ops.ensure_backend("cuda")  # raises with the reason
    logger.error("sglang-ddtree: the CUDA tree ops are unavailable; using the CPU ops with a host round trip per "
                 "decode round (slow; request the 'cuda' ops backend to make this fatal)")
    ops.ensure_backend("cpu")
    return "cpu"


class RoundOps:
    """The project's ops for one decoder on one device, with the backend chosen once.

    backend 'cuda' runs everything on the device with no host sync; 'cpu' on a CUDA device is the fallback
    (inputs copied to the host and results back — correct, slow, one sync per call).
    """

    def __init__(self, device, requested: str = "auto"):
        self.device = torch.device(device)
        self.backend = _ops_backend(requested, self.device)
        self.fallback = self.backend == "cpu" and self.device.type == "cuda"

    def _host(self, *tensors):
        return [t.cpu() for t in tensors] if self.fallback else list(tensors)

    def _back(self, tensors):
        return [t.to(self.device, non_blocking=True) for t in tensors] if self.fallback else list(tensors)

    def build(self, lp, ids, budget: int, roots, prefix_lens, anchor=None) -> TreeBatch:
        """Best-first tree from top-k log-probs (tree.build_tree_from_topk) on this decoder's backend."""
        lp, ids, roots, lens = self._host(lp, ids, roots, prefix_lens.to(torch.int64))
        tree = build_tree_from_topk(lp, ids, budget, root_tokens=roots, seq_lens=lens, backend=self.backend,
                                    anchor=anchor)
        return tree.to(self.device, non_blocking=True) if self.fallback else tree

    def greedy_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-node argmax (first index on ties, NaN wins, like torch.argmax) of logits [..., V]."""
        return torch.argmax(logits, dim=-1)

    def sample_tokens(self, logits: torch.Tensor, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """Per-node Gumbel-max draws at temperature 1 from logits [B, n, V] (already divided by each request's
        temperature); seed / step int64 [B] (accept.sample_node_tokens documents the generator)."""
        B, n, V = logits.shape
        dev = logits.device
        seeds = seed.to(device=dev, dtype=torch.int64).repeat_interleave(n)
        steps = step.to(device=dev, dtype=torch.int64).repeat_interleave(n)
        nodes = torch.arange(n, device=dev, dtype=torch.int64).repeat(B)
        rows = logits.reshape(B * n, V)
        if self.backend == "cuda":
            out = ops.op("sample_rows")(rows.contiguous(), 1.0, seeds, steps, nodes)
        else:  # the torch sampler runs on any device: no host round trip needed
            out = sample_rows_torch(rows, 1.0, seeds, steps, nodes)
        return out.view(B, n)

    def commit(self, tree: TreeBatch, target_tokens: torch.Tensor, prefix_lens: torch.Tensor,
               slots: torch.Tensor) -> CommitPlan:
        """The round's commit plan (module docstring). target_tokens int [B, n]; prefix_lens int32/int64 [B];
        slots int64 [B, n]: the KV slot holding tree node i of request b during the verify."""
        args = self._host(tree.tokens, tree.retrive_next_token, tree.retrive_next_sibling, tree.num_nodes,
                          target_tokens.to(torch.int64), prefix_lens, slots.to(torch.int64))
        outs = self._back(ops.op("commit_tree")(*[a.contiguous() for a in args], tree.depth_limit))
        plan = CommitPlan.from_outputs(outs)
        plan.flags = plan.flags | torch.where(plan.bonus < 0, F.NONFINITE_TARGET, 0).to(plan.flags.dtype)
        return plan
