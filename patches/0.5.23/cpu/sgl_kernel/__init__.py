"""A stand-in for `sgl_kernel` on the CPU test copy of SGLang (patches/0.5.23/cpu/README.md).

SGLang's CPU engine imports its CPU ops from `sgl_kernel`, which exists only as a source build (every PyPI wheel
is a CUDA build). The plain server needs none of them at run time; a DFlash-family server (stock DFLASH and
DDTree) calls the six below, written here in torch from the Triton kernels they stand in for (each docstring
names the kernel). Every other name imports (SGLang imports several at module level) and raises if called, naming
itself, so a missing op is never silent.
"""
from __future__ import annotations

import ctypes

import torch


def _spans(req_pool_indices, start_offset, end_offset):
    """(row, start, end) per request, read on the host (these are CPU tensors)."""
    return zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist())


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """mem_cache/allocation.py `assign_req_to_token_pool`: req_to_token[row, start:end] <- the next end - start
    entries of out_cache_loc, request after request."""
    pos = 0
    for row, start, end in _spans(req_pool_indices, start_offset, end_offset):
        req_to_token[row, start:end] = out_cache_loc[pos:pos + end - start].to(req_to_token.dtype)
        pos += end - start


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """speculative/cache_locs.py `assign_extend_cache_locs`, the gather the other way: the next end - start entries
    of out_cache_loc <- req_to_token[row, start:end], request after request."""
    pos = 0
    for row, start, end in _spans(req_pool_indices, start_offset, end_offset):
        out_cache_loc[pos:pos + end - start] = req_to_token[row, start:end].to(out_cache_loc.dtype)
        pos += end - start


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk,
                                           num_cols):
    """speculative/cache_locs.py `assign_draft_cache_locs_contiguous` (no positions): request i's topk * num_cols
    slots from its seq_lens on -> out_cache_loc[i * topk * num_cols :]."""
    width = int(topk) * int(num_cols)
    for i, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * width:(i + 1) * width] = req_to_token[row, start:start + width].to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """speculative/eagle.py `fill_bonus_tokens`: bonus[i] <- accept_tokens[i * stride + accept_lens[i] - 1] (the
    last accepted slot holds the bonus token)."""
    rows = torch.arange(accept_lens.numel(), device=accept_lens.device)
    at = rows * int(accept_stride) + accept_lens.to(torch.int64) - 1
    bonus_tokens.copy_(accept_tokens.reshape(-1)[at].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    """speculative/eagle.py `fill_accept_out_cache_loc`: the entries of accept_index that are not -1, in order,
    gather out_cache_loc into the front of accept_out_cache_loc."""
    flat = accept_index.reshape(-1)
    keep = flat[flat != -1].to(torch.int64)
    accept_out_cache_loc[:keep.numel()] = out_cache_loc[keep].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """kvcache/cache_move.py `copy_all_layer_kv_cache_tiled`: row src_loc[i] -> row tgt_loc[i] of every layer's
    buffer (its base address and row bytes), every row read before any is written (safe in place, as the kernel)."""
    if tgt_loc.numel() == 0:
        return
    src, tgt = src_loc.to(torch.int64), tgt_loc.to(torch.int64)
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(ptr))
        view = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        view[tgt] = view[src]


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: no CPU stand-in in the CPU test copy (patches/0.5.23/cpu)")

    missing.__name__ = name
    return missing
