"""FlashMLA (sgl_kernel) as the prefix library of an MLA verify: every tree query of a request over its prefix
only, no mask, one KV pass per request; LSE in natural log.

Its plan (the split metadata) reads the prefix lengths: the engine makes it on the host once per batch (`run`'s
`state`), the server every forward out of its CUDA graphs into static buffers (sglang/tree_attention.py).
"""
from __future__ import annotations

from . import install
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


def plan(prob: Problem, state: dict) -> None:
    """The batch's split plan, once for all layers (reads the lengths on the host)."""
    if "flashmla_meta" not in state:
        state["flashmla_meta"] = metadata(prob.prefix_lens, prob.n, prob.Hq)


def run(prob: Problem, state: dict):
    """(O_p, LSE_p, base) of the engine's cascade."""
    plan(prob, state)
    q = prob.q_full().reshape(prob.B, prob.n, prob.Hq, prob.Dqk)
    o, lse = attend(q, cache_4d(prob.k_cache, prob.page_size), prob.page_table, prob.prefix_lens, prob.Dv,
                    state["flashmla_meta"], prob.sm_scale)
    return o, empty_rows_to_neg_inf(prob, lse), BASE

