// The length-dependent part of FlashInfer's CUDA-graph prefill plan, written on the device every round
// (sglang_ddtree/attention/flashinfer_graphs.py, Fa2Schedule, says why and what FlashInfer reads): one rule for the
// CPU op (kernels/cpu/prefix_slots.cpp) and the CUDA kernel (kernels/fa2_schedule.cu). With kmax chunks at most a
// request and lens clamped to >= 1: chunk C = max(min_chunk, ceil(max_b len_b / kmax)), request b's chunk count
// c_b = ceil(len_b / C) (the kernel's own count), CTA e of the fixed grid (request e / (tiles * kmax), chunk
// e % kmax) live iff its chunk < c_b, o_indptr[b + 1] = n * sum_{b' <= b} c_b', and merge_indptr[1 + b * n + i] =
// o_indptr[b] + (i + 1) * c_b.
#pragma once

#include <cstdint>

#include "tree_walk.h"  // DDTREE_HD

namespace ddtree {

DDTREE_HD int64_t fa2_len(int64_t len) { return len < 1 ? 1 : len; }

DDTREE_HD int64_t fa2_chunk(int64_t max_len, int64_t kmax, int64_t min_chunk) {
  const int64_t c = (max_len + kmax - 1) / kmax;
  return c < min_chunk ? min_chunk : c;
}

DDTREE_HD int64_t fa2_count(int64_t len, int64_t chunk) { return (fa2_len(len) + chunk - 1) / chunk; }

// CTA e of the fixed grid: its request, and whether it is live given that request's chunk count.
DDTREE_HD int64_t fa2_request(int64_t e, int64_t tiles, int64_t kmax) { return e / (tiles * kmax); }
DDTREE_HD bool fa2_live(int64_t e, int64_t kmax, int64_t count) { return e % kmax < count; }

}  // namespace ddtree
