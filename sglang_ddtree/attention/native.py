"""The CUDA verify-attention kernel (kernels/verify_attn.cu): which shapes it takes and how it splits the prefix.

One launch covers a request's prefix (split into chunks across CTAs when the batch alone cannot fill the
GPU) and its tree keys with the ancestor mask, in one online softmax per chunk; split chunks are combined
by LSE in a second small kernel. With num_splits = 0 it computes the tree tail alone (the cascade's half).
"""
from __future__ import annotations

import torch

from .. import ops
from .merge import LN2, merge_states
from .problem import Problem

ROWS_PER_CTA = 64
_WORKSPACE_CAP = 1 << 30  # bytes of float32 split partials


def key_tile(prob: Problem) -> int:
    return 32 if prob.layout == "mla" else 64


def supports(prob: Problem) -> bool:
    if prob.q_a.device.type != "cuda" or prob.dtype != torch.bfloat16:
        return False
    if prob.layout == "mla":
        return prob.q_a.shape[2] == 512 and prob.Dqk == 576 and prob.Dv == 512
    return prob.Dqk == 128 and prob.Dv == 128


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
    """merge_states through the CUDA kernel (one pass, bf16 in/out) where it applies, else in torch."""
    if o_a.is_cuda and o_a.dtype == o_b.dtype == out_dtype == torch.bfloat16 and o_a.shape[-1] % 8 == 0:
        ops.ensure_backend("cuda")
        scale = {"e": 1.0, "2": LN2}
        return ops.op("merge_attn_states")(o_a, lse_a, scale[base_a], o_b, lse_b, scale[base_b])
    return merge_states(o_a, lse_a, o_b, lse_b, base_a=base_a, base_b=base_b, out_dtype=out_dtype)
