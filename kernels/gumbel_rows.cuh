// The Gumbel-max scan of one row by one block (kernels/law_rule.h: gumbel_scan), for every kernel that draws a
// token from a row: the sampler (sample_rows) and the drawn tree's bonus (kernels/tree_rejection.cu).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "law_rule.h"

namespace ddtree {

// This thread's share of a block's scan of one row (law_rule.h: gumbel_scan).
template <class Value>
__device__ __forceinline__ void gumbel_scan_block(int64_t V, int64_t seed, int64_t step, int64_t stream, bool greedy,
                                                  Value value, float& best, int64_t& bidx) {
  gumbel_scan(V, seed, step, stream, greedy, value, best, bidx, threadIdx.x, blockDim.x);
}

// The block's best (score, index) to every thread (warp shuffles, then one value a warp through shared memory).
__device__ __forceinline__ int64_t block_best(float best, int64_t bidx) {
  __shared__ float s_best[32];
  __shared__ int64_t s_idx[32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_down_sync(0xffffffffu, best, off);
    const int64_t oi = __shfl_down_sync(0xffffffffu, bidx, off);
    if (beats(ob, oi, best, bidx)) { best = ob; bidx = oi; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) { s_best[warp] = best; s_idx[warp] = bidx; }
  __syncthreads();
  if (warp == 0) {
    best = lane < nwarps ? s_best[lane] : -INFINITY;
    bidx = lane < nwarps ? s_idx[lane] : INT64_MAX;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ob = __shfl_down_sync(0xffffffffu, best, off);
      const int64_t oi = __shfl_down_sync(0xffffffffu, bidx, off);
      if (beats(ob, oi, best, bidx)) { best = ob; bidx = oi; }
    }
    if (lane == 0) s_idx[0] = bidx;
  }
  __syncthreads();
  const int64_t out = s_idx[0];
  __syncthreads();
  return out;
}

}  // namespace ddtree
