"""The DFlash2 drafter (SGLang 0.5.23's `DFlash2DraftModel`): the DFlash backbone of dflash.py plus a candidate
selector, and the two ways its lattice is decoded (docs/DESIGN.md §3.10, §8.2).

Per request and draft slot e = 0 … L − 1 the selector takes the top K tokens of the *target's* head on the
drafter's hidden state h_e as candidates cand[e, :] (their raw logits, through `output_multiplier` and
`final_logit_softcapping`, are the unary scores) and scores every transition between adjacent slots:

    score[e, p, c] = unary[e, c] + <A[pred] ∘ W h_e, B[cand[e, c]]>,   pred = cand[e − 1, p] (e = 0: the root)

with A, B the [vocab, r] predecessor and successor codebooks and W the [r, hidden] projection. Decoded two ways:
- **the lattice tree**: DDTree over this first-order chain (`tree.build_tree_from_lattice`);
- **the selector's walk** (SGLang's DFLASH on a DFlash2 drafter): one path, the argmax of each row after the
  previous pick (greedy) or a draw from softmax(row / T) (sampled), whose law q the verify's rejection sampling
  reads (`rejection.py`).

Checkpoint layout is 0.5.23's: the DFlash backbone's names, plus `candidate_selector.predecessor_codebook`,
`candidate_selector.successor_codebook`, `candidate_selector.hidden_projection.weight`; config.json has
`architectures: ["DFlash2DraftModel"]` and `dflash_config: {selector_rank, selector_top_k, ...}`. Like 0.5.23's,
the drafter has no head of its own: it borrows the target's.
"""
from __future__ import annotations

import torch
from torch import nn

from ..sampling import gumbel_noise
from ..topk import topk_logprobs
from ..tree import TreeBatch, build_tree_from_topk
from .dflash import DFlashConfig, DFlashDraftModel

ARCHITECTURE = "DFlash2DraftModel"
# the Philox stream of the walk's draw at slot e is node WALK_STREAM + e (sampling's node draws use nodes < 4096,
# rejection.py its own streams), so the walk never shares random numbers with the verify
WALK_STREAM = 1 << 24


class DFlash2Config(DFlashConfig):
    """DFlashConfig plus the selector's fields (dflash_config, where 0.5.23's parse_dflash_draft_config reads them)."""

    @property
    def selector_rank(self) -> int:
        return int(self.dflash.get("selector_rank", 0))

    @property
    def selector_top_k(self) -> int:
        return int(self.dflash.get("selector_top_k", 0))

    @property
    def output_multiplier(self) -> float:
        return float(self.dflash.get("output_multiplier", 1.0))

    @property
    def final_logit_softcapping(self) -> float | None:
        cap = float(self.dflash.get("final_logit_softcapping") or 0.0)
        return cap if cap > 0 else None


def is_dflash2(config_dict: dict) -> bool:
    """Whether a drafter's config.json names a selector drafter (0.5.23 needs a selector rank for one)."""
    return ARCHITECTURE in (config_dict.get("architectures") or []) and \
        bool((config_dict.get("dflash_config") or {}).get("selector_rank"))


def dflash2_config(base: DFlashConfig, *, rank: int, top_k: int) -> DFlash2Config:
    """A DFlash2 config on a DFlash backbone's config (the backbone unchanged). top_k: a power of two, which
    0.5.23's CUDA walk (`selector_walk_triton`, one `tl.arange(0, top_k)`) needs."""
    if rank < 1 or top_k < 1 or top_k & (top_k - 1) or top_k > base.vocab_size:
        raise ValueError(f"rank must be >= 1 and top_k a power of two <= the vocabulary, got {rank}, {top_k}")
    d = base.to_dict()
    d["architectures"] = [ARCHITECTURE]
    d["dflash_config"] = {**d["dflash_config"], "selector_rank": rank, "selector_top_k": top_k}
    return DFlash2Config.from_dict(d)


class CandidateSelector(nn.Module):
    """The selector's parameters (0.5.23's names) and its lattice score (`build_lattice`, the same formula)."""

    def __init__(self, hidden_size: int, vocab_size: int, rank: int, top_k: int):
        super().__init__()
        self.top_k = int(top_k)
        self.predecessor_codebook = nn.Parameter(torch.zeros(vocab_size, rank))
        self.successor_codebook = nn.Parameter(torch.zeros(vocab_size, rank))
        self.hidden_projection = nn.Linear(hidden_size, rank, bias=False)

    def pair_scores(self, predecessors: torch.Tensor, hidden: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """<A[pred] ∘ W h, B[c]> for predecessors [..., P], hidden [..., H], candidates [..., C] -> [..., P, C]."""
        state = self.predecessor_codebook[predecessors] * self.hidden_projection(hidden).unsqueeze(-2)
        return state @ self.successor_codebook[candidates].transpose(-1, -2)

    def build_lattice(self, candidate_ids: torch.Tensor, unary_logits: torch.Tensor, hidden_states: torch.Tensor,
                      anchor_token_ids: torch.Tensor) -> torch.Tensor:
        """candidate_ids [B, L, K], unary_logits [B, L, K], hidden_states [B, L, H], anchor_token_ids [B] ->
        score [B, L, K, K]: score[b, e, p, c] = unary[b, e, c] + <A[pred] ∘ W h[b, e], B[cand[b, e, c]]>, pred
        the anchor for e = 0 (every p alike) and cand[b, e − 1, p] after."""
        B, L, K = candidate_ids.shape
        preds = torch.cat([anchor_token_ids.view(B, 1, 1).expand(B, 1, K), candidate_ids[:, :-1]], dim=1)
        return unary_logits.unsqueeze(-2) + self.pair_scores(preds, hidden_states, candidate_ids)


class DFlash2DraftModel(DFlashDraftModel):
    def __init__(self, c: DFlash2Config):
        super().__init__(c)
        if c.selector_rank < 1 or c.selector_top_k < 1:
            raise ValueError("a DFlash2 drafter needs dflash_config.selector_rank and selector_top_k >= 1, got "
                             f"{c.selector_rank} and {c.selector_top_k}")
        self.candidate_selector = CandidateSelector(c.hidden_size, c.vocab_size, c.selector_rank, c.selector_top_k)

    def unary(self, logits: torch.Tensor) -> torch.Tensor:
        """0.5.23's `_transform_unary_logits`: float32, times output_multiplier, then the softcap."""
        c, x = self.config, logits.float()
        if c.output_multiplier != 1.0:
            x = x * c.output_multiplier
        if c.final_logit_softcapping is not None:
            x = torch.tanh(x / c.final_logit_softcapping) * c.final_logit_softcapping
        return x

    def candidates(self, logits: torch.Tensor, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The K candidates of each slot's target-head logits [B, L, V]: (ids int64 [B, L, K], unary float32
        [B, L, K]), by logit descending, ties by token id (the project's canonical top-k, topk.py; SGLang's
        radix top-k agrees wherever the K-th logit is not tied)."""
        _, ids = topk_logprobs(logits, self.candidate_selector.top_k, backend)
        return ids, self.unary(logits.gather(-1, ids))

    def lattice(self, hidden: torch.Tensor, logits: torch.Tensor, roots: torch.Tensor, backend: str):
        """The lattice of one draft block: hidden [B, L, H] (the drafter's slots 1 … L), logits [B, L, V] (the
        target's head on them), roots [B] -> (candidate_ids [B, L, K], scores [B, L, K, K])."""
        ids, unary = self.candidates(logits, backend)
        return ids, self.candidate_selector.build_lattice(ids, unary, hidden.float(), roots)


def walk(scores: torch.Tensor, temperatures: torch.Tensor, seed: torch.Tensor, step: torch.Tensor):
    """The selector's walk (0.5.23's `CandidateSelector.sample_path`): per request, slot 0 reads row (0, 0),
    slot e the row of slot e − 1's pick. A greedy request (temperature 0) takes the row's first maximum and q is
    the point mass there; a sampled one draws from q = softmax(row / T) (Gumbel-max on the Philox stream (seed,
    step, WALK_STREAM + e); SGLang inverts the CDF of its own uniforms: the same law).
    scores [B, L, K, K], temperatures float32 [B] -> (path int64 [B, L] candidate indices, q float32 [B, L, K])."""
    B, L, K, _ = scores.shape
    greedy = (temperatures <= 0).view(B, 1)
    t = torch.where(greedy, 1.0, temperatures.view(B, 1).float().clamp(min=1e-5))  # SGLang's clamp
    prev = torch.zeros(B, dtype=torch.int64, device=scores.device)
    rows = torch.arange(B, device=scores.device)
    path, q = [], []
    for e in range(L):  # the slots' dependency is the walk itself: L steps over the whole batch
        row = scores[rows, e, prev].float()
        scaled = row / t
        noise = gumbel_noise(seed, step, torch.full_like(seed, WALK_STREAM + e), K).to(scaled.device)
        pick = torch.where(greedy[:, 0], row.argmax(-1), (scaled + noise).argmax(-1))
        q.append(torch.where(greedy, nn.functional.one_hot(pick, K).float(), torch.softmax(scaled, -1)))
        path.append(pick)
        prev = pick
    return torch.stack(path, 1), torch.stack(q, 1)


def walk_tree(candidate_ids: torch.Tensor, path: torch.Tensor, roots, seq_lens) -> TreeBatch:
    """The walk's path as a tree: one chain of L nodes (node e + 1 holds slot e's pick), built as the top-k tree
    of one candidate per depth, so accept, commit and the verify mask are the chain's."""
    tokens = candidate_ids.gather(-1, path.unsqueeze(-1))  # [B, L, 1]
    lp = torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
    return build_tree_from_topk(lp, tokens, path.shape[1], root_tokens=roots, seq_lens=seq_lens)


def attach_selector(backbone: DFlashDraftModel, *, rank: int, top_k: int, seed: int = 0,
                    std: float = 0.02) -> DFlash2DraftModel:
    """A DFlash2 drafter on a trained DFlash backbone (its weights copied), the selector's codebooks and
    projection drawn N(0, std²) (zero codebooks would be a saddle: neither gets a gradient)."""
    model = DFlash2DraftModel(dflash2_config(backbone.config, rank=rank, top_k=top_k))
    missing, unexpected = model.load_state_dict(backbone.state_dict(), strict=False)
    if unexpected or not all(m.startswith("candidate_selector.") for m in missing):
        raise ValueError(f"backbone must be a DFlash drafter, got missing {missing[:3]}, unexpected {unexpected[:3]}")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.candidate_selector.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return model

