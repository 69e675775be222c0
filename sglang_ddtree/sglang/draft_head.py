"""DraftTreeHead: the draft side of a DDTree round — lm_head, top-k log-probs and the tree, for SGLang.

The DFlash drafter's hidden states for [bonus, MASK x L] go through the target's lm_head, the canonical
top-k + log-normaliser and the best-first build. As a capture-tail hook of the draft runner it runs inside
the draft CUDA graph: the roots (the block's first input id) and positions (prefix + depth) come from the
graph's own static inputs, so the replayed graph leaves the finished tree in static buffers and the round
reads it with no extra op. Eagerly (`build`), the same functions run on the hidden states directly.
With a `predict` function (budget.AutoWidth.predict, the served auto budget) the graph also leaves each
request's predicted tokens at every candidate width next to the tree.
Nothing here reads SGLang's request tables (they may be rewritten once a graph's pre-replay read barrier
has passed).
"""
from __future__ import annotations

import torch

from sglang_ddtree.round import RoundOps
from sglang_ddtree.topk import topk_logprobs
from sglang_ddtree.tree import TreeBatch


class DraftTreeHead:
    def __init__(self, *, weight, num_org: int, block_size: int, budget: int, topk: int | None, max_bs: int,
                 ops: RoundOps, tree_in_graph: bool, anchor=None, depth_temperature=None, predict=None,
                 vocab: int | None = None, vocab_start: int = 0, tp=None):
        self.weight, self.num_org = weight, int(num_org)
        # tensor parallelism (sglang/tp.py): this rank's lm_head holds vocabulary rows vocab_start .. + num_org of
        # `vocab`; stage 1 merges every rank's shard
        self.tp, self.vocab_start = tp, int(vocab_start)
        vocab = self.num_org if vocab is None else int(vocab)
        self.anchor = anchor  # tree.build_tree_from_topk's anchor: None (the paper's tree) or 'chain'
        # calibration: depth d's logits times 1 / T_d before stage 1 (a static tensor, so it rides in the graph)
        self.depth_scale = None if depth_temperature is None else \
            torch.tensor([1.0 / float(t) for t in depth_temperature], dtype=weight.dtype,
                         device=weight.device)[:, None]
        self.block, self.L, self.budget = int(block_size), int(block_size) - 1, int(budget)
        self.k = min(topk or budget, vocab)
        self.ops = ops
        self.stage1 = "cuda" if ops.backend == "cuda" else "cpu"
        self.tree_in_graph = tree_in_graph and ops.backend == "cuda"
        self.max_bs = int(max_bs)
        self.predict = predict
        self.static_tree = self.static_predicted = None
        if self.tree_in_graph:
            dev = weight.device
            lp = torch.zeros(1, self.L, self.k, dtype=torch.float32, device=dev)
            probe = ops.build(lp, torch.zeros(1, self.L, self.k, dtype=torch.int64, device=dev), self.budget,
                              torch.zeros(1, dtype=torch.int64, device=dev), torch.zeros(1, dtype=torch.int64, device=dev))
            self.static_tree = {name: torch.zeros((self.max_bs, *t.shape[1:]), dtype=t.dtype, device=dev)
                                for name, t in probe.tensors().items()}
            if predict is not None:
                self.static_predicted = torch.zeros((self.max_bs, predict(probe).shape[1]), dtype=torch.float32,
                                                    device=dev)
        self.graph_ready = False

    def logits(self, hidden: torch.Tensor, bs: int) -> torch.Tensor:
        """[bs, L, V] in one 2-D GEMM that reads the lm_head once. The strided [bs, L, H] view of the depth
        rows would make matmul a batched GEMM reading the whole head once per request, an order of magnitude
        slower on a large head (docs/benchmarks/round-cost-h200-2026-12-04.md)."""
        hs = hidden.view(bs, self.block, -1)[:, 1:, :].reshape(bs * self.L, -1)  # a contiguous copy (small)
        if hs.dtype != self.weight.dtype:
            hs = hs.to(self.weight.dtype)
        logits = torch.matmul(hs, self.weight[: self.num_org].T).view(bs, self.L, -1)
        return logits if self.depth_scale is None else logits * self.depth_scale

    def build(self, hidden, bs: int, roots, prefix) -> TreeBatch:
        logits = self.logits(hidden, bs)
        if self.tp is None:
            lp, ids = topk_logprobs(logits, self.k, self.stage1)
        else:
            lp, ids = self.tp.stage1(logits, self.k, self.vocab_start, self.stage1)
        return self.ops.build(lp, ids, self.budget, roots, prefix, anchor=self.anchor)

    def capture_hook(self, runner, out, forward_batch, num_tokens):
        """Draft-graph capture tail (DFlashWorkerV2's draft runner calls it inside the capture)."""
        del runner
        if self.static_tree is None:
            return
        bs = int(num_tokens) // self.block
        roots = forward_batch.input_ids.view(bs, self.block)[:, 0]
        tree = self.build(out.hidden_states, bs, roots, forward_batch.seq_lens[:bs])
        for name, t in tree.tensors().items():
            self.static_tree[name][:bs].copy_(t)
        if self.static_predicted is not None:
            self.static_predicted[:bs].copy_(self.predict(tree))
        self.graph_ready = True

    def from_graph(self, bs: int) -> TreeBatch:
        """The tree the last draft-graph replay left in the static buffers (views, no op)."""
        f = {name: buf[:bs] for name, buf in self.static_tree.items()}
        return TreeBatch(**f, budget=self.budget, depth_limit=self.L, topk=self.k)

    def predicted(self, tree: TreeBatch, from_graph: bool) -> torch.Tensor:
        """[bs, K] predicted tokens per candidate width for this round's tree (the graph's, when it ran)."""
        if from_graph and self.static_predicted is not None:
            return self.static_predicted[: tree.batch_size]
        return self.predict(tree)
