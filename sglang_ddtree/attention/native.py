"""The CUDA verify-attention kernel (kernels/verify_attn.cu): which shapes it takes and how it splits the prefix.

One launch covers a request's prefix (split into chunks across CTAs when the batch alone cannot fill the
GPU) and its tree keys with the ancestor mask, in one online softmax per chunk; split chunks are combined
by LSE in a second small kernel. With num_splits = 0 it computes the tree tail alone (the cascade's half).
"""
from __future__ import annotations

import torch

from .. import ops
from . import fallback
from .merge import LN2, merge_states
from .prefix_attention import PrefixAttention
from .problem import Problem

ROWS_PER_CTA = 64
_WORKSPACE_CAP = 1 << 30  # bytes of float32 split partials


def key_tile(prob: Problem) -> int:
    return 32 if prob.layout == "mla" else 64


DTYPES = (torch.bfloat16, torch.float16)
GQA_HEAD_DIMS = (32, 64, 128, 256)


MLA_LATENT, MLA_ROPE = 512, 64  # the MLA layout kernels/verify_attn.cu takes (DeepSeek-V3 / Kimi-K2)

# as the prefix library `tree` (prefixes.py): our kernel over prefix and tree in one pass; the tail of every cascade
NAME, TITLE = "tree", "the tree kernel"
LAYOUTS = ("gqa", "mla")
HEAD_DIMS = GQA_HEAD_DIMS  # MHA/GQA; MLA: latent 512 + rope 64
PAGE_SIZES = None
BACKENDS = None
MISSING, INSTALL = "the project's CUDA ops", "build them (python -m sglang_ddtree check)"


def installed() -> bool:
    """Built from the package's own sources on first use (ops.ensure_backend)."""
    return True


def shape_ok(layout: str, qk_dim: int, v_dim: int, latent: int | None = None) -> bool:
    """The head dims kernels/verify_attn.cu has instances for: MLA 512 + 64 -> 512, GQA 32-256 (keys = values)."""
    if layout == "mla":
        return latent == MLA_LATENT and qk_dim == MLA_LATENT + MLA_ROPE and v_dim == MLA_LATENT
    return qk_dim == v_dim and qk_dim in GQA_HEAD_DIMS


def supports_shape(device, dtype, layout: str, qk_dim: int, v_dim: int, latent: int | None = None) -> bool:
    """What kernels/verify_attn.cu takes: CUDA bf16/fp16 in a shape of `shape_ok`."""
    return torch.device(device).type == "cuda" and dtype in DTYPES and shape_ok(layout, qk_dim, v_dim, latent)


def supports(prob: Problem) -> bool:
    return supports_shape(prob.q_a.device, prob.dtype, prob.layout, prob.Dqk, prob.Dv, prob.q_a.shape[2])


def ragged_splits(batch: int, n: int, group: int, kv_heads: int, num_sms: int, cap: int = 16) -> int:
    """Prefix chunks per request for `attend_ragged`: about two waves of CTAs for this batch, at most `cap`
    (each split costs a float32 partial of the request's rows; empty splits write only their LSE)."""
    ctas = -(-n * group // ROWS_PER_CTA) * batch * kv_heads
    return max(1, min(cap, -(-2 * num_sms // max(1, ctas))))


def _check_ragged_dims(q, q_pe, k_cache, v_cache) -> None:
    """Head dims the kernel has no instance for are refused here, naming the argument (the op checks them too,
    but its formatted error for them crashed the process: docs/benchmarks/sglang-mla-h200-2026-12-04.md)."""
    d, dk, dv = int(q.shape[-1]), int(k_cache.shape[-1]), int(v_cache.shape[-1])
    if q_pe is not None:
        if not shape_ok("mla", dk, dv, latent=d) or int(q_pe.shape[-1]) != dk - d:
            raise ValueError(f"attend_ragged (MLA): q / q_pe / k_cache / v_cache head dims must be {MLA_LATENT} / "
                             f"{MLA_ROPE} / {MLA_LATENT + MLA_ROPE} / {MLA_LATENT}, got {d} / "
                             f"{int(q_pe.shape[-1])} / {dk} / {dv}")
    elif not shape_ok("gqa", d, dv) or dk != d:
        raise ValueError(f"attend_ragged: q / k_cache / v_cache head dims must be equal and one of "
                         f"{GQA_HEAD_DIMS}, got {d} / {dk} / {dv}")


def attend_ragged(q, q_pe, k_cache, v_cache, kv_indptr, kv_indices, k_tree, v_tree, mask_bits, sm_scale: float,
                  num_splits: int):
    """The kernel with SGLang's prefix addressing (ops.py: verify_attn_ragged): request b's prefix KV slots
    are kv_indices[kv_indptr[b]:kv_indptr[b+1]]; no host read of any length, so it captures in a CUDA graph
    that any later prefix lengths replay. q [T, Hq, D] (MLA: q = c_kv part 512, q_pe 64); caches [slots,
    Hkv, D]; tree K/V [T, Hkv, D]; mask_bits int32 [B, n, W]. Returns (O [T, Hq, Dv], natural-log LSE)."""
    if not q.is_cuda:  # a CPU server's verify: the same addressing in torch (any float dtype and head dims)
        return fallback.attend_ragged(q, q_pe, k_cache, v_cache, kv_indptr, kv_indices, k_tree, v_tree, mask_bits,
                                      sm_scale)
    _check_ragged_dims(q, q_pe, k_cache, v_cache)
    ops.ensure_backend("cuda")  # the op exists only once the CUDA libraries are loaded (a cached check after the first)
    return ops.op("verify_attn_ragged")(q, q_pe, k_cache, v_cache, kv_indptr, kv_indices, k_tree, v_tree,
                                        mask_bits, float(sm_scale), int(num_splits))


class TreePrefix(PrefixAttention):
    """The prefix `tree` served: our kernel reads each request's whole prefix in the tree's own call (one online
    softmax over prefix and tree), through SGLang's token-level slot list: the metadata gathers kv_indptr and the
    prefix slots from req_to_token into static buffers (gather_prefix_slots, one small kernel, the same replay-time
    reads of req_to_token as DFLASH's verify), so any page size is served and a graph replays at any length."""

    name = "the tree kernel"

    def __init__(self, target):
        super().__init__(target)
        self.context, self.sms = target.context, target.sms
        self.kv_indptr = torch.zeros(int(target.max_bs) + 1, dtype=torch.int32, device=self.device)
        self.kv_indices = torch.zeros(0, dtype=torch.int32, device=self.device)

    def reserve(self, bs: int) -> None:
        # every prefix is at most the context length: no host bound needed
        need = bs * self.context
        if self.kv_indices.numel() < need:
            self.kv_indices = torch.zeros(need, dtype=torch.int32, device=self.device)

    def grow(self, bs: int) -> None:
        self.kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)

    def plan(self, req_to_token, rows, lens, width, bs: int) -> None:
        ops.op("gather_prefix_slots")(req_to_token, rows, lens, self.kv_indptr, self.kv_indices)

    def run(self, q, q_pe, k_cache, v_cache, bs, n, hq, scale, q_whole=None):
        return None  # the prefix is read by the tail's own call

    def tail(self, bs: int, n: int, group: int, kv_heads: int):
        return self.kv_indptr[: bs + 1], self.kv_indices, ragged_splits(bs, n, group, kv_heads, self.sms)


PREFIX = TreePrefix


def split_plan(prob: Problem, n_max: int, num_sms: int) -> tuple[int, int]:
    """(num_splits, kv_chunk): enough CTAs for about two waves, chunks a multiple of the key tile."""
    if n_max <= 0:
        return 0, key_tile(prob)
    bn = key_tile(prob)
    ctas = -(-prob.n * prob.G // ROWS_PER_CTA) * prob.B * prob.Hkv
    splits = max(1, min(-(-n_max // bn), -(-2 * num_sms // ctas)))
    per_split_bytes = prob.T * prob.Hq * prob.Dv * 4
    if splits > 1:
        splits = max(1, min(splits, _WORKSPACE_CAP // per_split_bytes))
    chunk = -(-(-(-n_max // splits)) // bn) * bn
    return -(-n_max // chunk), chunk


def attend(prob: Problem, *, with_prefix: bool = True, with_tree: bool = True, max_prefix_len: int | None = None,
           num_splits: int | None = None):
    ops.ensure_backend("cuda")
    n_max = 0
    if with_prefix:
        n_max = int(prob.prefix_lens.max()) if max_prefix_len is None else int(max_prefix_len)
    sms = torch.cuda.get_device_properties(prob.q_a.device).multi_processor_count
    splits, chunk = split_plan(prob, n_max, sms)
    if num_splits is not None and n_max > 0:
        bn = key_tile(prob)
        chunk = -(-(-(-n_max // num_splits)) // bn) * bn
        splits = -(-n_max // chunk)
    return ops.op("verify_attn")(prob.q_a, prob.q_b, prob.k_cache, prob.v_cache, prob.page_size, prob.page_table,
                                 prob.prefix_lens, prob.k_tree, prob.v_tree, prob.mask_bits, prob.sm_scale,
                                 splits, chunk, with_tree)


def merge(o_a, lse_a, base_a: str, o_b, lse_b, base_b: str, out_dtype):
    """merge_states through the CUDA kernel (one pass, bf16/fp16 in and out) where it applies, else in torch."""
    if o_a.is_cuda and o_a.dtype == o_b.dtype == out_dtype and out_dtype in DTYPES and o_a.shape[-1] % 8 == 0:
        ops.ensure_backend("cuda")
        scale = {"e": 1.0, "2": LN2}
        return ops.op("merge_attn_states")(o_a, lse_a, scale[base_a], o_b, lse_b, scale[base_b])
    return merge_states(o_a, lse_a, o_b, lse_b, base_a=base_a, base_b=base_b, out_dtype=out_dtype)
