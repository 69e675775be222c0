"""DraftTreeHead: the draft side of a DDTree round — lm_head, top-k log-probs and the tree, for SGLang.

The DFlash drafter's hidden states for [bonus, MASK x L] go through the target's lm_head, the canonical
top-k + log-normaliser under each request's law (keys.py: its temperature and filters, the drafter's
calibration) and the best-first build. As a capture-tail hook of the draft runner it runs inside
the draft CUDA graph: the roots (the block's first input id) and positions (prefix + depth) come from the
graph's own static inputs, so the replayed graph leaves the finished tree in static buffers and the round
reads it with no extra op. Eagerly (`build`), the same functions run on the hidden states directly.
With a `predict` function (budget.AutoWidth.predict, the served auto budget) the graph also leaves each
request's predicted tokens at every candidate width next to the tree. The requests' laws reach the graph through
static buffers that `load_law` fills before each replay.
With a DFlash2 drafter's `selector` (adapters: SGLang's unary transform and transition scores) a greedy request's
tree is the lattice's (docs/DESIGN.md §3.10): the top K of the same logits are each slot's candidates, and a node's
key is its path's probability under the selector's transitions; a sampled request's is the marginals' (its
children drawn and verified by rejection sampling), or the lattice's at its temperature with lattice_sampled.
Nothing here reads SGLang's request tables (they may be rewritten once a graph's pre-replay read barrier
has passed).
"""
from __future__ import annotations

import torch

from sglang_ddtree.keys import DraftKeys
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import NodeLaw
from sglang_ddtree.topk import topk_logprobs
from sglang_ddtree.tree import TreeBatch


class DraftTreeHead:
    def __init__(self, *, weight, num_org: int, block_size: int, budget: int, topk: int | None, max_bs: int,
                 ops: RoundOps, tree_in_graph: bool, anchor=None, calibration=None, predict=None,
                 vocab: int | None = None, vocab_start: int = 0, tp=None, selector=None,
                 lattice_sampled: bool = False):
        self.weight, self.num_org = weight, int(num_org)
        # tensor parallelism (sglang/tp.py): this rank's lm_head holds vocabulary rows vocab_start .. + num_org of
        # `vocab`; stage 1 merges every rank's shard
        self.tp, self.vocab_start = tp, int(vocab_start)
        vocab = self.num_org if vocab is None else int(vocab)
        self.anchor = anchor  # tree.build_tree_from_topk's anchor: None (the paper's tree) or 'chain'
        self.block, self.L, self.budget = int(block_size), int(block_size) - 1, int(budget)
        # stage 1 under each request's law, with the drafter's calibration (keys.Calibration or None)
        self.keys = DraftKeys(self.L, calibration, weight.device)
        # a DFlash2 drafter's (adapters' Selector): greedy requests' trees over its lattice, and sampled ones' too
        # with lattice_sampled (else over the marginals, where drawn children and their rejection sampling apply)
        self.selector, self.lattice_sampled = selector, bool(lattice_sampled)
        self.k = min(topk or budget, vocab)
        self.ops = ops
        self.stage1 = "cuda" if ops.backend == "cuda" else "cpu"
        # the lattice head runs eagerly after the draft graph until its capture has run on a GPU
        self.tree_in_graph = tree_in_graph and ops.backend == "cuda" and selector is None
        self.max_bs = int(max_bs)
        self.predict = predict
        self.static_tree = self.static_predicted = self.static_law = self.static_keys = None
        self.keys_out = None  # the last eager build's (lp, ids): the round draws sampled children from them
        self._greedy_rows = 0  # leading static law rows known to hold the greedy law (load_law skips them)
        if self.tree_in_graph:
            dev = weight.device
            full = lambda v, dt: torch.full((self.max_bs,), v, dtype=dt, device=dev)  # noqa: E731
            self.static_law = NodeLaw(full(0.0, torch.float32), full(1, torch.int64), full(1.0, torch.float32),
                                      full(0.0, torch.float32), filtered=True)
            self._greedy_rows = self.max_bs
            lp = torch.zeros(1, self.L, self.k, dtype=torch.float32, device=dev)
            probe = ops.build(lp, torch.zeros(1, self.L, self.k, dtype=torch.int64, device=dev), self.budget,
                              torch.zeros(1, dtype=torch.int64, device=dev), torch.zeros(1, dtype=torch.int64, device=dev))
            self.static_tree = {name: torch.zeros((self.max_bs, *t.shape[1:]), dtype=t.dtype, device=dev)
                                for name, t in probe.tensors().items()}
            self.static_keys = (torch.zeros(self.max_bs, self.L, self.k, dtype=torch.float32, device=dev),
                                torch.zeros(self.max_bs, self.L, self.k, dtype=torch.int64, device=dev))
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
        return torch.matmul(hs, self.weight[: self.num_org].T).view(bs, self.L, -1)

    def build(self, hidden, bs: int, roots, prefix, law: NodeLaw | None = None) -> TreeBatch:
        """The round's tree; law: the requests' sampling.NodeLaw (None: all greedy). With a selector: the lattice's
        tree for greedy requests (and for sampled ones with lattice_sampled), the marginals' for sampled ones."""
        logits = self.logits(hidden, bs)
        if self.selector is None:
            return self._marginal_tree(logits, bs, roots, prefix, law)
        lattice = self._lattice_tree(logits, hidden, bs, roots, prefix, law)
        if law is None or self.lattice_sampled:
            self.keys_out = None  # no per-depth keys: a lattice tree's children are its top candidates
            return lattice
        return lattice.where(law.greedy(), self._marginal_tree(logits, bs, roots, prefix, law))

    def _marginal_tree(self, logits, bs: int, roots, prefix, law: NodeLaw | None) -> TreeBatch:
        lp, ids = self.keys(logits, self.k, self.stage1, law, None if self.tp is None else self._tp_stage1)
        self.keys_out = lp, ids  # a drawn tree's children are drawn from these; its shape from the shape keys
        return self.ops.build(self.keys.shape_keys(lp, law), ids, self.budget, roots, prefix, anchor=self.anchor,
                              anchored=None if self.anchor is None else self.keys.anchored(law))

    def _lattice_tree(self, logits, hidden, bs: int, roots, prefix, law: NodeLaw | None) -> TreeBatch:
        """The tree over the selector's lattice: each slot's K candidates the canonical top K of its logits (value
        descending, ids ascending on ties, as the engine's), each row's law softmax(score / T) at the request's
        temperature (greedy requests: the drafter's own, T = 1)."""
        ids = topk_logprobs(logits, self.selector.top_k, self.stage1)[1]
        unary = self.selector.unary(logits.gather(-1, ids))
        scores = self.selector.scores(ids, unary, hidden.view(bs, self.block, -1)[:, 1:, :], roots)
        temps = torch.zeros(bs, dtype=torch.float32, device=ids.device) if law is None else \
            torch.where(law.greedy(), 0.0, law.temperatures.float())
        return self.ops.build_lattice(ids, scores, self.budget, temps, roots, prefix, anchor=self.anchor,
                                      anchored=None if self.anchor is None else self.keys.anchored(law))

    def _tp_stage1(self, logits, k: int, backend: str, scale):
        """Stage 1 over this rank's vocabulary shard, merged across the ranks under the rows' law scale (tp.py)."""
        return self.tp.stage1(logits, k, self.vocab_start, backend, scale)

    def load_law(self, law: NodeLaw | None, bs: int) -> None:
        """Before a draft-graph replay: the batch's laws into the static buffers the graph reads (device copies;
        an all-greedy batch whose rows already hold the greedy law costs nothing)."""
        if self.static_law is None:
            return
        if law is None:
            if bs > self._greedy_rows:
                for buf, value in zip(self._law_tensors(), (0.0, 1, 1.0, 0.0)):
                    buf[:bs].fill_(value)
                self._greedy_rows = bs
            return
        for buf, src in zip(self._law_tensors(), (law.temperatures, law.top_ks, law.top_ps, law.min_ps)):
            buf[:bs].copy_(src.view(-1), non_blocking=True)
        self._greedy_rows = 0

    def _law_tensors(self):
        law = self.static_law
        return law.temperatures, law.top_ks, law.top_ps, law.min_ps

    def capture(self, hidden, input_ids, seq_lens, num_tokens):
        """Draft-graph capture tail (the adapter's add_draft_capture_hook: the draft runner calls it inside the
        capture with its hidden states, the block's input ids and the prefix lengths)."""
        if self.static_tree is None:
            return
        bs = int(num_tokens) // self.block
        roots = input_ids.view(bs, self.block)[:, 0]
        law = NodeLaw(*(t[:bs] for t in self._law_tensors()), filtered=True)
        tree = self.build(hidden, bs, roots, seq_lens[:bs], law)
        for name, t in tree.tensors().items():
            self.static_tree[name][:bs].copy_(t)
        for buf, t in zip(self.static_keys, self.keys_out):
            buf[:bs].copy_(t)
        if self.static_predicted is not None:
            self.static_predicted[:bs].copy_(self.predict(tree))
        self.graph_ready = True

    def from_graph(self, bs: int) -> TreeBatch:
        """The tree the last draft-graph replay left in the static buffers (views, no op)."""
        f = {name: buf[:bs] for name, buf in self.static_tree.items()}
        return TreeBatch(**f, budget=self.budget, depth_limit=self.L, topk=self.k)

    def keys_of(self, bs: int, from_graph: bool):
        """(lp, ids) [bs, L, k]: the keys of the round's tree (the graph's, when it ran)."""
        if from_graph:
            return tuple(buf[:bs] for buf in self.static_keys)
        return self.keys_out

    def predicted(self, tree: TreeBatch, from_graph: bool) -> torch.Tensor:
        """[bs, K] predicted tokens per candidate width for this round's tree (the graph's, when it ran)."""
        if from_graph and self.static_predicted is not None:
            return self.static_predicted[: tree.batch_size]
        return self.predict(tree)
