"""Drafter calibration: how far the draft's per-depth probabilities are from what the target accepts, and a
per-depth temperature fitted to close the gap.

The tree ranks paths by the product of the drafter's per-depth marginals, so a drafter that is
under-confident at depth d (its top-1 probability below its measured hit rate there) spends the budget on
siblings when it should go deeper. A block-diffusion drafter predicts every depth of a block in one
forward, each from the committed context only, so calibrating each depth's marginal on its own is the
right unit: temperature T_d divides depth d's logits before stage 1 (T_d < 1 sharpens). The tree built
from calibrated log-probs is exact with respect to those keys (same builders, other inputs) and every tree
is lossless; what calibration can change is acceptance, so it is kept only where held-out τ rises.

    python -m sglang_ddtree calibration [--out FILE]   # fit on the first 100 held-out prompts (the shipped
                                                       # tiny pair), reliability and τ on the other 131
                                                       # (tools/calibrate.py)

The fitted temperatures ship with a drafter as `ddtree_calibration.json` in its directory (`load_calibration`):
the engine uses them with `draft_temperature="drafter"` (and the sampling entry with `sampling_temperature=
"drafter"`), the SGLang plugin whenever the drafter directory has the file (`SGLANG_DDTREE_CALIBRATION`: auto /
off / a path). Sampled requests rank by their own law over the draft (keys.py), calibrated by the sampling entry
(`fit_sampling_temperatures`); a file without one leaves their draft raw.
"""
from __future__ import annotations

import json
import math
import os

import torch

GRID = [math.exp(x / 40.0) for x in range(-64, 41)]  # T from e^-1.6 ≈ 0.20 to e^1 ≈ 2.72
FILE = "ddtree_calibration.json"
SAMPLING_KEY = "sampling_depth_temperature"  # the file's entry for sampled requests (keys.py)
SHAPE_KEY = "drawn_shape"  # the file's entry for drawn trees' shape keys (keys.ShapeTable; fit_shape_table)
SHAPE_MIN_COUNT = 100  # nodes a (depth, slot) needs to be fitted on its own; fewer: the slot before it's value


def load_calibration(path: str, depth_limit: int):
    """keys.Calibration of a calibration file (or of FILE inside a drafter directory): `depth_temperature` for
    greedy requests and, where the file has one, `sampling_depth_temperature` for sampled requests (None
    without: a sampled request's keys are then its law over the raw draft, keys.py). Raises ValueError naming
    the file when it is malformed or fitted for another number of draft depths."""
    from .keys import Calibration

    if os.path.isdir(path):
        path = os.path.join(path, FILE)
    try:
        with open(path) as f:
            data = json.load(f)
        entries = {key: data[key] for key in ("depth_temperature", SAMPLING_KEY) if key in data}
        entries["depth_temperature"]  # noqa: B018 (the greedy entry is required)
        entries = {key: [float(t) for t in temps] for key, temps in entries.items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"calibration file {path}: cannot read depth_temperature ({e})") from None
    for key, temps in entries.items():
        if len(temps) != depth_limit or not all(math.isfinite(t) and t > 0 for t in temps):
            raise ValueError(f"calibration file {path}: {key} must be {depth_limit} positive floats (one per draft "
                             f"depth), got {temps}")
    sampling = entries.get(SAMPLING_KEY)
    return Calibration(tuple(entries["depth_temperature"]), None if sampling is None else tuple(sampling),
                       _shape_entry(data.get(SHAPE_KEY), path, depth_limit))


def _shape_entry(entry, path: str, depth_limit: int):
    """keys.ShapeTable of a file's SHAPE_KEY entry (None without one: drawn trees are shaped by their law keys)."""
    from .keys import ShapeTable, shape_log_alpha

    if entry is None:
        return None
    try:
        tables = sorted(entry["tables"], key=lambda t: float(t["temperature"]))
        shape = ShapeTable(float(entry["weight"]), tuple(float(t["temperature"]) for t in tables),
                           tuple(tuple(tuple(float(a) for a in row) for row in t["alpha"]) for t in tables))
        shape_log_alpha(shape, depth_limit)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"calibration file {path}: {SHAPE_KEY} must hold a weight and tables of a temperature and "
                         f"alpha [{depth_limit}][slots] ({e})") from None
    return shape


def shape_entry(weight: float, tables: list[tuple[dict, list]]) -> dict:
    """The file's SHAPE_KEY entry: weight, and per fitted law (its arguments, alpha [L][R]) one table."""
    return {"weight": float(weight), "tables": [{"temperature": float(law["temperature"]), "law": law,
                                                 "alpha": [[float(a) for a in row] for row in alpha]}
                                                for law, alpha in tables]}


def fit_shape_table(taken: torch.Tensor, depth: torch.Tensor, slot: torch.Tensor, depth_limit: int, slots: int,
                    min_count: int = SHAPE_MIN_COUNT) -> list[list[float]]:
    """A drawn tree's shape table (keys.ShapeTable, docs/DESIGN.md §3.12), alpha [L][slots]: per (child depth d,
    sibling slot r) the mean over drawn nodes of P(taken | parent reached), the verify's exact outcome probability
    (round_contexts.node_steps) — how often such a node is on the walk's path, which the builder's keys should rank
    by. taken float [M], depth (1..L) / slot (0..) int [M], one entry per node of the fit's trees. A (depth, slot)
    with fewer than min_count nodes takes slot r − 1's value (0 at slot 0); each row is then made non-increasing
    in r (a running minimum), so the shape keys stay sorted as the builders need."""
    L, R = int(depth_limit), int(slots)
    idx = (depth.long() - 1) * R + slot.long()
    ok = (depth >= 1) & (depth <= L) & (slot >= 0) & (slot < R)
    num = torch.zeros(L * R, dtype=torch.float64).index_add_(0, idx[ok], taken[ok].double())
    den = torch.zeros(L * R, dtype=torch.float64).index_add_(0, idx[ok], torch.ones_like(taken[ok], dtype=torch.float64))
    num, den = num.view(L, R), den.view(L, R)
    alpha = torch.zeros(L, R, dtype=torch.float64)
    for r in range(R):
        seen = den[:, r] >= min_count
        prev = alpha[:, r - 1] if r else torch.zeros(L, dtype=torch.float64)
        alpha[:, r] = torch.where(seen, num[:, r] / den[:, r].clamp(min=1), prev)
    return alpha.cummin(-1).values.tolist()


def collect(engine, prompts, max_new: int = 48, budget: int = 16, anchor="chain", batch_size: int = 100):
    """(logits, target) pairs per depth from greedy DDTree rounds: depth d's draft logits of a round and the
    token the target actually produced at that position (the greedy output equals AR's). Returns a list of
    L pairs (float32 [N_d, V], int64 [N_d])."""
    L = engine.block_size - 1
    rows = [[] for _ in range(L)]
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        rounds = []
        res = engine.generate(chunk, max_new, method="ddtree", budget=budget, anchor=anchor, batch_size=len(chunk),
                              draft_temperature=None,  # the raw draft: what the temperatures are fitted to
                              on_round=lambda logits, *_: rounds.append(logits.float().cpu()))
        for b, r in enumerate(res):
            start = 0  # output index of the round's root: the prefill's token is out[0]
            for k, alen in enumerate(r.accept_lengths):
                for d in range(1, L + 1):
                    if start + d < len(r.token_ids):
                        rows[d - 1].append((rounds[k][b, d - 1], r.token_ids[start + d]))
                start += alen
    return [(torch.stack([x for x, _ in rs]), torch.tensor([y for _, y in rs], dtype=torch.int64)) for rs in rows]


def nll(logits: torch.Tensor, target: torch.Tensor, temperature: float) -> float:
    """Mean negative log-likelihood of the targets under softmax(logits / T), in float64."""
    z = logits.double() / temperature
    return float((torch.logsumexp(z, -1) - z.gather(1, target[:, None])[:, 0]).mean())


def cross_entropy(logits: torch.Tensor, probs: torch.Tensor, temperature: float) -> float:
    """Mean cross-entropy −Σ_v q_v log softmax(logits / T)_v of distributions probs q [N, V] (rows of q that
    are zero where the logits are −inf add nothing), in float64."""
    z = logits.double() / temperature
    logp = z - torch.logsumexp(z, -1, keepdim=True)
    q = probs.double()
    return float(-(torch.where(q > 0, q * logp, torch.zeros_like(q))).sum(-1).mean())


def fit_temperature(logits: torch.Tensor, target: torch.Tensor, loss=nll) -> float:
    """The T of GRID with the lowest loss(logits, target, T) (temperature scaling; nll: target tokens,
    cross_entropy: target distributions), refined by a golden-section search between its neighbours."""
    losses = [loss(logits, target, t) for t in GRID]
    j = min(range(len(GRID)), key=losses.__getitem__)
    lo, hi = GRID[max(j - 1, 0)], GRID[min(j + 1, len(GRID) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(30):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(logits, target, a) < loss(logits, target, b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def fit_sampling_temperatures(draft: torch.Tensor, target: torch.Tensor) -> list[float]:
    """The sampling calibration: per depth d, the T_d minimising the cross-entropy of the target's distribution
    softmax(y) against the drafter's softmax(x_d / T_d) over the drafted positions (draft, target: [N, L, V]
    draft and target logits, engine/round_contexts.py; rows with a NaN target — past the output — are left out).

    Why this objective: sampled, the walk takes the drafter's token t at depth d with probability q(t), the
    target's law there (§3.5), so the keys should estimate q; the cross-entropy −Σ_t q(t) log p̂(t) is the proper
    score of a whole distribution p̂ against q (its minimum is p̂ = q). It is fitted at temperature 1 without
    filters, where both laws cover the vocabulary: if x_d / T_d ≈ y + const, then x_d / (T_d · T) ≈ y / T, so
    a request's own temperature and filters are applied afterwards exactly as the target's sampler applies them
    (keys.py)."""
    out = []
    for d in range(draft.shape[1]):
        y = target[:, d]
        ok = ~torch.isnan(y).any(-1)
        out.append(fit_temperature(draft[ok, d], torch.softmax(y[ok].double(), -1), cross_entropy))
    return out


def reliability(logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0, bins: int = 10) -> dict:
    """Top-1 confidence vs hit rate: mean confidence, hit rate, expected calibration error and the bins. target:
    the tokens [N] (a hit: the drafter's top-1 is the token), or distributions [N, V] (sampled: the hit rate is the
    probability the target's law gives the drafter's top-1, what the walk accepts it with)."""
    p = torch.softmax(logits.double() / temperature, -1)
    conf, top = p.max(-1)
    hit = (top == target).double() if target.dim() == 1 else target.double().gather(1, top[:, None])[:, 0]
    edges = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    table, ece = [], 0.0
    for i in range(bins):
        sel = (conf > edges[i]) & (conf <= edges[i + 1]) if i else (conf <= edges[1])
        if sel.any():
            c, h, w = float(conf[sel].mean()), float(hit[sel].mean()), float(sel.double().mean())
            ece += w * abs(c - h)
            table.append({"bin": [float(edges[i]), float(edges[i + 1])], "confidence": c, "hit_rate": h,
                          "share": w})
    return {"confidence": float(conf.mean()), "hit_rate": float(hit.mean()), "ece": ece, "n": int(len(target)),
            "bins": table}
