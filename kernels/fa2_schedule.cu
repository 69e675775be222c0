// CUDA kernel of sglang_ddtree::fa2_schedule: kernels/fa2_schedule.h's rule (the CPU op runs the same functions)
// in one block, so a verify's FlashInfer prefix writes its round's schedule in one launch. The chunk count's
// prefix sum is a block scan: each thread owns a run of requests.
#include <cuda_runtime.h>

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
  __shared__ int64_t s_part[kFa2Threads];
  __shared__ int64_t s_chunk;
  const int tid = threadIdx.x;
  int64_t m = 1;
  for (int b = tid; b < bs; b += kFa2Threads) {
    const int64_t len = fa2_len(static_cast<int64_t>(lens[b]));
    m = len > m ? len : m;
  }
  s_part[tid] = m;
  __syncthreads();
  if (tid == 0) {
    for (int t = 1; t < kFa2Threads; ++t) m = s_part[t] > m ? s_part[t] : m;
    s_chunk = fa2_chunk(m, kmax, min_chunk);
    chunk_out[0] = static_cast<int32_t>(s_chunk);
    o_indptr[0] = merge_indptr[0] = 0;
  }
  __syncthreads();
  const int64_t chunk = s_chunk;
  // each thread's run of requests [b0, b1): its partial-output rows, then an exclusive scan over the threads
  const int per = (bs + kFa2Threads - 1) / kFa2Threads;
  const int b0 = tid * per < bs ? tid * per : bs, b1 = b0 + per < bs ? b0 + per : bs;
  int64_t rows = 0;
  for (int b = b0; b < b1; ++b) rows += static_cast<int64_t>(n) * fa2_count(static_cast<int64_t>(lens[b]), chunk);
  s_part[tid] = rows;  // thread 0 read the maxima before the barrier above
  __syncthreads();
  if (tid == 0) {
    int64_t acc = 0;
    for (int t = 0; t < kFa2Threads; ++t) {
      const int64_t r = s_part[t];
      s_part[t] = acc;
      acc += r;
    }
  }
  __syncthreads();
  int64_t at = s_part[tid];
  for (int b = b0; b < b1; ++b) {
    const int64_t count = fa2_count(static_cast<int64_t>(lens[b]), chunk);
    for (int i = 0; i < n; ++i)
      merge_indptr[1 + static_cast<int64_t>(b) * n + i] = static_cast<int32_t>(at + (i + 1) * count);
    at += static_cast<int64_t>(n) * count;
    o_indptr[b + 1] = static_cast<int32_t>(at);
  }
  for (int e = tid; e < live; e += kFa2Threads)
    valid[e] = fa2_live(e, kmax, fa2_count(static_cast<int64_t>(lens[fa2_request(e, tiles, kmax)]), chunk));
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
