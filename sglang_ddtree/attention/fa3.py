"""FA3's paged attention (sgl_kernel.flash_attn, the kernel of SGLang's fa3 backend) as the prefix library of an
MHA/GQA verify: every tree query of a request over its prefix only, no mask; LSE in natural log.

It plans nothing on the host: it reads the prefix lengths on the device, so one CUDA graph replays at any length
(the engine and the server call it alike: `FA3`, its two entry points).
"""
from __future__ import annotations

import torch

from . import install
from .prefix_attention import PagedPrefix
from .problem import Problem, cache_4d, empty_rows_to_neg_inf

NAME, TITLE = "fa3", "FA3"
LAYOUTS = ("gqa",)
HEAD_DIMS = (64, 96, 128, 192, 256)  # the head dims sgl_kernel's FA3 is built for (equal K and V dims here)
PAGE_SIZES = None                    # any
BACKENDS = None                      # any MHA backend: it reads SGLang's req_to_token as a page table
BASE = "e"
MISSING, INSTALL = "sgl_kernel's FA3 library (flash_ops) installed", "install sglang-kernel with it"


def installed() -> bool:
    return install.sgl_kernel_has("flash_ops")


def attend(q, k_cache, v_cache, page_table, prefix_lens, sm_scale: float):
    """Every query of request b over its first prefix_lens[b] cached tokens, no mask. q [B, n, Hq, D];
    k_cache / v_cache [pages, page_size, Hkv, D]; page_table int32 [B, pages]; prefix_lens int32 [B] on the device.
    Returns (O [B·n, Hq, D], natural-log LSE [B·n, Hq]); FA3 returns the LSE as [B, Hq, n]."""
    from sgl_kernel.flash_attn import flash_attn_with_kvcache

    B, n, H = q.shape[0], q.shape[1], q.shape[2]
    o, lse, *_ = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=prefix_lens, page_table=page_table,
                                         softmax_scale=sm_scale, causal=False, return_softmax_lse=True)
    return o.reshape(B * n, H, -1), lse.transpose(1, 2).reshape(B * n, H)


class FA3(PagedPrefix):
    """FA3 over the prefix (prefix_attention.py's interface). Served: an MHA/GQA target where sgl_kernel's FA3
    library imports (SGLang's fa3 backend's kernel), its paged attention over SGLang's page table (req_to_token's page
    columns, as the fa3 backend builds it) with the prefix lengths read on the device, so nothing is planned on the
    host and a graph replays at any length (`auto` on --attention-backend fa3). The engine: `run_host`."""

    name = "FA3"

    def run(self, q, q_pe, k_cache, v_cache, bs, n, hq, scale, q_whole=None):
        """FA3 over the prefix through the page table: (O, LSE, its base: natural log)."""
        hkv, d = k_cache.shape[-2], k_cache.shape[-1]
        pages = lambda c: c[: c.shape[0] // self.page * self.page].view(-1, self.page, hkv, c.shape[-1])  # noqa: E731
        o_p, lse_p = attend(q.view(bs, n, hq, d), pages(k_cache), pages(v_cache), self.block_table[:bs],
                            self.prefix_lens[:bs], scale)
        return o_p, lse_p, BASE

    @staticmethod
    def plan_host(prob: Problem, state: dict) -> None:
        """The engine's plan: nothing (FA3 reads the lengths on the device)."""

    @staticmethod
    def run_host(prob: Problem, state: dict):
        """(O_p, LSE_p, base) of the engine's cascade (`state` unused: nothing to plan)."""
        q = prob.q_a.reshape(prob.B, prob.n, prob.Hq, prob.Dqk)
        o, lse = attend(q, cache_4d(prob.k_cache, prob.page_size), cache_4d(prob.v_cache, prob.page_size),
                        prob.page_table.to(torch.int32), prob.prefix_lens.to(torch.int32), prob.sm_scale)
        return o, empty_rows_to_neg_inf(prob, lse), BASE


PREFIX = FA3
