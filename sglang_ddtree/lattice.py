"""Stage 1 of the lattice tree (docs/DESIGN.md §3.10): for every row (request, slot e, predecessor p) of a DFlash2
selector's K × K transition scores, the request's law over the slot's K candidates and the row's sort, which
is what the builders read.

`reference.lattice_rows_reference` is the definition; this is the same in torch ops on any device, with no
host read, so a draft CUDA graph can hold it. The order is exact (it depends on the scores alone); the
log-probs agree with the reference's within one float32 ulp plus the float64 rounding of the row's log-sum-exp
(exp, log and the sum's order differ between libraries and devices).
"""
from __future__ import annotations

import numbers

import torch

from . import _checks as C


def key_temperatures(temperature, batch: int, device: torch.device) -> torch.Tensor:
    """The request temperatures as float32 [batch] (SGLang's dtype), checked: a real or a float tensor [batch].
    Values must be finite and >= 0 (0: a greedy request); checked for reals and CPU tensors (a CUDA tensor is
    not read on the host: a negative or NaN value there gives a flagged, root-only tree)."""
    if isinstance(temperature, numbers.Real) and not isinstance(temperature, bool):
        t = float(temperature)
        if not (t >= 0.0 and t != float("inf")):
            raise ValueError(f"temperature must be a finite value >= 0, got {temperature}")
        return torch.full((batch,), t, dtype=torch.float32, device=device)
    if isinstance(temperature, bool) or not isinstance(temperature, torch.Tensor):
        raise TypeError(f"temperature must be a float or a float tensor [B], got {type(temperature).__name__}")
    C.tensor("temperature", temperature, ndim=1, dtypes=(torch.float16, torch.bfloat16, torch.float32,
                                                          torch.float64), device=device)
    C.shape("temperature", temperature, (batch,))
    t = temperature.to(torch.float32)
    if t.device.type == "cpu" and t.numel() and not bool(((t >= 0) & (t != float("inf"))).all()):
        bad = t[~((t >= 0) & (t != float("inf")))][0].item()
        raise ValueError(f"temperature must be finite and >= 0 for every request, got {bad}")
    return t


def lattice_logprobs(scores: torch.Tensor, temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [B, L, K, K] (float; read as float32), temperature float32 [B] (0: greedy, whose keys take T = 1)
    -> (lp float32 [B, L, K, K] sorted descending along the last axis, order int32 [B, L, K, K]: the candidate
    index of each rank). reference.lattice_rows_reference defines every entry, masked and NaN rows included."""
    s = scores.float() + 0.0                                   # -0.0 + 0.0 = +0.0: signed zeros tie
    K = s.shape[-1]
    order = torch.sort(s, dim=-1, descending=True, stable=True).indices  # ties: candidate index ascending
    t = temperature.to(torch.float64)
    t = torch.where(t == 0, torch.ones_like(t), t).view(-1, 1, 1, 1)
    z = s.double() / t
    lse = torch.logsumexp(z, -1, keepdim=True)  # m + log Σ exp(z − m); −inf for a fully masked row
    lp = torch.where(z == float("-inf"), z, z - lse).float()
    bad = (torch.isnan(s) | torch.isposinf(s)).any(-1, keepdim=True)  # no law: NaN (flagged), identity order
    lp = torch.where(bad, torch.full_like(lp, float("nan")), lp)
    order = torch.where(bad, torch.arange(K, device=s.device).expand_as(order), order)
    return lp.gather(-1, order), order.to(torch.int32)
