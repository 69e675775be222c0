// Stage 1 of the tree: exact top-k in the canonical order (value desc, token id asc) and the float32
// log-normaliser of every logits row, reading the logits from HBM once.
//
// Grid: R rows x S splits. Each CTA (512 threads) loads its chunk of the row into registers (VPT 16-byte
// vectors per thread, raw bf16/fp16/fp32 bits) and never reads it again from memory. From the registers:
//   1. online (max, sum exp(x - max)) per thread -> block -> the split's partial;
//   2. a lower bound tau for the chunk's k-th largest value: the k-th largest of 512*G group maxima
//      (each a distinct element, so >= k elements are >= tau), found by radix select on 512*G keys;
//   3. the elements >= tau (about k..1.4k on real rows) go to a shared candidate buffer as 64-bit keys
//      (orderable value << 32 | ~id: a strict total order equal to the canonical one); if the buffer
//      overflows (massive ties), an exact radix select over all register-resident keys replaces tau;
//   4. the candidates go to the split's partial as they are when they fit its capacity P (k <= P <= 2k);
//      only otherwise an exact radix select (8-bit digits) cuts them to the chunk's top-k first.
// The last CTA of a row to finish (atomic counter, reset to 0 after use) merges the S partials: top-k of
// the S*P keys, a rank sort into the canonical order, lse = M + log(sum s_i exp(m_i - M)), lp = top - lse.
// Sample keys of 16-bit dtypes keep the top 16 bits of the orderable value (two radix passes).
// NaN anywhere in a row makes its lse (so every lp) NaN; +inf gives NaN lp too: the builder flags both.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "tree_kernels.cuh"

namespace ddtree {
namespace {

constexpr int kThreads = 512;
constexpr int kCandCap = 4096;        // candidate buffer of a chunk CTA (64-bit keys)
constexpr int kMergeCap = 16384;      // S * P keys merged by the last CTA of a row

// Keys one split hands to the merge: up to 2k (so the usual k..1.4k candidates need no per-split select),
// at least k, and S * P <= kMergeCap (pick_vpt guarantees S * k <= kMergeCap).
__host__ __device__ inline int split_capacity(int S, int k) {
  const int cap = kMergeCap / S;
  return cap >= 2 * k ? 2 * k : (cap > k ? cap : k);
}

__device__ __forceinline__ uint32_t ord32(float v) {
  uint32_t b = __float_as_uint(v);
  if (b == 0x80000000u) b = 0u;  // -0.0 ties with +0.0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float unord32(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ uint64_t comp_key(float v, uint32_t id) {
  return (static_cast<uint64_t>(ord32(v)) << 32) | (0xffffffffu - id);
}
__device__ __forceinline__ uint32_t key_id(uint64_t k) { return 0xffffffffu - static_cast<uint32_t>(k); }

// Raw 16-byte vectors of E elements of type T.
template <typename T> struct Elem;
template <> struct Elem<float> {
  static constexpr int E = 4;
  __device__ static float get(const uint4& v, int e) {
    const uint32_t w = e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
    return __uint_as_float(w);
  }
  __device__ static void set(uint4& v, int e, const float* p) {
    const uint32_t b = __float_as_uint(*p);
    if (e == 0) v.x = b; else if (e == 1) v.y = b; else if (e == 2) v.z = b; else v.w = b;
  }
};
template <typename H> struct Elem16 {
  static constexpr int E = 8;
  __device__ static uint32_t bits(const uint4& v, int e) {
    const int c = e >> 1;
    const uint32_t w = c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
    return (e & 1) ? (w >> 16) : (w & 0xffffu);
  }
  __device__ static void set(uint4& v, int e, const H* p) {
    const uint32_t b = *reinterpret_cast<const unsigned short*>(p);
    const int c = e >> 1, sh = (e & 1) * 16;
    uint32_t* w = c == 0 ? &v.x : c == 1 ? &v.y : c == 2 ? &v.z : &v.w;
    *w = (*w & ~(0xffffu << sh)) | (b << sh);
  }
};
template <> struct Elem<__nv_bfloat16> : Elem16<__nv_bfloat16> {
  __device__ static float get(const uint4& v, int e) { return __uint_as_float(bits(v, e) << 16); }
};
template <> struct Elem<__half> : Elem16<__half> {
  __device__ static float get(const uint4& v, int e) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits(v, e))));
  }
};

struct Shared {
  uint32_t hist[256];
  uint32_t sel_digit, sel_remaining, sel_done;
  int cand_count, out_count;
  int is_last;
  float red_m[kThreads / 32], red_s[kThreads / 32];
  int red_nan[kThreads / 32];
};

// k-th largest (1-based) key among the keys every thread feeds through for_each. Returns a threshold t with
// #{keys >= t} >= k and, for distinct keys, exactly k. 8-bit MSB-first radix passes; stops early once the
// chosen digit bucket holds exactly the remaining count.
template <typename Key, int kBits = sizeof(Key) * 8, typename ForEach>
__device__ Key block_select(ForEach for_each, uint32_t k, Shared& sh) {
  Key prefix = 0, mask = 0;
  uint32_t remaining = k;
  for (int shift = kBits - 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
    for_each([&](Key key) {
      if ((key & mask) == prefix) atomicAdd(&sh.hist[static_cast<uint32_t>(key >> shift) & 255u], 1u);
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      // lane holds bins [248 - 8*lane, 255 - 8*lane] (lane 0 the top); suffix counts from the top.
      uint32_t c[8], tot = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) { c[j] = sh.hist[255 - 8 * lane - j]; tot += c[j]; }
      uint32_t incl = tot;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t o = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += o;
      }
      uint32_t above = incl - tot;  // keys in higher lanes' bins
      if (above < remaining && remaining <= incl) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (above < remaining && remaining <= above + c[j]) {
            sh.sel_digit = 255 - 8 * lane - j;
            sh.sel_remaining = remaining - above;
            sh.sel_done = (c[j] == remaining - above) ? 1u : 0u;
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<Key>(sh.sel_digit) << shift;
    mask |= static_cast<Key>(255) << shift;
    remaining = sh.sel_remaining;
    if (sh.sel_done) break;
  }
  __syncthreads();
  return prefix;
}

__device__ __forceinline__ void merge_ms(float& m, float& s, float om, float os) {
  if (om > m) { s = s * __expf(m - om) + os; m = om; }
  else if (om != -INFINITY) { s += os * __expf(om - m); }
}

template <typename T, int VPT, bool VEC>
__global__ void __launch_bounds__(kThreads, 1) topk_lse_kernel(const T* __restrict__ logits, int64_t V, int k, int S,
                                                               float* __restrict__ out_lp, int64_t* __restrict__ out_ids,
                                                               uint64_t* __restrict__ part_keys,
                                                               float* __restrict__ part_ms,
                                                               int32_t* __restrict__ counters) {
  using El = Elem<T>;
  constexpr int E = El::E;
  constexpr int kSampleShift = sizeof(T) == 2 ? 16 : 0;  // sample keys: top 16 bits for 16-bit dtypes
  constexpr int64_t CH = static_cast<int64_t>(kThreads) * VPT * E;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  uint64_t* s_keys = reinterpret_cast<uint64_t*>(smem_raw + ((sizeof(Shared) + 15) & ~size_t{15}));
  uint32_t* s_sample = reinterpret_cast<uint32_t*>(s_keys);  // aliases s_keys before candidates are written

  const int row = blockIdx.x / S, split = blockIdx.x - row * S;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* x = logits + static_cast<int64_t>(row) * V;
  const int64_t c0 = split * CH;
  const int64_t c1 = (c0 + CH < V) ? c0 + CH : V;

  // ---- one read of the chunk into registers
  uint4 v[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t e0 = c0 + (static_cast<int64_t>(j) * kThreads + tid) * E;
    if (VEC) {
      v[j] = e0 < c1 ? __ldcs(reinterpret_cast<const uint4*>(x + e0)) : make_uint4(0, 0, 0, 0);
    } else {
      v[j] = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (e0 + e < c1) El::set(v[j], e, x + e0 + e);
    }
  }
  auto index_of = [&](int j, int e) -> int64_t { return c0 + (static_cast<int64_t>(j) * kThreads + tid) * E + e; };

  // ---- pass 1: online log-sum-exp; per-position maxima give the group maxima (group = position % G)
  auto valid = [&](int j, int e) -> bool { return index_of(j, VEC ? 0 : e) < c1; };
  const int G = (k > 256) ? ((k > 512) ? 4 : 2) : 1;
  float m = -INFINITY, s = 0.f;
  bool nan = false;
  float pmax[E];
#pragma unroll
  for (int e = 0; e < E; ++e) pmax[e] = -INFINITY;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    float vm = -INFINITY;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      if (valid(j, e)) {
        const float f = El::get(v[j], e);
        nan |= isnan(f);
        vm = fmaxf(vm, f);
        pmax[e] = fmaxf(pmax[e], f);
      }
    }
    if (vm > m) { s = (m == -INFINITY) ? 0.f : s * __expf(m - vm); m = vm; }
    if (m != -INFINITY) {
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (valid(j, e)) s += __expf(El::get(v[j], e) - m);
    }
  }
  uint32_t gkey[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (index_of(0, e) < c1) {  // the thread's first element at this position exists
      const uint32_t key = ord32(pmax[e]) >> kSampleShift;
#pragma unroll
      for (int g = 0; g < 4; ++g)
        if (g == (e & (G - 1)) && key > gkey[g]) gkey[g] = key;
    }
  }
  // block (m, s, nan)
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, off), os = __shfl_xor_sync(0xffffffffu, s, off);
    merge_ms(m, s, om, os);
  }
  nan = __any_sync(0xffffffffu, nan);
  if (lane == 0) { sh.red_m[warp] = m; sh.red_s[warp] = s; sh.red_nan[warp] = nan; }
#pragma unroll
  for (int g = 0; g < 4; ++g)
    if (g < G) s_sample[tid * G + g] = gkey[g];
  if (tid == 0) { sh.cand_count = 0; sh.out_count = 0; }
  __syncthreads();
  if (warp == 0) {
    m = lane < kThreads / 32 ? sh.red_m[lane] : -INFINITY;
    s = lane < kThreads / 32 ? sh.red_s[lane] : 0.f;
    nan = __any_sync(0xffffffffu, lane < kThreads / 32 && sh.red_nan[lane]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, m, off), os = __shfl_xor_sync(0xffffffffu, s, off);
      merge_ms(m, s, om, os);
    }
    if (lane == 0) { sh.red_m[0] = m; sh.red_s[0] = nan ? NAN : s; }
  }

  // ---- tau: k-th largest group maximum (0 = take everything when the chunk has <= k elements)
  const int64_t nvalid = c1 > c0 ? c1 - c0 : 0;
  uint32_t tau = 0;
  if (nvalid > k) {
    const int M = kThreads * G;
    tau = block_select<uint32_t, 32 - kSampleShift>(
              [&](auto f) { for (int i = tid; i < M; i += kThreads) f(s_sample[i]); }, static_cast<uint32_t>(k), sh)
          << kSampleShift;
  }
  __syncthreads();  // s_sample is overwritten by candidates below

  // ---- candidates >= tau into shared memory (warp-aggregated slots)
  auto gather = [&](auto admit) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t idx = index_of(j, e);
        const float f = El::get(v[j], e);
        const bool take = valid(j, e) && admit(f, idx);
        const uint32_t bal = __ballot_sync(0xffffffffu, take);
        if (bal) {
          int base = 0;
          if (lane == __ffs(bal) - 1) base = atomicAdd(&sh.cand_count, __popc(bal));
          base = __shfl_sync(0xffffffffu, base, __ffs(bal) - 1);
          const int pos = base + __popc(bal & ((1u << lane) - 1u));
          if (take && pos < kCandCap) s_keys[pos] = comp_key(f, static_cast<uint32_t>(idx));
        }
      }
    }
  };
  gather([&](float f, int64_t) { return ord32(f) >= tau; });
  __syncthreads();
  int cnt = sh.cand_count;
  if (cnt > kCandCap) {  // massive ties: exact k-th key over the whole chunk, then gather exactly k
    const uint64_t t = block_select<uint64_t>(
        [&](auto f) {
#pragma unroll
          for (int j = 0; j < VPT; ++j)
#pragma unroll
            for (int e = 0; e < E; ++e)
              if (valid(j, e)) f(comp_key(El::get(v[j], e), static_cast<uint32_t>(index_of(j, e))));
        },
        static_cast<uint32_t>(k), sh);
    if (tid == 0) sh.cand_count = 0;
    __syncthreads();
    gather([&](float f, int64_t idx) { return comp_key(f, static_cast<uint32_t>(idx)) >= t; });
    __syncthreads();
    cnt = sh.cand_count;
  }

  // ---- the chunk's exact top-k keys
  const int P = split_capacity(S, k);
  uint64_t thr = 0;
  if (cnt > P) {
    thr = block_select<uint64_t>([&](auto f) { for (int i = tid; i < cnt; i += kThreads) f(s_keys[i]); },
                                 static_cast<uint32_t>(k), sh);
  }
  const int kk = cnt > P ? k : cnt;
  uint64_t* part = part_keys + (static_cast<int64_t>(row) * S + split) * P;
  for (int i = tid; i < cnt; i += kThreads) {
    const uint64_t key = s_keys[i];
    if (key >= thr) part[atomicAdd(&sh.out_count, 1)] = key;
  }
  for (int i = kk + tid; i < P; i += kThreads) part[i] = 0;  // pads: "no element"
  if (tid == 0) {
    part_ms[(static_cast<int64_t>(row) * S + split) * 2] = sh.red_m[0];
    part_ms[(static_cast<int64_t>(row) * S + split) * 2 + 1] = sh.red_s[0];
  }

  // ---- the last CTA of the row merges
  __threadfence();
  __syncthreads();
  if (tid == 0) sh.is_last = atomicAdd(&counters[row], 1) == S - 1;
  __syncthreads();
  if (!sh.is_last) return;
  __threadfence();
  const int total = S * P;
  const uint64_t* rp = part_keys + static_cast<int64_t>(row) * total;
  for (int i = tid; i < total; i += kThreads) s_keys[i] = __ldcg(reinterpret_cast<const unsigned long long*>(rp + i));
  if (warp == 0) {
    float mm = -INFINITY, ss = 0.f;
    bool any_nan = false;
    for (int i = lane; i < S; i += 32) {
      const float om = __ldcg(part_ms + (static_cast<int64_t>(row) * S + i) * 2);
      const float os = __ldcg(part_ms + (static_cast<int64_t>(row) * S + i) * 2 + 1);
      any_nan |= isnan(os);
      if (om > mm) { ss = (mm == -INFINITY) ? os : ss * expf(mm - om) + os; mm = om; }
      else if (om != -INFINITY) { ss += os * expf(om - mm); }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, mm, off), os = __shfl_xor_sync(0xffffffffu, ss, off);
      if (om > mm) { ss = (mm == -INFINITY) ? os : ss * expf(mm - om) + os; mm = om; }
      else if (om != -INFINITY) { ss += os * expf(om - mm); }
    }
    any_nan = __any_sync(0xffffffffu, any_nan);
    if (lane == 0) sh.red_m[1] = any_nan ? NAN : mm + logf(ss);
    if (lane == 0) { counters[row] = 0; sh.out_count = 0; }
  }
  __syncthreads();
  const float lse = sh.red_m[1];
  uint64_t fthr = 0;
  {
    fthr = block_select<uint64_t>([&](auto f) { for (int i = tid; i < total; i += kThreads) f(s_keys[i]); },
                                  static_cast<uint32_t>(k), sh);
  }
  // Rank sort the k winners (distinct keys): position = number of winners above.
  uint64_t* s_top = s_keys + total;
  for (int i = tid; i < total; i += kThreads) {
    const uint64_t key = s_keys[i];
    if (key >= fthr && key != 0) s_top[atomicAdd(&sh.out_count, 1)] = key;
  }
  __syncthreads();
  for (int i = tid; i < k; i += kThreads) {
    const uint64_t key = s_top[i];
    int rank = 0;
    for (int j = 0; j < k; ++j) rank += s_top[j] > key;
    const int64_t o = static_cast<int64_t>(row) * k + rank;
    out_lp[o] = unord32(static_cast<uint32_t>(key >> 32)) - lse;
    out_ids[o] = key_id(key);
  }
}

template <typename T, int VPT>
int64_t chunk_elems() { return static_cast<int64_t>(kThreads) * VPT * Elem<T>::E; }

template <typename T>
int pick_vpt(int64_t R, int64_t V, int k) {
  // Largest chunk that still gives >= 2 CTAs per SM (132 SMs), and whose merge fits kMergeCap keys.
  const int options[3] = {4, 2, 1};  // VPT 8 spills registers (ptxas -v)
  int chosen = 4;
  for (int o : options) {
    const int64_t ch = static_cast<int64_t>(kThreads) * o * Elem<T>::E;
    const int64_t S = (V + ch - 1) / ch;
    chosen = o;
    if (R * S >= 264) break;
  }
  for (int o = chosen; o <= 8; o *= 2) {  // VPT 8 only when the merge would not fit otherwise
    const int64_t ch = static_cast<int64_t>(kThreads) * o * Elem<T>::E;
    if (((V + ch - 1) / ch) * k <= kMergeCap) return o;
  }
  return -1;
}

template <typename T, int VPT>
cudaError_t launch_vpt(const T* logits, int64_t R, int64_t V, int k, float* lp, int64_t* ids, void* ws,
                       int32_t* counters, cudaStream_t stream) {
  const int64_t ch = chunk_elems<T, VPT>();
  const int S = static_cast<int>((V + ch - 1) / ch);
  uint64_t* part_keys = static_cast<uint64_t*>(ws);
  const int P = split_capacity(S, k);
  float* part_ms = reinterpret_cast<float*>(part_keys + R * S * P);
  const bool vec = (V * sizeof(T)) % 16 == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
  const int keys = (S * P > kCandCap ? S * P : kCandCap) + k;
  const size_t bytes = ((sizeof(Shared) + 15) & ~size_t{15}) + sizeof(uint64_t) * keys;
  auto kern = vec ? topk_lse_kernel<T, VPT, true> : topk_lse_kernel<T, VPT, false>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  kern<<<static_cast<unsigned>(R * S), kThreads, bytes, stream>>>(logits, V, k, S, lp, ids, part_keys, part_ms,
                                                                   counters);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_t(const T* logits, int64_t R, int64_t V, int k, float* lp, int64_t* ids, void* ws,
                     int32_t* counters, cudaStream_t stream) {
  switch (pick_vpt<T>(R, V, k)) {
    case 1: return launch_vpt<T, 1>(logits, R, V, k, lp, ids, ws, counters, stream);
    case 2: return launch_vpt<T, 2>(logits, R, V, k, lp, ids, ws, counters, stream);
    case 4: return launch_vpt<T, 4>(logits, R, V, k, lp, ids, ws, counters, stream);
    case 8: return launch_vpt<T, 8>(logits, R, V, k, lp, ids, ws, counters, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
size_t ws_bytes(int64_t R, int64_t V, int k) {
  const int vpt = pick_vpt<T>(R, V, k);
  if (vpt < 0) return 0;
  const int64_t ch = static_cast<int64_t>(kThreads) * vpt * Elem<T>::E;
  const int64_t S = (V + ch - 1) / ch;
  return static_cast<size_t>(R * S) * (sizeof(uint64_t) * split_capacity(static_cast<int>(S), k) + 2 * sizeof(float));
}

}  // namespace

size_t topk_lse_workspace_bytes(int64_t R, int64_t V, int k, LogitDtype dtype) {
  switch (dtype) {
    case LogitDtype::kFloat32: return ws_bytes<float>(R, V, k);
    case LogitDtype::kFloat16: return ws_bytes<__half>(R, V, k);
    default: return ws_bytes<__nv_bfloat16>(R, V, k);
  }
}

cudaError_t launch_topk_lse(const void* logits, LogitDtype dtype, int64_t R, int64_t V, int k, float* lp,
                            int64_t* ids, void* workspace, int32_t* counters, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (k < 1 || k > kMaxTopK || k > V || V >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  switch (dtype) {
    case LogitDtype::kFloat32:
      return launch_t(static_cast<const float*>(logits), R, V, k, lp, ids, workspace, counters, stream);
    case LogitDtype::kFloat16:
      return launch_t(static_cast<const __half*>(logits), R, V, k, lp, ids, workspace, counters, stream);
    default:
      return launch_t(static_cast<const __nv_bfloat16*>(logits), R, V, k, lp, ids, workspace, counters, stream);
  }
}

}  // namespace ddtree
