// Accepting a verified tree on the GPU: the bounded greedy walk (reference.walk_reference), the round's commit
// plan (the walk plus KV moves, committed tokens, hidden-state rows; kernels/tree_walk.h) and the per-node
// target token (argmax, or Gumbel-max at temperature > 0).
//
// ---- The sampling RNG (the CPU mirror, sglang_ddtree/sampling.py:gumbel_noise, must match it) ----------
//   Generator  Philox4x32-10 (Salmon et al. 2011): multipliers M0 = 0xD2511F53, M1 = 0xCD9E8D57,
//              Weyl key increments W0 = 0x9E3779B9, W1 = 0xBB67AE85; per round
//                (c0, c1, c2, c3) <- (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0)),
//              then (k0, k1) += (W0, W1); 10 rounds, the first with the unmodified key.
//   Key        (k0, k1) = (seed & 0xFFFFFFFF, seed >> 32)                      seed: int64 of the row
//   Counter    (c0, c1, c2, c3) = (v >> 2, node & 0xFFFFFFFF, step & 0xFFFFFFFF, step >> 32)
//              v = vocabulary index; the uniform of v is output word v & 3.
//   Uniform    u = float32((x + 0.5) * 2^-32) computed in float64 (exact) and rounded to nearest, then
//              clamped to at most 1 - 2^-24 (0x3F7FFFFF): the float32 rounding maps the top 128 words to
//              1.0, whose Gumbel value would be +inf.
//   Gumbel     g = -log(-log(u)), both logs float32 (CUDA logf, <= 1 ulp; CPU libm may differ by 1 ulp,
//              so CPU and GPU samples agree except on near-ties of the score).
//   Score      s = logit / T + g in float32 (IEEE division); sample = argmax_v s, first index on ties.
//   T == 0     sample = argmax of the logits, first index on ties; NaN counts as the maximum (torch.argmax).
// Elements that cannot win are skipped without drawing: g <= G_MAX = -log(-log(1 - 2^-24)) < 16.64, so an
// element with logit / T + 16.64 < the thread's best score is never evaluated; counter-based draws make
// skipping invisible in the result.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gumbel_rows.cuh"
#include "logits.cuh"
#include "tree_commit.cuh"
#include "tree_kernels.cuh"
#include "tree_walk.h"

namespace ddtree {
namespace {

// ------------------------------------------------------------------------------------------ the walk
// One warp per request: the links, tokens and targets are staged into shared memory with coalesced loads,
// then lane 0 walks (kernels/tree_walk.h, = reference.walk_reference); links outside [-1, n) become n,
// which fails the walk's range check like the raw value would.
struct Staged {
  int64_t* tok;
  int64_t* tgt;
  int32_t* nt;
  int32_t* ns;
};

__device__ __forceinline__ Staged stage_request(unsigned char* smem, const int64_t* tokens, const int64_t* next_token,
                                                const int64_t* next_sibling, const int64_t* target, int b, int n,
                                                int lane) {
  Staged s;
  s.tok = reinterpret_cast<int64_t*>(smem);
  s.tgt = s.tok + n;
  s.nt = reinterpret_cast<int32_t*>(s.tgt + n);
  s.ns = s.nt + n;
  const int64_t base = static_cast<int64_t>(b) * n;
  auto squash = [n](int64_t v) -> int32_t { return (v < -1 || v >= n) ? n : static_cast<int32_t>(v); };
  for (int i = lane; i < n; i += 32) {
    s.tok[i] = tokens[base + i];
    s.tgt[i] = target[base + i];
    s.nt[i] = squash(next_token[base + i]);
    s.ns[i] = squash(next_sibling[base + i]);
  }
  return s;
}

__host__ __device__ constexpr size_t staged_bytes(int n) {
  return static_cast<size_t>(n) * (2 * sizeof(int64_t) + 2 * sizeof(int32_t));
}

__global__ void __launch_bounds__(32) tree_accept_kernel(const int64_t* __restrict__ tokens,
                                                         const int64_t* __restrict__ next_token,
                                                         const int64_t* __restrict__ next_sibling,
                                                         const int32_t* __restrict__ num_nodes,
                                                         const int64_t* __restrict__ target, int n, int depth_limit,
                                                         int32_t* __restrict__ accept_index,
                                                         int32_t* __restrict__ accept_len,
                                                         int64_t* __restrict__ bonus, int32_t* __restrict__ flags) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int b = blockIdx.x, lane = threadIdx.x;
  const Staged s = stage_request(smem, tokens, next_token, next_sibling, target, b, n, lane);
  const int width = depth_limit + 1;
  int32_t* acc = accept_index + static_cast<int64_t>(b) * width;
  for (int j = lane; j < width; j += 32) acc[j] = -1;
  __syncwarp();
  if (lane != 0) return;
  const WalkResult w = walk_tree(s.tok, s.tgt, s.nt, s.ns, num_nodes[b], n, depth_limit, acc);
  accept_len[b] = w.len;
  bonus[b] = s.tgt[w.last];
  flags[b] = w.flags;
}

// The walk and the round's commit plan (tree_walk.h: commit_column) in one launch: lane 0 walks into shared
// memory, then the warp writes the W = depth_limit + 1 plan columns.
template <class Len>
__global__ void __launch_bounds__(32) tree_commit_kernel(const int64_t* __restrict__ tokens,
                                                         const int64_t* __restrict__ next_token,
                                                         const int64_t* __restrict__ next_sibling,
                                                         const int32_t* __restrict__ num_nodes,
                                                         const int64_t* __restrict__ target,
                                                         const Len* __restrict__ prefix_lens,
                                                         const int64_t* __restrict__ slots, int n, int depth_limit,
                                                         CommitOutputs out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int b = blockIdx.x, lane = threadIdx.x;
  const Staged s = stage_request(smem, tokens, next_token, next_sibling, target, b, n, lane);
  const int width = depth_limit + 1;
  int32_t* s_acc = reinterpret_cast<int32_t*>(smem + staged_bytes(n));
  __shared__ WalkResult s_w;
  __syncwarp();
  if (lane == 0) s_w = walk_tree(s.tok, s.tgt, s.nt, s.ns, num_nodes[b], n, depth_limit, s_acc);
  __syncwarp();
  const WalkResult w = s_w;
  const int64_t o = static_cast<int64_t>(b) * width;
  const Len prefix = prefix_lens[b];
  for (int k = lane; k < width; k += 32) {
    out.accept_index[o + k] = k < w.len ? s_acc[k] : -1;
    commit_column(k, w, s_acc, s.tok, s.tgt, slots + static_cast<int64_t>(b) * n, prefix, b, n,
                  out.out_tokens + o, out.kv_src + o, out.kv_dst + o, out.hidden_index + o, out.positions + o);
  }
  if (lane == 0) {
    out.accept_len[b] = w.len;
    out.bonus[b] = s.tgt[w.last];
    out.flags[b] = w.flags;
    static_cast<Len*>(out.new_seq_lens)[b] = prefix + static_cast<Len>(w.len);
  }
}

// -------------------------------------------------------------------------------------- the sampler
// One block per row; T = row_temperature[row] when given, else temperature_all; with a boundary (law_rows), a token
// whose rank key is below its row's is dropped from a sampled row's draw.
template <typename T>
__global__ void __launch_bounds__(512) sample_rows_kernel(const T* __restrict__ logits, int64_t V, float temperature_all,
                                                          const float* __restrict__ row_temperature,
                                                          const int64_t* __restrict__ boundary,
                                                          const int64_t* __restrict__ seed,
                                                          const int64_t* __restrict__ step,
                                                          const int64_t* __restrict__ node, int64_t* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  const float temperature = row_temperature != nullptr ? row_temperature[row] : temperature_all;
  const bool greedy = !(temperature > 0.f);
  const int64_t bnd = boundary != nullptr ? boundary[row] : kKeepAll;
  float best = -INFINITY;
  int64_t bidx = INT64_MAX;
  gumbel_scan_block(V, seed[row], step[row], node[row], greedy, [&](int64_t j) {
    const float v = to_f32(x[j]);
    if (greedy) return v;
    return law_key(v, j) >= bnd ? v / temperature : -INFINITY;
  }, best, bidx);
  bidx = block_best(best, bidx);
  if (threadIdx.x == 0) out[row] = bidx;
}

}  // namespace

cudaError_t launch_tree_accept(const int64_t* tokens, const int64_t* next_token, const int64_t* next_sibling,
                               const int32_t* num_nodes, const int64_t* target, int B, int n, int depth_limit,
                               int32_t* accept_index, int32_t* accept_len, int64_t* bonus, int32_t* flags,
                               cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  if (n < 1 || depth_limit < 0) return cudaErrorInvalidValue;
  const size_t bytes = staged_bytes(n);
  if (bytes > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(tree_accept_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  tree_accept_kernel<<<B, 32, bytes, stream>>>(tokens, next_token, next_sibling, num_nodes, target, n, depth_limit,
                                               accept_index, accept_len, bonus, flags);
  return cudaGetLastError();
}

cudaError_t launch_tree_commit(const int64_t* tokens, const int64_t* next_token, const int64_t* next_sibling,
                               const int32_t* num_nodes, const int64_t* target, const void* prefix_lens,
                               bool prefix_is_64, const int64_t* slots, int B, int n, int depth_limit,
                               const CommitOutputs& out, cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  if (n < 1 || depth_limit < 0) return cudaErrorInvalidValue;
  const size_t bytes = staged_bytes(n) + static_cast<size_t>(depth_limit + 1) * sizeof(int32_t);
  if (bytes > 48 * 1024) {
    const cudaError_t e =
        prefix_is_64 ? cudaFuncSetAttribute(tree_commit_kernel<int64_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes))
                     : cudaFuncSetAttribute(tree_commit_kernel<int32_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  if (prefix_is_64) {
    tree_commit_kernel<int64_t><<<B, 32, bytes, stream>>>(tokens, next_token, next_sibling, num_nodes, target,
                                                          static_cast<const int64_t*>(prefix_lens), slots, n,
                                                          depth_limit, out);
  } else {
    tree_commit_kernel<int32_t><<<B, 32, bytes, stream>>>(tokens, next_token, next_sibling, num_nodes, target,
                                                          static_cast<const int32_t*>(prefix_lens), slots, n,
                                                          depth_limit, out);
  }
  return cudaGetLastError();
}

cudaError_t launch_sample_rows(const void* logits, LogitDtype dtype, int64_t R, int64_t V, float temperature,
                               const float* row_temperature, const int64_t* boundary, const int64_t* seed,
                               const int64_t* step, const int64_t* node, int64_t* out, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (V < 1 || R > 0x7fffffff) return cudaErrorInvalidValue;
  const int threads = V >= 16384 ? 512 : (V >= 2048 ? 256 : 64);
  return with_logit_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    sample_rows_kernel<T><<<static_cast<unsigned>(R), threads, 0, stream>>>(
        static_cast<const T*>(logits), V, temperature, row_temperature, boundary, seed, step, node, out);
  });
}

}  // namespace ddtree
