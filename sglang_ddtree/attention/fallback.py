"""Portable verify attention in torch (CPU, and GPU for fp16/fp32): the prefix in key chunks, then the tree.

Every chunk is one batched product of all T·Hq query rows against the chunk's keys, so the n tree queries
of a request share each pass over its prefix, exactly the cascade the CUDA path runs; partial results are
combined with `merge_states` (natural-log LSE). fp16/bf16 inputs are computed in float32, float64 in float64.
"""
from __future__ import annotations

import math

import torch

from .merge import merge_states
from .problem import Problem, prefix_slots, unpack_mask

_LOGIT_BUDGET = 1 << 26  # float elements of one chunk's logits (256 MB in float32)


def _attend_block(q, K, V, visible):
    """q [B,n,Hkv,G,D], K [B,J,Hkv,D], V [B,J,Hkv,Dv], visible bool broadcastable to [B,n,Hkv,G,J].
    A row with no visible key gives O = 0, LSE = −inf; a NaN among the visible logits stays NaN (it must
    not read as an empty row, which the merge would then drop)."""
    logits = torch.einsum("bikgd,bjkd->bikgj", q, K).masked_fill(~visible, -math.inf)
    m = logits.amax(-1)
    empty = m == -math.inf
    m_safe = torch.where(empty, torch.zeros_like(m), m)
    p = torch.exp(logits - m_safe.unsqueeze(-1))
    s = p.sum(-1)
    o = torch.einsum("bikgj,bjkd->bikgd", p, V) / torch.where(empty, torch.ones_like(s), s).unsqueeze(-1)
    lse = torch.where(empty, torch.full_like(s, -math.inf), m_safe + torch.log(s))
    return o, lse


def attend(prob: Problem, *, with_prefix: bool = True, with_tree: bool = True, max_prefix_len: int | None = None,
           chunk: int | None = None):
    """(O [T, Hq, Dv] in float32/float64, natural-log LSE [T, Hq]) over the prefix and/or the tree keys."""
    cd = torch.float64 if prob.dtype == torch.float64 else torch.float32
    B, n, Hkv, G = prob.B, prob.n, prob.Hkv, prob.G
    q = prob.q_full().to(cd).reshape(B, n, Hkv, G, prob.Dqk) * prob.sm_scale
    o = torch.zeros(B, n, Hkv, G, prob.Dv, dtype=cd, device=q.device)
    lse = torch.full((B, n, Hkv, G), -math.inf, dtype=cd, device=q.device)
    if with_prefix:
        n_max = int(prob.prefix_lens.max()) if max_prefix_len is None else int(max_prefix_len)
        if chunk is None:
            chunk = max(64, min(8192, _LOGIT_BUDGET // max(1, B * n * prob.Hq)))
        lens = prob.prefix_lens.to(torch.int64).unsqueeze(1)
        for c0 in range(0, n_max, chunk):
            keys = torch.arange(c0, min(c0 + chunk, n_max), device=q.device)
            slots = prefix_slots(prob, keys)                                    # [B, J]
            seen = keys.unsqueeze(0) < lens                                      # [B, J]
            # keys past a prefix come from slots of other data (or padding): zero their values so that
            # garbage there (NaN in unwritten cache memory) cannot reach the output through p = 0
            V = prob.v_cache[slots].to(cd).masked_fill(~seen[:, :, None, None], 0.0)
            o_c, lse_c = _attend_block(q, prob.k_cache[slots].to(cd), V, seen[:, None, None, None, :])
            o, lse = merge_states(o, lse, o_c, lse_c)
    if with_tree:
        visible = unpack_mask(prob.mask_bits, n)[:, :, None, None, :]           # [B, n, 1, 1, n]
        K = prob.k_tree.to(cd).reshape(B, n, Hkv, prob.Dqk)
        V = prob.v_tree.to(cd).reshape(B, n, Hkv, prob.Dv)
        o_t, lse_t = _attend_block(q, K, V, visible)
        o, lse = merge_states(o, lse, o_t, lse_t)
    return o.reshape(B * n, prob.Hq, prob.Dv), lse.reshape(B * n, prob.Hq)


def attend_ragged(q, q_pe, k_cache, v_cache, kv_indptr, kv_indices, k_tree, v_tree, mask_bits, sm_scale: float):
    """The ragged verify op (native.attend_ragged: request b's prefix slots are kv_indices[kv_indptr[b] :
    kv_indptr[b+1]], caches [slots, Hkv, D]) in torch, for CPU tensors: the served tree verify of a CPU server
    reads the same SGLang addressing as the CUDA kernel, so one metadata path serves both. The lengths are read on
    the host (a CPU tensor costs no sync). Returns (O [T, Hq, Dv] in q's dtype, natural-log LSE float32 [T, Hq])."""
    B = int(kv_indptr.shape[0]) - 1
    n = int(q.shape[0]) // B
    lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    width = max(1, int(lens.max()))
    cols = torch.arange(width, device=q.device)
    at = (kv_indptr[:-1].to(torch.int64).unsqueeze(1) + cols).clamp(max=max(kv_indices.numel() - 1, 0))
    table = torch.where(cols < lens.unsqueeze(1), kv_indices.to(torch.int64)[at] if kv_indices.numel() else 0, 0)
    prob = Problem("mla" if q_pe is not None else "gqa", q, q_pe, k_cache, v_cache, k_tree, v_tree, 1,
                   table.to(torch.int32), lens.to(torch.int32), mask_bits, float(sm_scale), B, n)
    o, lse = attend(prob, max_prefix_len=int(lens.max()) if B else 0)
    return o.to(q.dtype), lse.to(torch.float32)
