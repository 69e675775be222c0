// A drawn tree's two steps on the GPU, one launch each (sglang_ddtree/rejection.py is their definition and the CPU
// path; docs/DESIGN.md §3.12). One thread per node (b, v): it finds its children (the nodes after it whose parent
// it is, in index order: the walk's order), so no sibling tables or per-node tensors cross the host.
//   draw_tree       node v's children get the first draws of the Gumbel top-k of its children's depth keys
//                   (lp·sharpness + Gumbel noise of stream DRAW_STREAM + v, entry e; descending, ties by the lower
//                   index: torch.sort(descending, stable)) in the rows `drawn` marks; the others keep their tokens
//   tree_rejection  node v's children tested in order against the target's residual law (float64, the definition's
//                   operation order), the accepted child's token (or -1) out, and the last residual written over the
//                   candidates' entries of the scaled logits (log pc + lse) for the bonus draw
// Products are rounded before sums (__fmul_rn / __fadd_rn), as torch computes them: no contraction into an FMA.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "philox.cuh"
#include "tree_kernels.cuh"

namespace ddtree {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kAcceptStream = 2LL << 24, kDrawStream = 4LL << 24;  // rejection.ACCEPT_STREAM, DRAW_STREAM

__device__ __forceinline__ int depth_row(const int32_t* depths, int64_t node, int L) {
  const int d = depths[node];
  return d < 0 ? 0 : (d > L - 1 ? L - 1 : d);
}

__global__ void draw_tree_kernel(const int32_t* __restrict__ parents,
                                 const int32_t* __restrict__ num_nodes, const int32_t* __restrict__ depths,
                                 const float* __restrict__ lp, const int64_t* __restrict__ ids,
                                 const bool* __restrict__ drawn, float sharpness, const int64_t* __restrict__ seed,
                                 const int64_t* __restrict__ step, int B, int n, int L, int K,
                                 float* __restrict__ scratch, int64_t* __restrict__ out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(B) * n) return;
  const int b = static_cast<int>(t / n), v = static_cast<int>(t % n);
  const int nn = min(max(num_nodes[b], 0), n);
  if (!drawn[b] || v >= nn) return;
  const int32_t* par = parents + static_cast<int64_t>(b) * n;
  int m = 0;
  for (int j = v + 1; j < nn; ++j) m += par[j] == v;
  if (m == 0) return;
  const int d = depth_row(depths, t, L);
  const float* row = lp + (static_cast<int64_t>(b) * L + d) * K;
  const int64_t* cand = ids + (static_cast<int64_t>(b) * L + d) * K;
  float* s = scratch + t * K;
  uint32_t c[4];
  for (int e = 0; e < K; ++e) {
    if ((e & 3) == 0) philox_words(c, seed[b], step[b], kDrawStream + v, static_cast<uint32_t>(e >> 2));
    s[e] = __fadd_rn(__fmul_rn(row[e], sharpness), gumbel_from_word(c[e & 3]));
  }
  int j = v + 1;
  for (int i = 0; i < m && i < K; ++i) {  // the i-th draw: the largest score left, ties by the lower index
    int best = -1;
    for (int e = 0; e < K; ++e)
      if (!isnan(s[e]) && (best < 0 || s[e] > s[best])) best = e;
    if (best < 0) break;
    s[best] = NAN;  // taken
    while (j < nn && par[j] != v) ++j;
    out[static_cast<int64_t>(b) * n + j] = cand[best];
    ++j;
  }
}

__global__ void tree_rejection_kernel(const int64_t* __restrict__ tokens, const int32_t* __restrict__ parents,
                                      const int32_t* __restrict__ num_nodes, const int32_t* __restrict__ depths,
                                      float* __restrict__ scaled, const float* __restrict__ lse,
                                      const int64_t* __restrict__ cand_all, const float* __restrict__ q_all,
                                      const bool* __restrict__ sampled, const int64_t* __restrict__ seed,
                                      const int64_t* __restrict__ step, int B, int n, int64_t V, int L, int K,
                                      double* __restrict__ scratch, int64_t* __restrict__ out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(B) * n) return;
  const int b = static_cast<int>(t / n), v = static_cast<int>(t % n);
  out[t] = -1;
  if (!sampled[b]) return;
  const int nn = min(max(num_nodes[b], 0), n);
  const int32_t* par = parents + static_cast<int64_t>(b) * n;
  const int d = depth_row(depths, t, L);
  const int64_t* cand = cand_all + (static_cast<int64_t>(b) * L + d) * K;
  const float* qrow = q_all + (static_cast<int64_t>(b) * L + d) * K;
  float* x = scaled + t * V;
  const float z0 = lse[t];
  double* pc = scratch + t * 2 * K;
  double* q = pc + K;
  double total = 0.0;
  for (int e = 0; e < K; ++e) {
    pc[e] = exp(static_cast<double>(__fsub_rn(x[cand[e]], z0)));
    q[e] = static_cast<double>(qrow[e]);
    total += pc[e];
  }
  const double rest = fmax(1.0 - total, 0.0);
  uint32_t c[4];
  int i = 0;
  int64_t accepted = -1;
  for (int j = v + 1; j < nn && accepted < 0; ++j) {
    if (par[j] != v) continue;
    if ((i & 3) == 0) philox_words(c, seed[b], step[b], kAcceptStream + v, static_cast<uint32_t>(i >> 2));
    const float u = uniform_from_word(c[i & 3]);
    ++i;
    const int64_t tok = tokens[static_cast<int64_t>(b) * n + j];
    int at = -1;
    for (int e = 0; e < K; ++e)
      if (cand[e] == tok) { at = e; break; }
    if (at < 0) continue;  // a token q never drew: no test
    double mass = 0.0, zsum = 0.0;
    for (int e = 0; e < K; ++e) {
      mass += q[e];
      zsum += pc[e];
    }
    const double z = zsum + rest;
    if (!(mass > 0.0)) continue;
    if (static_cast<double>(u) * (q[at] / mass) * z < pc[at]) {
      accepted = tok;
      break;
    }
    for (int e = 0; e < K; ++e) pc[e] = fmax(pc[e] - z * (q[e] / mass), 0.0);
    q[at] = 0.0;
  }
  out[t] = accepted;
  double left = rest;
  for (int e = 0; e < K; ++e) left += pc[e];
  if (!(left > 0.0)) return;  // no residual mass (p = q up to rounding): the bonus is drawn from p itself
  for (int e = 0; e < K; ++e) x[cand[e]] = static_cast<float>(log(pc[e]) + static_cast<double>(z0));
}

unsigned blocks(int64_t R) { return static_cast<unsigned>((R + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launch_draw_tree(const int32_t* parents, const int32_t* num_nodes,
                             const int32_t* depths, const float* lp, const int64_t* ids, const bool* drawn,
                             float sharpness, const int64_t* seed, const int64_t* step, int B, int n, int L, int K,
                             float* scratch, int64_t* out, cudaStream_t stream) {
  const int64_t R = static_cast<int64_t>(B) * n;
  if (R == 0) return cudaSuccess;
  if (L < 1 || K < 1 || K > kMaxTopK || n > kMaxTreeSlots) return cudaErrorInvalidValue;
  draw_tree_kernel<<<blocks(R), kThreads, 0, stream>>>(parents, num_nodes, depths, lp, ids, drawn, sharpness,
                                                       seed, step, B, n, L, K, scratch, out);
  return cudaGetLastError();
}

cudaError_t launch_tree_rejection(const int64_t* tokens, const int32_t* parents, const int32_t* num_nodes,
                                  const int32_t* depths, float* scaled, const float* lse, const int64_t* cand,
                                  const float* q, const bool* sampled, const int64_t* seed, const int64_t* step, int B,
                                  int n, int64_t V, int L, int K, double* scratch, int64_t* out, cudaStream_t stream) {
  const int64_t R = static_cast<int64_t>(B) * n;
  if (R == 0) return cudaSuccess;
  if (L < 1 || K < 1 || K > kMaxTopK || n > kMaxTreeSlots || V < 1) return cudaErrorInvalidValue;
  tree_rejection_kernel<<<blocks(R), kThreads, 0, stream>>>(tokens, parents, num_nodes, depths, scaled, lse, cand, q,
                                                            sampled, seed, step, B, n, V, L, K, scratch, out);
  return cudaGetLastError();
}

}  // namespace ddtree
