// CUDA kernel of sglang_ddtree::mla_schedule: kernels/mla_schedule.h's rule (the CPU op runs the same functions) in
// one block, so a verify's FlashInfer-MLA prefix writes its round's schedule in one launch. Each thread owns a run
// of requests; the three running totals (works, partial rows, merge CTAs) are a block scan over the runs.
#include <cuda_runtime.h>

#include "mla_schedule.h"
#include "verify_attn.cuh"

namespace ddtree {
namespace {

constexpr int kMlaThreads = 256;

template <class L, class K>
__global__ void __launch_bounds__(kMlaThreads) mla_schedule_kernel(const L* __restrict__ lens,
                                                                    const K* __restrict__ kv_indptr, int bs, MlaShape s,
                                                                    int64_t merge_slots, MlaScheduleOut o) {
  __shared__ int64_t s_works[kMlaThreads], s_rows[kMlaThreads], s_merges[kMlaThreads];
  __shared__ int64_t s_limit, s_total_works, s_total_merges;
  const int tid = threadIdx.x;
  const int per = (bs + kMlaThreads - 1) / kMlaThreads;
  const int b0 = tid * per < bs ? tid * per : bs, b1 = b0 + per < bs ? b0 + per : bs;
  int64_t keys = 0;
  for (int b = b0; b < b1; ++b) keys += s.tiles() * static_cast<int64_t>(lens[b]);
  s_works[tid] = keys;
  __syncthreads();
  if (tid == 0) {
    int64_t total = 0;
    for (int t = 0; t < kMlaThreads; ++t) total += s_works[t];
    s_limit = mla_kv_limit(total, s.clusters);
  }
  __syncthreads();
  const int64_t limit = s_limit;
  MlaCounts mine{0, 0, 0};
  for (int b = b0; b < b1; ++b) {
    const MlaCounts c = mla_counts(static_cast<int64_t>(lens[b]), limit, s);
    mine.works += c.works, mine.partial_rows += c.partial_rows, mine.merges += c.merges;
  }
  s_works[tid] = mine.works, s_rows[tid] = mine.partial_rows, s_merges[tid] = mine.merges;
  __syncthreads();
  if (tid == 0) {
    MlaCounts acc{0, 0, 0};
    for (int t = 0; t < kMlaThreads; ++t) {
      const MlaCounts c{s_works[t], s_rows[t], s_merges[t]};
      s_works[t] = acc.works, s_rows[t] = acc.partial_rows, s_merges[t] = acc.merges;
      acc.works += c.works, acc.partial_rows += c.partial_rows, acc.merges += c.merges;
    }
    s_total_works = acc.works, s_total_merges = acc.merges;
  }
  __syncthreads();
  const int64_t works = s_total_works;
  MlaCounts at{s_works[tid], s_rows[tid], s_merges[tid]};
  for (int b = b0; b < b1; ++b) {
    const int64_t len = static_cast<int64_t>(lens[b]);
    mla_write_request(b, len, static_cast<int64_t>(kv_indptr[b]), limit, s, at, works, o);
    const MlaCounts c = mla_counts(len, limit, s);
    at.works += c.works, at.partial_rows += c.partial_rows, at.merges += c.merges;
  }
  for (int64_t c = tid; c <= s.clusters; c += kMlaThreads)
    o.work_indptr[c] = static_cast<int32_t>(mla_cluster_start(c, works, s.clusters));
  for (int64_t m = s_total_merges + tid; m < merge_slots; m += kMlaThreads)
    o.merge_start[m] = o.merge_end[m] = o.merge_partial_start[m] = o.merge_partial_end[m] = o.merge_stride[m] = 0;
}

template <class L>
void launch_typed(const L* lens, const void* kv_indptr, bool kv_64, int bs, const MlaShape& s, int64_t merge_slots,
                  const MlaScheduleOut& o, cudaStream_t stream) {
  if (kv_64)
    mla_schedule_kernel<L, int64_t><<<1, kMlaThreads, 0, stream>>>(lens, static_cast<const int64_t*>(kv_indptr), bs, s,
                                                                   merge_slots, o);
  else
    mla_schedule_kernel<L, int32_t><<<1, kMlaThreads, 0, stream>>>(lens, static_cast<const int32_t*>(kv_indptr), bs, s,
                                                                   merge_slots, o);
}

}  // namespace

cudaError_t launch_mla_schedule(const void* lens, bool lens_64, const void* kv_indptr, bool kv_64, int bs,
                                const MlaShape& shape, int64_t merge_slots, const MlaScheduleOut& out,
                                cudaStream_t stream) {
  if (lens_64)
    launch_typed(static_cast<const int64_t*>(lens), kv_indptr, kv_64, bs, shape, merge_slots, out, stream);
  else
    launch_typed(static_cast<const int32_t*>(lens), kv_indptr, kv_64, bs, shape, merge_slots, out, stream);
  return cudaGetLastError();
}

}  // namespace ddtree
