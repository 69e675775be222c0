"""One DDTree decode round, for both of its hosts: the SGLang worker (sglang/decode_round.py) and the
standalone engine (engine/engine.py).

  width   the round's verify width n: the host's fixed one, or the auto budget's choice (budget.AutoWidth)
  draft   the drafter's block [root, MASK...] -> top-k -> the widest tree          host.draft
          (auto: its prediction is published for a later round's choice, the tree cut to n nodes)
  draw    a sampled request's children drawn from its keys' law (drawn trees: rejection.draw_children)
  verify  one target forward over the n tree nodes at the round's KV slots          host.verify
  sample  every node's target token under the request's law (sampling.node_tokens; a tree drawn from a known
          law, recursive rejection sampling: rejection.py)
  accept  RoundOps.commit: the bounded walk and the round's commit plan, one op
  commit  the accepted nodes' KV to the committed slots, their hidden states to the drafter
                                                                      host.move_kv, host.append_draft_context
`Round.run(host)` is the whole round; `RoundHost` lists what a host supplies. What differs between hosts (how
a forward runs, which attention the verify reads, what a result is) stays behind those verbs, so a change to
the round is made here once and the engine, the project's end-to-end proof, runs exactly what the server runs.

`RoundOps.commit` returns the whole commit plan of the round in one op (`commit_tree`: the bounded walk plus,
per committed column k, the accepted node's KV move slots[acc[k]] -> slots[k], the committed tokens, the rows
of the verify's hidden states that become drafter context, positions and new lengths; kernels/tree_walk.h
holds the rule, once, for the CPU and CUDA kernels). `RoundOps` also chooses the ops backend once per decoder
and owns the one CPU fallback (device tensors round-trip through the CPU ops, with a host sync, when the CUDA
library cannot load).
"""
from __future__ import annotations

import dataclasses
import logging

import torch

from . import ops
from .budget import truncate
from .rejection import draw_children, rejection_targets
from .sampling import node_tokens, sample_rows_torch
from .sizes import budget_of, check_budget
from .tree import TreeBatch, build_tree_from_lattice, build_tree_from_topk

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

    def build(self, lp, ids, budget: int, roots, prefix_lens, anchor=None, anchored=None) -> TreeBatch:
        """Best-first tree from top-k log-probs (tree.build_tree_from_topk) on this decoder's backend; anchored:
        bool [B], the requests the anchor applies to (None: all)."""
        lp, ids, roots, lens = self._host(lp, ids, roots, prefix_lens.to(torch.int64))
        if anchored is not None:
            anchored = self._host(anchored)[0]
        tree = build_tree_from_topk(lp, ids, budget, root_tokens=roots, seq_lens=lens, backend=self.backend,
                                    anchor=anchor, anchored=anchored)
        return tree.to(self.device, non_blocking=True) if self.fallback else tree

    def build_lattice(self, candidate_ids, scores, budget: int, temperatures, roots, prefix_lens, anchor=None,
                      anchored=None) -> TreeBatch:
        """Best-first tree over a DFlash2 selector's lattice (tree.build_tree_from_lattice: candidate_ids [B, L, K],
        scores [B, L, K, K], temperatures float32 [B], 0 for greedy rows) on this decoder's backend."""
        ids, scores, temps, roots, lens = self._host(candidate_ids, scores, temperatures, roots,
                                                     prefix_lens.to(torch.int64))
        if anchored is not None:
            anchored = self._host(anchored)[0]
        tree = build_tree_from_lattice(ids, scores, budget, temperature=temps, root_tokens=roots, seq_lens=lens,
                                       backend=self.backend, anchor=anchor, anchored=anchored)
        return tree.to(self.device, non_blocking=True) if self.fallback else tree

    def truncate(self, tree: TreeBatch, budget: int) -> TreeBatch:
        """The tree of a smaller budget (budget.truncate, its definition) in one op on this decoder's backend:
        the auto budget verifies fewer nodes than the drafter's tree nearly every round, and the definition's
        two dozen tensor ops would each be a launch."""
        if check_budget(budget, maximum=tree.budget) == tree.budget or self.fallback:  # the fallback: torch ops on the device, no round trip
            return truncate(tree, budget)
        t = tree
        outs = ops.op("truncate_tree")(t.num_nodes, t.tokens, t.parents, t.depths, t.ranks, t.logw, t.positions,
                                       t.retrive_next_token, t.retrive_next_sibling, t.tree_mask, t.mask_bits,
                                       t.flags, budget)
        return TreeBatch(*outs, budget=budget, depth_limit=t.depth_limit, topk=min(t.topk, max(budget, 1)))

    def greedy_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-node argmax (first index on ties, NaN wins, like torch.argmax) of logits [..., V]."""
        return torch.argmax(logits, dim=-1)

    def sample_tokens(self, logits: torch.Tensor, seed: torch.Tensor, step: torch.Tensor,
                      stream: int = 0, temperatures: torch.Tensor | None = None,
                      boundary: torch.Tensor | None = None) -> torch.Tensor:
        """Per-node Gumbel-max draws from softmax(logits / T) for logits [B, n, V]: T = temperatures float32 [B]
        (each request's, divided inside the sampler), or 1 (logits already scaled); seed / step int64 [B]; node
        i draws from Philox stream `stream` + i (sampling.sample_node_tokens documents the generator); boundary
        int64 [B, n] (sampling.law_rows'): each node draws among the tokens its law keeps."""
        B, n, V = logits.shape
        dev = logits.device
        seeds = seed.to(device=dev, dtype=torch.int64).repeat_interleave(n)
        steps = step.to(device=dev, dtype=torch.int64).repeat_interleave(n)
        nodes = (int(stream) + torch.arange(n, device=dev, dtype=torch.int64)).repeat(B)
        temps = None if temperatures is None else temperatures.to(device=dev, dtype=torch.float32).repeat_interleave(n)
        bounds = None if boundary is None else boundary.reshape(B * n)
        rows = logits.reshape(B * n, V)
        if not self.fallback and rows.dtype != torch.float64:  # the ops read 16/32-bit logits, on either backend
            out = ops.op("sample_rows")(rows.contiguous(), 1.0, seeds, steps, nodes, temps, bounds)
        else:  # the torch definition runs on any device: no host round trip needed
            rows = rows if temps is None else rows.float()  # the ops' float32 division
            out = sample_rows_torch(rows, 1.0 if temps is None else temps, seeds, steps, nodes, bounds)
        return out.view(B, n)

    def commit(self, tree: TreeBatch, target_tokens: torch.Tensor, prefix_lens: torch.Tensor,
               slots: torch.Tensor) -> CommitPlan:
        """The round's commit plan (module docstring). target_tokens int [B, n]; prefix_lens int32/int64 [B];
        slots int64 [B, n]: the KV slot holding tree node i of request b during the verify."""
        args = self._host(tree.tokens, tree.retrive_next_token, tree.retrive_next_sibling, tree.num_nodes,
                          target_tokens.to(torch.int64), prefix_lens, slots.to(torch.int64))
        outs = self._back(ops.op("commit_tree")(*[a.contiguous() for a in args], tree.depth_limit))
        return CommitPlan.from_outputs(outs)


class RoundHost:
    """What a decoder supplies to a round, for one batch; `Round.run` calls the verbs in the order below.
    SGLang's worker makes one host a decode call (sglang/decode_round.py), the engine one a batch of requests
    (engine/engine.py)."""

    # the engine stops a request whose target logits have no token (NaN / all -inf): such a node's token
    # is -1 (flags.NONFINITE_TARGET); the server keeps the argmax, as its plain decode does
    stops_on_nonfinite = False

    def batch_size(self) -> int:
        raise NotImplementedError

    def context(self) -> float:
        """The batch's mean prefix length as the host knows it without a device read (the auto budget's)."""
        raise NotImplementedError

    def prefix(self) -> torch.Tensor:
        """[bs] the committed prefix lengths on the device."""
        raise NotImplementedError

    def sampled(self) -> bool:
        """Whether a request of the batch samples, as the host knows it without a device read (the auto budget
        prices a sampled round's tail)."""
        return False

    def agree_width(self, n):
        """The round's verify width as every rank of the host takes it (a tensor-parallel server: rank 0's; the
        choice rests on host timings, which differ between ranks); n itself on one rank."""
        return n

    def agree_targets(self, targets: torch.Tensor) -> torch.Tensor:
        """Every node's target token as every rank of the host takes it (a tensor-parallel server: rank 0's)."""
        return targets

    def slots(self, n: int) -> torch.Tensor:
        """int64 [bs, n]: the KV slot of tree node i of request b during the verify (prefix + i in its row)."""
        raise NotImplementedError

    def draft(self, slots: torch.Tensor):
        """The drafter's forward and the round's widest tree -> (TreeBatch, [bs, K] predicted tokens per auto
        width or None: the round computes them). The host builds the tree because SGLang's draft CUDA graph
        builds it inside the graph."""
        raise NotImplementedError

    def verify(self, tree: TreeBatch, slots: torch.Tensor, n: int) -> torch.Tensor:
        """The target's forward over the tree's n nodes per request -> its logits [bs, n, V], viewed over what
        the host keeps (the hidden states for append_draft_context)."""
        raise NotImplementedError

    def adjust_logits(self, logits: torch.Tensor, tree: TreeBatch) -> None:
        """Every node's logits as the host adjusts the next token's (in place): penalties, grammar, bias."""

    def node_law(self, round_no: int):
        """(sampling.NodeLaw or None for all greedy, seed int64 [bs], step int64 [bs]) of the round's draw."""
        raise NotImplementedError

    def draft_law(self):
        """None: the tree's nodes are verified by independent draws (docs/DESIGN.md §3.5), or drawn by the round
        (draft_keys). Or (candidate ids [bs, L, K], q [bs, L, K]) where the round's tree is one path drafted from q
        (a DFlash2 selector's walk): it is then verified by rejection sampling, as SGLang's DFLASH verifies it
        (rejection.py)."""
        return None

    def draft_keys(self):
        """(lp float32 [bs, L, k], ids [bs, L, k]): the keys the round's tree was built from, for a round that draws
        its sampled requests' children from them (rejection.draw_children); None where it has none (the tree was
        not built from per-depth keys)."""
        return None

    def committed(self, plan: CommitPlan, targets: torch.Tensor) -> None:
        """The commit plan exists: what the host reports before the KV moves (lengths, counts, log-probs)."""

    def move_kv(self, plan: CommitPlan) -> None:
        """The accepted nodes' KV, every layer: plan.kv_src -> plan.kv_dst."""
        raise NotImplementedError

    def append_draft_context(self, plan: CommitPlan) -> None:
        """The accepted nodes' target hidden states (rows plan.hidden_index of the verify's) -> the drafter's
        KV at plan.kv_dst, positions plan.positions."""
        raise NotImplementedError

    def result(self, plan: CommitPlan, n: int):
        """What the round returns to the host's caller."""
        raise NotImplementedError

    def mark(self, stage: str) -> None:
        """The round enters `stage` (draft, verify, sample, accept, commit; a host may time them)."""


class Round:
    """A decoder's rounds: its ops, its widest verify width, for budget 'auto' the width chooser (budget.AutoWidth),
    and how a sampled request's tree gets its tokens (drawn: docs/DESIGN.md §3.12). `count` numbers the rounds (the
    seeds' step where requests bring no stream)."""

    def __init__(self, ops: RoundOps, widest: int, auto=None, log_every: int = 200, drawn: bool = False):
        self.ops, self.widest, self.auto = ops, int(widest), auto
        self.drawn = bool(drawn)  # sampled requests' children drawn from their keys (rejection.py), else the top k
        self.count = 0
        self.log_every = log_every

    def width(self, bs: int, context: float, sampled: bool = False) -> int | None:
        """This round's verify width; None where the chooser waits for the round's own prediction."""
        if self.auto is None:
            return self.widest
        width = self.auto.choose(bs, context, sampled)
        if width is not None and self.auto.round % self.log_every == 0:
            logger.info("DDTREE auto budget after %d rounds: {bucket: {width: rounds, cost ms}} %s",
                        self.auto.round, self.auto.summary())
        return width

    def run(self, host: RoundHost):
        """One decode round of the host's batch (the module docstring lists its steps) -> host.result."""
        bs = host.batch_size()
        context = host.context() if self.auto is not None else 1.0
        sampled = host.sampled() if self.auto is not None else False
        n = host.agree_width(self.width(bs, context, sampled))
        self.count += 1
        prefix = host.prefix()
        slots = host.slots(self.widest if n is None else n)
        host.mark("draft")
        tree, predicted = host.draft(slots)
        if self.auto is not None:
            self.auto.publish(self.auto.predict(tree) if predicted is None else predicted)
            if n is None:  # the first round reads its own prediction (one host sync, once)
                self.auto.wait()
                n = host.agree_width(self.width(bs, context, sampled))
                slots = slots[:, :n]
            if n < self.widest:
                tree = self.ops.truncate(tree, budget_of(n))
        law, seed, step = host.node_law(self.count)
        drafted_from = host.draft_law()
        if drafted_from is None and self.drawn and law is not None:
            keys = host.draft_keys()
            if keys is not None:
                tree, drafted_from = draw_children(self.ops, tree, *keys, law, seed, step)
        host.mark("verify")
        logits = host.verify(tree, slots, n)
        host.mark("sample")
        host.adjust_logits(logits, tree)
        if drafted_from is None:
            targets = node_tokens(self.ops, logits, law, seed, step, no_token=host.stops_on_nonfinite)
        else:
            targets = rejection_targets(self.ops, logits, law, tree, drafted_from, seed, step,
                                        no_token=host.stops_on_nonfinite)
        targets = host.agree_targets(targets)
        host.mark("accept")
        plan = self.ops.commit(tree, targets, prefix, slots)
        host.mark("commit")
        host.committed(plan, targets)
        host.move_kv(plan)
        host.append_draft_context(plan)
        return host.result(plan, n)
