"""FlashInfer as the prefix library: its paged prefill over an MHA/GQA prefix, FlashInfer-MLA over an MLA one;
every tree query of a request over its prefix only, no mask; LSE in base 2.

Two ways to plan, both kept: the engine plans on the host per batch from the exact lengths (`plan` / `run`, the
wrapper reused by all layers through `state`); the server, which knows the lengths on the host only as a bound,
plans once per (width, batch) and writes the length-dependent schedule on the device every forward
(flashinfer_graphs.FlashInferPrefix / FlashInferMLAPrefix: `plan(width, batch)`, `prepare(lengths)`, `run`).
"""
from __future__ import annotations

import torch

from . import install
from .flashinfer_graphs import FI_HEAD_DIMS
from .problem import Problem, cache_4d, empty_rows_to_neg_inf

NAME, TITLE = "flashinfer", "FlashInfer's paged prefill"
LAYOUTS = ("gqa", "mla")   # MLA: FlashInfer-MLA
HEAD_DIMS = FI_HEAD_DIMS   # MHA/GQA head dims (fa2 prefill)
PAGE_SIZES = None          # any: token-level prefix slots
BACKENDS = None
BASE = "2"
MISSING, INSTALL = "flashinfer installed", "pip install flashinfer-python"
_WORKSPACE_BYTES = 128 << 20


def installed() -> bool:
    return install.has_module("flashinfer")


def paged_indices(prob: Problem):
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


def plan(prob: Problem, state: dict) -> None:
    """The batch's wrapper, planned on the host from the exact lengths, once for all layers."""
    if "flashinfer" in state:
        return
    import flashinfer

    ws = state.get("flashinfer_workspace")
    if ws is None:
        ws = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=prob.q_a.device)
    qo_indptr, kv_indptr, kv_indices, last = paged_indices(prob)
    if prob.layout == "mla":
        w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend=state.get("flashinfer_mla_backend", "auto"))
        w.plan(qo_indptr, kv_indptr, kv_indices, prob.prefix_lens, prob.Hq, prob.Dv, prob.Dqk - prob.Dv,
               prob.page_size, False, prob.sm_scale, prob.dtype, prob.dtype)
    else:
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
        w.plan(qo_indptr, kv_indptr, kv_indices, last, prob.Hq, prob.Hkv, prob.Dqk, prob.page_size,
               head_dim_vo=prob.Dv, causal=False, sm_scale=prob.sm_scale, q_data_type=prob.dtype,
               kv_data_type=prob.dtype)
    state["flashinfer"] = w


def run(prob: Problem, state: dict):
    """(O_p, LSE_p, base) of the engine's cascade."""
    plan(prob, state)
    w = state["flashinfer"]
    if prob.layout == "mla":
        cache = cache_4d(prob.k_cache, prob.page_size).squeeze(2)            # [pages, ps, 576]
        o, lse = w.run(prob.q_a, prob.q_b, cache[..., :prob.Dv], cache[..., prob.Dv:], return_lse=True)
    else:
        kv = (cache_4d(prob.k_cache, prob.page_size), cache_4d(prob.v_cache, prob.page_size))
        o, lse = w.run(prob.q_a, kv, return_lse=True)
    return o, empty_rows_to_neg_inf(prob, lse), BASE
