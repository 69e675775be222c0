// Stage 1 of the tree: exact top-k in the canonical order (value desc, token id asc) and the float32
// log-normaliser of every logits row, reading each logit from memory once.
//
// Keys: orderable value << 32 | (2^32 - 1 - id), a strict total order equal to the canonical one (-0.0 and
// +0.0 share a value key; for 16-bit dtypes the value key's bits below the dtype's precision are cleared, so
// they are known to be zero and the selects skip them, as they skip the id bits above bit_length(V - 1)).
//
// A row is split over a cluster of C CTAs (C = 1 when rows alone fill the GPU, up to 8 when rows are few;
// launch_t says how C and the CTA shape are chosen). Each CTA streams a contiguous chunk in tiles of THREADS x U 16-byte vectors, the next tile's loads in
// flight while the current one is processed. Per tile:
//   * online (max, sum 2^(x*log2e - max*log2e)) per thread, one FMA and one ex2 per element;
//   * elements whose key is >= the CTA's threshold T go to a shared candidate buffer (warp-aggregated
//     appends). A vector whose max is below T's value is rejected with one float compare; keys are formed
//     only for the rest.
// Invariant: the buffer holds every key >= T of the chunk read so far and, once T > 0, at least k of them, so
// it contains the chunk's top-k. T starts at the k-th largest of the first tile's group maxima (each group
// maximum is a distinct element, so >= k elements reach it). When the buffer passes a high-water mark, an
// exact radix select raises T to its k-th largest key and keeps exactly k keys; when one tile overflows the
// buffer (adversarial rows where every element raises the bar, or floods of ties), the select runs over the
// pre-tile buffer plus the tile's keys, read again from memory.
// Merge, through distributed shared memory: Tg = max of the CTAs' T (>= k keys of the row reach it), an exact
// radix select of the row's k-th key with the histograms summed over the cluster, the k winners gathered at
// rank 0, sorted there and written with lp = value - (M + log S).
// NaN anywhere in a row makes S (so every lp) NaN, and so does +inf (inf - inf): the builder flags both. The
// fast reject ignores NaN elements, so a NaN row's ids are deterministic but not canonical.
// A row's scale c > 0 (a request's temperature and the drafter's calibration, sglang_ddtree/keys.py; 1 without
// a scale array) leaves the keys and so the candidates those of the raw logits x, and makes lp = c*x - lse(c*x):
// the online sum runs on 2^((x - m) * c * log2e) and lse = c*M + log S.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tree_kernels.cuh"

namespace ddtree {
namespace {

namespace cg = cooperative_groups;

constexpr int kCap = 4096;        // candidate buffer of a CTA (64-bit keys)
constexpr int kMaxCluster = 8;    // portable cluster size
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t ord32(float v) {
  uint32_t b = __float_as_uint(v);
  if (b == 0x80000000u) b = 0u;  // -0.0 ties with +0.0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float unord32(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Raw 16-byte vectors of E elements. kZeroBits: low bits of a float converted from the dtype that are always
// zero (cleared in value keys, where negative values would otherwise set them).
template <typename T> struct Dtype;
template <> struct Dtype<float> {
  static constexpr int E = 4, kZeroBits = 0;
  static constexpr uint32_t kNegInf = 0xff800000u;  // a 32-bit word of -inf elements
  __device__ static float get(const uint4& v, int e) {
    return __uint_as_float(e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w);
  }
  __device__ static void set(uint4& v, int e, const float* p) {
    const uint32_t b = __float_as_uint(*p);
    if (e == 0) v.x = b; else if (e == 1) v.y = b; else if (e == 2) v.z = b; else v.w = b;
  }
};
template <typename H> struct Dtype16 {
  static constexpr int E = 8;
  __device__ static uint32_t word(const uint4& v, int e) {
    const int c = e >> 1;
    return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
  }
  __device__ static void set(uint4& v, int e, const H* p) {
    const uint32_t b = *reinterpret_cast<const unsigned short*>(p);
    const int c = e >> 1, sh = (e & 1) * 16;
    uint32_t* w = c == 0 ? &v.x : c == 1 ? &v.y : c == 2 ? &v.z : &v.w;
    *w = (*w & ~(0xffffu << sh)) | (b << sh);
  }
};
template <> struct Dtype<__nv_bfloat16> : Dtype16<__nv_bfloat16> {
  static constexpr int kZeroBits = 16;
  static constexpr uint32_t kNegInf = 0xff80ff80u;
  __device__ static float get(const uint4& v, int e) {
    const uint32_t w = word(v, e);
    return __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));
  }
};
template <> struct Dtype<__half> : Dtype16<__half> {
  static constexpr int kZeroBits = 13;
  static constexpr uint32_t kNegInf = 0xfc00fc00u;
  __device__ static float get(const uint4& v, int e) {
    const uint32_t w = word(v, e);
    return __half2float(__ushort_as_half(static_cast<unsigned short>((e & 1) ? (w >> 16) : (w & 0xffffu))));
  }
};

template <typename T> __device__ __forceinline__ uint32_t value_key(float f) {
  return ord32(f) & ~((1u << Dtype<T>::kZeroBits) - 1u);
}
template <typename T> __device__ __forceinline__ float key_value(uint32_t vkey) {  // exact inverse
  return __uint_as_float(__float_as_uint(unord32(vkey)) & ~((1u << Dtype<T>::kZeroBits) - 1u));
}

struct Smem {
  uint64_t buf[kCap];             // candidates
  uint64_t top[kMaxTopK];         // survivors of a compaction; at cluster rank 0, the row's k winners
  uint32_t lhist[256];            // CTA-local select
  uint32_t chist[2][256];         // cluster select, double-buffered: the other CTAs read the previous pass's
  uint32_t tot[256];              // cluster-summed histogram
  uint32_t add[3];                // per-tile append counters, rotating (see the tile loop)
  uint32_t nsurv, gcount;
  uint32_t sel_digit, sel_remaining, sel_done, sel_none;
  float red_m[32], red_s[32];
  uint64_t pub_t;                 // published to the cluster: the CTA's threshold and (max, sum exp)
  float pub_m, pub_s;
};

// Clusters exist from sm_90 on; older GPUs are only launched with csize = 1 (launch_t).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DDTREE_CLUSTERS 1
#else
#define DDTREE_CLUSTERS 0
#endif
template <typename P> __device__ __forceinline__ P* at_rank(P* p, int rank, int csize) {
#if DDTREE_CLUSTERS
  if (csize > 1) return cg::this_cluster().map_shared_rank(p, rank);
#endif
  return p;
}
__device__ __forceinline__ void cluster_barrier(int csize) {
#if DDTREE_CLUSTERS
  if (csize > 1) {
    cg::this_cluster().sync();
    return;
  }
#endif
  __syncthreads();
}
__device__ __forceinline__ int cluster_rank(int csize) {
#if DDTREE_CLUSTERS
  if (csize > 1) return static_cast<int>(cg::this_cluster().block_rank());
#endif
  return 0;
}

// (m, s) <- the pair for the union: sum exp(c * (x - m)) over both sets (c: the row's scale), NaN when either
// sum is NaN.
__device__ __forceinline__ void merge_ms(float& m, float& s, float om, float os, float c) {
  const float M = fmaxf(m, om);
  if (M == -INFINITY) { s += os; return; }
  s = s * expf(c * (m - M)) + os * expf(c * (om - M));
  m = M;
}

// Digits whose value every key shares: value bits below the dtype's precision are 0, id bits at or above
// bit_length(V - 1) of (2^32 - 1 - id) are 1. -1: to be histogrammed.
struct KeySpace {
  int zero_bits, id_bits;
  __device__ int known_digit(int shift) const {
    if (shift >= 32) return shift - 32 + 8 <= zero_bits ? 0 : -1;
    return shift >= id_bits ? 0xff : -1;
  }
};

// One warp-aggregated histogram increment per lane (bin 256 = none). Keys of a pass mostly share one digit,
// so the first lane's bin is counted with one atomic and only the others add their own.
__device__ __forceinline__ void hist_add(uint32_t* h, uint32_t bin) {
  const unsigned has = __ballot_sync(0xffffffffu, bin < 256u);
  if (!has) return;
  const int lane = threadIdx.x & 31, src = __ffs(has) - 1;
  const uint32_t lead = __shfl_sync(0xffffffffu, bin, src);
  const unsigned same = __ballot_sync(0xffffffffu, bin == lead);
  if (lane == src) atomicAdd(&h[lead], __popc(same));
  else if (bin < 256u && bin != lead) atomicAdd(&h[bin], 1u);
}

// Warp-aggregated append of `key` where `take` into dst[*ctr++] (local or another CTA's shared memory);
// positions >= cap are dropped (the callers guarantee they do not occur).
__device__ __forceinline__ void warp_append(bool take, uint64_t key, uint32_t* ctr, uint64_t* dst, uint32_t cap) {
  const unsigned bal = __ballot_sync(0xffffffffu, take);
  if (!bal) return;
  const int lane = threadIdx.x & 31, leader = __ffs(bal) - 1;
  uint32_t b = 0;
  if (lane == leader) b = atomicAdd(ctr, static_cast<uint32_t>(__popc(bal)));
  b = __shfl_sync(0xffffffffu, b, leader) + __popc(bal & ((1u << lane) - 1u));
  if (take && b < cap) dst[b] = key;
}

// Warp 0: the digit of the 256-bin histogram `h` (bin 255 = largest) holding the remaining-th largest key.
__device__ __forceinline__ void pick_digit(const uint32_t* h, uint32_t remaining, Smem& sh) {
  const int lane = threadIdx.x & 31;
  uint32_t c[8], tot = 0;  // lane holds bins [248 - 8*lane, 255 - 8*lane]
#pragma unroll
  for (int j = 0; j < 8; ++j) { c[j] = h[255 - 8 * lane - j]; tot += c[j]; }
  uint32_t incl = tot;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  uint32_t above = incl - tot;  // keys in higher lanes' bins
  if (lane == 31) sh.sel_none = incl < remaining;
  if (above < remaining && remaining <= incl) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (above < remaining && remaining <= above + c[j]) {
        sh.sel_digit = 255 - 8 * lane - j;
        sh.sel_remaining = remaining - above;
        sh.sel_done = c[j] == remaining - above;
      }
      above += c[j];
    }
  }
}

// Threshold t such that exactly the k largest keys fed through for_each(f) as f(key, valid) are >= t (keys are
// distinct); 0 when fewer than k are valid. All lanes of a warp call f together. MSB-first 8-bit radix
// passes over the digits not known in advance; stops once the chosen bucket holds exactly the remaining
// count. kCluster: every CTA of the cluster calls it with its own keys and the histograms are summed, so all
// get the same threshold over the union.
template <int THREADS, bool kCluster, typename ForEach>
__device__ uint64_t select_kth(ForEach for_each, uint32_t k, KeySpace ks, Smem& sh, int csize) {
  const int tid = threadIdx.x;
  uint64_t prefix = 0, mask = 0;
  uint32_t remaining = k;
  int pass = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    const int known = ks.known_digit(shift);
    if (known >= 0) {
      prefix |= static_cast<uint64_t>(known) << shift;
      mask |= uint64_t{255} << shift;
      continue;
    }
    uint32_t* h = kCluster ? sh.chist[pass & 1] : sh.lhist;
    if (!kCluster) {  // warp 0's last scan of lhist is behind the barrier that ended the previous pass
      for (int i = tid; i < 256; i += THREADS) h[i] = 0;
      __syncthreads();
    }
    for_each([&](uint64_t key, bool valid) {
      hist_add(h, valid && (key & mask) == prefix ? static_cast<uint32_t>(key >> shift) & 255u : 256u);
    });
    const uint32_t* hs = h;
    if (kCluster) {
      cluster_barrier(csize);  // every CTA's histogram of this pass is complete
      if (tid < 256) {
        uint32_t t = 0;
        for (int r = 0; r < csize; ++r) t += at_rank(h, r, csize)[tid];
        sh.tot[tid] = t;
        // The other buffer was last read remotely in the previous pass, before this pass's cluster barrier.
        sh.chist[(pass + 1) & 1][tid] = 0;
      }
      hs = sh.tot;
    }
    __syncthreads();
    if (tid < 32) pick_digit(hs, remaining, sh);
    __syncthreads();
    if (sh.sel_none) return 0;  // only possible in the first pass
    prefix |= static_cast<uint64_t>(sh.sel_digit) << shift;
    mask |= uint64_t{255} << shift;
    remaining = sh.sel_remaining;
    ++pass;
    if (sh.sel_done) break;
  }
  return prefix;
}

template <typename T, int THREADS, int U, bool VEC>
__global__ void __launch_bounds__(THREADS, THREADS <= 256 ? 3 : 1)
    topk_lse_kernel(const T* __restrict__ logits, int64_t V, int k, int csize, int64_t chunk,
                    const float* __restrict__ scale, float* __restrict__ out_lp, int64_t* __restrict__ out_ids) {
  using D = Dtype<T>;
  constexpr int E = D::E;
  constexpr int64_t kTile = static_cast<int64_t>(THREADS) * U * E;
  using Mask = std::conditional_t<(U * E <= 32), uint32_t, uint64_t>;  // a thread's tile, one bit per element
  static_assert(U * E <= 64, "a thread's tile must fit the take mask");
  static_assert(THREADS >= 256 && THREADS % 32 == 0, "one thread per histogram bin");
  __shared__ Smem sh;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rank = cluster_rank(csize);
  const int64_t row = blockIdx.x / csize;
  const T* x = logits + row * V;
  const float sc = scale != nullptr ? scale[row] : 1.f, c2 = sc * kLog2e;  // the row's scale (header)
  const int64_t c0 = rank * chunk, c1 = c0 + chunk < V ? c0 + chunk : V;
  const int ntiles = c1 > c0 ? static_cast<int>((c1 - c0 + kTile - 1) / kTile) : 0;
  const KeySpace ks{D::kZeroBits, V > 1 ? 64 - __clzll(V - 1) : 0};
  const uint32_t high = min(max(4 * k, 512), kCap / 2);  // compaction mark (>= k, leaves room for a tile)

  for (int i = tid; i < 256; i += THREADS) sh.chist[0][i] = 0;
  if (tid < 3) sh.add[tid] = 0;
  if (tid == 0) sh.gcount = 0;
  __syncthreads();

  auto first = [&](int t, int u) -> int64_t { return c0 + ((static_cast<int64_t>(t) * U + u) * THREADS + tid) * E; };
  auto valid = [&](int t, int u, int e) -> bool { return first(t, u) + (VEC ? 0 : e) < c1; };
  auto load_vec = [&](int t, int u) -> uint4 {
    const int64_t e0 = first(t, u);
    const uint4 ninf = make_uint4(D::kNegInf, D::kNegInf, D::kNegInf, D::kNegInf);  // -inf: no mass, no max
    if (VEC) return e0 < c1 ? __ldcs(reinterpret_cast<const uint4*>(x + e0)) : ninf;
    uint4 v = ninf;
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (e0 + e < c1) D::set(v, e, x + e0 + e);
    return v;
  };
  auto load = [&](uint4 (&v)[U], int t) {
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = load_vec(t, u);
  };
  auto key_at = [&](const uint4& v, int t, int u, int e) -> uint64_t {
    return (static_cast<uint64_t>(value_key<T>(D::get(v, e))) << 32) |
           (0xffffffffu - static_cast<uint32_t>(first(t, u) + e));
  };

  auto group_max = [&](const uint4& v, int h) -> float {  // max of half a vector
    float g = D::get(v, h * E / 2);
#pragma unroll
    for (int e = h * E / 2 + 1; e < (h + 1) * E / 2; ++e) g = fmaxf(g, D::get(v, e));
    return g;
  };

  float m = -INFINITY, s = 0.f;  // s = sum exp(x - m) over the thread's elements (0 while m = -inf)
  uint64_t thr = 0;              // T
  uint32_t base = 0;             // candidates in buf before the current tile
  uint4 cur[U], nxt[U] = {};
  if (ntiles > 0) {
    load(cur, 0);
    // T: the k-th largest maximum of the first tile's half vectors (value key only; 0 if fewer than k
    // groups exist). Before tile 1's loads are issued, to keep fewer registers live across the select.
    const KeySpace values{D::kZeroBits, 0};
    thr = select_kth<THREADS, false>(
              [&](auto f) {
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                  for (int h = 0; h < 2; ++h) {
                    const float g = group_max(cur[u], h);
                    f((static_cast<uint64_t>(value_key<T>(g)) << 32) | 0xffffffffu, valid(0, u, h * E / 2) && !isnan(g));
                  }
              },
              static_cast<uint32_t>(k), values, sh, 1) &
          0xffffffff00000000ull;
  }
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) load(nxt, t + 1);
    // Tile t appends through add[t % 3], read by all after the barrier below; add[(t + 1) % 3] was last read
    // after the barrier of tile t - 2, so it can be cleared now for tile t + 1.
    if (tid == 0) sh.add[(t + 1) % 3] = 0;

    // ---- online log-sum-exp
    float vmax[U], tmax = -INFINITY;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      vmax[u] = fmaxf(group_max(cur[u], 0), group_max(cur[u], 1));
      tmax = fmaxf(tmax, vmax[u]);
    }
    if (tmax > m) {
      if (m != -INFINITY) s *= ex2((m - tmax) * c2);
      m = tmax;
    }
    const float nml = m == -INFINITY ? 0.f : -m * c2;
    float ts = 0.f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float a[E];
#pragma unroll
      for (int e = 0; e < E; ++e) a[e] = ex2(fmaf(D::get(cur[u], e), c2, nml));
#pragma unroll
      for (int w = 1; w < E; w *= 2)
#pragma unroll
        for (int e = 0; e < E; e += 2 * w) a[e] += a[e + w];
      ts += a[0];
    }
    s += ts;

    // ---- candidates: keys >= T, appended at base + add[t % 3]
    const float tf = key_value<T>(static_cast<uint32_t>(thr >> 32));  // NaN when T's value is: no fast reject
    Mask take = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!(vmax[u] < tf)) {
#pragma unroll
        for (int e = 0; e < E; ++e)
          if (valid(t, u, e) && key_at(cur[u], t, u, e) >= thr) take |= Mask{1} << (u * E + e);
      }
    }
    const uint32_t cnt = __popcll(take);  // (zero-extended for a 32-bit mask)
    if (__any_sync(0xffffffffu, cnt != 0)) {
      uint32_t incl = cnt;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t o = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += o;
      }
      uint32_t wb = 0;
      if (lane == 31) wb = atomicAdd(&sh.add[t % 3], incl);
      uint32_t pos = base + __shfl_sync(0xffffffffu, wb, 31) + incl - cnt;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if ((take >> (u * E)) & ((Mask{1} << E) - 1)) {
#pragma unroll
          for (int e = 0; e < E; ++e) {
            if ((take >> (u * E + e)) & 1) {
              if (pos < kCap) sh.buf[pos] = key_at(cur[u], t, u, e);
              ++pos;
            }
          }
        }
      }
    }
    __syncthreads();
    const uint32_t n = base + sh.add[t % 3];
    if (n > high) {  // raise T to the exact k-th key and keep exactly k candidates
      const bool overflow = n > kCap;  // the tile's appends are incomplete: select over its registers instead
      const uint32_t nb = overflow ? base : n;
      const uint64_t old = thr;
      auto cands = [&](auto f) {
        for (uint32_t i0 = 0; i0 < nb; i0 += THREADS) {
          const uint32_t i = i0 + tid;
          f(i < nb ? sh.buf[i] : 0, i < nb);
        }
        if (overflow) {  // the tile again, from memory: keeps its registers dead here (rare path)
#pragma unroll 1
          for (int u = 0; u < U; ++u) {
            const uint4 v = load_vec(t, u);
#pragma unroll
            for (int e = 0; e < E; ++e) {
              const uint64_t key = key_at(v, t, u, e);
              f(key, valid(t, u, e) && key >= old);
            }
          }
        }
      };
      if (tid == 0) sh.nsurv = 0;  // last read after the barrier that ended the previous compaction
      thr = select_kth<THREADS, false>(cands, static_cast<uint32_t>(k), ks, sh, 1);
      cands([&](uint64_t key, bool ok) { warp_append(ok && key >= thr, key, &sh.nsurv, sh.top, kMaxTopK); });
      __syncthreads();
      base = min(sh.nsurv, static_cast<uint32_t>(kMaxTopK));
      for (uint32_t i = tid; i < base; i += THREADS) sh.buf[i] = sh.top[i];
      __syncthreads();
    } else {
      base = n;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = nxt[u];  // (after the last tile: unused)
  }

  // ---- publish the CTA's (T, max, sum) to the cluster
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    merge_ms(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off), sc);
  if (lane == 0) { sh.red_m[warp] = m; sh.red_s[warp] = s; }
  __syncthreads();
  if (tid == 0) {
    float bm = -INFINITY, bs = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) merge_ms(bm, bs, sh.red_m[w], sh.red_s[w], sc);
    sh.pub_t = thr;
    sh.pub_m = bm;
    sh.pub_s = bs;
  }
  cluster_barrier(csize);
  uint64_t tg = 0;
  float M = -INFINITY, S = 0.f;
  for (int r = 0; r < csize; ++r) {  // rank order: every CTA gets the same lse
    const Smem* o = at_rank(&sh, r, csize);
    tg = o->pub_t > tg ? o->pub_t : tg;
    merge_ms(M, S, o->pub_m, o->pub_s, sc);
  }
  const float lse = sc * M + logf(S);

  // ---- the row's k-th key over the cluster's candidates >= Tg; the winners go to rank 0
  const uint32_t nb = base;
  auto cands = [&](auto f) {
    for (uint32_t i0 = 0; i0 < nb; i0 += THREADS) {
      const uint32_t i = i0 + tid;
      const uint64_t key = i < nb ? sh.buf[i] : 0;
      f(key, i < nb && key >= tg);
    }
  };
  const uint64_t kth = select_kth<THREADS, true>(cands, static_cast<uint32_t>(k), ks, sh, csize);
  uint32_t* gcount = at_rank(&sh.gcount, 0, csize);
  uint64_t* gtop = at_rank(sh.top, 0, csize);
  cands([&](uint64_t key, bool ok) { warp_append(ok && key >= kth, key, gcount, gtop, kMaxTopK); });
  cluster_barrier(csize);  // winners landed; no CTA's shared memory is read remotely after this
  if (rank != 0) return;

  // ---- canonical order: rank sort for small k, bitonic (O(k log^2 k)) beyond
  const int cnt = min(sh.gcount, static_cast<uint32_t>(kMaxTopK));
  float* olp = out_lp + row * k;
  int64_t* oid = out_ids + row * k;
  auto emit = [&](int pos, uint64_t key) {
    if (pos < k) {
      olp[pos] = sc * key_value<T>(static_cast<uint32_t>(key >> 32)) - lse;
      oid[pos] = 0xffffffffu - static_cast<uint32_t>(key);
    }
  };
  if (k <= 256) {
    for (int i = tid; i < cnt; i += THREADS) {
      const uint64_t key = sh.top[i];
      int r = 0;
      for (int j = 0; j < cnt; ++j) r += sh.top[j] > key;
      emit(r, key);
    }
  } else {
    int P = 1;
    while (P < cnt) P <<= 1;
    for (int i = cnt + tid; i < P; i += THREADS) sh.top[i] = 0;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int i = tid; i < P / 2; i += THREADS) {
          const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
          const uint64_t a = sh.top[lo], b = sh.top[hi];
          if ((a < b) == ((lo & size) == 0)) { sh.top[lo] = b; sh.top[hi] = a; }  // descending overall
        }
        __syncthreads();
      }
    }
    for (int i = tid; i < cnt; i += THREADS) emit(i, sh.top[i]);
  }
}

template <typename T, int THREADS, int U>
cudaError_t launch_cfg(const T* logits, int64_t R, int64_t V, int k, int C, const float* scale, float* lp,
                       int64_t* ids, cudaStream_t stream, int* max_clusters = nullptr) {
  constexpr int E = Dtype<T>::E;
  const int64_t chunk = ((V + C - 1) / C + E - 1) / E * E;  // multiple of E: vector-aligned chunks
  const bool vec = V % E == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
  auto kern = vec ? topk_lse_kernel<T, THREADS, U, true> : topk_lse_kernel<T, THREADS, U, false>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(R * C));
  cfg.blockDim = dim3(THREADS);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = C > 1 ? 1 : 0;
  if (max_clusters) return cudaOccupancyMaxActiveClusters(max_clusters, kern, &cfg);
  return cudaLaunchKernelEx(&cfg, kern, logits, V, k, C, chunk, scale, lp, ids);
}

// Occupancy answers are fixed per device and kernel: cached (as value + 1; 0 = not yet asked) so that
// eager calls do not repeat the query and graph captures, after their warm-up calls, make none.
constexpr int kMaxDevices = 64;
template <typename Query>
cudaError_t cached_query(std::atomic<int>* cache, int dev, int* out, Query query) {
  if (dev < kMaxDevices && (*out = cache[dev].load(std::memory_order_relaxed) - 1) >= 0) return cudaSuccess;
  const cudaError_t err = query(out);
  if (err == cudaSuccess && dev < kMaxDevices) cache[dev].store(*out + 1, std::memory_order_relaxed);
  return err;
}

template <typename T>
cudaError_t launch_t(const T* logits, int64_t R, int64_t V, int k, const float* scale, float* lp, int64_t* ids,
                     cudaStream_t stream) {
  constexpr int64_t kStreamTile = 256 * 4 * Dtype<T>::E;
  static std::atomic<int> sm_cache[kMaxDevices], major_cache[kMaxDevices], occ_cache[kMaxDevices],
      fit_cache[4][kMaxDevices];
  int dev = 0, sms = 0, major = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess)
    err = cached_query(sm_cache, dev, &sms, [&](int* o) {
      return cudaDeviceGetAttribute(o, cudaDevAttrMultiProcessorCount, dev);
    });
  if (err == cudaSuccess)
    err = cached_query(major_cache, dev, &major, [&](int* o) {
      return cudaDeviceGetAttribute(o, cudaDevAttrComputeCapabilityMajor, dev);
    });
  if (err != cudaSuccess) return err;
  const int max_cluster = major >= 9 ? kMaxCluster : 1;
  if (R * kMaxCluster <= sms) {
    // Latency-bound (batch 1): a cluster of up to 8 CTAs of 512 threads x 5 vectors per row, each reading
    // its chunk (>= 2048 elements) in one tile; halved while the GPU cannot hold all R clusters at once.
    int C = 1;
    while (C < max_cluster && V >= 2 * C * 2048) C *= 2;
    for (int fit = 0; C > 1; C /= 2) {
      err = cached_query(fit_cache[__builtin_ctz(C)], dev, &fit, [&](int* o) {
        return launch_cfg<T, 512, 5>(logits, R, V, k, C, scale, lp, ids, stream, o);
      });
      if (err != cudaSuccess) return err;
      if (fit >= R) break;
    }
    return launch_cfg<T, 512, 5>(logits, R, V, k, C, scale, lp, ids, stream);
  }
  // Streaming: 256 threads x 4 vectors. HBM is shared, so what matters is enough CTAs per SM to keep bytes
  // in flight, also in the last (partial) wave: rows are split over the fewest CTAs (chunks >= 2 tiles) that
  // give >= 1.5 CTAs per SM in the last wave, or >= 4 waves.
  int occ = 0;
  err = cached_query(occ_cache, dev, &occ, [&](int* o) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(o, topk_lse_kernel<T, 256, 4, true>, 256, 0);
  });
  if (err != cudaSuccess) return err;
  const int64_t slots = static_cast<int64_t>(occ > 0 ? occ : 1) * sms;
  int C = 1;
  for (; C < max_cluster && V >= 4 * C * kStreamTile; C *= 2) {
    const int64_t n = R * C, tail = n % slots == 0 ? slots : n % slots;
    if (n >= 4 * slots || 2 * tail >= 3 * static_cast<int64_t>(sms)) break;
  }
  return launch_cfg<T, 256, 4>(logits, R, V, k, C, scale, lp, ids, stream);
}

}  // namespace

cudaError_t launch_topk_lse(const void* logits, LogitDtype dtype, int64_t R, int64_t V, int k, const float* scale,
                            float* lp, int64_t* ids, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (k < 1 || k > kMaxTopK || k > V || V >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  switch (dtype) {
    case LogitDtype::kFloat32: return launch_t(static_cast<const float*>(logits), R, V, k, scale, lp, ids, stream);
    case LogitDtype::kFloat16: return launch_t(static_cast<const __half*>(logits), R, V, k, scale, lp, ids, stream);
    default: return launch_t(static_cast<const __nv_bfloat16*>(logits), R, V, k, scale, lp, ids, stream);
  }
}

}  // namespace ddtree
