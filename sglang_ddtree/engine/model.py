"""A compact Qwen3 causal LM that reads Hugging Face Qwen3 checkpoints, with the KV cache in our hands, and
the parts every engine target shares (config, RMSNorm, rope, MLP, decoder layer, cache; mla.py is the other).

Why our own: the decode loop needs to place keys at arbitrary cache slots (tree nodes at seq_len + i),
give each query its own position (seq_len + depth) and attend under an arbitrary boolean mask (the
ancestor mask), then move accepted slots. transformers' Qwen3ForCausalLM does not expose that cleanly;
this file does, in one read. Weight names match transformers (`model.layers.N.self_attn.q_proj.weight`,
...), so HF and SGLang load the same safetensors. A test checks the logits against transformers.

Cache layout: one dense tensor per layer, [B, S, Hkv, D] (a paged cache with one page of S slots per
request, the layout the project's verify-attention op reads). A request's valid keys are the slots
j < seq_len[b]; slots beyond hold stale values that the mask hides until a commit overwrites them.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LMConfig:
    """The fields every target config shares; a subclass adds its architecture's. Each config.json key the
    dataclass does not name is kept in `extra` and written back unchanged."""
    vocab_size: int = 259
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    extra: dict = field(default_factory=dict)

    KEEP_NONE = ()  # fields written as null when None (a reader's default for a missing key differs)

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in fields(cls)} - {"extra"}
        kw = {k: d[k] for k in names if k in d and (d[k] is not None or k in cls.KEEP_NONE)}
        return cls(**cls.derived(d, kw), extra={k: v for k, v in d.items() if k not in names})

    @classmethod
    def derived(cls, d: dict, kw: dict) -> dict:
        return kw

    @classmethod
    def load(cls, path: str):
        with open(os.path.join(path, "config.json")) as f:
            return cls.from_dict(json.load(f))

    def to_dict(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        return {**extra, **{k: v for k, v in d.items() if v is not None or k in self.KEEP_NONE}}


@dataclass
class Qwen3Config(LMConfig):
    head_dim: int = 32

    @classmethod
    def derived(cls, d: dict, kw: dict) -> dict:
        if "head_dim" not in d:
            kw["head_dim"] = d["hidden_size"] // d["num_attention_heads"]
        return kw


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # computed in float32 like transformers, cast back
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype):
    """cos, sin [..., head_dim] for integer positions (neox layout: halves rotated together)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    ang = positions.float()[..., None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x [B, T, H, D]; cos/sin [B, T, D]."""
    cos, sin = cos[:, :, None], sin[:, :, None]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def apply_rope_interleaved(x, cos, sin):
    """DeepSeek's layout (HF `rope_interleave`): pairs (x0, x1), (x2, x3), ... each rotated by one frequency.
    De-interleaved first (evens, then odds), so the output is in the neox layout, exactly as HF returns it;
    q and k are permuted alike, so their dot products are those of the in-place pair rotation."""
    return apply_rope(torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1), cos, sin)


def write_slots(cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> None:
    """cache [B, S, H, D][b, slots[b, t]] = x[b, t] for x [B, T, H, D], slots i64 [B, T] (no host sync)."""
    B, T, H, D = x.shape
    cache.scatter_(1, slots[:, :, None, None].expand(B, T, H, D), x)


def read_slots(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    B, _, H, D = cache.shape
    return cache.gather(1, slots[:, :, None, None].expand(B, slots.shape[1], H, D))


class KVCache:
    """Dense per-layer K/V, [B, S, Hkv, D] each, plus the per-request number of valid slots.
    values=False: keys only (MLA's latent cache, whose values are a view of the keys)."""

    def __init__(self, num_layers, batch, kv_heads, capacity, head_dim, dtype, device, values: bool = True):
        shape = (batch, capacity, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)] if values else []
        self.seq_lens = torch.zeros(batch, dtype=torch.int64, device=device)
        self.capacity = capacity

    def layer(self, i: int) -> tuple:
        """Layer i's cache tensors, as its attention takes them: (k, v), or (latent,) without values."""
        return (self.k[i], self.v[i]) if self.v else (self.k[i],)

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy slots src [B, T] to slots dst [B, T] in every layer (gather first, then scatter)."""
        for c in (*self.k, *self.v):
            write_slots(c, dst, read_slots(c, src))


def attend(q, k, v, mask):
    """q [B, T, H, D], k/v [B, S, Hkv, D], mask bool [B, T, S] (True = visible) or None (causal)
    -> [B, T, H, D]."""
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if mask is None:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
    return o.transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=c.attention_bias)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=c.attention_bias)
        self.q_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, c.rms_norm_eps)

    def heads(self, x, n):  # [B, T, n*D] -> [B, T, n, D]
        return x.view(*x.shape[:2], n, self.hd)

    def kv(self, x, cos, sin):
        k = apply_rope(self.k_norm(self.heads(self.k_proj(x), self.nkv)), cos, sin)
        return k, self.heads(self.v_proj(x), self.nkv)

    def forward(self, x, cos, sin, mask, cache_kv=None, slots=None, prefix_kv=None, attn_fn=None):
        """cache_kv + slots: write this step's keys into their cache slots, attend over the cache (or
        attn_fn(q, k, v, k_cache, v_cache) -> [B, T, H, D], e.g. the project's tree verify attention).
        prefix_kv: attend over cat(prefix, this step) instead (drafter training)."""
        q = apply_rope(self.q_norm(self.heads(self.q_proj(x), self.nh)), cos, sin)
        k, v = self.kv(x, cos, sin)
        if cache_kv is not None:
            ck, cv = cache_kv
            write_slots(ck, slots, k)
            write_slots(cv, slots, v)
            if attn_fn is not None:
                return self.o_proj(attn_fn(q, k, v, ck, cv).reshape(*x.shape[:2], self.nh * self.hd))
            k, v = ck, cv
        elif prefix_kv is not None:
            k, v = torch.cat([prefix_kv[0], k], dim=1), torch.cat([prefix_kv[1], v], dim=1)
        o = attend(q, k, v, mask)
        return self.o_proj(o.reshape(*x.shape[:2], self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LMConfig, attention=Attention):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask, cache_kv=None, slots=None, prefix_kv=None, attn_fn=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache_kv, slots, prefix_kv, attn_fn)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, c: LMConfig, attention):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, attention) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class CausalLM(nn.Module):
    """forward(ids, positions, mask, cache, slots, capture) -> (logits, features).

    features: the residual stream after each layer in `capture`, concatenated on the last dim (HF's
    hidden_states[i + 1]; SGLang's aux hidden state captured before layer i + 1) — the DFlash context.
    Without a cache the attention is plain causal over `ids` (training).
    A subclass names its attention module (`ATTENTION`), its rotary width (`rope_dim`), its cache
    (`new_cache`) and its verify through the project's tree attention (`op_attention`).
    """
    ATTENTION = None

    def __init__(self, c: LMConfig):
        super().__init__()
        self.config = c
        self.model = Body(c, self.ATTENTION)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def embed(self, ids):
        return self.model.embed_tokens(ids)

    def forward(self, ids, positions=None, mask=None, cache: KVCache | None = None, slots=None,
                capture=(), logits_index=None, attn_fn=None):
        c = self.config
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
        x = self.embed(ids)
        cos, sin = rope_cos_sin(positions, self.rope_dim, c.rope_theta, x.dtype)
        feats = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, cache.layer(i) if cache is not None else None, slots, None, attn_fn)
            if i in capture:
                feats.append(x)
        if logits_index is not None:  # only some rows need logits (prefill: the last prompt token)
            x = x.gather(1, logits_index[:, :, None].expand(-1, -1, x.shape[-1]))
        logits = self.lm_head(self.model.norm(x))
        return logits, (torch.cat(feats, dim=-1) if feats else None)


class Qwen3ForCausalLM(CausalLM):
    ATTENTION = Attention

    @property
    def rope_dim(self) -> int:
        return self.config.head_dim

    def new_cache(self, batch: int, capacity: int, dtype, device) -> KVCache:
        c = self.config
        return KVCache(c.num_hidden_layers, batch, c.num_key_value_heads, capacity, c.head_dim, dtype, device)

    def op_attention_fits(self, device: torch.device, dtype) -> bool:
        return device.type == "cuda" and dtype == torch.bfloat16 and self.config.head_dim == 128

    def op_attention(self, seq_lens, mask_bits, cap, prefix_choice: str = "auto"):
        """attn_fn for the verify forward through the project's kernel: the dense cache is a paged cache
        with one page of `cap` slots per request; the prefix is the first seq_len slots, the tree K/V are
        this step's (mask_bits: TreeBatch.mask_bits)."""
        from ..attention import tree_verify_attention

        B = seq_lens.shape[0]
        page_table = torch.arange(B, dtype=torch.int32, device=seq_lens.device)[:, None]
        prefix = seq_lens.to(torch.int32)
        scale = self.config.head_dim ** -0.5

        def fn(q, k, v, ck, cv):
            n = q.shape[1]
            o, _ = tree_verify_attention(q.reshape(B * n, *q.shape[2:]), (ck, cv), page_table, prefix,
                                         (k.reshape(B * n, *k.shape[2:]), v.reshape(B * n, *v.shape[2:])),
                                         mask_bits, scale, max_prefix_len=cap, backend=prefix_choice)
            return o.view(B, n, *o.shape[1:])
        return fn


def init_weights(model: nn.Module, std: float = 0.02, seed: int = 0) -> None:
    """Deterministic small-normal init (norms at 1), the same on every device."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                p.zero_()


def prefix_tree_mask(seq_lens: torch.Tensor, tree_mask: torch.Tensor, capacity: int) -> torch.Tensor:
    """[B, n, S] visibility for n tree queries: every slot j < seq_len, plus tree slots by tree_mask."""
    B, n, _ = tree_mask.shape
    ar = torch.arange(capacity, device=seq_lens.device)
    mask = (ar[None, :] < seq_lens[:, None])[:, None, :].expand(B, n, capacity).clone()
    cols = (seq_lens[:, None, None] + torch.arange(n, device=seq_lens.device)).expand(B, n, n)
    mask.scatter_(2, cols, tree_mask)
    return mask


__all__ = ["LMConfig", "Qwen3Config", "CausalLM", "Qwen3ForCausalLM", "KVCache", "RMSNorm", "MLP", "DecoderLayer",
           "rope_cos_sin", "apply_rope", "apply_rope_interleaved", "write_slots", "read_slots", "attend",
           "prefix_tree_mask", "init_weights"]
