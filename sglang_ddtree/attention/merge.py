"""Merging two partial attention results by their log-sum-exp, with the LSE base made explicit.

Libraries disagree on the base of the LSE they return (FlashInfer: base 2; FlashMLA, FA3, sgl
merge_state_v2: natural log). Mixing them silently is a shipped bug (sglang #40903), so every LSE that
enters `merge_states` carries its base by name, and the result's base is chosen by the caller.
"""
from __future__ import annotations

import math

import torch

LN2 = math.log(2.0)
LOG2E = 1.0 / LN2
BASES = ("e", "2")


def _check_base(name: str, base: str) -> str:
    if base not in BASES:
        raise ValueError(f"{name} must be one of {BASES}, got {base!r}")
    return base


def lse_to_natural(lse: torch.Tensor, base: str) -> torch.Tensor:
    """Natural-log LSE (float32, float64 kept) from an LSE in `base`; +inf (FlashMLA's mark of a key-less
    row) → −inf."""
    _check_base("base", base)
    lse = lse if lse.dtype == torch.float64 else lse.float()
    if base == "2":
        lse = lse * LN2
    return torch.where(lse == math.inf, torch.full_like(lse, -math.inf), lse)


def lse_from_natural(lse: torch.Tensor, base: str) -> torch.Tensor:
    _check_base("base", base)
    return lse * LOG2E if base == "2" else lse


def merge_states(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor, *,
                 base_a: str = "e", base_b: str = "e", out_base: str = "e", out_dtype=None):
    """Combine attention over two disjoint key sets: O = (w_a O_a + w_b O_b)/(w_a + w_b), w_x = e^{s_x − m}.

    o_*: [..., D]; lse_*: [...] in the named bases. A side with LSE −inf (no keys) gets weight 0 and its
    O is ignored even if it holds NaN; if both sides are empty, O = 0 and LSE = −inf. A NaN LSE is not
    an empty side: it makes O and LSE NaN.
    Returns (O in out_dtype (default o_a's), LSE (float32, or float64 for float64 input) in out_base).
    """
    _check_base("base_a", base_a), _check_base("base_b", base_b), _check_base("out_base", out_base)
    if o_a.shape != o_b.shape:
        raise ValueError(f"o_a and o_b must have the same shape, got {tuple(o_a.shape)} and {tuple(o_b.shape)}")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if tuple(lse.shape) != tuple(o_a.shape[:-1]):
            raise ValueError(f"{name} must have shape {tuple(o_a.shape[:-1])}, got {tuple(lse.shape)}")
    la, lb = lse_to_natural(lse_a, base_a), lse_to_natural(lse_b, base_b)
    cd = torch.float64 if torch.float64 in (o_a.dtype, o_b.dtype, la.dtype, lb.dtype) else torch.float32
    la, lb = la.to(cd), lb.to(cd)
    m = torch.maximum(la, lb)  # NaN if either is NaN
    empty = m == -math.inf
    m_safe = torch.where(empty, torch.zeros_like(m), m)
    wa, wb = torch.exp(la - m_safe), torch.exp(lb - m_safe)
    total = wa + wb  # >= 1 unless empty or NaN
    inv = torch.where(empty, torch.zeros_like(total), 1.0 / total)
    acc = o_a.to(cd) * (wa * inv).unsqueeze(-1)
    acc = torch.where((la == -math.inf).unsqueeze(-1), torch.zeros_like(acc), acc)
    part_b = o_b.to(cd) * (wb * inv).unsqueeze(-1)
    acc = acc + torch.where((lb == -math.inf).unsqueeze(-1), torch.zeros_like(part_b), part_b)
    lse = torch.where(empty, torch.full_like(total, -math.inf), m_safe + torch.log(total))
    return acc.to(out_dtype or o_a.dtype), lse_from_natural(lse, out_base)
