"""FlashMLA (sgl_kernel) as the prefix library of an MLA verify: every tree query of a request over its prefix
only, no mask, one KV pass per request; LSE in natural log.

Its plan (the split metadata) reads the prefix lengths: the engine makes it on the host once per batch
(`FlashMLA.plan_host`, kept in `state`), the server every forward out of its CUDA graphs into static buffers
(`FlashMLA.plan`).
"""
from __future__ import annotations

import torch

from . import install
from .native import MLA_LATENT, MLA_ROPE
from .prefix_attention import PagedPrefix
from .problem import Problem, cache_4d, empty_rows_to_neg_inf

NAME, TITLE = "flashmla", "FlashMLA"
LAYOUTS = ("mla",)
HEAD_DIMS = ()              # MLA only: latent 512 + rope 64 (native.MLA_LATENT / MLA_ROPE)
PAGE_SIZES = (64,)
BACKENDS = ("flashmla",)    # in a server, its page tables are those of SGLang's FlashMLA backend
BASE = "e"
MISSING, INSTALL = "sgl_kernel's FlashMLA (flashmla_ops) installed", "install sglang-kernel with it"


def installed() -> bool:
    return install.sgl_kernel_has("flashmla_ops")


def metadata(prefix_lens, n: int, heads: int):
    """FlashMLA's split plan for n queries x `heads` heads per request over one latent KV head."""
    from sgl_kernel.flash_mla import get_mla_metadata

    return get_mla_metadata(prefix_lens, n * heads, 1)


def attend(q, k_cache, page_table, prefix_lens, dv: int, meta, sm_scale: float):
    """Every query of request b over its first prefix_lens[b] cached tokens, no mask. q [B, n, H, 576]; k_cache
    [pages, page_size, 1, 576]; page_table int32 [B, pages]. Returns (O [B·n, H, dv], natural-log LSE [B·n, H]);
    FlashMLA returns the LSE as [B, H, n]."""
    from sgl_kernel.flash_mla import flash_mla_with_kvcache

    B, n, H = q.shape[0], q.shape[1], q.shape[2]
    o, lse = flash_mla_with_kvcache(q, k_cache, page_table, prefix_lens, dv, meta[0], meta[1],
                                    softmax_scale=sm_scale, causal=False)
    return o.reshape(B * n, H, dv), lse.transpose(1, 2).reshape(B * n, H)


class FlashMLA(PagedPrefix):
    """FlashMLA over the prefix (prefix_attention.py's interface). Served: an MLA target on the flashmla backend
    (page size 64), the default there (`auto`): our kernel is several times slower than FlashMLA over an MLA prefix
    (docs/benchmarks/round-cost-h200-2026-12-04.md). The metadata fills a page table and the prefix lengths from
    req_to_token and FlashMLA's split plan for the forward's width (out of the graph, into static buffers, as
    SGLang's own FlashMLA backend does); per layer FlashMLA attends every tree query over its prefix. The engine:
    `plan_host` / `run_host`."""

    name = "FlashMLA"
    needs_width = True

    def __init__(self, target):
        super().__init__(target)
        self.hq = target.sgl.flashmla_q_heads()  # FlashMLA's plan is made before the layers see any query
        self._plans = {}  # verify width -> FlashMLA's split plan in static buffers (graphs read their addresses)
        self._plan = None  # the plan of the forward under way: (tile metadata, num_splits[:bs + 1])

    def plan(self, req_to_token, rows, lens, width, bs: int) -> None:
        """The page table and lengths, then FlashMLA's split plan for this forward, made here (out of any graph,
        every replay) into static buffers: SGLang runs a captured forward more than once after one metadata call
        (warm-up, then capture), so a plan made by the first layer would be the warm-up's tensors inside the graph,
        freed at the next metadata."""
        super().plan(req_to_token, rows, lens, width, bs)
        n = width
        tile, splits = metadata(self.prefix_lens[:bs], n, self.hq)
        static = self._plans.get(n)
        if static is None or static[0].shape != tile.shape or static[1].shape[0] < bs + 1:
            cap = max(bs, self.prefix_lens.shape[0]) + 1
            static = self._plans[n] = (torch.empty_like(tile),
                                       torch.zeros(cap, dtype=splits.dtype, device=self.device))
        static[0].copy_(tile)
        static[1][: bs + 1].copy_(splits)
        self._plan = (static[0], static[1][: bs + 1])

    def run(self, q, q_pe, k_cache, v_cache, bs, n, hq, scale, q_whole=None):
        """FlashMLA over the prefix through its page table, reading the queries whole as SGLang's flashmla backend
        hands them (q_whole): (O, LSE, its base: natural log)."""
        o_p, lse_p = attend(q_whole.view(bs, n, hq, MLA_LATENT + MLA_ROPE),
                            k_cache.view(-1, self.page, 1, MLA_LATENT + MLA_ROPE),
                            self.block_table[:bs], self.prefix_lens[:bs], MLA_LATENT, self._plan, scale)
        return o_p, lse_p, BASE

    @staticmethod
    def plan_host(prob: Problem, state: dict) -> None:
        """The engine's split plan for the batch, once for all layers (reads the lengths on the host)."""
        if "flashmla_meta" not in state:
            state["flashmla_meta"] = metadata(prob.prefix_lens, prob.n, prob.Hq)

    @staticmethod
    def run_host(prob: Problem, state: dict):
        """(O_p, LSE_p, base) of the engine's cascade."""
        FlashMLA.plan_host(prob, state)
        q = prob.q_full().reshape(prob.B, prob.n, prob.Hq, prob.Dqk)
        o, lse = attend(q, cache_4d(prob.k_cache, prob.page_size), prob.page_table, prob.prefix_lens, prob.Dv,
                        state["flashmla_meta"], prob.sm_scale)
        return o, empty_rows_to_neg_inf(prob, lse), BASE


PREFIX = FlashMLA

