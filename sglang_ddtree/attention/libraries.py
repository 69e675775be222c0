"""Prefix attention through FlashMLA and FA3 (sgl_kernel) and FlashInfer, when they import.

Each adapter returns (O_p [T, Hq, Dv], LSE_p [T, Hq], base) for the n tree queries of every request over
its prefix only (no mask: one KV pass per request shared by all n queries). The base is what the library
returns ("e" for FlashMLA and FA3, "2" for FlashInfer) and travels with the LSE to `merge_states`.
Library planning (FlashInfer's plan, FlashMLA's tile metadata) happens once per batch and is kept in the
caller's `plan` dict, so the layers of one forward reuse it; planning reads the prefix lengths on the host.
FA3 plans nothing on the host: it reads the lengths on the device (as SGLang's fa3 backend runs it in graphs).
The served verify's FlashInfer prefixes read none: flashinfer_graphs.py.
"""
from __future__ import annotations

import functools
import math

import torch

from .problem import Problem

_WORKSPACE_BYTES = 128 << 20


@functools.cache
def available(name: str) -> bool:
    try:
        if name == "flashmla":
            from sgl_kernel import flash_mla
            return flash_mla._flashmla_import_error is None
        if name == "flashinfer":
            import flashinfer  # noqa: F401
            return True
        if name == "fa3":  # sgl_kernel's FA3 library (flash_ops): SGLang's fa3 backend's kernels
            from sgl_kernel.flash_attn import flash_attn_with_kvcache  # noqa: F401
            return True
    except Exception:
        return False
    raise ValueError(f"unknown library {name!r}")


def supports(name: str, prob: Problem) -> bool:
    if prob.q_a.device.type != "cuda" or prob.dtype not in (torch.bfloat16, torch.float16):
        return False
    if name == "flashmla":
        return prob.layout == "mla" and prob.page_size == 64 and prob.Dqk == 576 and prob.Dv == 512
    if name == "flashinfer":
        return True
    if name == "fa3":
        return prob.layout == "gqa" and prob.Dqk == prob.Dv and prob.Dqk in FA3_HEAD_DIMS
    return False


def _cache_4d(flat: torch.Tensor, page_size: int) -> torch.Tensor:
    """[slots, Hkv, D] (a view of the paged cache) → [pages, page_size, Hkv, D]."""
    return flat.unflatten(0, (-1, page_size))


def _empty_rows_to_neg_inf(prob: Problem, lse: torch.Tensor) -> torch.Tensor:
    """Requests with no prefix have no keys: force LSE −inf whatever the library wrote there."""
    empty = (prob.prefix_lens == 0).repeat_interleave(prob.n).unsqueeze(1)
    return torch.where(empty, torch.full_like(lse, -math.inf), lse)


def flashmla_metadata(prefix_lens: torch.Tensor, n: int, heads: int):
    """FlashMLA's split plan for n queries x `heads` heads per request over one latent KV head."""
    from sgl_kernel.flash_mla import get_mla_metadata

    return get_mla_metadata(prefix_lens, n * heads, 1)


def flashmla_attend(q: torch.Tensor, k_cache: torch.Tensor, page_table: torch.Tensor, prefix_lens: torch.Tensor,
                    dv: int, meta, sm_scale: float):
    """Every query of request b over its first prefix_lens[b] cached tokens, no mask. q [B, n, H, 576]; k_cache
    [pages, page_size, 1, 576]; page_table int32 [B, pages]. Returns (O [B·n, H, dv], natural-log LSE [B·n, H]);
    FlashMLA returns the LSE as [B, H, n]."""
    from sgl_kernel.flash_mla import flash_mla_with_kvcache

    B, n, H = q.shape[0], q.shape[1], q.shape[2]
    o, lse = flash_mla_with_kvcache(q, k_cache, page_table, prefix_lens, dv, meta[0], meta[1],
                                    softmax_scale=sm_scale, causal=False)
    return o.reshape(B * n, H, dv), lse.transpose(1, 2).reshape(B * n, H)


def flashmla_prefix(prob: Problem, plan: dict):
    if "flashmla_meta" not in plan:
        plan["flashmla_meta"] = flashmla_metadata(prob.prefix_lens, prob.n, prob.Hq)
    q = prob.q_full().reshape(prob.B, prob.n, prob.Hq, prob.Dqk)
    o, lse = flashmla_attend(q, _cache_4d(prob.k_cache, prob.page_size), prob.page_table, prob.prefix_lens,
                             prob.Dv, plan["flashmla_meta"], prob.sm_scale)
    return o, _empty_rows_to_neg_inf(prob, lse), "e"


FA3_HEAD_DIMS = (64, 96, 128, 192, 256)  # the head dims sgl_kernel's FA3 is built for (equal K and V dims here)


def fa3_attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
               prefix_lens: torch.Tensor, sm_scale: float):
    """Every query of request b over its first prefix_lens[b] cached tokens, no mask, through FA3's paged
    attention (sgl_kernel.flash_attn.flash_attn_with_kvcache, the kernel of SGLang's fa3 backend). q [B, n, Hq, D];
    k_cache / v_cache [pages, page_size, Hkv, D]; page_table int32 [B, pages]; prefix_lens int32 [B] on the device
    (FA3 reads them there: nothing is planned on the host, so a CUDA graph replays at any length). Returns (O
    [B·n, Hq, D], natural-log LSE [B·n, Hq]); FA3 returns the LSE as [B, Hq, n]."""
    from sgl_kernel.flash_attn import flash_attn_with_kvcache

    B, n, H = q.shape[0], q.shape[1], q.shape[2]
    o, lse, *_ = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=prefix_lens, page_table=page_table,
                                         softmax_scale=sm_scale, causal=False, return_softmax_lse=True)
    return o.reshape(B * n, H, -1), lse.transpose(1, 2).reshape(B * n, H)


def fa3_prefix(prob: Problem, plan: dict):
    q = prob.q_a.reshape(prob.B, prob.n, prob.Hq, prob.Dqk)
    o, lse = fa3_attend(q, _cache_4d(prob.k_cache, prob.page_size), _cache_4d(prob.v_cache, prob.page_size),
                        prob.page_table.to(torch.int32), prob.prefix_lens.to(torch.int32), prob.sm_scale)
    return o, _empty_rows_to_neg_inf(prob, lse), "e"


def _paged_indices(prob: Problem):
    """FlashInfer's CSR page lists from the dense page table (host side, at plan time)."""
    lens = prob.prefix_lens.to(torch.int64)
    pages = (lens + prob.page_size - 1) // prob.page_size
    indptr = torch.zeros(prob.B + 1, dtype=torch.int32, device=lens.device)
    indptr[1:] = torch.cumsum(pages, 0)
    cols = torch.arange(prob.page_table.shape[1], device=lens.device)
    indices = prob.page_table[cols.unsqueeze(0) < pages.unsqueeze(1)].to(torch.int32)
    if indices.numel() == 0:
        indices = torch.zeros(1, dtype=torch.int32, device=lens.device)
    last = torch.where(lens > 0, (lens - 1) % prob.page_size + 1, torch.zeros_like(lens)).to(torch.int32)
    qo_indptr = (torch.arange(prob.B + 1, device=lens.device) * prob.n).to(torch.int32)
    return qo_indptr, indptr, indices, last


def flashinfer_prefix(prob: Problem, plan: dict):
    import flashinfer

    dev = prob.q_a.device
    if "flashinfer" not in plan:
        ws = plan.get("flashinfer_workspace")
        if ws is None:
            ws = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        qo_indptr, kv_indptr, kv_indices, last = _paged_indices(prob)
        if prob.layout == "mla":
            w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend=plan.get("flashinfer_mla_backend", "auto"))
            w.plan(qo_indptr, kv_indptr, kv_indices, prob.prefix_lens, prob.Hq, prob.Dv, prob.Dqk - prob.Dv,
                   prob.page_size, False, prob.sm_scale, prob.dtype, prob.dtype)
        else:
            w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
            w.plan(qo_indptr, kv_indptr, kv_indices, last, prob.Hq, prob.Hkv, prob.Dqk, prob.page_size,
                   head_dim_vo=prob.Dv, causal=False, sm_scale=prob.sm_scale, q_data_type=prob.dtype,
                   kv_data_type=prob.dtype)
        plan["flashinfer"] = w
    w = plan["flashinfer"]
    if prob.layout == "mla":
        cache = _cache_4d(prob.k_cache, prob.page_size).squeeze(2)            # [pages, ps, 576]
        o, lse = w.run(prob.q_a, prob.q_b, cache[..., :prob.Dv], cache[..., prob.Dv:], return_lse=True)
    else:
        kv = (_cache_4d(prob.k_cache, prob.page_size), _cache_4d(prob.v_cache, prob.page_size))
        o, lse = w.run(prob.q_a, kv, return_lse=True)
    return o, _empty_rows_to_neg_inf(prob, lse), "2"


PREFIX = {"flashmla": flashmla_prefix, "flashinfer": flashinfer_prefix, "fa3": fa3_prefix}
