// FlashInfer-MLA's work schedule (MLAPlan in FlashInfer's include/flashinfer/attention/scheduler.cuh, non-causal),
// written on the device every round from the exact prefix lengths (sglang_ddtree/attention/flashinfer_graphs.py,
// FlashInferMLAPrefix, says why): one rule for the CPU op (kernels/cpu/prefix_slots.cpp) and the CUDA kernel
// (kernels/mla_schedule.cu).
//
// A request b of n queries x H heads is cut into tiles of T = 64 * cluster_size packed rows (tiles = ceil(nH / T),
// tile j has r_j = min(T, nH - jT) rows); every tile's KV is cut into chunks of the limit
// L = f(max(ceil(tiles * sum_b len_b / clusters), 1)) (FlashInfer's rounding f), so request b has
// k_b = max(1, ceil(len_b / L)) chunks a tile, and it is split iff len_b > L. Works are listed as FlashInfer lists
// them (requests in order, tiles from the last, chunks from the first); work w goes to cluster w mod clusters, the
// works of a cluster contiguous (FlashInfer balances by a cost heap instead: the same works, other clusters).
// A split tile's chunk c writes partial rows P + c * r_j (P packed tile by tile in listing order), and its merge is
// FlashInfer's: max(len_b * cluster_size / L, 1) merge CTAs over its rows. The bounds the kernel's buffers need
// follow as in FlashInfer (works <= tiles * bs + 2 * clusters, merge CTAs <= cluster_size * clusters, partial
// rows < 2 * clusters * T); tests/attention/test_flashinfer_mla_prefix_cpu.py checks them.
#pragma once

#include <cstdint>

#include "tree_walk.h"  // DDTREE_HD

namespace ddtree {

// The schedule's arrays, FlashInfer's MLA names (int32, in its int workspace).
struct MlaScheduleOut {
  int32_t *q_indptr, *kv_indptr, *partial_indptr, *q_len, *kv_len, *q_start, *kv_start, *kv_end, *work_indptr;
  int32_t *merge_start, *merge_end, *merge_partial_start, *merge_partial_end, *merge_stride;
};

struct MlaShape {
  int64_t n, heads, cluster_size, clusters;
  DDTREE_HD int64_t tile() const { return 64 * cluster_size; }
  DDTREE_HD int64_t rows() const { return n * heads; }
  DDTREE_HD int64_t tiles() const { return (rows() + tile() - 1) / tile(); }
  DDTREE_HD int64_t tile_rows(int64_t j) const { return rows() - j * tile() < tile() ? rows() - j * tile() : tile(); }
};

DDTREE_HD int64_t mla_kv_limit(int64_t total, int64_t clusters) {
  int64_t x = (total + clusters - 1) / clusters;
  if (x < 1) x = 1;
  if (x <= 8) return 32;
  if (x <= 16) return 64;
  if (x <= 32) return 128;
  if (x <= 64) return 192;
  return (x + 255) / 256 * 256;
}

DDTREE_HD int64_t mla_chunks(int64_t len, int64_t limit) { return len <= limit ? 1 : (len + limit - 1) / limit; }

// Merge CTAs of one split tile of r rows, and the rows each covers.
DDTREE_HD int64_t mla_merge_rows(int64_t len, int64_t limit, int64_t cluster_size, int64_t r) {
  int64_t m = len * cluster_size / limit;
  if (m < 1) m = 1;
  return (r + m - 1) / m;
}

// What request b adds to the three running totals (works, partial rows, merge CTAs).
struct MlaCounts {
  int64_t works, partial_rows, merges;
};

DDTREE_HD MlaCounts mla_counts(int64_t len, int64_t limit, const MlaShape& s) {
  const int64_t k = mla_chunks(len, limit);
  MlaCounts c{s.tiles() * k, 0, 0};
  if (len > limit) {
    c.partial_rows = k * s.rows();
    for (int64_t j = 0; j < s.tiles(); ++j) {
      const int64_t r = s.tile_rows(j), per = mla_merge_rows(len, limit, s.cluster_size, r);
      c.merges += (r + per - 1) / per;
    }
  }
  return c;
}

// Where work w of `works` sits: cluster w mod clusters, after the works of the clusters before it.
DDTREE_HD int64_t mla_cluster_start(int64_t c, int64_t works, int64_t clusters) {
  const int64_t q = works / clusters, r = works % clusters;
  return c * q + (c < r ? c : r);
}

DDTREE_HD int64_t mla_work_slot(int64_t w, int64_t works, int64_t clusters) {
  return mla_cluster_start(w % clusters, works, clusters) + w / clusters;
}

// Request b's works and merge CTAs, given what the requests before it took (at) and the round's total works.
DDTREE_HD void mla_write_request(int64_t b, int64_t len, int64_t kv_indptr, int64_t limit, const MlaShape& s,
                                 MlaCounts at, int64_t works, const MlaScheduleOut& o) {
  const int64_t k = mla_chunks(len, limit);
  const bool split = len > limit;
  int64_t w = at.works, p = at.partial_rows, m = at.merges;
  for (int64_t j = s.tiles() - 1; j >= 0; --j) {
    const int64_t r = s.tile_rows(j), row0 = b * s.rows() + j * s.tile();
    if (split) {
      const int64_t per = mla_merge_rows(len, limit, s.cluster_size, r);
      for (int64_t off = 0; off < r; off += per, ++m) {
        o.merge_start[m] = static_cast<int32_t>(row0 + off);
        o.merge_end[m] = static_cast<int32_t>(row0 + (off + per < r ? off + per : r));
        o.merge_partial_start[m] = static_cast<int32_t>(p + off);
        o.merge_partial_end[m] = static_cast<int32_t>(p + k * r);
        o.merge_stride[m] = static_cast<int32_t>(r);
      }
    }
    for (int64_t c = 0; c < k; ++c, ++w) {
      const int64_t at_slot = mla_work_slot(w, works, s.clusters), end = (c + 1) * limit;
      o.q_indptr[at_slot] = static_cast<int32_t>(b * s.n);
      o.kv_indptr[at_slot] = static_cast<int32_t>(kv_indptr);
      o.partial_indptr[at_slot] = split ? static_cast<int32_t>(p + c * r) : -1;
      o.q_len[at_slot] = static_cast<int32_t>(s.n);
      o.kv_len[at_slot] = static_cast<int32_t>(len);
      o.q_start[at_slot] = static_cast<int32_t>(j * s.tile());
      o.kv_start[at_slot] = static_cast<int32_t>(c * limit < len ? c * limit : len);
      o.kv_end[at_slot] = static_cast<int32_t>(end < len ? end : len);
    }
    if (split) p += k * r;
  }
}

// The whole schedule by one block of kThreads threads (the CUDA kernel, kernels/mla_schedule.cu; a host test runs
// it on kThreads threads with a barrier for `sync`): each thread owns a run of requests, and the three running
// totals are a scan over the runs in `sh`, which the threads share.
template <int kThreads>
struct MlaBlockShared {
  int64_t works[kThreads], rows[kThreads], merges[kThreads];
  int64_t limit, total_works, total_merges;
};

template <int kThreads, class L, class K, class Sync>
DDTREE_HD void mla_schedule_block(int tid, const L* lens, const K* kv_indptr, int bs, const MlaShape& s,
                                  int64_t merge_slots, const MlaScheduleOut& o, MlaBlockShared<kThreads>& sh,
                                  Sync sync) {
  const int per = (bs + kThreads - 1) / kThreads;
  const int b0 = tid * per < bs ? tid * per : bs, b1 = b0 + per < bs ? b0 + per : bs;
  int64_t keys = 0;
  for (int b = b0; b < b1; ++b) keys += s.tiles() * static_cast<int64_t>(lens[b]);
  sh.works[tid] = keys;
  sync();
  if (tid == 0) {
    int64_t total = 0;
    for (int t = 0; t < kThreads; ++t) total += sh.works[t];
    sh.limit = mla_kv_limit(total, s.clusters);
  }
  sync();
  const int64_t limit = sh.limit;
  MlaCounts mine{0, 0, 0};
  for (int b = b0; b < b1; ++b) {
    const MlaCounts c = mla_counts(static_cast<int64_t>(lens[b]), limit, s);
    mine.works += c.works, mine.partial_rows += c.partial_rows, mine.merges += c.merges;
  }
  sh.works[tid] = mine.works, sh.rows[tid] = mine.partial_rows, sh.merges[tid] = mine.merges;
  sync();
  if (tid == 0) {
    MlaCounts acc{0, 0, 0};
    for (int t = 0; t < kThreads; ++t) {
      const MlaCounts c{sh.works[t], sh.rows[t], sh.merges[t]};
      sh.works[t] = acc.works, sh.rows[t] = acc.partial_rows, sh.merges[t] = acc.merges;
      acc.works += c.works, acc.partial_rows += c.partial_rows, acc.merges += c.merges;
    }
    sh.total_works = acc.works, sh.total_merges = acc.merges;
  }
  sync();
  const int64_t works = sh.total_works;
  MlaCounts at{sh.works[tid], sh.rows[tid], sh.merges[tid]};
  for (int b = b0; b < b1; ++b) {
    const int64_t len = static_cast<int64_t>(lens[b]);
    mla_write_request(b, len, static_cast<int64_t>(kv_indptr[b]), limit, s, at, works, o);
    const MlaCounts c = mla_counts(len, limit, s);
    at.works += c.works, at.partial_rows += c.partial_rows, at.merges += c.merges;
  }
  for (int64_t c = tid; c <= s.clusters; c += kThreads)
    o.work_indptr[c] = static_cast<int32_t>(mla_cluster_start(c, works, s.clusters));
  for (int64_t m = sh.total_merges + tid; m < merge_slots; m += kThreads)
    o.merge_start[m] = o.merge_end[m] = o.merge_partial_start[m] = o.merge_partial_end[m] = o.merge_stride[m] = 0;
}

}  // namespace ddtree

namespace ddtree {

// The arrays at their int32 element offsets in FlashInfer's MLA int workspace, in MlaScheduleOut's order (the
// bindings' shared set-up); fits: every array inside the workspace's `size` elements.
inline bool mla_schedule_view(int32_t* ws, int64_t size, const int64_t* off, int64_t max_works, int64_t merge_slots,
                              int64_t clusters, MlaScheduleOut* o) {
  int32_t** arrays[14] = {&o->q_indptr, &o->kv_indptr, &o->partial_indptr, &o->q_len, &o->kv_len, &o->q_start,
                          &o->kv_start, &o->kv_end, &o->work_indptr, &o->merge_start, &o->merge_end,
                          &o->merge_partial_start, &o->merge_partial_end, &o->merge_stride};
  for (int i = 0; i < 14; ++i) {
    const int64_t need = i < 8 ? max_works : i == 8 ? clusters + 1 : merge_slots;
    if (off[i] < 0 || off[i] + need > size) return false;
    *arrays[i] = ws + off[i];
  }
  return true;
}

}  // namespace ddtree
