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
                                                       # (engine/calibrate.py)

The fitted temperatures ship with a drafter as `ddtree_calibration.json` in its directory
(`load_depth_temperatures`): the engine uses them with `draft_temperature="drafter"`, the SGLang plugin
whenever the drafter directory has the file (`SGLANG_DDTREE_CALIBRATION`: auto / off / a path).
"""
from __future__ import annotations

import json
import math
import os

import torch

GRID = [math.exp(x / 40.0) for x in range(-64, 41)]  # T from e^-1.6 ≈ 0.20 to e^1 ≈ 2.72
FILE = "ddtree_calibration.json"


def load_depth_temperatures(path: str, depth_limit: int) -> list[float]:
    """The per-depth temperatures of a calibration file (or of FILE inside a drafter directory); raises
    ValueError naming the file when it is malformed or fitted for another number of draft depths."""
    if os.path.isdir(path):
        path = os.path.join(path, FILE)
    try:
        with open(path) as f:
            temps = json.load(f)["depth_temperature"]
        temps = [float(t) for t in temps]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"calibration file {path}: cannot read depth_temperature ({e})") from None
    if len(temps) != depth_limit or not all(math.isfinite(t) and t > 0 for t in temps):
        raise ValueError(f"calibration file {path}: depth_temperature must be {depth_limit} positive floats (one "
                         f"per draft depth), got {temps}")
    return temps


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


def fit_temperature(logits: torch.Tensor, target: torch.Tensor) -> float:
    """The T of GRID with the lowest NLL (temperature scaling), refined by a golden-section search between
    its neighbours."""
    losses = [nll(logits, target, t) for t in GRID]
    j = min(range(len(GRID)), key=losses.__getitem__)
    lo, hi = GRID[max(j - 1, 0)], GRID[min(j + 1, len(GRID) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(30):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if nll(logits, target, a) < nll(logits, target, b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def reliability(logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0, bins: int = 10) -> dict:
    """Top-1 confidence vs hit rate: mean confidence, hit rate, expected calibration error and the bins."""
    p = torch.softmax(logits.double() / temperature, -1)
    conf, top = p.max(-1)
    hit = (top == target).double()
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
