"""The DFlash block drafter (z-lab's DFlashDraftModel), in the same style as model.py.

Targets: the Qwen3 (model.py) and the DeepSeek-V3 MLA (mla.py) ones alike; the drafter is Qwen3-style
attention either way, fed by the target's hidden states.

One draft pass proposes the next L = block_size - 1 tokens at once. Input: the block
[last bonus token, MASK x L] embedded with the *target's* embeddings, at positions seq_len .. seq_len+L.
Each layer's queries come from the block; its keys/values are the projected target context (cached)
followed by the block's own keys, and attention inside the block is non-causal. The context is the
target's residual stream after the layers in `target_layer_ids`, concatenated, through `fc` and
`hidden_norm`, then each layer's k_proj/k_norm/RoPE and v_proj: the drafter's cache holds only that
projected context (never the block). Output: the drafter's final norm, then the *target's* lm_head.

Checkpoint layout is SGLang's / z-lab's: `layers.N.*`, `fc.weight`, `hidden_norm.weight`, `norm.weight`;
config.json has `architectures: ["DFlashDraftModel"]`, `block_size`, `num_target_layers` and
`dflash_config: {target_layer_ids, mask_token_id, mask_token}`.
"""
from __future__ import annotations

import torch
from torch import nn

from .model import DecoderLayer, KVCache, Qwen3Config, Qwen3ForCausalLM, RMSNorm, rope_cos_sin, write_slots


class DFlashConfig(Qwen3Config):
    """Qwen3Config plus the DFlash fields (kept in `extra`, exactly where config.json has them)."""

    @property
    def dflash(self) -> dict:
        return self.extra.get("dflash_config", {})

    @property
    def block_size(self) -> int:
        return int(self.dflash.get("block_size", self.extra.get("block_size", 16)))

    @property
    def target_layer_ids(self) -> list[int]:
        return [int(i) for i in self.dflash["target_layer_ids"]]

    @property
    def mask_token_id(self) -> int:
        return int(self.dflash["mask_token_id"])


def dflash_config(target, *, num_layers: int, block_size: int, target_layer_ids: list[int],
                  mask_token_id: int, mask_token: str = "<|MASK|>", intermediate_size: int | None = None,
                  num_attention_heads: int | None = None, num_key_value_heads: int | None = None,
                  head_dim: int | None = None) -> DFlashConfig:
    """A drafter config matched to `target` (same hidden size and vocabulary: it borrows both). The drafter's
    attention shape defaults to the target's; a target without one (MLA) must give it."""
    if max(target_layer_ids) > target.num_hidden_layers - 2:
        # SGLang captures the context *before* layer id + 1, so id must leave a layer after it.
        raise ValueError(f"target_layer_ids must be <= num_hidden_layers - 2, got {target_layer_ids}")
    heads = {"num_attention_heads": num_attention_heads, "num_key_value_heads": num_key_value_heads,
             "head_dim": head_dim}
    for k, v in heads.items():
        heads[k] = getattr(target, k, None) if v is None else v
        if not isinstance(heads[k], int) or heads[k] < 1:
            raise ValueError(f"{k} must be a positive int (the target has none to copy), got {heads[k]!r}")
    extra = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_act": "silu",
        "block_size": block_size, "num_target_layers": target.num_hidden_layers,
        "dflash_config": {"block_size": block_size, "target_layer_ids": list(target_layer_ids),
                          "mask_token_id": mask_token_id, "mask_token": mask_token},
        "layer_types": ["full_attention"] * num_layers, "use_sliding_window": False, "sliding_window": None,
        "attention_dropout": 0.0, "torch_dtype": "float32",
    }
    return DFlashConfig(vocab_size=target.vocab_size, hidden_size=target.hidden_size,
                        intermediate_size=intermediate_size or target.intermediate_size,
                        num_hidden_layers=num_layers, **heads,
                        rms_norm_eps=target.rms_norm_eps, rope_theta=target.rope_theta,
                        max_position_embeddings=target.max_position_embeddings, extra=extra)


class DFlashDraftModel(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.config = c
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.fc = nn.Linear(len(c.target_layer_ids) * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    new_cache = Qwen3ForCausalLM.new_cache  # the same Qwen3 K/V cache shape

    def context_kv(self, feats, positions):
        """Per layer (k, v) [B, T, Hkv, D] of target features [B, T, F] at positions [B, T]."""
        ctx = self.hidden_norm(self.fc(feats))
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, ctx.dtype)
        return [layer.self_attn.kv(ctx, cos, sin) for layer in self.layers]

    def add_context(self, cache: KVCache, feats, positions, slots) -> None:
        """Project target features into the drafter cache at `slots` (the commit of a round)."""
        for i, (k, v) in enumerate(self.context_kv(feats, positions)):
            write_slots(cache.k[i], slots, k)
            write_slots(cache.v[i], slots, v)

    def forward(self, noise, positions, mask, cache: KVCache | None = None, slots=None, prefix_kv=None):
        """noise [B, T, H] (embedded block(s)), positions [B, T], mask bool [B, T, S] over the keys.

        With `cache`, the block's keys go to the scratch `slots` just past the context (the next commit
        overwrites them, which is the reference's crop); with `prefix_kv` (training) they are appended
        to the given per-layer context keys. Returns the final-normed hidden states [B, T, H].
        """
        c = self.config
        cos, sin = rope_cos_sin(positions, c.head_dim, c.rope_theta, noise.dtype)
        x = noise
        for i, layer in enumerate(self.layers):
            kv = (cache.k[i], cache.v[i]) if cache is not None else None
            x = layer(x, cos, sin, mask, kv, slots, prefix_kv[i] if prefix_kv is not None else None)
        return self.norm(x)
