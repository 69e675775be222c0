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

// The whole schedule by one block of kThreads threads (the CUDA kernel, kernels/fa2_schedule.cu; a host test runs it
// on kThreads threads with a barrier for `sync`): the longest prefix is a reduction, the partial-output rows a scan
// over each thread's run of requests, in `sh`, which the threads share.
template <int kThreads>
struct Fa2BlockShared {
  int64_t part[kThreads];
  int64_t chunk;
};

template <int kThreads, class L, class Sync>
DDTREE_HD void fa2_schedule_block(int tid, const L* lens, int bs, int n, int tiles, int kmax, int min_chunk,
                                  bool* valid, int live, int32_t* o_indptr, int32_t* merge_indptr, int32_t* chunk_out,
                                  Fa2BlockShared<kThreads>& sh, Sync sync) {
  int64_t m = 1;
  for (int b = tid; b < bs; b += kThreads) {
    const int64_t len = fa2_len(static_cast<int64_t>(lens[b]));
    m = len > m ? len : m;
  }
  sh.part[tid] = m;
  sync();
  if (tid == 0) {
    for (int t = 1; t < kThreads; ++t) m = sh.part[t] > m ? sh.part[t] : m;
    sh.chunk = fa2_chunk(m, kmax, min_chunk);
    chunk_out[0] = static_cast<int32_t>(sh.chunk);
    o_indptr[0] = merge_indptr[0] = 0;
  }
  sync();
  const int64_t chunk = sh.chunk;
  // each thread's run of requests [b0, b1): its partial-output rows, then an exclusive scan over the threads
  const int per = (bs + kThreads - 1) / kThreads;
  const int b0 = tid * per < bs ? tid * per : bs, b1 = b0 + per < bs ? b0 + per : bs;
  int64_t rows = 0;
  for (int b = b0; b < b1; ++b) rows += static_cast<int64_t>(n) * fa2_count(static_cast<int64_t>(lens[b]), chunk);
  sh.part[tid] = rows;  // thread 0 read the maxima before the barrier above
  sync();
  if (tid == 0) {
    int64_t acc = 0;
    for (int t = 0; t < kThreads; ++t) {
      const int64_t r = sh.part[t];
      sh.part[t] = acc;
      acc += r;
    }
  }
  sync();
  int64_t at = sh.part[tid];
  for (int b = b0; b < b1; ++b) {
    const int64_t count = fa2_count(static_cast<int64_t>(lens[b]), chunk);
    for (int i = 0; i < n; ++i)
      merge_indptr[1 + static_cast<int64_t>(b) * n + i] = static_cast<int32_t>(at + (i + 1) * count);
    at += static_cast<int64_t>(n) * count;
    o_indptr[b + 1] = static_cast<int32_t>(at);
  }
  for (int e = tid; e < live; e += kThreads)
    valid[e] = fa2_live(e, kmax, fa2_count(static_cast<int64_t>(lens[fa2_request(e, tiles, kmax)]), chunk));
}

}  // namespace ddtree
