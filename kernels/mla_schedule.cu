// CUDA kernel of sglang_ddtree::mla_schedule: kernels/mla_schedule.h's rule (the CPU op runs the same functions) in
// one block (mla_schedule_block, which tests/core/test_block_schedules.py also runs on host threads), so a verify's
// FlashInfer-MLA prefix writes its round's schedule in one launch.
#include <cuda_runtime.h>

#include "block_sync.cuh"
#include "mla_schedule.h"
#include "verify_attn.cuh"

namespace ddtree {
namespace {

constexpr int kMlaThreads = 256;

template <class L, class K>
__global__ void __launch_bounds__(kMlaThreads) mla_schedule_kernel(const L* __restrict__ lens,
                                                                    const K* __restrict__ kv_indptr, int bs, MlaShape s,
                                                                    int64_t merge_slots, MlaScheduleOut o) {
  __shared__ MlaBlockShared<kMlaThreads> sh;
  mla_schedule_block<kMlaThreads>(threadIdx.x, lens, kv_indptr, bs, s, merge_slots, o, sh, BlockSync{});
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
