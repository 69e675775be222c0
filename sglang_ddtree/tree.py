"""TreeBatch — the contract between build, verify, accept and SGLang — and the public build functions.

Every field is a device tensor with a fixed n = budget + 1 slots per request, so one decode round can be
captured in a CUDA graph; nothing here is read on the host.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from . import _checks as C
from . import ops
from .lattice import key_temperatures, lattice_logprobs
from .sizes import check_budget, verify_width
from .topk import topk_logprobs


@dataclasses.dataclass
class TreeBatch:
    """docs/DESIGN.md §4. Pads: tokens 0, parents −1, depths 0, ranks −1, logw −inf, links −1, mask = self."""

    num_nodes: torch.Tensor             # int32 [B]   real nodes incl. root
    tokens: torch.Tensor                # int64 [B,n] node 0 = root token, then pop order
    parents: torch.Tensor               # int32 [B,n]
    depths: torch.Tensor                # int32 [B,n]
    ranks: torch.Tensor                 # int32 [B,n] rank of the token in its depth's top-k
    logw: torch.Tensor                  # float64 [B,n] path log-weight
    positions: torch.Tensor             # int64 [B,n] seq_len + depth
    retrive_index: torch.Tensor         # int64 [B,n] b·n + i
    retrive_next_token: torch.Tensor    # int64 [B,n] first child or −1
    retrive_next_sibling: torch.Tensor  # int64 [B,n] next sibling or −1
    tree_mask: torch.Tensor             # bool  [B,n,n] ancestor-or-self
    mask_bits: torch.Tensor             # int32 [B,n,⌈n/32⌉] packed tree_mask (bit j%32 of word j//32)
    flags: torch.Tensor                 # int32 [B]   flags.py bits
    budget: int
    depth_limit: int                    # L: deepest node depth allowed
    topk: int                           # k: candidates per depth

    @property
    def n(self) -> int:
        return verify_width(self.budget)

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def to(self, device, non_blocking: bool = False) -> "TreeBatch":
        """The same tree with every tensor on `device` (the CPU-ops fallback moves trees across)."""
        return dataclasses.replace(self, **{k: v.to(device, non_blocking=non_blocking)
                                            for k, v in self.tensors().items()})

    def tensors(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}

    def where(self, rows: torch.Tensor, other: "TreeBatch") -> "TreeBatch":
        """Row b of this tree where rows[b] (bool [B]), else other's row b: two trees of one budget and depth limit
        for one batch (a DFlash2 drafter's lattice tree for greedy requests, its marginals' for sampled ones)."""
        if (self.budget, self.depth_limit) != (other.budget, other.depth_limit):
            raise ValueError(f"trees of budget / depth limit {self.budget} / {self.depth_limit} and "
                             f"{other.budget} / {other.depth_limit} cannot share a batch")
        pick = {k: torch.where(rows.view(-1, *[1] * (v.dim() - 1)), v, getattr(other, k))
                for k, v in self.tensors().items()}
        return dataclasses.replace(self, **pick, topk=max(self.topk, other.topk))


assert tuple(f.name for f in dataclasses.fields(TreeBatch))[:len(ops._TREE_OUT)] == ops._TREE_OUT


def _tree_from_outputs(outs, budget: int, depth_limit: int, topk: int) -> TreeBatch:
    return TreeBatch(*outs, budget, depth_limit, topk)  # the op's outputs are in field order (ops._TREE_OUT)


# the tree's anchor, by the name a user types: 'chain' (the drafter's greedy chain always in the tree) or 'none'
# (None, the paper's tree)
ANCHORS = {"chain": "chain", "none": None}


def chain_pops(anchor, depth_limit: int) -> int:
    """The builder's forced greedy-chain pops for `anchor`: None -> 0 (the paper's tree), 'chain' -> L."""
    if anchor not in ANCHORS.values():
        raise ValueError(f"anchor must be one of {tuple(ANCHORS.values())}, got {anchor!r}")
    return depth_limit if anchor == "chain" else 0


def _build_reference(build, inputs, budget, root_tokens, seq_lens, forced: int = 0, anchored=None) -> tuple:
    """Loop a numpy oracle (`build`: reference.build_tree_reference or build_lattice_tree_reference) over the
    requests of `inputs` (tensors, batch first), `forced` chain pops in the requests `anchored` (bool [B]) marks,
    every request without it (tests and tools; never a hot path)."""
    B, n = inputs[0].shape[0], verify_width(budget)
    arrays = [x.detach().cpu().numpy() for x in inputs]
    roots, lens = root_tokens.cpu().tolist(), seq_lens.cpu().tolist()
    rows = [True] * B if anchored is None else anchored.cpu().tolist()
    per = [build(*(a[b] for a in arrays), budget, root_token=roots[b], seq_len=lens[b], request_index=b,
                 chain_pops=forced if rows[b] else 0) for b in range(B)]
    words = ops.mask_words(n)
    stack = lambda key, dt: torch.from_numpy(np.stack([p[key] for p in per]) if per else np.zeros((0, n), dt))
    mask = torch.from_numpy(np.stack([p["tree_mask"] for p in per]) if per else np.zeros((0, n, n), bool))
    return (torch.tensor([p["num_nodes"] for p in per], dtype=torch.int32),
            stack("tokens", np.int64), stack("parents", np.int32), stack("depths", np.int32),
            stack("ranks", np.int32), stack("logw", np.float64), stack("positions", np.int64),
            stack("retrive_index", np.int64), stack("retrive_next_token", np.int64),
            stack("retrive_next_sibling", np.int64), mask, pack_mask(mask, words),
            torch.tensor([p["flags"] for p in per], dtype=torch.int32))


def pack_mask(mask: torch.Tensor, words: int) -> torch.Tensor:
    """bool [..., n, n] → int32 [..., n, words], bit j%32 of word j//32 = mask[..., j]."""
    n = mask.shape[-1]
    padded = torch.zeros(*mask.shape[:-1], words * 32, dtype=torch.int64, device=mask.device)
    padded[..., :n] = mask.to(torch.int64)
    weights = (torch.ones(32, dtype=torch.int64, device=mask.device) << torch.arange(32, device=mask.device))
    packed = (padded.reshape(*mask.shape[:-1], words, 32) * weights).sum(-1)
    return torch.where(packed >= (1 << 31), packed - (1 << 32), packed).to(torch.int32)


def _request_vectors(root_tokens, seq_lens, batch: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """root_tokens and seq_lens as int64 [batch], checked (a negative value is refused for ints and CPU tensors)."""
    roots = C.per_request("root_tokens", root_tokens, batch, device)
    lens = C.per_request("seq_lens", seq_lens, batch, device)
    if root_tokens is not None:
        C.in_range("root_tokens", root_tokens, 0)
    if seq_lens is not None:
        C.in_range("seq_lens", seq_lens, 0)
    return roots, lens


def _check_anchored(anchored, batch: int, device) -> None:
    """anchored: None or bool [batch] on `device` (the requests the anchor applies to)."""
    if anchored is not None:
        C.tensor("anchored", anchored, ndim=1, dtypes=(torch.bool,), device=device)
        C.shape("anchored", anchored, (batch,))


def build_tree_from_topk(top_logprobs: torch.Tensor, top_ids: torch.Tensor, budget: int, *,
                         root_tokens=None, seq_lens=None, backend: str = "auto", anchor=None,
                         anchored=None) -> TreeBatch:
    """Best-first DDTree build (docs/DESIGN.md §3) from per-depth top-k log-probs, for a batch of requests.

    top_logprobs: float32 [B, L, k], rows sorted descending (ties by id); top_ids: int64 [B, L, k].
    root_tokens / seq_lens: None, an int, or int [B] (root token at node 0; positions = seq_len + depth); a
    negative token, top id or seq_len is refused (for CPU tensors and ints; CUDA tensors are not read on the host).
    budget 0 is the root alone (an autoregressive step). backend: 'auto' (the tensors' device), 'cuda', 'cpu'
    or 'reference' (the numpy oracle); all agree exactly on the same inputs. anchor: None (the paper's tree) or
    'chain' (the drafter's greedy chain is popped first, so it is always a path of the tree: docs/DESIGN.md §3.7).
    anchored: None (the anchor applies to every request) or bool [B] on the tensors' device, the requests it
    applies to (the others get the paper's tree: the served default anchors greedy requests only, §3.11).
    """
    C.tensor("top_logprobs", top_logprobs, ndim=3, dtypes=(torch.float32,))
    device = top_logprobs.device
    C.tensor("top_ids", top_ids, ndim=3, dtypes=C.INT_DTYPES, device=device)
    C.shape("top_ids", top_ids, tuple(top_logprobs.shape))
    budget = check_budget(budget)
    B, L, k = top_logprobs.shape
    forced = chain_pops(anchor, L)
    C.in_range("top_ids", top_ids, 0)  # a negative id would become a node's token, unflagged
    roots, lens = _request_vectors(root_tokens, seq_lens, B, device)
    _check_anchored(anchored, B, device)
    backend = ops.resolve_backend(backend, device)
    lp, ids = top_logprobs.contiguous(), top_ids.to(torch.int64).contiguous()
    if backend == "reference":
        from .reference import build_tree_reference
        outs = [t.to(device) for t in _build_reference(build_tree_reference, (lp, ids), budget, roots, lens, forced,
                                                       anchored)]
    else:
        outs = ops.op("build_tree_from_topk")(lp, ids, roots, lens, budget, forced,
                                              None if anchored is None else anchored.contiguous())
    return _tree_from_outputs(outs, budget, L, k)


def build_tree(draft_logits: torch.Tensor, budget: int, *, topk: int | None = None, root_tokens=None,
               seq_lens=None, backend: str = "auto", anchor=None) -> TreeBatch:
    """Stage 1 (canonical top-k + log-normaliser) then the best-first build.

    draft_logits: [B, L, V] (bf16/fp16/fp32) for the L = block_size − 1 draft positions.
    k = min(topk or budget, V) as in the paper (topk=1 gives the DFlash chain); budget 0 is the root alone.
    root_tokens must lie in [0, V) when budget > 0 (checked for ints and CPU tensors); anchor and the rest as in
    build_tree_from_topk.
    """
    C.tensor("draft_logits", draft_logits, ndim=3, dtypes=C.FLOAT_DTYPES)
    budget = check_budget(budget)
    if topk is not None:
        C.integer("topk", topk, minimum=1)
    B, L, V = draft_logits.shape
    if V < 1:
        raise ValueError(f"draft_logits must have a non-empty vocabulary dimension, got shape {tuple(draft_logits.shape)}")
    k = min(topk if topk is not None else max(budget, 1), V)  # budget 0 (the root alone) still reads one candidate
    chain_pops(anchor, L)  # refuse a bad anchor before any work
    if root_tokens is not None and budget > 0:  # budget 0 reads no draft token, so any vocabulary will do
        C.in_range("root_tokens", root_tokens, 0, V)
    native = ops.resolve_backend(backend, draft_logits.device)
    stage1 = "cuda" if native == "cuda" else "cpu"
    lp, ids = topk_logprobs(draft_logits, k, stage1)
    return build_tree_from_topk(lp, ids, budget, root_tokens=root_tokens, seq_lens=seq_lens, backend=native,
                                anchor=anchor)


def build_tree_from_lattice_rows(row_logprobs: torch.Tensor, row_order: torch.Tensor, candidate_ids: torch.Tensor,
                                 budget: int, *, root_tokens=None, seq_lens=None, backend: str = "auto",
                                 anchor=None, anchored=None) -> TreeBatch:
    """Best-first tree over a selector's lattice (docs/DESIGN.md §3.10) from its sorted rows (stage 1's output,
    `lattice.lattice_logprobs`), for a batch of requests.

    row_logprobs: float32 [B, L, K, K], row (e, p) the conditional log-probs of slot e's candidates after
    candidate p of slot e − 1 (slot 0: after the anchor; its row 0 is read), sorted descending; row_order: int
    [B, L, K, K], the candidate index of each rank (each row a permutation of 0..K−1: checked for CPU tensors);
    candidate_ids: int [B, L, K], slot e's candidate tokens. A node's token is its candidate's id, its rank its
    position in its parent's row. root_tokens, seq_lens, backend, anchor and anchored as in build_tree_from_topk
    (the chain is the lattice's argmax walk: the selector's greedy path). The TreeBatch's topk is K.
    """
    C.tensor("row_logprobs", row_logprobs, ndim=4, dtypes=(torch.float32,))
    device = row_logprobs.device
    B, L, K, K2 = row_logprobs.shape
    if K != K2 or K < 1:
        raise ValueError(f"row_logprobs must be [B, L, K, K] with K >= 1, got shape {tuple(row_logprobs.shape)}")
    C.tensor("row_order", row_order, ndim=4, dtypes=C.INT_DTYPES, device=device)
    C.shape("row_order", row_order, (B, L, K, K))
    C.tensor("candidate_ids", candidate_ids, ndim=3, dtypes=C.INT_DTYPES, device=device)
    C.shape("candidate_ids", candidate_ids, (B, L, K))
    C.in_range("candidate_ids", candidate_ids, 0)  # a negative id would become a node's token, unflagged
    budget = check_budget(budget)
    forced = chain_pops(anchor, L)
    if row_order.device.type == "cpu" and row_order.numel():  # a CUDA tensor is not read (the builder flags it)
        if not torch.equal(row_order.sort(-1).values, torch.arange(K, dtype=row_order.dtype).expand_as(row_order)):
            raise ValueError("row_order must list every candidate index 0..K-1 once in each row")
    roots, lens = _request_vectors(root_tokens, seq_lens, B, device)
    _check_anchored(anchored, B, device)
    backend = ops.resolve_backend(backend, device)
    return _build_from_rows(row_logprobs, row_order, candidate_ids, budget, roots, lens, backend, forced, anchored)


def _build_from_rows(lp, order, cand, budget: int, roots, lens, backend: str, forced: int,
                     anchored=None) -> TreeBatch:
    """The lattice build on checked arguments (backend resolved, roots and lens int64 [B])."""
    lp, order, cand = lp.contiguous(), order.to(torch.int32).contiguous(), cand.to(torch.int64).contiguous()
    if backend == "reference":
        from .reference import build_lattice_tree_reference
        outs = [t.to(lp.device) for t in _build_reference(build_lattice_tree_reference, (lp, order, cand), budget,
                                                          roots, lens, forced, anchored)]
    else:
        outs = ops.op("build_tree_from_lattice")(lp, order, cand, roots, lens, budget, forced,
                                                 None if anchored is None else anchored.contiguous())
    return _tree_from_outputs(outs, budget, lp.shape[1], lp.shape[2])


def build_tree_from_lattice(candidate_ids: torch.Tensor, scores: torch.Tensor, budget: int, *, temperature=0.0,
                            root_tokens=None, seq_lens=None, backend: str = "auto", anchor=None,
                            anchored=None) -> TreeBatch:
    """The tree over a DFlash2 selector's lattice (docs/DESIGN.md §3.10): stage 1 (each row's law and sort,
    `lattice.lattice_logprobs`) then build_tree_from_lattice_rows.

    candidate_ids: int [B, L, K] and scores: float [B, L, K, K], as SGLang's `CandidateSelector.build_lattice`
    gives them (score[b, e, p, c]: candidate c of slot e after candidate p of slot e − 1, after the anchor for
    e = 0). temperature: a float or a float tensor [B], each request's sampling temperature, 0 for greedy: the
    keys are log softmax(score / T) over the K candidates, the drafter's estimate of the probability that the
    target's walk takes each edge; a greedy request's keys take T = 1, the drafter's own law (SGLang serves greedy
    requests at temperature 1 with top-k 1, which gives the same keys). The rest as in
    build_tree_from_lattice_rows; budget 0 is the root alone.
    """
    C.tensor("candidate_ids", candidate_ids, ndim=3, dtypes=C.INT_DTYPES)
    device = candidate_ids.device
    B, L, K = candidate_ids.shape
    if K < 1:
        raise ValueError(f"candidate_ids must hold K >= 1 candidates per slot, got shape {tuple(candidate_ids.shape)}")
    C.tensor("scores", scores, ndim=4, dtypes=C.FLOAT_DTYPES, device=device)
    C.shape("scores", scores, (B, L, K, K))
    C.in_range("candidate_ids", candidate_ids, 0)  # a negative id would become a node's token, unflagged
    budget = check_budget(budget)
    forced = chain_pops(anchor, L)
    temps = key_temperatures(temperature, B, device)
    roots, lens = _request_vectors(root_tokens, seq_lens, B, device)
    _check_anchored(anchored, B, device)
    backend = ops.resolve_backend(backend, device)
    lp, order = lattice_logprobs(scores, temps)
    return _build_from_rows(lp, order, candidate_ids, budget, roots, lens, backend, forced, anchored)
