"""FlashInfer as the prefix library: its paged prefill over an MHA/GQA prefix, FlashInfer-MLA over an MLA one;
every tree query of a request over its prefix only, no mask; LSE in base 2.

Two ways to plan, both entry points of `FlashInfer`: the engine plans on the host per batch from the exact lengths
(`plan_host` / `run_host`, the wrapper reused by all layers through `state`); the server, which knows the lengths on
the host only as a bound, plans once per (width, batch) and writes the length-dependent schedule on the device every
forward (`plan` / `run` over flashinfer_graphs.FlashInferPrefix / FlashInferMLAPrefix: `plan(width, batch)`,
`prepare(lengths)`, `run`).
"""
from __future__ import annotations

import torch

from . import flashinfer_graphs, install
from .flashinfer_graphs import FI_HEAD_DIMS
from .prefix_attention import CascadePrefix, Unavailable
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


class FlashInfer(CascadePrefix):
    """FlashInfer over the prefix (prefix_attention.py's interface). Served:
    - an MHA/GQA target (triton or flashinfer, head dim 64/128/256; `auto` there): FlashInfer's paged prefill (the
      kernel family of DFLASH's chain verify on --attention-backend flashinfer) over the token-level prefix slots, so
      any page size. Our kernel reads the whole prefix once per 64-row tile of a request's n·G query rows, FlashInfer
      splits it across CTAs by length. FlashInfer plans on the host from the KV lengths, which SGLang knows there
      only as an upper bound (overlap scheduling), and a plan made from a bound misplaces the split partial outputs
      (flashinfer_graphs.py): so its host plan is made once per (width, batch) and the length-dependent schedule is
      written on the device in the metadata (flashinfer_graphs.FlashInferPrefix);
    - an MLA target (opt-in: not yet served on the GPU): FlashInfer-MLA (SGLang's flashinfer MLA backend's kernel)
      over the token-level latent prefix slots, on any MLA backend. Its kernel trusts the host plan's per-work KV
      ranges, so nothing of its plan but the grid and the offsets is kept: the works and merges are written on the
      device in the metadata from the exact lengths (flashinfer_graphs.FlashInferMLAPrefix).
    Planned once at construction at the widest width (batch 1), so that a FlashInfer that cannot compile or plan is
    known before any request (`Unavailable`). The engine: `plan_host` / `run_host`."""

    name = "FlashInfer"
    needs_width = True

    def __init__(self, target):
        super().__init__(target)
        sgl = target.sgl
        k, _ = sgl.kv_buffers(0)
        self.mla = target.mla
        self.width = None  # the width the metadata planned (checked by each layer)
        workspace = sgl.workspace()
        try:
            if self.mla:
                self.fi = flashinfer_graphs.FlashInferMLAPrefix(
                    self.device, heads=sgl.q_heads(target.tp), dtype=k.dtype, context=target.context,
                    max_bs=int(target.max_bs), widths=target.widths, sms=target.sms, workspace=workspace)
                self.fi.plan(target.n)
            else:
                self.fi = flashinfer_graphs.FlashInferPrefix(
                    self.device, q_heads=sgl.q_heads(target.tp), kv_heads=int(k.shape[1]),
                    head_dim=int(k.shape[2]), dtype=k.dtype, context=target.context, max_bs=int(target.max_bs),
                    widths=target.widths, sms=target.sms, workspace=workspace)
                self.fi.plan(target.n, 1)
        except Exception as e:  # noqa: BLE001 — a JIT, import or plan failure: the reason is logged or raised
            raise Unavailable(self.name, f"{type(e).__name__}: {e}") from e

    def plan(self, req_to_token, rows, lens, width, bs: int) -> None:
        """The wrapper of (width, batch), its slot lists and device schedule."""
        self.width = width
        self.fi.prepare(width, bs, req_to_token, rows, lens)

    def run(self, q, q_pe, k_cache, v_cache, bs, n, hq, scale, q_whole=None):
        """FlashInfer over the prefix: (O, LSE, its base: 2). A key-less side (a padding row at seq_len 0) has LSE
        -inf: weight 0 in the merge, its O never read; rows never mix. An MLA target: q the latent queries, q_pe
        their rope part, k_cache the latent cache (latent ‖ rope)."""
        if n != self.width or hq != self.fi.hq:
            raise RuntimeError(f"DDTREE tree verify: {n} queries x {hq} heads a request, but FlashInfer was planned "
                               f"for {self.width} x {self.fi.hq}")
        if self.mla:
            o_p, lse_p = self.fi.run(n, q, q_pe, k_cache, scale)
        else:
            o_p, lse_p = self.fi.run(n, bs, q, k_cache, v_cache, scale)
        return o_p, lse_p, BASE

    @staticmethod
    def plan_host(prob: Problem, state: dict) -> None:
        """The engine's wrapper for the batch, planned on the host from the exact lengths, once for all layers."""
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

    @staticmethod
    def run_host(prob: Problem, state: dict):
        """(O_p, LSE_p, base) of the engine's cascade."""
        FlashInfer.plan_host(prob, state)
        w = state["flashinfer"]
        if prob.layout == "mla":
            cache = cache_4d(prob.k_cache, prob.page_size).squeeze(2)            # [pages, ps, 576]
            o, lse = w.run(prob.q_a, prob.q_b, cache[..., :prob.Dv], cache[..., prob.Dv:], return_lse=True)
        else:
            kv = (cache_4d(prob.k_cache, prob.page_size), cache_4d(prob.v_cache, prob.page_size))
            o, lse = w.run(prob.q_a, kv, return_lse=True)
        return o, empty_rows_to_neg_inf(prob, lse), BASE


PREFIX = FlashInfer
