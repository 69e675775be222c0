// CUDA kernel of sglang_ddtree::fa2_schedule: kernels/fa2_schedule.h's rule (the CPU op runs the same functions)
// in one block (fa2_schedule_block, which tests/core/test_block_schedules.py also runs on host threads), so a
// verify's FlashInfer prefix writes its round's schedule in one launch.
#include <cuda_runtime.h>

#include "block_sync.cuh"
#include "fa2_schedule.h"
#include "verify_attn.cuh"

namespace ddtree {
namespace {

constexpr int kFa2Threads = 256;

template <class L>
__global__ void __launch_bounds__(kFa2Threads) fa2_schedule_kernel(const L* __restrict__ lens, int bs, int n, int tiles,
                                                                    int kmax, int min_chunk, bool* __restrict__ valid,
                                                                    int live, int32_t* __restrict__ o_indptr,
                                                                    int32_t* __restrict__ merge_indptr,
                                                                    int32_t* __restrict__ chunk_out) {
  __shared__ Fa2BlockShared<kFa2Threads> sh;
  fa2_schedule_block<kFa2Threads>(threadIdx.x, lens, bs, n, tiles, kmax, min_chunk, valid, live, o_indptr, merge_indptr,
                                  chunk_out, sh, BlockSync{});
}

}  // namespace

cudaError_t launch_fa2_schedule(const void* lens, bool lens_64, int bs, int n, int tiles, int kmax, int min_chunk,
                                bool* valid, int live, int32_t* o_indptr, int32_t* merge_indptr, int32_t* chunk,
                                cudaStream_t stream) {
  if (lens_64)
    fa2_schedule_kernel<int64_t><<<1, kFa2Threads, 0, stream>>>(static_cast<const int64_t*>(lens), bs, n, tiles, kmax,
                                                                 min_chunk, valid, live, o_indptr, merge_indptr, chunk);
  else
    fa2_schedule_kernel<int32_t><<<1, kFa2Threads, 0, stream>>>(static_cast<const int32_t*>(lens), bs, n, tiles, kmax,
                                                                 min_chunk, valid, live, o_indptr, merge_indptr, chunk);
  return cudaGetLastError();
}

}  // namespace ddtree
