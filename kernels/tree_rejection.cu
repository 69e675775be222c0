// A drawn tree's two per-node steps on the GPU (sglang_ddtree/rejection.py is their definition and the CPU path;
// docs/DESIGN.md §3.12). One thread per row (a node of a request); rows are short (K, W <= kMaxTopK), the work
// per row O(K log K) and O(W K), so one pass over [R, K] in global memory, no shared state, no host sync.
//   draw_order       keys [R, K] + Gumbel noise of stream node[r] (entry e: kernels/philox.cuh), sorted
//                    descending, ties by the lower index (torch.sort(descending, stable)): Gumbel top-k, a draw
//                    without replacement from softmax(keys)
//   accept_children  each row's children tested in order (rejection.accept_children, float64, the same operation
//                    order: mass = Σq, z = Σpc + rest, accept iff u·(q[x]/mass)·z < pc[x], else
//                    pc = max(pc − z·q/mass, 0) and q[x] = 0); uniform i is entry i of stream node[r]
#include <cuda_runtime.h>

#include <cstdint>

#include "philox.cuh"
#include "tree_kernels.cuh"

namespace ddtree {
namespace {

constexpr int kThreads = 128;

__global__ void draw_order_kernel(const float* __restrict__ keys, int64_t R, int K, const int64_t* __restrict__ seed,
                                  const int64_t* __restrict__ step, const int64_t* __restrict__ node,
                                  float* __restrict__ scratch, int64_t* __restrict__ order) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* k = keys + r * K;
  float* s = scratch + r * K;
  int64_t* o = order + r * K;
  uint32_t c[4];
  for (int e = 0; e < K; ++e) {
    if ((e & 3) == 0) philox_words(c, seed[r], step[r], node[r], static_cast<uint32_t>(e >> 2));
    s[e] = k[e] + gumbel_from_word(c[e & 3]);
  }
  // insertion sort: a later index moves past an earlier one only on a strictly smaller value (stable)
  for (int e = 0; e < K; ++e) {
    const float v = s[e];
    int j = e;
    while (j > 0 && s[o[j - 1]] < v) {
      o[j] = o[j - 1];
      --j;
    }
    o[j] = e;
  }
}

__global__ void accept_children_kernel(const double* __restrict__ pc_in, const double* __restrict__ rest,
                                       const double* __restrict__ q_in, const int64_t* __restrict__ kids,
                                       const int64_t* __restrict__ pos, int64_t R, int K, int W,
                                       const int64_t* __restrict__ seed, const int64_t* __restrict__ step,
                                       const int64_t* __restrict__ node, double* __restrict__ pc_out,
                                       double* __restrict__ q_work, int64_t* __restrict__ out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= R) return;
  double* pc = pc_out + r * K;
  double* q = q_work + r * K;
  for (int e = 0; e < K; ++e) {
    pc[e] = pc_in[r * K + e];
    q[e] = q_in[r * K + e];
  }
  int64_t accepted = -1;
  uint32_t c[4];
  for (int i = 0; i < W; ++i) {
    if ((i & 3) == 0) philox_words(c, seed[r], step[r], node[r], static_cast<uint32_t>(i >> 2));
    const int64_t tok = kids[r * W + i];
    if (tok < 0) continue;
    double mass = 0.0, z = 0.0;
    for (int e = 0; e < K; ++e) {
      mass += q[e];
      z += pc[e];
    }
    z += rest[r];
    if (!(mass > 0.0)) continue;
    const int64_t x = pos[r * W + i];
    const double u = static_cast<double>(uniform_from_word(c[i & 3]));
    if (u * (q[x] / mass) * z < pc[x]) {
      accepted = tok;
      break;
    }
    for (int e = 0; e < K; ++e) pc[e] = fmax(pc[e] - z * (q[e] / mass), 0.0);
    q[x] = 0.0;
  }
  out[r] = accepted;
}

unsigned blocks(int64_t R) { return static_cast<unsigned>((R + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launch_draw_order(const float* keys, int64_t R, int K, const int64_t* seed, const int64_t* step,
                              const int64_t* node, float* scratch, int64_t* order, cudaStream_t stream) {
  if (R == 0 || K == 0) return cudaSuccess;
  if (K < 0 || K > kMaxTopK || R > 0x7fffffffLL * kThreads) return cudaErrorInvalidValue;
  draw_order_kernel<<<blocks(R), kThreads, 0, stream>>>(keys, R, K, seed, step, node, scratch, order);
  return cudaGetLastError();
}

cudaError_t launch_accept_children(const double* pc, const double* rest, const double* q, const int64_t* kids,
                                   const int64_t* pos, int64_t R, int K, int W, const int64_t* seed,
                                   const int64_t* step, const int64_t* node, double* pc_out, double* q_work,
                                   int64_t* out, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (K < 1 || K > kMaxTopK || W < 0 || W > kMaxTopK || R > 0x7fffffffLL * kThreads) return cudaErrorInvalidValue;
  accept_children_kernel<<<blocks(R), kThreads, 0, stream>>>(pc, rest, q, kids, pos, R, K, W, seed, step, node,
                                                             pc_out, q_work, out);
  return cudaGetLastError();
}

}  // namespace ddtree
