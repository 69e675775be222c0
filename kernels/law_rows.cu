// Every tree node's law in one launch, without sorting the vocabulary (kernels/law_rule.h defines the law; the
// torch definition is sglang_ddtree/sampling.py:law_rows_torch). A row is split over a cluster of C CTAs (C = 1
// when rows alone fill the GPU, up to 8 when they are few; launch_t says how C is chosen): each CTA reads a
// contiguous chunk in tiles of 16-byte vectors, kLoads a thread issued together, two CTAs an SM hiding each
// other's latency (one block reading 4-byte words with one load in flight is latency-bound, whatever the row
// count). Every pass covers the whole row, split so:
//   pass 1   the argmax (and whether the row is degenerate): each CTA's best pushed to every CTA of the cluster
//   pass 2   Z, the counts of e > 0 and e >= min_p, and, in a row its request filters, a histogram of count and
//            mass over the tokens' distance below the top score, d = s_max - s, in bins of 1/8 (an interval of the
//            rank order each: d grows as x falls). A token with d > F ln 2 has mass exactly 0 (E = floor(e 2^F)):
//            it takes no exp and no histogram atomic, only a count ("far"): a real row's tail, most of its tokens
//   descent  the lowest bin (or the far tokens, last) whose first token the rule keeps holds the last kept token:
//            every CTA sums the cluster's histograms (distributed shared memory) and scans them in parallel, so
//            all CTAs pick the same bucket. While it holds more than kGather tokens, histograms of its compact
//            keys' next 11 bits narrow it, one pass each; then its tokens are gathered into rank 0's shared
//            memory, sorted there, and the rule is applied along them
// Every sum that reaches an output is of integers (counts, fixed-point masses), so the split, the atomics' order
// and the cluster size cannot change a result: the kernel returns the same bits for any C. The argmax's order is
// total (law_rule.h: beats). A row whose request sets no filter takes two passes; a filtered one three (long runs
// of equal logits, a few more); a greedy request's row one. Rows live in L2 between passes.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "law_rule.h"
#include "logits.cuh"

namespace ddtree {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kLoads = 4;            // 16-byte loads a thread issues a tile, all before the first is read
constexpr int kMaxCluster = 8;       // portable cluster size
constexpr int64_t kMinChunk = 4096;  // a CTA's share of a row (elements) stays at least this when rows are split
constexpr int kDigitBits = 11;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kPer = kBuckets / kThreads;  // buckets a thread sums and scans
constexpr int kGather = 1024;
constexpr double kBinsPerNat = 8.0;  // the first level's bins over d = s_max - s; F ln 2 <= 62 ln 2 < 43 nats: 344 bins
constexpr int kLevel0 = 512;         // the first level's buckets: the near bins, then the far tokens' (last: mass 0)
constexpr int kFar = kLevel0 - 1;
static_assert(62 * 0.6931471805599453 * kBinsPerNat + 1 < kFar, "the near bins stay below the far bucket");
static_assert(kGather <= 2 * kThreads, "the final scan takes two gathered tokens a thread");

// Clusters exist from sm_90 on; older GPUs are only launched with csize = 1 (launch_t).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DDTREE_LAW_CLUSTERS 1
#else
#define DDTREE_LAW_CLUSTERS 0
#endif
template <typename P> __device__ __forceinline__ P* at_rank(P* p, int rank, int csize) {
#if DDTREE_LAW_CLUSTERS
  if (csize > 1) return cg::this_cluster().map_shared_rank(p, rank);
#endif
  return p;
}
__device__ __forceinline__ void cluster_barrier(int csize) {
#if DDTREE_LAW_CLUSTERS
  if (csize > 1) {
    cg::this_cluster().sync();
    return;
  }
#endif
  __syncthreads();
}
// The kernel's first arrival (relaxed) and its wait, before the first write into another CTA's shared memory:
// that CTA has started by then. Pass 1 runs in between.
__device__ __forceinline__ void cluster_arrive_relaxed(int csize) {
#if DDTREE_LAW_CLUSTERS
  if (csize > 1) __cluster_barrier_arrive_relaxed();
#endif
}
__device__ __forceinline__ void cluster_wait(int csize) {
#if DDTREE_LAW_CLUSTERS
  if (csize > 1) __cluster_barrier_wait();
#endif
}
__device__ __forceinline__ int cluster_rank(int csize) {
#if DDTREE_LAW_CLUSTERS
  if (csize > 1) return static_cast<int>(cg::this_cluster().block_rank());
#endif
  return 0;
}

// 16-byte vectors of E elements, PW a 32-bit word; at(w, h): element h of word w as float32 (exact, little-endian).
// kZeroBits: the low bits of that float32 a value of the dtype always leaves 0.
template <typename T> struct Vec;
template <> struct Vec<float> {
  static constexpr int E = 4, PW = 1, kZeroBits = 0;
  __device__ static float at(uint32_t w, int) { return __uint_as_float(w); }
};
template <> struct Vec<__nv_bfloat16> {
  static constexpr int E = 8, PW = 2, kZeroBits = 16;
  __device__ static float at(uint32_t w, int h) { return __uint_as_float(h ? (w & 0xffff0000u) : (w << 16)); }
};
template <> struct Vec<__half> {
  static constexpr int E = 8, PW = 2, kZeroBits = 13;
  __device__ static float at(uint32_t w, int h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h ? (w >> 16) : (w & 0xffffu))));
  }
};

// f(x_j, j) for this thread's share of j in [c0, c1). kVec (rows 16-byte aligned, c0 and c1 multiples of E): tiles
// of kThreads x kLoads vectors, a tile's loads all issued before its first element is read (the other warps of the
// SM hide their latency). kUnroll: f inlined at every element (a cheap f) or once a word's element, the vectors
// rotated through registers (a heavy f: the loop's code stays small).
template <typename T, bool kVec, bool kUnroll, typename F>
__device__ __forceinline__ void scan_chunk(const T* __restrict__ x, int64_t c0, int64_t c1, F&& f) {
  using D = Vec<T>;
  constexpr int E = D::E;
  if constexpr (!kVec) {
    for (int64_t j = c0 + threadIdx.x; j < c1; j += kThreads) f(to_f32(x[j]), j);
  } else {
    constexpr int64_t kStride = static_cast<int64_t>(kThreads) * E, kTile = kStride * kLoads;
    constexpr int kU = kUnroll ? kLoads : 1, kW = kUnroll ? 4 : 1;
    for (int64_t t0 = c0; t0 < c1; t0 += kTile) {
      const int64_t j0 = t0 + static_cast<int64_t>(threadIdx.x) * E;
      uint4 cur[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t e0 = j0 + u * kStride;
        cur[u] = e0 < c1 ? __ldg(reinterpret_cast<const uint4*>(x + e0)) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll kU
      for (int u = 0; u < kLoads; ++u) {
        int64_t j = j0 + u * kStride;
        uint4 v = cur[0];
#pragma unroll
        for (int r = 0; r + 1 < kLoads; ++r) cur[r] = cur[r + 1];
        if (j < c1) {
#pragma unroll kW
          for (int w = 0; w < 4; ++w, j += D::PW) {
#pragma unroll
            for (int h = 0; h < D::PW; ++h) f(D::at(v.x, h), j + h);
            v.x = v.y;
            v.y = v.z;
            v.z = v.w;
          }
        }
      }
    }
  }
}

// The first level's bucket of a token d = s_max - s below the top score, or kFar.
__device__ __forceinline__ int bin_of(double d, double cut) {
  return d > cut ? kFar : static_cast<int>(d * kBinsPerNat);
}

// The rank key without the bits every token of the dtype shares: the float's low zb bits (0 for x >= 0, 1 below
// law_key's flip: fixed by the sign, which the top bits hold) and the id's bits at and above ib = bit_length(V - 1)
// (all 1). Order and distinctness are law_key's, in 32 - zb + ib bits: fewer levels of the descent.
__device__ __forceinline__ uint64_t compact_key(float x, int64_t j, int zb, int ib) {
  const uint64_t k = static_cast<uint64_t>(law_key(x, j)) ^ 0x8000000000000000ull;
  return (((k >> 32) >> zb) << ib) | (k & ((1ull << ib) - 1));
}

struct Shared {
  uint32_t cnt[kBuckets];  // this CTA's histogram of a level: its tokens, and their fixed-point mass as two words
  uint32_t lo[kBuckets];
  uint32_t hi[kBuckets];
  int64_t gkey[kGather];   // at rank 0: the gathered tokens' keys and masses
  int64_t gmass[kGather];
  float pub_best[kMaxCluster];  // each rank's partial results, pushed into every rank's slot [rank]
  int64_t pub_idx[kMaxCluster];
  long long pub_sum[kMaxCluster][4];  // Z, near, count_pos, count_min
  float best[32];
  int64_t best_idx[32];
  long long red[32][4];
  long long scan_a[32];
  unsigned long long scan_b[32];
  long long above_cnt, above_mass, chosen_cnt;
  int chosen, ngather;
};

// One token into bucket i: its count, and its mass E in two 32-bit words (a 64-bit shared atomic is a CAS loop).
// The low word's carry is counted by the add that made it (the old value tells), so hi * 2^32 + lo is the exact sum.
__device__ __forceinline__ void hist_add(Shared& sh, int i, uint64_t E) {
  atomicAdd(&sh.cnt[i], 1u);
  const uint32_t el = static_cast<uint32_t>(E);
  uint32_t up = static_cast<uint32_t>(E >> 32);
  if (el != 0) {
    const uint32_t old = atomicAdd(&sh.lo[i], el);
    up += old + el < old ? 1u : 0u;
  }
  if (up != 0) atomicAdd(&sh.hi[i], up);
}

// Exclusive prefix sums of (a, b) over the block in thread order; every thread calls it.
__device__ __forceinline__ void block_exscan(long long& a, unsigned long long& b, Shared& sh) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long ia = a;
  unsigned long long ib = b;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const long long oa = __shfl_up_sync(0xffffffffu, ia, off);
    const unsigned long long ob = __shfl_up_sync(0xffffffffu, ib, off);
    if (lane >= off) { ia += oa; ib += ob; }
  }
  if (lane == 31) { sh.scan_a[warp] = ia; sh.scan_b[warp] = ib; }
  __syncthreads();
  if (warp == 0) {
    const long long wa = lane < kWarps ? sh.scan_a[lane] : 0;
    const unsigned long long wb = lane < kWarps ? sh.scan_b[lane] : 0;
    long long xa = wa;
    unsigned long long xb = wb;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const long long oa = __shfl_up_sync(0xffffffffu, xa, off);
      const unsigned long long ob = __shfl_up_sync(0xffffffffu, xb, off);
      if (lane >= off) { xa += oa; xb += ob; }
    }
    if (lane < kWarps) { sh.scan_a[lane] = xa - wa; sh.scan_b[lane] = xb - wb; }
  }
  __syncthreads();
  a = sh.scan_a[warp] + ia - a;
  b = sh.scan_b[warp] + ib - b;
  __syncthreads();
}

struct Pick {
  int at;                    // the bucket (never -1: the bucket the level narrows starts with a kept token)
  long long above_cnt;       // tokens ahead of it in the order, and their mass
  long long above_mass;
  long long cnt;             // its tokens
};

// The lowest bucket whose first token the rule keeps, among nb buckets in order, summed over the cluster's
// histograms (`last_extra` tokens of no mass added to the last: the far ones). `before_*`: the tokens ahead of
// every bucket. Each thread sums and scans a run of buckets; the rule is monotone along the order, so the bucket
// is the last non-empty one whose exclusive prefix it keeps. Every CTA of the cluster gets the same answer.
__device__ Pick select_bucket(Shared& sh, int csize, int nb, long long last_extra, long long before_cnt,
                              long long before_mass, const LawLimits& lim) {
  const int tid = threadIdx.x;
  const int per = nb > kThreads ? nb / kThreads : 1;  // nb: kLevel0 or a power of 2 up to kBuckets
  long long c[kPer];
  unsigned long long m[kPer];
  long long tc = 0;
  unsigned long long tm = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = tid * per + k;
    c[k] = 0;
    m[k] = 0;
    if (k < per && i < nb) {
      for (int r = 0; r < csize; ++r) {
        const Shared* o = at_rank(&sh, r, csize);
        c[k] += o->cnt[i];
        m[k] += (static_cast<unsigned long long>(o->hi[i]) << 32) + o->lo[i];
      }
      if (i == nb - 1) c[k] += last_extra;
    }
    tc += c[k];
    tm += m[k];
  }
  if (tid == 0) sh.chosen = -1;
  block_exscan(tc, tm, sh);
  long long ac = before_cnt + tc;
  unsigned long long am = static_cast<unsigned long long>(before_mass) + tm;
  int mine = -1;
  long long mc = 0, mm = 0, mn = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (c[k] > 0) {
      if (law_keeps(ac, static_cast<int64_t>(am), lim)) {
        mine = tid * per + k;
        mc = ac;
        mm = static_cast<long long>(am);
        mn = c[k];
      }
      ac += c[k];
      am += m[k];
    }
  }
  if (mine >= 0) atomicMax(&sh.chosen, mine);
  __syncthreads();
  if (mine >= 0 && mine == sh.chosen) { sh.above_cnt = mc; sh.above_mass = mm; sh.chosen_cnt = mn; }
  __syncthreads();
  const Pick p{sh.chosen, sh.above_cnt, sh.above_mass, sh.chosen_cnt};
  __syncthreads();
  return p;
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) law_rows_kernel(const T* __restrict__ logits, int64_t V, int n,
                                                               int csize, int64_t chunk,
                                                               const float* __restrict__ temperatures,
                                                               const int64_t* __restrict__ top_ks,
                                                               const float* __restrict__ top_ps,
                                                               const float* __restrict__ min_ps,
                                                               int64_t* __restrict__ greedy, float* __restrict__ lse,
                                                               int64_t* __restrict__ boundary) {
  __shared__ Shared sh;
  cluster_arrive_relaxed(csize);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rank = cluster_rank(csize);
  const int64_t row = blockIdx.x / csize;
  const int b = static_cast<int>(row / n);
  const T* x = logits + row * V;
  const int64_t c0 = rank * chunk, c1 = c0 + chunk < V ? c0 + chunk : V;
  const bool lead = rank == 0 && tid == 0;  // writes the row's outputs
  for (int i = tid; i < kBuckets; i += kThreads) { sh.cnt[i] = 0; sh.lo[i] = 0; sh.hi[i] = 0; }
  if (tid == 0) sh.ngather = 0;

  // pass 1: the argmax
  float best = -INFINITY;
  int64_t bidx = INT64_MAX;
  scan_chunk<T, kVec, true>(x, c0, c1, [&](float v, int64_t j) {
    if (beats(v, j, best, bidx)) { best = v; bidx = j; }
  });
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_down_sync(0xffffffffu, best, off);
    const int64_t oi = __shfl_down_sync(0xffffffffu, bidx, off);
    if (beats(ob, oi, best, bidx)) { best = ob; bidx = oi; }
  }
  if (lane == 0) { sh.best[warp] = best; sh.best_idx[warp] = bidx; }
  __syncthreads();
  cluster_wait(csize);
  if (tid == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (beats(sh.best[w], sh.best_idx[w], best, bidx)) { best = sh.best[w]; bidx = sh.best_idx[w]; }
    for (int r = 0; r < csize; ++r) {
      at_rank(sh.pub_best, r, csize)[rank] = best;
      at_rank(sh.pub_idx, r, csize)[rank] = bidx;
    }
  }
  cluster_barrier(csize);
  float x_max = sh.pub_best[0];
  int64_t arg = sh.pub_idx[0];
  for (int r = 1; r < csize; ++r)
    if (beats(sh.pub_best[r], sh.pub_idx[r], x_max, arg)) { x_max = sh.pub_best[r]; arg = sh.pub_idx[r]; }
  if (lead) greedy[row] = arg;
  const float temperature = temperatures[b];
  const int64_t top_k = top_ks[b];
  if (!(temperature > 0.f) || top_k == 1) {  // a greedy request: its argmax is all the round reads
    if (lead) { lse[row] = 0.f; boundary[row] = kKeepAll; }
    return;
  }
  const float t = fmaxf(temperature, kMinTemperature);
  const float s_max = div_rn(x_max, t);
  if (isnan(x_max) || !isfinite(s_max)) {
    if (lead) { lse[row] = NAN; boundary[row] = kKeepNone; }
    return;
  }
  const float top_p = top_ps[b], min_p = min_ps[b];
  const bool filtered = law_filtered(top_k, top_p, min_p, V);
  const int F = mass_bits(V);

  // pass 2: Z and the counts; the first level's histogram over d (near tokens only)
  const double sm = static_cast<double>(s_max);
  const double cut = F * 0.6931471805599453 + 1e-6;  // d > cut: exp(-d) < 2^-F, so E = 0 (law_rule.h's mass)
  const bool has_min_p = min_p > 0.f;
  const double dmin_p = static_cast<double>(min_p);
  const double log_min_p = has_min_p ? log(dmin_p) - 1e-6 : 0.0;
  long long z = 0;
  int near = 0, npos = 0, nmin = 0;
  scan_chunk<T, kVec, false>(x, c0, c1, [&](float xv, int64_t) {
    const double d = sm - static_cast<double>(div_rn(xv, t));
    const bool is_near = !(d > cut);
    // law_weight's exp(s - s_max), taken once, where a count below can read it
    const bool need = is_near || !(d < 745.0) || (has_min_p && -d >= log_min_p);
    const double ex = need ? exp(-d) : 0.0;
    const double e = is_near ? ex : 0.0;
    const int64_t E = fixed_mass(e, F);
    z += E;
    near += is_near;
    npos += is_near || d < 745.0 || ex > 0.0;
    nmin += !has_min_p || (is_near ? e >= dmin_p : (-d >= log_min_p && ex >= dmin_p));
    if (filtered && is_near) hist_add(sh, static_cast<int>(d * kBinsPerNat), static_cast<uint64_t>(E));
  });
  long long part[4] = {z, near, npos, nmin};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) part[k] += __shfl_down_sync(0xffffffffu, part[k], off);
    if (lane == 0) sh.red[warp][k] = part[k];
  }
  __syncthreads();
  if (tid == 0) {
    for (int k = 0; k < 4; ++k) {
      long long s = 0;
      for (int w = 0; w < kThreads / 32; ++w) s += sh.red[w][k];
      for (int r = 0; r < csize; ++r) *at_rank(&sh.pub_sum[rank][k], r, csize) = s;
    }
  }
  cluster_barrier(csize);  // also: every CTA's first-level histogram is complete
  long long Z = 0, near_all = 0, count_pos = 0, count_min = 0;
  for (int r = 0; r < csize; ++r) {
    Z += sh.pub_sum[r][0];
    near_all += sh.pub_sum[r][1];
    count_pos += sh.pub_sum[r][2];
    count_min += sh.pub_sum[r][3];
  }
  if (!filtered) {
    if (lead) { lse[row] = law_lse(s_max, Z, F); boundary[row] = kKeepAll; }
    return;
  }
  const LawLimits lim = law_limits(top_k, top_p, V, count_pos, has_min_p ? count_min : V, Z);

  // the first level: the lowest bin (far last) whose first token is kept
  Pick p = select_bucket(sh, csize, kLevel0, V - near_all, 0, 0, lim);
  const int bin = p.at;
  // then the compact keys' bits, among the chosen bin's tokens: the bits of the key at and above `top` are fixed
  // (prefix)
  const int zb = Vec<T>::kZeroBits, ib = V > 1 ? 64 - __clzll(static_cast<unsigned long long>(V - 1)) : 0;
  int top = 32 - zb + ib;
  uint64_t prefix = 0;
  // whether token j is in the narrowed bucket; its score s and compact key ck
  auto inside = [&](float xv, int64_t j, float& s, uint64_t& ck) {
    s = div_rn(xv, t);
    if (bin_of(sm - static_cast<double>(s), cut) != bin) return false;
    ck = compact_key(xv, j, zb, ib);
    return top >= 64 || (ck >> top) == prefix;
  };
  bool gather = p.cnt <= kGather;
  while (!gather) {
    const int lo = top - kDigitBits > 0 ? top - kDigitBits : 0, nb = 1 << (top - lo);
    cluster_barrier(csize);  // every CTA has read the histograms of the level before
    for (int i = tid; i < nb; i += kThreads) { sh.cnt[i] = 0; sh.lo[i] = 0; sh.hi[i] = 0; }
    __syncthreads();
    scan_chunk<T, kVec, false>(x, c0, c1, [&](float xv, int64_t j) {
      float s;
      uint64_t ck;
      if (!inside(xv, j, s, ck)) return;
      const int dg = static_cast<int>((ck >> lo) & static_cast<uint64_t>(nb - 1));
      hist_add(sh, nb - 1 - dg, static_cast<uint64_t>(fixed_mass(law_weight(s, s_max), F)));  // digits descending
    });
    cluster_barrier(csize);  // the level's histograms are complete
    p = select_bucket(sh, csize, nb, 0, p.above_cnt, p.above_mass, lim);
    prefix = (prefix << (top - lo)) | static_cast<uint64_t>(nb - 1 - p.at);
    gather = p.cnt <= kGather || lo == 0;
    top = lo;
  }
  // the gather: the bucket's tokens into rank 0
  int* gcount = at_rank(&sh.ngather, 0, csize);
  int64_t* gkey = at_rank(sh.gkey, 0, csize);
  int64_t* gmass = at_rank(sh.gmass, 0, csize);
  scan_chunk<T, kVec, false>(x, c0, c1, [&](float xv, int64_t j) {
    float s;
    uint64_t ck;
    if (!inside(xv, j, s, ck)) return;
    const int at = atomicAdd(gcount, 1);
    if (at < kGather) {
      gkey[at] = law_key(xv, j);
      gmass[at] = fixed_mass(law_weight(s, s_max), F);
    }
  });
  cluster_barrier(csize);  // the tokens are at rank 0; no CTA's shared memory is read remotely after this
  if (rank != 0) return;

  // rank 0: the tokens sorted by key, descending (bitonic; keys are distinct, the padding INT64_MIN below all), so
  // position i has rank above_cnt + i and the mass before it is above_mass plus the exclusive prefix
  const int m = sh.ngather < kGather ? sh.ngather : kGather;
  int P = 1;
  while (P < m) P <<= 1;
  for (int i = m + tid; i < P; i += kThreads) { sh.gkey[i] = INT64_MIN; sh.gmass[i] = 0; }
  __syncthreads();
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < P / 2; i += kThreads) {
        const int a = 2 * i - (i & (stride - 1)), c = a + stride;
        const int64_t ka = sh.gkey[a], kc = sh.gkey[c];
        if ((ka < kc) == ((a & size) == 0)) {
          sh.gkey[a] = kc;
          sh.gkey[c] = ka;
          const int64_t ma = sh.gmass[a];
          sh.gmass[a] = sh.gmass[c];
          sh.gmass[c] = ma;
        }
      }
      __syncthreads();
    }
  }
  const int i0 = 2 * tid, i1 = i0 + 1;
  const long long m0 = i0 < m ? sh.gmass[i0] : 0, m1 = i1 < m ? sh.gmass[i1] : 0;
  long long unused = 0;
  unsigned long long before = static_cast<unsigned long long>(m0 + m1);
  if (tid == 0) sh.chosen = -1;
  block_exscan(unused, before, sh);
  // the kept tokens are a prefix of the positions (the rule is monotone): the last one is the boundary
  long long mb = p.above_mass + static_cast<long long>(before), kept = 0;
  int mine = -1;
  if (i0 < m && law_keeps(p.above_cnt + i0, mb, lim)) { mine = i0; kept = mb + m0; }
  mb += m0;
  if (i1 < m && law_keeps(p.above_cnt + i1, mb, lim)) { mine = i1; kept = mb + m1; }
  if (mine >= 0) atomicMax(&sh.chosen, mine);
  __syncthreads();
  if (mine >= 0 && mine == sh.chosen) {
    boundary[row] = sh.gkey[mine];
    lse[row] = law_lse(s_max, kept, F);
  }
  if (tid == 0 && sh.chosen < 0) {  // never: the bucket starts with a kept token
    boundary[row] = kKeepNone;
    lse[row] = law_lse(s_max, p.above_mass, F);
  }
}

template <typename T, bool kVec>
cudaError_t launch_cfg(const T* logits, int64_t R, int64_t V, int n, int C, const float* temperatures,
                       const int64_t* top_ks, const float* top_ps, const float* min_ps, int64_t* greedy, float* lse,
                       int64_t* boundary, cudaStream_t stream, int* max_clusters = nullptr) {
  constexpr int E = Vec<T>::E;
  const int64_t chunk = ((V + C - 1) / C + E - 1) / E * E;  // a multiple of E: vector-aligned chunks
  auto kern = law_rows_kernel<T, kVec>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(R * C));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = C > 1 ? 1 : 0;
  if (max_clusters) return cudaOccupancyMaxActiveClusters(max_clusters, kern, &cfg);
  return cudaLaunchKernelEx(&cfg, kern, logits, V, n, C, chunk, temperatures, top_ks, top_ps, min_ps, greedy, lse,
                            boundary);
}

// Occupancy answers are fixed per device and kernel: cached (as value + 1; 0 = not yet asked), so eager calls do
// not repeat the queries and graph captures, after their warm-up calls, make none.
constexpr int kMaxDevices = 64;
template <typename Query>
cudaError_t cached_query(std::atomic<int>* cache, int dev, int* out, Query query) {
  if (dev < kMaxDevices && (*out = cache[dev].load(std::memory_order_relaxed) - 1) >= 0) return cudaSuccess;
  const cudaError_t err = query(out);
  if (err == cudaSuccess && dev < kMaxDevices) cache[dev].store(*out + 1, std::memory_order_relaxed);
  return err;
}

// C: the largest power of 2 (up to 8, from sm_90) that keeps R * C CTAs within one wave and chunks of at least
// kMinChunk elements, halved while the GPU cannot hold the R clusters at once.
template <typename T>
cudaError_t launch_t(const T* logits, int64_t R, int64_t V, int n, const float* temperatures, const int64_t* top_ks,
                     const float* top_ps, const float* min_ps, int64_t* greedy, float* lse, int64_t* boundary,
                     cudaStream_t stream) {
  constexpr int E = Vec<T>::E;
  static std::atomic<int> sm_cache[kMaxDevices], major_cache[kMaxDevices], occ_cache[kMaxDevices],
      fit_cache[4][kMaxDevices];
  int dev = 0, sms = 0, major = 0, occ = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess)
    err = cached_query(sm_cache, dev, &sms, [&](int* o) {
      return cudaDeviceGetAttribute(o, cudaDevAttrMultiProcessorCount, dev);
    });
  if (err == cudaSuccess)
    err = cached_query(major_cache, dev, &major, [&](int* o) {
      return cudaDeviceGetAttribute(o, cudaDevAttrComputeCapabilityMajor, dev);
    });
  if (err == cudaSuccess)
    err = cached_query(occ_cache, dev, &occ, [&](int* o) {
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(o, law_rows_kernel<T, true>, kThreads, 0);
    });
  if (err != cudaSuccess) return err;
  const bool vec = V % E == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
  const int64_t slots = static_cast<int64_t>(occ > 0 ? occ : 1) * sms;
  const int max_cluster = major >= 9 ? kMaxCluster : 1;
  int C = 1;
  while (C < max_cluster && R * 2 * C <= slots && V >= 2 * C * kMinChunk) C *= 2;
  for (int fit = 0; C > 1; C /= 2) {
    err = cached_query(fit_cache[__builtin_ctz(C)], dev, &fit, [&](int* o) {
      return launch_cfg<T, true>(logits, R, V, n, C, temperatures, top_ks, top_ps, min_ps, greedy, lse, boundary,
                                 stream, o);
    });
    if (err != cudaSuccess) return err;
    if (fit >= R) break;
  }
  return vec ? launch_cfg<T, true>(logits, R, V, n, C, temperatures, top_ks, top_ps, min_ps, greedy, lse, boundary,
                                   stream)
             : launch_cfg<T, false>(logits, R, V, n, C, temperatures, top_ks, top_ps, min_ps, greedy, lse, boundary,
                                    stream);
}

}  // namespace

cudaError_t launch_law_rows(const void* logits, LogitDtype dtype, int64_t R, int64_t V, int n,
                            const float* temperatures, const int64_t* top_ks, const float* top_ps,
                            const float* min_ps, int64_t* greedy, float* lse, int64_t* boundary,
                            cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (V < 1 || n < 1 || R % n != 0 || R > 0x7fffffff) return cudaErrorInvalidValue;
  static_assert(sizeof(Shared) <= 48 * 1024, "law_rows' shared memory must fit the default launch limit");
  switch (dtype) {
    case LogitDtype::kFloat32:
      return launch_t(static_cast<const float*>(logits), R, V, n, temperatures, top_ks, top_ps, min_ps, greedy, lse,
                      boundary, stream);
    case LogitDtype::kFloat16:
      return launch_t(static_cast<const __half*>(logits), R, V, n, temperatures, top_ks, top_ps, min_ps, greedy, lse,
                      boundary, stream);
    default:
      return launch_t(static_cast<const __nv_bfloat16*>(logits), R, V, n, temperatures, top_ks, top_ps, min_ps,
                      greedy, lse, boundary, stream);
  }
}

}  // namespace ddtree
