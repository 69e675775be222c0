"""Tensor parallelism: every rank of a DDTree server takes the same decision each round.

What each rank holds and what crosses ranks (docs/DESIGN.md §7, Tensor parallelism, has the account and the bytes):
- the drafter's hidden states and the target's verify forward run sharded as SGLang runs them; the round's
  decisions are made on data every rank holds bit for bit:
- stage 1 (the tree's top-k log-probs): each rank scores its shard of the vocabulary through its shard of the
  lm_head, keeps its shard's top k (raw logit, global id) and the log-sum-exp of its row under each request's
  law scale (keys.py: the same on every rank); those are all-gathered and merged (topk.merge_shards), so every
  rank merges the same bits into the same tree, and the requests' filters act on the merged keys;
- the target's verify logits reach every rank whole (SGLang's logits processor gathers the vocabulary), and
  each node's token is broadcast from rank 0 before the walk (as SGLang's DFLASH broadcasts its accept), so a
  kernel's reduction order on one rank cannot split the commit;
- the auto budget's width (chosen from host timings, which differ between ranks) is rank 0's, broadcast over the
  host group;
- penalties, grammar and seeds are functions of state every rank keeps alike.
`SGLANG_DDTREE_TP_CHECK=1` all-gathers a hash of each round's tree and commit plan and stops the server at the
first round where two ranks disagree (a debugging aid: one device read a round).
"""
from __future__ import annotations

import logging

import torch

logger = logging.getLogger("sglang_ddtree")

_P = (1 << 31) - 1  # the hash's modulus (a prime): every term stays below 2^62 before the sum


def fingerprint(*tensors: torch.Tensor) -> torch.Tensor:
    """int64 [1]: a hash of the tensors' integer contents, on their device (no host read): Σ (x_i mod P)·w_i mod P
    with fixed odd weights per position, summed across tensors with their own offsets."""
    total = None
    for j, t in enumerate(tensors):
        x = t.reshape(-1).to(torch.int64).remainder(_P)
        w = (torch.arange(x.numel(), device=x.device, dtype=torch.int64) * 2654435761 + 40503 * (j + 1)) % _P | 1
        h = (x * w).remainder(_P).sum().remainder(_P)
        total = h if total is None else (total * 1000003 + h).remainder(_P)
    return total.view(1)


class TpAgreement:
    """The round's agreement across the ranks of SGLang's TP group (module docstring); `group` is SGLang's group
    coordinator (world_size, rank_in_group, broadcast, all_gather_into_tensor, cpu_group)."""

    def __init__(self, group, check: bool = False):
        self.group = group
        self.size, self.rank = int(group.world_size), int(group.rank_in_group)
        self.check_rounds = bool(check)

    def stage1(self, logits: torch.Tensor, k: int, vocab_start: int, backend: str, scale=None):
        """Stage 1 of the whole vocabulary from this rank's shard of the draft logits [..., V_shard] (module
        docstring): shard_stage1 here, all-gathered, merge_shards on every rank alike. scale: None or float32
        [...] (logits.shape[:-1]), each row's law scale (topk.topk_logprobs), which every rank holds alike."""
        from sglang_ddtree.topk import merge_shards, shard_stage1

        values, ids, lse = shard_stage1(logits, k, vocab_start, backend, scale)
        gathered = []
        for t in (values.contiguous(), ids.contiguous(), lse.contiguous()):
            out = torch.empty((self.size, *t.shape), dtype=t.dtype, device=t.device)
            self.group.all_gather_into_tensor(out.view(-1), t.view(-1))
            gathered.append(out)
        return merge_shards(*gathered, k, scale)

    def width(self, n):
        """Rank 0's verify width (None: the round waits for its own prediction; every rank does)."""
        import torch.distributed as dist

        box = torch.tensor([-1 if n is None else int(n)], dtype=torch.int64)
        dist.broadcast(box, group_src=0, group=self.group.cpu_group)  # the host group: no device sync
        value = int(box[0])
        return None if value < 0 else value

    def targets(self, tokens: torch.Tensor) -> torch.Tensor:
        """Every node's target token as rank 0 drew it."""
        tokens = tokens.contiguous()
        self.group.broadcast(tokens, src=0)
        return tokens

    def check(self, round_no: int, tree, plan) -> None:
        """SGLANG_DDTREE_TP_CHECK: the ranks' hashes of the round's tree and commit plan must agree."""
        if not self.check_rounds:
            return
        mine = fingerprint(tree.num_nodes, tree.tokens, tree.parents, plan.tokens, plan.commit_lens, plan.kv_src)
        every = torch.empty(self.size, dtype=torch.int64, device=mine.device)
        self.group.all_gather_into_tensor(every, mine)
        hashes = every.tolist()
        if len(set(hashes)) > 1:
            message = (f"DDTREE TP check (SGLANG_DDTREE_TP_CHECK=1): at decode round {round_no} the ranks' trees or "
                       f"commit plans differ (hash per rank {hashes}); the server stops rather than let the ranks "
                       f"commit different tokens")
            logger.error(message)
            raise RuntimeError(message)
