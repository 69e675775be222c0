"""A compact DeepSeek-V3 causal LM with multi-head latent attention (MLA), dense MLP only, HF weight names.

Why: DDTree must verify MLA targets (DeepSeek-V3, Kimi-K2) through the absorbed MLA form of the
project's verify attention; this is the smallest target with MLA's real shapes (latent 512, rope 64,
nope 128, v 128) that the engine decodes. config.json and weight names are HF's `DeepseekV3ForCausalLM`
(`model.layers.N.self_attn.kv_a_proj_with_mqa.weight`, ...), so transformers and SGLang's DeepseekV2/V3
loader read the same files; a test checks the logits against transformers. MoE layers are not built:
first_k_dense_replace must be >= num_hidden_layers.

Per token x (HF DeepseekV3Attention, rope_scaling null so no yarn mscale):
  q = q_proj(x) (or q_b_proj(q_a_layernorm(q_a_proj(x)))), per head q_nope [128] ‖ q_pe [64]
  c ‖ k_pe = kv_a_proj_with_mqa(x);  c = kv_a_layernorm(c) [512];  k_pe [64] shared by all heads
  q_pe, k_pe rotated with DeepSeek's interleaved pairs (model.apply_rope_interleaved)
  k_nope ‖ v = kv_b_proj(c) per head [128 ‖ 128];  logits = (q_nope·k_nope + q_pe·k_pe) / sqrt(128 + 64)
Plain form (no cache: training, and the reference): exactly that. Cached form (prefill, verify): the
cache holds the latent c ‖ k_pe [576] per token (one "KV head"); W_uk, W_uv = kv_b_proj's per-head
halves; q_nope·k_nope = (W_ukᵀ q_nope)·c, so the query is absorbed to q_abs = W_ukᵀ q_nope [512] and
attends keys c ‖ k_pe with values c; the head output is W_uv o_latent [128]. That is the MLA layout of
sglang_ddtree.attention.tree_verify_attention, which the verify calls (`op_attention`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .model import CausalLM, KVCache, LMConfig, RMSNorm, apply_rope_interleaved, write_slots

PAGE_SIZE = 64  # the verify op's paged view of the dense cache (FlashMLA takes page size 64)


@dataclass
class DeepseekV3Config(LMConfig):
    num_key_value_heads: int = 16
    num_attention_heads: int = 16
    kv_lora_rank: int = 512
    q_lora_rank: int | None = None
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    first_k_dense_replace: int = 2
    num_hidden_layers: int = 2

    KEEP_NONE = ("q_lora_rank",)  # HF's default for a missing q_lora_rank is 1536, not None

    def __post_init__(self):
        if self.first_k_dense_replace < self.num_hidden_layers:
            raise ValueError(f"first_k_dense_replace ({self.first_k_dense_replace}) must be >= num_hidden_layers "
                             f"({self.num_hidden_layers}): the engine's DeepSeek-V3 has dense MLPs only")
        if self.extra.get("rope_scaling") is not None:
            raise ValueError("rope_scaling must be null: the engine's DeepSeek-V3 has no yarn scaling")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def sm_scale(self) -> float:
        return self.qk_head_dim ** -0.5


class MLAttention(nn.Module):
    def __init__(self, c: DeepseekV3Config):
        super().__init__()
        self.c, self.nh = c, c.num_attention_heads
        bias = c.attention_bias
        if c.q_lora_rank is None:
            self.q_proj = nn.Linear(c.hidden_size, self.nh * c.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(c.hidden_size, c.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.rms_norm_eps)
            self.q_b_proj = nn.Linear(c.q_lora_rank, self.nh * c.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim, bias=bias)
        # HF builds the two latent norms with eps 1e-6 whatever rms_norm_eps says, SGLang with rms_norm_eps:
        # the same for the shipped 1e-6
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.rms_norm_eps)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, self.nh * (c.qk_nope_head_dim + c.v_head_dim), bias=False)
        self.o_proj = nn.Linear(self.nh * c.v_head_dim, c.hidden_size, bias=bias)

    def w_uk_uv(self):
        """kv_b_proj's per-head halves: W_uk [H, nope, latent], W_uv [H, v, latent]."""
        c = self.c
        w = self.kv_b_proj.weight.view(self.nh, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
        return w[:, :c.qk_nope_head_dim], w[:, c.qk_nope_head_dim:]

    def latent(self, x, cos, sin):
        """This step's cache rows: c ‖ k_pe [B, T, 1, latent + rope] (normed latent, rotated shared key)."""
        c = self.c
        ckv, k_pe = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
        return torch.cat([self.kv_a_layernorm(ckv), apply_rope_interleaved(k_pe[:, :, None], cos, sin)[:, :, 0]],
                         dim=-1)[:, :, None]

    def query(self, x, cos, sin):
        c = self.c
        q = self.q_proj(x) if c.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(*x.shape[:2], self.nh, c.qk_head_dim)
        q_nope, q_pe = q.split([c.qk_nope_head_dim, c.qk_rope_head_dim], -1)
        return q_nope, apply_rope_interleaved(q_pe, cos, sin)

    def forward(self, x, cos, sin, mask, cache_kv=None, slots=None, prefix_kv=None, attn_fn=None):
        """As model.Attention.forward; cache_kv = (latent cache [B, S, 1, 576],); attn_fn((q_abs, q_pe),
        latent_rows, latent_cache) -> latent output [B, T, H, 512] (e.g. the project's verify attention)."""
        if prefix_kv is not None:
            raise ValueError("prefix_kv is a drafter-training input; an MLA target takes cache_kv or nothing")
        c, B, T = self.c, *x.shape[:2]
        q_nope, q_pe = self.query(x, cos, sin)
        lat = self.latent(x, cos, sin)
        if cache_kv is None:  # plain (decompressed) form, HF's: per-head keys and values from the latent
            k_nope, v = self.kv_b_proj(lat[:, :, 0, :c.kv_lora_rank]).view(
                B, T, self.nh, -1).split([c.qk_nope_head_dim, c.v_head_dim], -1)
            k = torch.cat([k_nope, lat[:, :, :, c.kv_lora_rank:].expand(B, T, self.nh, -1)], -1)
            q = torch.cat([q_nope, q_pe], -1).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=None if mask is None else mask[:, None],
                                               is_causal=mask is None, scale=c.sm_scale).transpose(1, 2)
        else:  # absorbed form over the latent cache
            (cache,) = cache_kv
            write_slots(cache, slots, lat)
            w_uk, w_uv = self.w_uk_uv()
            q_abs = torch.einsum("bthd,hdc->bthc", q_nope, w_uk)
            if attn_fn is not None:
                o_lat = attn_fn((q_abs, q_pe), lat, cache)
            elif mask is None:
                raise ValueError("mask (bool [B, T, S] over the cache) is required with cache_kv and no attn_fn")
            else:
                o_lat = latent_attend(torch.cat([q_abs, q_pe], -1), cache, mask, c.kv_lora_rank, c.sm_scale)
            o = torch.einsum("bthc,hvc->bthv", o_lat, w_uv)
        return self.o_proj(o.reshape(B, T, self.nh * c.v_head_dim))


def latent_attend(q, cache, mask, dv: int, scale: float):
    """q [B, T, H, Dk] over one shared key head cache [B, S, 1, Dk] (values: its first dv) under mask bool
    [B, T, S] -> [B, T, H, dv]. The heads fold into the query rows (no per-head copy of the cache)."""
    B, T, H, D = q.shape
    k = cache[:, None, :, 0]                                                        # [B, 1, S, Dk]
    o = F.scaled_dot_product_attention(q.reshape(B, 1, T * H, D), k, k[..., :dv],
                                       attn_mask=mask.repeat_interleave(H, dim=1)[:, None], scale=scale)
    return o.view(B, T, H, dv)


class DeepseekV3ForCausalLM(CausalLM):
    ATTENTION = MLAttention

    @property
    def rope_dim(self) -> int:
        return self.config.qk_rope_head_dim

    def new_cache(self, batch: int, capacity: int, dtype, device) -> KVCache:
        c = self.config
        return KVCache(c.num_hidden_layers, batch, 1, capacity, c.kv_lora_rank + c.qk_rope_head_dim, dtype, device,
                       values=False)

    def op_attention_fits(self, device: torch.device, dtype) -> bool:
        return True  # the MLA op takes every device and dtype (its torch path on the CPU and for fp32)

    def op_attention(self, seq_lens, mask_bits, cap, prefix_choice: str = "auto"):
        """attn_fn for the verify forward: the latent cache [B, cap, 1, 576] seen as pages of PAGE_SIZE
        slots (request b's pages b·cap/PAGE_SIZE ...), the prefix its first seq_len slots, this step's latent
        rows the tree KV; sm_scale 1/sqrt(qk_nope + qk_rope)."""
        from ..attention import tree_verify_attention

        B, c = seq_lens.shape[0], self.config
        ps = PAGE_SIZE if cap % PAGE_SIZE == 0 else cap
        pages = cap // ps
        page_table = (torch.arange(B, device=seq_lens.device)[:, None] * pages
                      + torch.arange(pages, device=seq_lens.device)).to(torch.int32)
        prefix = seq_lens.to(torch.int32)

        def fn(q, lat, cache):
            (q_abs, q_pe), n = q, q[0].shape[1]
            o, _ = tree_verify_attention((q_abs.flatten(0, 1), q_pe.flatten(0, 1)),
                                         cache.view(B * pages, ps, cache.shape[-1]), page_table, prefix,
                                         lat.reshape(B * n, -1), mask_bits, c.sm_scale, max_prefix_len=cap,
                                         backend=prefix_choice)
            return o.view(B, n, *o.shape[1:])
        return fn


__all__ = ["DeepseekV3Config", "DeepseekV3ForCausalLM", "MLAttention", "latent_attend", "PAGE_SIZE"]
