"""The oracle for verify attention: dense softmax over [prefix ‖ tree] keys with the full mask, per request.

Deliberately naive (one request at a time, every key materialised, no online softmax, no LSE merge), so
it shares no code path with the backends it checks: float64 on the CPU, or float32 on the GPU for large
shapes. Returns O [T, Hq, Dv] and the natural-log LSE [T, Hq].
"""
from __future__ import annotations

import torch

from .problem import check_contents, make_problem, unpack_mask


def reference_tree_attention(q, kv_cache, page_table, prefix_lens, tree_kv, tree_mask, sm_scale, *,
                             dtype=torch.float64, device=None):
    """Same arguments as `tree_verify_attention`; computes in `dtype` on `device` (default: CPU)."""
    prob = make_problem(q, kv_cache, page_table, prefix_lens, tree_kv, tree_mask, sm_scale)
    check_contents(prob)
    dev = torch.device("cpu") if device is None else torch.device(device)
    cast = lambda t: t.to(device=dev, dtype=dtype)
    B, n, Hq, Hkv, G = prob.B, prob.n, prob.Hq, prob.Hkv, prob.G
    q_full, kc, vc = cast(prob.q_full()), cast(prob.k_cache), cast(prob.v_cache)
    kt, vt = cast(prob.k_tree), cast(prob.v_tree)
    table = prob.page_table.to(dev, torch.int64)
    lens = prob.prefix_lens.to("cpu", torch.int64).tolist()
    visible_tree = unpack_mask(prob.mask_bits.to(dev), n)                 # [B, n, n]
    out = torch.empty(B * n, Hq, prob.Dv, dtype=dtype, device=dev)
    lse = torch.empty(B * n, Hq, dtype=dtype, device=dev)
    for b in range(B):
        N = lens[b]
        pos = torch.arange(N, device=dev)
        slots = table[b, pos // prob.page_size] * prob.page_size + pos % prob.page_size
        K = torch.cat([kc[slots], kt[b * n:(b + 1) * n]])                   # [N + n, Hkv, Dqk]
        V = torch.cat([vc[slots], vt[b * n:(b + 1) * n]])                   # [N + n, Hkv, Dv]
        visible = torch.cat([torch.ones(n, N, dtype=torch.bool, device=dev), visible_tree[b]], dim=1)
        qb = q_full[b * n:(b + 1) * n].reshape(n, Hkv, G, -1)
        logits = torch.einsum("ikgd,jkd->ikgj", qb, K) * prob.sm_scale       # [n, Hkv, G, N + n]
        logits = logits.masked_fill(~visible[:, None, None, :], float("-inf"))
        s = torch.logsumexp(logits, dim=-1)
        p = torch.exp(logits - s.unsqueeze(-1))
        out[b * n:(b + 1) * n] = torch.einsum("ikgj,jkd->ikgd", p, V).reshape(n, Hq, -1)
        lse[b * n:(b + 1) * n] = s.reshape(n, Hq)
    return out, lse
