// CUDA kernel of sglang_ddtree::truncate_tree: one block per request runs kernels/tree_truncate.h's rule (the
// CPU op runs the same function), so a round that verifies fewer nodes than its drafter's tree pays one launch.
#include <cuda_runtime.h>

#include "tree_kernels.cuh"

namespace ddtree {
namespace {

constexpr int kTruncThreads = 256;

__global__ void __launch_bounds__(kTruncThreads) tree_truncate_kernel(TruncIn in, TruncOut out, int n_big, int n) {
  truncate_request(in, out, blockIdx.x, n_big, n, threadIdx.x, blockDim.x);
}

}  // namespace

cudaError_t launch_tree_truncate(const TruncIn& in, const TruncOut& out, int B, int n_big, int n,
                                 cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  tree_truncate_kernel<<<B, kTruncThreads, 0, stream>>>(in, out, n_big, n);
  return cudaGetLastError();
}

}  // namespace ddtree
