// A drawn tree's two steps on the GPU, one launch each (sglang_ddtree/rejection.py is their definition;
// docs/DESIGN.md §3.12; kernels/law_rule.h holds the law and the per-node test, shared with the CPU ops).
//   draw_tree      one thread per node (b, v): node v's children get the first draws of the Gumbel top-k of its
//                  children's depth keys (lp·sharpness + Gumbel noise of stream DRAW_STREAM + v, entry e;
//                  descending, ties by the lower index: torch.sort(descending, stable)) in the rows `drawn` marks;
//                  the others keep their tokens
//   drawn_targets  one block per request: the round's walk, node by node from the root. At each node one thread
//                  tests its children in order against the target's law (law_rows' row: the kept set and its
//                  normaliser) read at the node's candidates only; an accepted child is the node's target token and
//                  the walk descends into it. Where none is accepted, the block draws the bonus from the last
//                  residual (the law with the candidates' entries replaced: one Gumbel-max pass over the row, the
//                  candidates scored apart at their residual values), and the walk descends if a child holds it
//                  (a child never tested can). So a request draws over the vocabulary once a round, at the node
//                  its walk stops, not at every node. Nodes off the walk keep their argmax (the commit walk
//                  reads only the walk's nodes).
// Products are rounded before sums (__fmul_rn / __fadd_rn), as torch computes them: no contraction into an FMA.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gumbel_rows.cuh"
#include "logits.cuh"
#include "tree_kernels.cuh"

namespace ddtree {
namespace {

constexpr int kThreads = 128;
constexpr int kTailThreads = 512;

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

// The drawn tree's tail (module comment). Shared memory: the request's tokens and links (int32), pc and q at one
// node's candidates (float64), and a bitmap of those candidates over the vocabulary.
template <typename T>
__global__ void __launch_bounds__(kTailThreads) drawn_targets_kernel(
    const T* __restrict__ logits, int64_t V, int n, int L, int K, const float* __restrict__ temperatures,
    const int64_t* __restrict__ greedy, const float* __restrict__ lse, const int64_t* __restrict__ boundary,
    const int64_t* __restrict__ tokens, const int32_t* __restrict__ parents, const int32_t* __restrict__ num_nodes,
    const int32_t* __restrict__ depths, const int64_t* __restrict__ next_token,
    const int64_t* __restrict__ next_sibling, const int64_t* __restrict__ cand_all, const float* __restrict__ q_all,
    const bool* __restrict__ sampled, const int64_t* __restrict__ seeds, const int64_t* __restrict__ steps,
    int64_t* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* pc = reinterpret_cast<double*>(smem);
  double* q = pc + K;
  int64_t* tok = reinterpret_cast<int64_t*>(q + K);
  int64_t* kids = tok + n;
  int32_t* par = reinterpret_cast<int32_t*>(kids + n);
  int32_t* nt = par + n;
  int32_t* ns = nt + n;
  uint32_t* bits = reinterpret_cast<uint32_t*>(ns + n);
  __shared__ int64_t s_tok;
  __shared__ int s_next;
  __shared__ bool s_residual;
  const int b = blockIdx.x, tid = threadIdx.x;
  const int64_t base = static_cast<int64_t>(b) * n;
  for (int v = tid; v < n; v += blockDim.x) out[base + v] = greedy[base + v];
  if (!sampled[b]) return;
  auto squash = [n](int64_t l) -> int32_t { return (l < -1 || l >= n) ? n : static_cast<int32_t>(l); };
  for (int v = tid; v < n; v += blockDim.x) {
    tok[v] = tokens[base + v];
    par[v] = parents[base + v];
    nt[v] = squash(next_token[base + v]);
    ns[v] = squash(next_sibling[base + v]);
  }
  const int64_t words = (V + 31) >> 5;
  for (int64_t w = tid; w < words; w += blockDim.x) bits[w] = 0;
  const int nn = min(max(num_nodes[b], 1), n);
  const float t = fmaxf(temperatures[b], kMinTemperature);
  const int64_t seed = seeds[b], step = steps[b];
  int v = 0;
  for (int hop = 0; hop < n; ++hop) {  // a walk visits each node at most once (links point forward)
    const int64_t row = base + v;
    const int64_t bnd = boundary[row];
    const float z0 = lse[row];
    const T* x = logits + row * V;
    const int64_t* cand = cand_all + (static_cast<int64_t>(b) * L + depth_row(depths, row, L)) * K;
    const bool point = bnd == kKeepNone;  // a degenerate row: the point mass at its argmax
    const int64_t g = greedy[row];
    __syncthreads();
    for (int e = tid; e < K; e += blockDim.x) {  // p and q at the node's candidates, one thread each (the loads)
      const int64_t c = cand[e];
      double p = 0.0;
      if (point) {
        p = c == g ? 1.0 : 0.0;
      } else if (c >= 0 && c < V) {
        const float xv = to_f32(x[c]);
        if (law_key(xv, c) >= bnd) p = exp(static_cast<double>(sub_rn(div_rn(xv, t), z0)));
      }
      pc[e] = p;
      q[e] = static_cast<double>(q_all[(cand - cand_all) + e]);
    }
    __syncthreads();
    if (tid == 0) {  // the tests, in order (shared memory only)
      double total = 0.0;
      for (int e = 0; e < K; ++e) total += pc[e];
      const double rest = fmax(1.0 - total, 0.0);
      int m = 0;
      for (int j = v + 1; j < nn; ++j)
        if (par[j] == v) kids[m++] = tok[j];
      int64_t accepted = test_children(kids, m, cand, K, pc, rest, q, seed, step, v);
      double left = rest;
      for (int e = 0; e < K; ++e) left += pc[e];
      s_residual = accepted < 0 && !point && left > 0.0;
      s_tok = accepted < 0 && point ? g : accepted;
    }
    __syncthreads();
    int64_t token = s_tok;
    if (token < 0) {  // the bonus: one pass over the row, the candidates at their residual values apart
      const bool residual = s_residual;
      if (residual)
        for (int e = tid; e < K; e += blockDim.x)
          if (cand[e] >= 0 && cand[e] < V) atomicOr(&bits[cand[e] >> 5], 1u << (cand[e] & 31));
      __syncthreads();
      float best = -INFINITY;
      int64_t bidx = INT64_MAX;
      gumbel_scan_block(V, seed, step, kBonusStream + v, false, [&](int64_t j) {
        if (residual && ((bits[j >> 5] >> (j & 31)) & 1u)) return -INFINITY;
        const float xv = to_f32(x[j]);
        return law_key(xv, j) >= bnd ? div_rn(xv, t) : -INFINITY;
      }, best, bidx);
      if (residual) {
        for (int e = tid; e < K; e += blockDim.x) {
          const int64_t c = cand[e];
          if (c < 0 || c >= V) continue;
          const float s = residual_score(pc[e], z0, c, seed, step, kBonusStream + v);
          if (beats(s, c, best, bidx)) { best = s; bidx = c; }
        }
      }
      token = block_best(best, bidx);
      if (residual)
        for (int e = tid; e < K; e += blockDim.x)
          if (cand[e] >= 0 && cand[e] < V) atomicAnd(&bits[cand[e] >> 5], ~(1u << (cand[e] & 31)));
    }
    if (tid == 0) {  // the node's target; the walk's next node: its first child in link order that holds it
      out[row] = token;
      int next = -1, prev = v, c = nt[v];
      for (int guard = 0; c != -1 && guard < n; ++guard) {
        if (!(prev < c && c < nn)) break;  // a malformed link: the commit walk flags it
        if (tok[c] == token) { next = c; break; }
        prev = c;
        c = ns[c];
      }
      s_next = next;
    }
    __syncthreads();
    if (s_next < 0) break;
    v = s_next;
  }
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

cudaError_t launch_drawn_targets(const void* logits, LogitDtype dtype, int64_t V, const float* temperatures,
                                 const int64_t* greedy, const float* lse, const int64_t* boundary,
                                 const int64_t* tokens, const int32_t* parents, const int32_t* num_nodes,
                                 const int32_t* depths, const int64_t* next_token, const int64_t* next_sibling,
                                 const int64_t* cand, const float* q, const bool* sampled, const int64_t* seed,
                                 const int64_t* step, int B, int n, int L, int K, int64_t* out, cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  if (n < 1 || L < 1 || K < 1 || K > kMaxTopK || n > kMaxTreeSlots || V < 1) return cudaErrorInvalidValue;
  const size_t bytes = static_cast<size_t>(K) * 2 * sizeof(double) + static_cast<size_t>(n) * 2 * sizeof(int64_t) +
                       static_cast<size_t>(n) * 3 * sizeof(int32_t) + static_cast<size_t>((V + 31) >> 5) * sizeof(uint32_t);
  return with_logit_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (bytes > 48 * 1024 &&
        cudaFuncSetAttribute(drawn_targets_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)) != cudaSuccess)
      return;  // cudaGetLastError reports it
    drawn_targets_kernel<T><<<B, kTailThreads, bytes, stream>>>(
        static_cast<const T*>(logits), V, n, L, K, temperatures, greedy, lse, boundary, tokens, parents, num_nodes,
        depths, next_token, next_sibling, cand, q, sampled, seed, step, out);
  });
}

}  // namespace ddtree
