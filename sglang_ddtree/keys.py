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

from .sampling import MIN_TEMPERATURE, NodeLaw, kept_ranks
from .topk import topk_logprobs

ALPHA_FLOOR = 1e-6  # a slot never seen taken keeps a finite shape key: only the filters' −inf removes a node


@dataclasses.dataclass(frozen=True)
class ShapeTable:
    """A drawn tree's shape table (calibration.fit_shape_table, docs/DESIGN.md §3.12): alpha[m][d][r], the mean
    chance that a drawn child at depth d + 1 in sibling slot r is its parent's outcome (given the parent reached),
    fitted under the law of temperature temperatures[m] (ascending); weight w, the law keys' share of the shape
    keys. A request's table is interpolated linearly in its temperature between the fitted ones (clamped)."""

    weight: float
    temperatures: tuple
    alpha: tuple


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The drafter's per-depth temperatures (calibration.py): `greedy` for greedy requests, `sampling` for sampled
    ones (None: the raw draft); `shape`: a drawn tree's ShapeTable (None: the law keys shape it)."""

    greedy: tuple | None = None
    sampling: tuple | None = None
    shape: ShapeTable | None = None


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
        self.shape_log_alpha = self.shape_temps = None
        if cal.shape is not None:
            self.shape_log_alpha, self.shape_temps = shape_log_alpha(cal.shape, self.L, self.device)

    def scales(self, law: NodeLaw | None, batch: int) -> torch.Tensor | None:
        """float32 [B, L] each row's multiplier of the draft logits, or None (all greedy and uncalibrated):
        1 / c_d (greedy calibration) for a greedy request, 1 / (T · c_d) (sampling calibration) for a sampled one."""
        ones = lambda: torch.ones(self.L, dtype=torch.float32, device=self.device)  # noqa: E731
        greedy = self.greedy_scale
        if law is None:
            return None if greedy is None else greedy.unsqueeze(0).expand(batch, self.L)
        g = ones() if greedy is None else greedy
        s = ones() if self.sampling_scale is None else self.sampling_scale
        t = law.temperatures.float().clamp(min=MIN_TEMPERATURE).view(-1, 1)
        return torch.where(law.greedy().view(-1, 1), g.view(1, -1), s.view(1, -1) / t)

    def shape_keys(self, lp: torch.Tensor, law: NodeLaw | None) -> torch.Tensor:
        """float32 [B, L, k]: the keys a drawn tree's shape is built from (docs/DESIGN.md §3.12). A sampled row:
        s_r = w · lp_r + (1 − w) · log α_r, α the shape table at the request's temperature; −inf where lp_r is −inf
        (a filtered token never gets a node). Greedy rows, and every row without a table, keep lp. Non-increasing in
        r as lp is (both terms are, and float32 rounding is monotone), so the builders take it as they take lp.
        Elementwise on static tensors: graph-safe, no host read. The children are still drawn from lp."""
        if self.shape_log_alpha is None or law is None:
            return lp
        B, L, k = lp.shape
        la = table_at(self.shape_log_alpha, self.shape_temps, law.temperatures)      # [B, L, R]
        R = la.shape[-1]
        la = la[..., torch.arange(k, device=la.device).clamp(max=R - 1)] if k != R else la  # slots past R: R − 1's
        w = float(self.calibration.shape.weight)
        x = lp.float()
        s = x * w + la * (1.0 - w)
        s = torch.where(x == float("-inf"), x, s)
        return torch.where(law.greedy().view(B, 1, 1), x, s)

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


def shape_log_alpha(shape: ShapeTable, depth_limit: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 [M, L, R] log α, floored at ALPHA_FLOOR and made non-increasing in r by a running minimum, float32
    [M] the tables' temperatures) of a ShapeTable; ValueError where its shape does not fit the drafter."""
    a = torch.tensor(shape.alpha, dtype=torch.float64)
    t = torch.tensor(shape.temperatures, dtype=torch.float64)
    if a.dim() != 3 or a.shape[0] != t.numel() or a.shape[1] != depth_limit or a.shape[2] < 1:
        raise ValueError(f"shape table must be [tables, {depth_limit}, slots] with one temperature per table, got "
                         f"{tuple(a.shape)} and {t.numel()} temperatures")
    if not (torch.isfinite(a).all() and torch.isfinite(t).all() and (t > 0).all() and bool((t[1:] > t[:-1]).all())
            and 0.0 <= float(shape.weight) <= 1.0):
        raise ValueError("shape table: alpha and temperatures finite, temperatures positive ascending, weight in [0, 1]")
    la = a.clamp(min=ALPHA_FLOOR).log().cummin(-1).values
    return la.float().to(device), t.float().to(device)


def table_at(log_alpha: torch.Tensor, temps: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """float32 [B, L, R]: each request's log α, linear in its temperature between the fitted tables' (clamped to
    the nearest outside them); device ops only."""
    M = temps.numel()
    if M == 1:
        return log_alpha.expand(temperature.shape[0], *log_alpha.shape[1:])
    t = temperature.float().to(temps.device)
    hi = torch.searchsorted(temps, t).clamp(1, M - 1)
    lo = hi - 1
    a = ((t - temps[lo]) / (temps[hi] - temps[lo])).clamp(0.0, 1.0).view(-1, 1, 1)
    return log_alpha[lo] * (1.0 - a) + log_alpha[hi] * a
