"""FA3's paged attention (sgl_kernel.flash_attn, the kernel of SGLang's fa3 backend) as the prefix library of an
MHA/GQA verify: every tree query of a request over its prefix only, no mask; LSE in natural log.

It plans nothing on the host: it reads the prefix lengths on the device, so one CUDA graph replays at any length
(the engine and the server call it alike).
"""
from __future__ import annotations

import torch

from . import install
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


def run(prob: Problem, state: dict):
    """(O_p, LSE_p, base) of the engine's cascade (`state` unused: nothing to plan)."""
    q = prob.q_a.reshape(prob.B, prob.n, prob.Hq, prob.Dqk)
    o, lse = attend(q, cache_4d(prob.k_cache, prob.page_size), cache_4d(prob.v_cache, prob.page_size),
                    prob.page_table.to(torch.int32), prob.prefix_lens.to(torch.int32), prob.sm_scale)
    return o, empty_rows_to_neg_inf(prob, lse), BASE
