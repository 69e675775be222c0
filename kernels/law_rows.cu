// Every tree node's law in one launch, without sorting the vocabulary (kernels/law_rule.h defines the law; the
// torch definition is sglang_ddtree/sampling.py:law_rows_torch). One block per row:
//   pass 1   the argmax (and whether the row is degenerate)
//   pass 2   Z, the counts of e > 0 and e >= min_p, and, in a row its request filters, a histogram of count and
//            mass over the tokens' distance below the top score, d = s_max - s, in bins of 1/8 (an interval of the
//            rank order each: d grows as x falls). A token with d > F ln 2 has mass exactly 0 (E = floor(e 2^F)):
//            it takes no exp and no histogram atomic, only a count ("far"): a real row's tail, most of its tokens
//   descent  the lowest bin (or the far tokens, last) whose first token the rule keeps holds the last kept token;
//            while it holds more than kGather tokens, histograms of its rank keys' next 11 bits narrow it, one pass
//            each; then its tokens are gathered into shared memory and ranked there (each token's rank and mass
//            before it are counts and sums over the bucket: integer, so the order threads meet them in cannot
//            change them)
// A row whose request sets no filter takes two passes; a filtered one three (long runs of equal logits, a few more).
// Rows live in L2 between passes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "law_rule.h"
#include "logits.cuh"

namespace ddtree {
namespace {

constexpr int kThreads = 512;
constexpr int kDigitBits = 11;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kGather = 1024;
constexpr double kBinsPerNat = 8.0;  // the first level's bins over d = s_max - s; F ln 2 <= 62 ln 2 < 43 nats: 344 bins
constexpr int kFar = kBuckets - 1;   // the far tokens' bucket (last in the order: mass 0)

// The first level's bucket of a token d = s_max - s below the top score, or kFar.
__device__ __forceinline__ int bin_of(double d, double cut) {
  return d > cut ? kFar : static_cast<int>(d * kBinsPerNat);
}

// The rank key made unsigned with its order kept (the histograms' digits).
__device__ __forceinline__ uint64_t ukey(float x, int64_t j) {
  return static_cast<uint64_t>(law_key(x, j)) ^ 0x8000000000000000ull;
}

template <typename V>
__device__ __forceinline__ V block_sum(V v, V* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : V(0);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const V out = scratch[0];
  __syncthreads();
  return out;
}

// One warp's tokens into the histogram: lanes that share a digit add once, through their lowest lane (a
// vocabulary piles into a few buckets of the first level: one shared-memory atomic per token would serialise).
// Every lane of the warp calls it; `active` marks the lanes with a token.
__device__ __forceinline__ void hist_add(int* cnt, unsigned long long* mass, int d, unsigned long long E, bool active) {
  const unsigned peers = __match_any_sync(0xffffffffu, active ? d : -1);
  unsigned long long sum = 0;
#pragma unroll 8
  for (int src = 0; src < 32; ++src) {
    const unsigned long long v = __shfl_sync(0xffffffffu, E, src);
    if ((peers >> src) & 1u) sum += v;
  }
  if (active && (threadIdx.x & 31) == __ffs(peers) - 1) {
    atomicAdd(&cnt[d], __popc(peers));
    atomicAdd(&mass[d], sum);
  }
}

struct Shared {
  int cnt[kBuckets];
  unsigned long long mass[kBuckets];
  int64_t gkey[kGather];
  int64_t gmass[kGather];
  long long red[32];
  float best[32];
  int64_t best_idx[32];
  int ngather;
  int chosen;
  long long above_cnt, above_mass;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) law_rows_kernel(const T* __restrict__ logits, int64_t V, int n,
                                                            const float* __restrict__ temperatures,
                                                            const int64_t* __restrict__ top_ks,
                                                            const float* __restrict__ top_ps,
                                                            const float* __restrict__ min_ps,
                                                            int64_t* __restrict__ greedy, float* __restrict__ lse,
                                                            int64_t* __restrict__ boundary) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  const int64_t row = blockIdx.x;
  const int b = static_cast<int>(row / n);
  const T* x = logits + row * V;
  const int tid = threadIdx.x;

  // pass 1: the argmax
  float best = -INFINITY;
  int64_t bidx = INT64_MAX;
  for (int64_t j = tid; j < V; j += blockDim.x) {
    const float v = to_f32(x[j]);
    if (beats(v, j, best, bidx)) { best = v; bidx = j; }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_down_sync(0xffffffffu, best, off);
    const int64_t oi = __shfl_down_sync(0xffffffffu, bidx, off);
    if (beats(ob, oi, best, bidx)) { best = ob; bidx = oi; }
  }
  if ((tid & 31) == 0) { sh.best[tid >> 5] = best; sh.best_idx[tid >> 5] = bidx; }
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
      if (beats(sh.best[w], sh.best_idx[w], sh.best[0], sh.best_idx[0])) { sh.best[0] = sh.best[w]; sh.best_idx[0] = sh.best_idx[w]; }
    greedy[row] = sh.best_idx[0];
  }
  __syncthreads();
  const float x_max = sh.best[0];
  const float temperature = temperatures[b];
  const int64_t top_k = top_ks[b];
  if (!(temperature > 0.f) || top_k == 1) {  // a greedy request: its argmax is all the round reads
    if (tid == 0) { lse[row] = 0.f; boundary[row] = kKeepAll; }
    return;
  }
  const float t = fmaxf(temperature, kMinTemperature);
  const float s_max = div_rn(x_max, t);
  if (isnan(x_max) || !isfinite(s_max)) {
    if (tid == 0) { lse[row] = NAN; boundary[row] = kKeepNone; }
    return;
  }
  const float top_p = top_ps[b], min_p = min_ps[b];
  const bool filtered = law_filtered(top_k, top_p, min_p, V);
  const int F = mass_bits(V);

  // pass 2: Z and the counts; the first level's histogram over d (near tokens only)
  for (int i = tid; i < kBuckets; i += blockDim.x) { sh.cnt[i] = 0; sh.mass[i] = 0; }
  __syncthreads();
  const double cut = F * 0.6931471805599453 + 1e-6;  // d > cut: exp(-d) < 2^-F, so E = 0 (law_rule.h's mass)
  const double log_min_p = min_p > 0.f ? log(static_cast<double>(min_p)) - 1e-6 : 0.0;
  long long z = 0, npos = 0, nmin = 0, near = 0;
  for (int64_t base = 0; base < V; base += blockDim.x) {  // uniform trip count: hist_add is warp-wide
    const int64_t j = base + tid;
    const bool in = j < V;
    const double d = in ? static_cast<double>(s_max) - static_cast<double>(div_rn(to_f32(x[j]), t)) : INFINITY;
    const bool is_near = in && !(d > cut);
    const double e = is_near ? exp(-d) : 0.0;  // law_weight's exp(s - s_max), where it can be nonzero in fixed point
    const int64_t E = fixed_mass(e, F);
    z += E;
    near += is_near;
    npos += in && (is_near || d < 745.0 || exp(-d) > 0.0);
    nmin += in && (!(min_p > 0.f) || (is_near ? e >= static_cast<double>(min_p)
                                              : (-d >= log_min_p && exp(-d) >= static_cast<double>(min_p))));
    if (filtered)
      hist_add(sh.cnt, sh.mass, is_near ? static_cast<int>(d * kBinsPerNat) : kFar, static_cast<unsigned long long>(E),
               is_near);
  }
  const long long Z = block_sum(z, sh.red);
  if (!filtered) {
    if (tid == 0) { lse[row] = law_lse(s_max, Z, F); boundary[row] = kKeepAll; }
    return;
  }
  const long long count_pos = block_sum(npos, sh.red), count_min = block_sum(nmin, sh.red);
  const long long far = V - block_sum(near, sh.red);
  const LawLimits lim = law_limits(top_k, top_p, V, count_pos, min_p > 0.f ? count_min : V, Z);

  // the first level: the lowest bin (far last) whose first token is kept (monotone: stop at the first refusal)
  if (tid == 0) {
    if (far > 0) sh.cnt[kFar] = static_cast<int>(far);
    long long ac = 0, am = 0, cac = 0, cam = 0;
    int chosen = -1;
    for (int b2 = 0; b2 < kBuckets; ++b2) {
      if (sh.cnt[b2] == 0) continue;
      if (!law_keeps(ac, am, lim)) break;
      chosen = b2; cac = ac; cam = am;
      ac += sh.cnt[b2];
      am += static_cast<long long>(sh.mass[b2]);
    }
    sh.chosen = chosen;  // never -1: the first token is always kept
    sh.above_cnt = cac;
    sh.above_mass = cam;
    sh.ngather = 0;
  }
  __syncthreads();
  const int bin = sh.chosen;
  // then the rank keys' bits, among the chosen bin's tokens: `top` bits of the key are fixed (prefix)
  uint64_t prefix = 0;
  int top = 64;
  bool gather = sh.cnt[bin] <= kGather;
  while (!gather) {
    __syncthreads();
    for (int i = tid; i < kBuckets; i += blockDim.x) { sh.cnt[i] = 0; sh.mass[i] = 0; }
    __syncthreads();
    const int lo = top - kDigitBits > 0 ? top - kDigitBits : 0;
    for (int64_t base = 0; base < V; base += blockDim.x) {
      const int64_t j = base + tid;
      const float xv = j < V ? to_f32(x[j]) : 0.f;
      const double d = static_cast<double>(s_max) - static_cast<double>(div_rn(xv, t));
      const uint64_t k = ukey(xv, j);
      const bool in = j < V && bin_of(d, cut) == bin && (top == 64 || (k >> top) == prefix);
      const int dg = static_cast<int>((k >> lo) & ((1ull << (top - lo)) - 1));
      const unsigned long long E = in ? fixed_mass(law_weight(div_rn(xv, t), s_max), F) : 0;
      hist_add(sh.cnt, sh.mass, dg, E, in);
    }
    __syncthreads();
    if (tid == 0) {  // the lowest non-empty bucket whose first token is kept
      long long ac = sh.above_cnt, am = sh.above_mass, cac = ac, cam = am;
      int chosen = -1;
      for (int dg = (1 << (top - lo)) - 1; dg >= 0; --dg) {
        if (sh.cnt[dg] == 0) continue;
        if (!law_keeps(ac, am, lim)) break;
        chosen = dg; cac = ac; cam = am;
        ac += sh.cnt[dg];
        am += static_cast<long long>(sh.mass[dg]);
      }
      sh.chosen = chosen;  // never -1: the bucket above starts with a kept token
      sh.above_cnt = cac;
      sh.above_mass = cam;
    }
    __syncthreads();
    const int chosen = sh.chosen;
    prefix = (top == 64 ? 0 : prefix << (top - lo)) | static_cast<uint64_t>(chosen);
    gather = sh.cnt[chosen] <= kGather || lo == 0;
    top = lo;
  }
  __syncthreads();
  // the gather: the tokens of the chosen bin under the prefix, ranked among themselves
  for (int64_t j = tid; j < V; j += blockDim.x) {
    const float xv = to_f32(x[j]);
    const double d = static_cast<double>(s_max) - static_cast<double>(div_rn(xv, t));
    if (bin_of(d, cut) != bin) continue;
    const uint64_t k = ukey(xv, j);
    if (top < 64 && (k >> top) != prefix) continue;
    const int at = atomicAdd(&sh.ngather, 1);
    if (at < kGather) {
      sh.gkey[at] = law_key(xv, j);
      sh.gmass[at] = fixed_mass(law_weight(div_rn(xv, t), s_max), F);
    }
  }
  __syncthreads();
  const int m = sh.ngather < kGather ? sh.ngather : kGather;
  const long long above_cnt = sh.above_cnt, above_mass = sh.above_mass;
  long long kept_mass = 0;
  int64_t last = kKeepNone;
  for (int i = tid; i < m; i += blockDim.x) {
    long long r = above_cnt, mb = above_mass;
    for (int l = 0; l < m; ++l)
      if (sh.gkey[l] > sh.gkey[i]) { ++r; mb += sh.gmass[l]; }
    if (law_keeps(r, mb, lim)) {
      kept_mass += sh.gmass[i];
      last = sh.gkey[i] < last ? sh.gkey[i] : last;
    }
  }
  kept_mass = block_sum(kept_mass, sh.red);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const int64_t o = __shfl_down_sync(0xffffffffu, last, off);
    last = o < last ? o : last;
  }
  if ((tid & 31) == 0) sh.best_idx[tid >> 5] = last;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) last = sh.best_idx[w] < last ? sh.best_idx[w] : last;
    boundary[row] = last;
    lse[row] = law_lse(s_max, above_mass + kept_mass, F);
  }
}

}  // namespace

cudaError_t launch_law_rows(const void* logits, LogitDtype dtype, int64_t R, int64_t V, int n,
                            const float* temperatures, const int64_t* top_ks, const float* top_ps,
                            const float* min_ps, int64_t* greedy, float* lse, int64_t* boundary,
                            cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (V < 1 || n < 1 || R % n != 0 || R > 0x7fffffff) return cudaErrorInvalidValue;
  static_assert(sizeof(Shared) <= 48 * 1024, "law_rows' shared memory must fit the default launch limit");
  return with_logit_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    law_rows_kernel<T><<<static_cast<unsigned>(R), kThreads, sizeof(Shared), stream>>>(
        static_cast<const T*>(logits), V, n, temperatures, top_ks, top_ps, min_ps, greedy, lse, boundary);
  });
}

}  // namespace ddtree
