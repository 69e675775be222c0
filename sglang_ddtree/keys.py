"""The tree's keys: each request's draft under that request's own law (docs/DESIGN.md §3.11).

Sampled, the walk takes a child with the probability the target's law gives the child's token (§3.5), so a
sampled request's tree is ranked, and its auto budget predicted (budget.py), by the drafter's distribution
transformed as the target's sampler transforms the target's: the request's temperature, then its top-k /
top-p / min-p, renormalised, with the drafter's sampling calibration per depth. A greedy request keeps the
greedy keys (the draft over the greedy calibration). `reference.law_keys_reference` is the definition; here
is its batched form for every backend: the scale rides into stage 1 (topk.py; the CUDA `topk_lse` op) as one
float per (request, depth), and the filters act on the k candidates with tensor ops, so a mixed greedy /
sampled batch needs no host read and the draft CUDA graph runs it from static law buffers. Any keys are
lossless: they only choose which nodes are verified.
"""
from __future__ import annotations

import dataclasses

import torch

from .sampling import NodeLaw, kept_ranks
from .topk import topk_logprobs

_MIN_TEMPERATURE = 1e-6  # as sampling.node_tokens: a sampled row's scale stays finite


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The drafter's per-depth temperatures (calibration.py): `greedy` for greedy requests, `sampling` for sampled
    ones (None: the raw draft)."""

    greedy: tuple | None = None
    sampling: tuple | None = None


class DraftKeys:
    """Stage 1 of the tree under each request's law, for one drafter (its depth count and calibration)."""

    def __init__(self, depth_limit: int, calibration: Calibration | None = None, device="cpu"):
        cal = calibration or Calibration()
        self.L = int(depth_limit)
        for name, temps in (("greedy", cal.greedy), ("sampling", cal.sampling)):
            if temps is not None and len(temps) != self.L:
                raise ValueError(f"calibration.{name} must hold {self.L} temperatures (one per draft depth), got "
                                 f"{len(temps)}")
        inv = lambda temps: None if temps is None else torch.tensor(  # noqa: E731
            [1.0 / float(t) for t in temps], dtype=torch.float32, device=device)
        self.calibration, self.device = cal, torch.device(device)
        self.greedy_scale, self.sampling_scale = inv(cal.greedy), inv(cal.sampling)

    def scales(self, law: NodeLaw | None, batch: int) -> torch.Tensor | None:
        """float32 [B, L] each row's multiplier of the draft logits, or None (all greedy and uncalibrated):
        1 / c_d (greedy calibration) for a greedy request, 1 / (T · c_d) (sampling calibration) for a sampled one."""
        ones = lambda: torch.ones(self.L, dtype=torch.float32, device=self.device)  # noqa: E731
        greedy = self.greedy_scale
        if law is None:
            return None if greedy is None else greedy.unsqueeze(0).expand(batch, self.L)
        g = ones() if greedy is None else greedy
        s = ones() if self.sampling_scale is None else self.sampling_scale
        t = law.temperatures.float().clamp(min=_MIN_TEMPERATURE).view(-1, 1)
        return torch.where(law.greedy().view(-1, 1), g.view(1, -1), s.view(1, -1) / t)

    @staticmethod
    def anchored(law: NodeLaw | None) -> torch.Tensor | None:
        """bool [B]: the requests a chain anchor applies to, the greedy ones (None: all). In sampled trees the
        anchor cost acceptance at every temperature and budget measured (docs/DESIGN.md §3.11)."""
        return None if law is None else law.greedy()

    def __call__(self, logits: torch.Tensor, k: int, backend: str, law: NodeLaw | None = None, stage1=None):
        """(lp float32 [B, L, k], ids int64 [B, L, k]) of draft logits [B, L, V] (backend 'cpu' or 'cuda').
        stage1: topk.topk_logprobs's signature (logits, k, backend, scale), by default topk_logprobs itself; under
        tensor parallelism the merge of every rank's shard (sglang/tp.py), so the filters act on the merged keys."""
        B = logits.shape[0]
        lp, ids = (stage1 or topk_logprobs)(logits, k, backend, self.scales(law, B))
        if law is None or not law.filtered:
            return lp, ids
        return filter_candidates(lp, law), ids


def filter_candidates(lp: torch.Tensor, law: NodeLaw) -> torch.Tensor:
    """Sampled requests' keys [B, L, k] under their filters, from the tempered candidates' lp (§3.11): the kept
    candidates renormalised by their mass where the kept set ends inside them, as they are where it may reach
    past them, the dropped ones −inf; greedy requests' rows unchanged."""
    B, L, k = lp.shape
    rows = lambda t: t.repeat_interleave(L)  # noqa: E731
    flat = lp.reshape(B * L, k)
    ps = flat.exp()
    keep = kept_ranks(ps, rows(law.top_ks), rows(law.top_ps), rows(law.min_ps))
    inside = ~keep[:, -1:]
    mass = torch.where(keep, ps, torch.zeros_like(ps)).sum(-1, keepdim=True)
    norm = torch.where(inside, mass.log(), torch.zeros_like(mass))
    keyed = torch.where(keep, flat - norm, torch.full_like(flat, float("-inf")))
    return torch.where(rows(law.greedy()).view(-1, 1), flat, keyed).view(B, L, k)
