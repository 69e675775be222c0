"""The tree-verify path's reads of SGLang's object model, as verbs on one model runner (`Runner`) and one forward
batch: its KV pool and buffers, req_to_token, page size, model config, the attention backend serving TARGET_VERIFY
and what that backend holds. sglang/tree_attention.py (the verify's buffers, metadata and kernels) and
sglang/draft_attention.py reach SGLang only through these. RUNNER_ATTRS, POOL_MEMBERS, BATCH_FIELDS and
BACKEND_ATTRS name every member they touch; tests/sglang/test_sglang_conformance.py checks them on each release.
"""
from __future__ import annotations

from . import backend_override

RUNNER_ATTRS = ("token_to_kv_pool", "req_to_token_pool", "attn_backend", "model_config", "server_args", "page_size",
                "sliding_window_size")
POOL_MEMBERS = ("get_key_buffer", "get_value_buffer", "set_kv_buffer")  # MHATokenToKVPool and MLATokenToKVPool
POOL_ATTRS = ("layer_num",)
BATCH_FIELDS = ("forward_mode", "batch_size", "req_pool_indices", "seq_lens", "out_cache_loc", "positions")
BACKEND_ATTRS = {"FlashInferAttnBackend": ("workspace_buffer",), "FlashMLABackend": ("num_q_heads",)}
MODEL_CONFIG_MEMBERS = ("attention_arch", "get_num_attention_heads")


class Runner:
    """One model runner (the target's, or the drafter's) as the tree-verify path reads it."""

    def __init__(self, model_runner):
        self.runner = model_runner

    @property
    def pool(self):
        return self.runner.token_to_kv_pool

    def pool_name(self) -> str:
        return type(self.pool).__name__

    def head_major(self) -> bool:
        """A head-major (HND) KV layout, which the kernel does not read."""
        return bool(getattr(self.pool, "use_hnd", False))

    def kv_buffers(self, layer_id: int = 0):
        """(keys, values) of one layer: [slots, Hkv, D] views of the pool (MLA: the latent cache twice)."""
        return self.pool.get_key_buffer(layer_id), self.pool.get_value_buffer(layer_id)

    def store_kv(self, layer, loc, k, v) -> None:
        """The tree tokens' K/V into the cache at their slots, before the kernel reads it."""
        self.pool.set_kv_buffer(layer, loc, k, v)

    def layers(self) -> int:
        return int(getattr(self.pool, "layer_num", 0) or 1)

    def req_to_token(self):
        return self.runner.req_to_token_pool.req_to_token

    def page_size(self) -> int:
        return int(getattr(self.runner, "page_size", 1) or 1)

    def is_mla(self) -> bool:
        """SGLang's ModelConfig.attention_arch is an IntEnum (AttentionArch.MLA): its str() is a number, so read
        its name."""
        arch = getattr(getattr(self.runner, "model_config", None), "attention_arch", None)
        return getattr(arch, "name", None) == "MLA"

    def q_heads(self, tp: int = 1) -> int:
        """Query heads of every layer on this rank: the model's own count split over its tp tensor-parallel ranks,
        as SGLang splits them."""
        mc = self.runner.model_config
        return int(mc.get_num_attention_heads(tp) if hasattr(mc, "get_num_attention_heads")
                   else mc.num_attention_heads // tp)

    def sliding_window(self):
        return getattr(self.runner, "sliding_window_size", None)

    def dcp_size(self) -> int:
        return int(getattr(self.runner.server_args, "dcp_size", 1) or 1)

    def has_backend(self) -> bool:
        """Whether the runner has its attention backend yet (tools and doubles may not)."""
        return getattr(self.runner, "attn_backend", None) is not None

    def verify_backend(self):
        """The backend instance serving TARGET_VERIFY (inside SGLang's hybrid backend, the one it routes to)."""
        return backend_override.verify_backend(self.runner.attn_backend)

    def verify_backend_name(self) -> str:
        return type(self.verify_backend()).__name__

    def workspace(self):
        """FlashInfer's float workspace of the backend, shared by the FlashInfer prefix (None where it has none)."""
        return getattr(self.verify_backend(), "workspace_buffer", None)

    def flashmla_q_heads(self) -> int:
        """The query heads FlashMLA's plan is made for (SGLang's FlashMLA backend's count)."""
        return int(self.verify_backend().num_q_heads)


def is_target_verify(forward_batch) -> bool:
    return forward_batch.forward_mode.is_target_verify()


def batch_rows(forward_batch):
    """(requests, their req_to_token rows, their prefix lengths) of a verify forward: at a graph replay the
    graph's padded request count, the tensors cut to it."""
    bs = int(forward_batch.batch_size)
    return bs, forward_batch.req_pool_indices[:bs], forward_batch.seq_lens[:bs]


def batch_tokens(forward_batch) -> int:
    """The forward's (padded) token count: every request's verify width, summed."""
    return int(forward_batch.positions.shape[0])


def cache_slots(forward_batch):
    """The KV slots SGLang gave this forward's tokens (the tree's), where their K/V are stored."""
    return forward_batch.out_cache_loc
