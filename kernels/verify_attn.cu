// Tree verify attention on tensor cores (mma.sync m16n8k16 bf16 → fp32).
//
// One CTA = 64 query rows (token, head) of one (request, KV head) × one prefix chunk. For MLA the 64 rows
// are one tree token's 64 heads: the latent tile is loaded once into shared memory and used by every head
// (never one pass per head over the latent); all n tokens of a request read the same chunk, so the prefix
// is read from HBM about once and re-served from L2. Per key tile (cp.async double buffer):
//   S = Q·Kᵀ       8 warps: warp (wr, wk) → rows 16·wr.., keys (BN/2)·wk..   (K tile in smem)
//   mask + online softmax (row max shared through smem by the two warps holding a row), P → smem (bf16)
//   O += P·V       warp (wr, wk) → rows 16·wr.., value columns (Dv/2)·wk..    (V = the latent for MLA)
// The tree keys are the last tiles of the last chunk, masked by the per-row ancestor bitset, so the
// prefix and the tree share one online softmax (no O_p round trip). Chunked prefixes (small batches) are
// combined by LSE in `combine_kernel`. With num_splits = 0 the kernel is the cascade's tree tail alone.
// Prefix keys are found either through a page table ([B, pages], the standalone API) or through a ragged
// slot list (kv_indptr / kv_indices, what SGLang's attention backends build for TARGET_VERIFY); with
// kv_chunk = 0 every request's prefix is split into num_splits equal chunks, so one launch (and one CUDA
// graph) serves any prefix lengths. bf16 and fp16 (mma.sync .bf16 / .f16); GQA head dims 32-256.
#include "verify_attn.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ddtree {
namespace {

using bf16 = __nv_bfloat16;
using f16 = __half;

// Element traits: the mma instruction and the float pair -> packed 2 x 16-bit conversion per dtype.
template <class T>
struct Elem;
template <>
struct Elem<bf16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Elem<f16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __half22float2(*reinterpret_cast<const __half2*>(&x));
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

constexpr int kRows = 64;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLn2 = 0.69314718055994531f;

template <int DA_, int DB_, int DV_, bool V_IS_K_, int BN_>
struct Cfg {
  static constexpr int DA = DA_, DB = DB_, DQK = DA_ + DB_, DV = DV_, BN = BN_;
  static constexpr bool V_IS_K = V_IS_K_;
  // Shared-memory row strides (elements): +8 bf16 = 16 B of padding keeps ldmatrix conflict-free.
  static constexpr int QSTR = DQK + 8, KSTR = DQK + 8, VSTR = DV + 8, PSTR = BN + 8;
  static constexpr int Q_ELEMS = kRows * QSTR;
  static constexpr int K_ELEMS = BN * KSTR;
  static constexpr int V_ELEMS = V_IS_K ? 0 : BN * VSTR;
  static constexpr int P_ELEMS = kRows * PSTR;
  static constexpr size_t SMEM =  // 16-bit elements (bf16 or fp16)
      size_t(Q_ELEMS + 2 * K_ELEMS + 2 * V_ELEMS + P_ELEMS) * 2 + 4 * kRows * sizeof(float);
  static constexpr int NB_S = BN / 2 / 8;  // 8-key n-blocks per warp in S
  static constexpr int NB_V = DV / 2 / 8;  // 8-column n-blocks per warp in O
  static constexpr int TPK = kThreads / BN;  // loader threads per key row
  static_assert(NB_S % 2 == 0 && NB_V % 2 == 0, "warp tiles are built from x4 ldmatrix pairs");
  static_assert(DQK % 16 == 0 && DA % 8 == 0 && BN % 32 == 0 && kThreads % BN == 0, "tile shapes");
  static_assert(!V_IS_K || DV <= DA, "MLA values are the first Dv key dims");
};
using MlaCfg = Cfg<512, 64, 512, true, 32>;   // 155.6 KB smem
template <int D>
using GqaCfg = Cfg<D, 0, D, false, 64>;       // D = 128: 97.3 KB smem; 256: 179 KB; 64: 55 KB; 32: 34 KB

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  // src-size 0 zero-fills the 16 bytes: keys past the segment end become 0, never garbage (0 · NaN = NaN)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// Request b's prefix: [pstart, pstart + plen) in the ragged slot list, or keys 0..plen through the page table.
__device__ __forceinline__ void prefix_extent(const VerifyAttnParams& p, int b, int64_t& pstart, int& plen) {
  if (p.kv_indptr != nullptr) {
    pstart = p.kv_indptr[b];
    plen = max(0, p.kv_indptr[b + 1] - p.kv_indptr[b]);
  } else {
    pstart = 0;
    plen = p.prefix_lens[b];
  }
}

__device__ __forceinline__ int64_t prefix_slot(const VerifyAttnParams& p, int b, int64_t pstart, int j) {
  if (p.kv_indptr != nullptr) {
    return p.kv_indices_64 ? static_cast<const int64_t*>(p.kv_indices)[pstart + j]
                           : int64_t(static_cast<const int32_t*>(p.kv_indices)[pstart + j]);
  }
  return int64_t(p.page_table[int64_t(b) * p.pt_b + j / p.page_size]) * p.page_size + j % p.page_size;
}

template <class T, class C>
__global__ void __launch_bounds__(kThreads, 1) verify_attn_kernel(const VerifyAttnParams p) {
  using E = Elem<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Qs = reinterpret_cast<T*>(smem_raw);
  T* Ks = Qs + C::Q_ELEMS;
  T* Vs = Ks + 2 * C::K_ELEMS;
  T* Ps = Vs + 2 * C::V_ELEMS;
  float* red_max = reinterpret_cast<float*>(Ps + C::P_ELEMS);  // [2][kRows]
  float* red_sum = red_max + 2 * kRows;                         // [2][kRows]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wr = warp & 3, wk = warp >> 2;  // row block, key half / value-column half
  const int g = lane >> 2, tq = lane & 3;
  const int rows_per_kv = p.n * p.G;
  const int row0 = blockIdx.x * kRows;
  const int part = blockIdx.y, parts = gridDim.y;
  const int b = blockIdx.z / p.Hkv, kvh = blockIdx.z % p.Hkv;

  const T* qa = static_cast<const T*>(p.q_a);
  const T* qb = static_cast<const T*>(p.q_b);
  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);
  const T* kt = static_cast<const T*>(p.k_tree);
  const T* vt = static_cast<const T*>(p.v_tree);

  // This CTA's keys: prefix [pbeg, pend), then (last part only) the n tree keys.
  int64_t pstart;
  int plen;
  prefix_extent(p, b, pstart, plen);
  int pbeg = 0, pend = 0;
  if (p.num_splits > 0) {
    int chunk = p.kv_chunk;
    if (chunk == 0) {  // this request's prefix in `parts` equal chunks, each a whole number of key tiles
      chunk = ((plen + parts - 1) / parts + C::BN - 1) / C::BN * C::BN;
      chunk = max(chunk, C::BN);
    }
    pbeg = part * chunk;
    pend = max(pbeg, min(plen, pbeg + chunk));
  }
  const bool tree_here = p.with_tree && part == parts - 1;
  const int n_ptiles = (pend - pbeg + C::BN - 1) / C::BN;
  const int n_tiles = n_ptiles + (tree_here ? (p.n + C::BN - 1) / C::BN : 0);

  // Q tile: 64 rows × Dqk (q_a ‖ q_b); rows past the request's n·G are zero.
  for (int c = tid; c < kRows * (C::DQK / 8); c += kThreads) {
    const int r = c / (C::DQK / 8), col = (c % (C::DQK / 8)) * 8;
    const int R = row0 + r;
    const bool valid = R < rows_per_kv;
    const int i = valid ? R / p.G : 0, h = kvh * p.G + (valid ? R % p.G : 0);
    const int64_t t = int64_t(b) * p.n + i;
    const T* src;
    if constexpr (C::DB > 0) {
      src = col < C::DA ? qa + t * p.q_a_t + h * p.q_a_h + col : qb + t * p.q_b_t + h * p.q_b_h + (col - C::DA);
    } else {
      src = qa + t * p.q_a_t + h * p.q_a_h + col;
    }
    cp_async16(Qs + r * C::QSTR + col, valid ? src : qa, valid);
  }

  auto tile_keys = [&](int it, int& key0, int& kend) {
    if (it < n_ptiles) {
      key0 = pbeg + it * C::BN;
      kend = pend;
    } else {
      key0 = (it - n_ptiles) * C::BN;
      kend = p.n;
    }
  };
  auto load_tile = [&](int it, int buf) {
    int key0, kend;
    tile_keys(it, key0, kend);
    const bool is_tree = it >= n_ptiles;
    const int kr = tid / C::TPK, sub = tid % C::TPK;
    const int j = key0 + kr;
    const bool valid = j < kend;
    const T* krow = kc;
    const T* vrow = vc;
    if (valid) {
      if (is_tree) {
        const int64_t t = int64_t(b) * p.n + j;
        krow = kt + t * p.kt_t + kvh * p.kt_h;
        vrow = vt + t * p.vt_t + kvh * p.vt_h;
      } else {
        const int64_t slot = prefix_slot(p, b, pstart, j);
        krow = kc + slot * p.kc_s + kvh * p.kc_h;
        vrow = vc + slot * p.vc_s + kvh * p.vc_h;
      }
    }
    T* kdst = Ks + buf * C::K_ELEMS + kr * C::KSTR;
#pragma unroll
    for (int col = sub * 8; col < C::DQK; col += C::TPK * 8) cp_async16(kdst + col, krow + (valid ? col : 0), valid);
    if constexpr (!C::V_IS_K) {
      T* vdst = Vs + buf * C::V_ELEMS + kr * C::VSTR;
#pragma unroll
      for (int col = sub * 8; col < C::DV; col += C::TPK * 8) cp_async16(vdst + col, vrow + (valid ? col : 0), valid);
    }
  };

  if (n_tiles > 0) load_tile(0, 0);
  cp_async_commit();

  float m_r[2] = {kNegInf, kNegInf};  // running row max (log2 domain) of rows g, g+8 of this warp's block
  float l_r[2] = {0.f, 0.f};          // this thread's share of the running row sums
  float o[C::NB_V][4];
#pragma unroll
  for (int nb = 0; nb < C::NB_V; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;

  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1;
    cp_async_wait_all();
    __syncthreads();  // tile `it` (and Q) visible; every warp is done with tile it-1
    if (it + 1 < n_tiles) load_tile(it + 1, buf ^ 1);
    cp_async_commit();

    int key0, kend;
    tile_keys(it, key0, kend);
    const bool is_tree = it >= n_ptiles;
    const T* Kb = Ks + buf * C::K_ELEMS;

    // ---- S = Q Kᵀ ----
    float s[C::NB_S][4];
#pragma unroll
    for (int nb = 0; nb < C::NB_S; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll 4
    for (int kk = 0; kk < C::DQK / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, Qs + (wr * 16 + (lane & 15)) * C::QSTR + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < C::NB_S / 2; ++np) {
        uint32_t bb[4];
        ldsm_x4(bb, Kb + (wk * (C::BN / 2) + np * 16 + (lane >> 4) * 8 + (lane & 7)) * C::KSTR + kk * 16 +
                        ((lane >> 3) & 1) * 8);
        E::mma(s[2 * np], a, bb[0], bb[1]);
        E::mma(s[2 * np + 1], a, bb[2], bb[3]);
      }
    }

    // ---- mask, scale (log2 domain), row max ----
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int R = row0 + wr * 16 + g + hr * 8;
      const bool row_ok = R < rows_per_kv;
      const uint32_t* mrow = p.mask_bits + (int64_t(b) * p.n + (row_ok ? R / p.G : 0)) * p.mask_words;
#pragma unroll
      for (int nb = 0; nb < C::NB_S; ++nb) {
        const int jb = key0 + wk * (C::BN / 2) + nb * 8;  // 8 keys inside one 32-bit mask word
        uint32_t word = 0xffffffffu;
        if (is_tree) word = (row_ok && jb < p.n) ? __ldg(mrow + (jb >> 5)) : 0u;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = jb + 2 * tq + e;
          const bool vis = row_ok && j < kend && ((word >> (j & 31)) & 1u);
          const float x = vis ? s[nb][hr * 2 + e] * p.scale_log2 : kNegInf;
          s[nb][hr * 2 + e] = x;
          mx[hr] = fmaxf(mx[hr], x);
        }
      }
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
    }
    if (tq == 0) {
      red_max[wk * kRows + wr * 16 + g] = mx[0];
      red_max[wk * kRows + wr * 16 + g + 8] = mx[1];
    }
    __syncthreads();

    // ---- online softmax; P (16-bit) → smem ----
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = wr * 16 + g + hr * 8;
      const float mn = fmaxf(m_r[hr], fmaxf(red_max[r], red_max[kRows + r]));
      const float mu = mn == kNegInf ? 0.f : mn;  // a row with no visible key so far keeps p = 0
      alpha[hr] = exp2f(m_r[hr] - mu);
      m_r[hr] = mn;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < C::NB_S; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = exp2f(s[nb][hr * 2 + e] - mu);
          s[nb][hr * 2 + e] = pv;
          sum += pv;
        }
      }
      l_r[hr] = l_r[hr] * alpha[hr] + sum;
    }
#pragma unroll
    for (int nb = 0; nb < C::NB_S; ++nb) {
      const int col = wk * (C::BN / 2) + nb * 8 + 2 * tq;
      *reinterpret_cast<uint32_t*>(Ps + (wr * 16 + g) * C::PSTR + col) = E::pack(s[nb][0], s[nb][1]);
      *reinterpret_cast<uint32_t*>(Ps + (wr * 16 + g + 8) * C::PSTR + col) = E::pack(s[nb][2], s[nb][3]);
    }
    __syncthreads();

    // ---- O = O·alpha + P V ----
#pragma unroll
    for (int nb = 0; nb < C::NB_V; ++nb) {
      o[nb][0] *= alpha[0];
      o[nb][1] *= alpha[0];
      o[nb][2] *= alpha[1];
      o[nb][3] *= alpha[1];
    }
    const T* Vb = C::V_IS_K ? Kb : Vs + buf * C::V_ELEMS;
    constexpr int VS = C::V_IS_K ? C::KSTR : C::VSTR;
#pragma unroll
    for (int kk = 0; kk < C::BN / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, Ps + (wr * 16 + (lane & 15)) * C::PSTR + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < C::NB_V / 2; ++np) {
        uint32_t bb[4];
        ldsm_x4_t(bb, Vb + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * VS + wk * (C::DV / 2) + np * 16 +
                          (lane >> 4) * 8);
        E::mma(o[2 * np], a, bb[0], bb[1]);
        E::mma(o[2 * np + 1], a, bb[2], bb[3]);
      }
    }
  }
  cp_async_wait_all();

  // ---- epilogue: row sums across the 4 lanes of a row and the two key halves ----
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_r[hr] += __shfl_xor_sync(0xffffffffu, l_r[hr], 1);
    l_r[hr] += __shfl_xor_sync(0xffffffffu, l_r[hr], 2);
  }
  if (tq == 0) {
    red_sum[wk * kRows + wr * 16 + g] = l_r[0];
    red_sum[wk * kRows + wr * 16 + g + 8] = l_r[1];
  }
  __syncthreads();
  const int64_t total_rows = int64_t(p.B) * p.n * p.Hq;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = wr * 16 + g + hr * 8;
    const int R = row0 + r;
    if (R >= rows_per_kv) continue;
    const float l = red_sum[r] + red_sum[kRows + r];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const float lse = l > 0.f ? (m_r[hr] + log2f(l)) * kLn2 : kNegInf;
    const int64_t row = (int64_t(b) * p.n + R / p.G) * p.Hq + kvh * p.G + R % p.G;
    if (parts == 1) {
      T* orow = static_cast<T*>(p.out) + row * C::DV + wk * (C::DV / 2) + 2 * tq;
#pragma unroll
      for (int nb = 0; nb < C::NB_V; ++nb)
        *reinterpret_cast<uint32_t*>(orow + nb * 8) = E::pack(o[nb][hr * 2] * inv, o[nb][hr * 2 + 1] * inv);
      if (wk == 0 && tq == 0) p.lse[row] = lse;
    } else {
      if (wk == 0 && tq == 0) p.lse_part[int64_t(part) * total_rows + row] = lse;
      if (l == 0.f) continue;  // an empty chunk: LSE −inf, and the combine never reads its O
      float* orow = p.o_part + (int64_t(part) * total_rows + row) * C::DV + wk * (C::DV / 2) + 2 * tq;
#pragma unroll
      for (int nb = 0; nb < C::NB_V; ++nb)
        *reinterpret_cast<float2*>(orow + nb * 8) = make_float2(o[nb][hr * 2] * inv, o[nb][hr * 2 + 1] * inv);
    }
  }
}

// Combines the prefix chunks of each row by their natural-log LSE; chunks without keys (LSE −inf) weigh 0.
template <class T, int DV>
__global__ void __launch_bounds__(DV / 4) combine_kernel(const float* __restrict__ o_part,
                                                        const float* __restrict__ lse_part, int parts,
                                                        int64_t rows, T* __restrict__ out,
                                                        float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  float m = kNegInf;
  for (int s = 0; s < parts; ++s) m = fmaxf(m, lse_part[s * rows + row]);
  const float mu = m == kNegInf ? 0.f : m;
  float wsum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < parts; ++s) {
    const float w = __expf(lse_part[s * rows + row] - mu);
    if (w > 0.f) {
      const float4 v = reinterpret_cast<const float4*>(o_part + (s * rows + row) * DV)[threadIdx.x];
      acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
    }
    wsum += w;
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  uint2 packed = make_uint2(Elem<T>::pack(acc.x * inv, acc.y * inv), Elem<T>::pack(acc.z * inv, acc.w * inv));
  reinterpret_cast<uint2*>(out + row * DV)[threadIdx.x] = packed;
  if (threadIdx.x == 0) lse[row] = wsum > 0.f ? mu + logf(wsum) : kNegInf;
}

template <class T, class C>
cudaError_t launch(const VerifyAttnParams& p, cudaStream_t stream) {
  const int parts = verify_attn_parts(p);
  if (p.B == 0 || p.n == 0) return cudaSuccess;
  const dim3 grid((p.n * p.G + kRows - 1) / kRows, parts, p.B * p.Hkv);
  cudaError_t err = cudaFuncSetAttribute(verify_attn_kernel<T, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(C::SMEM));
  if (err != cudaSuccess) return err;
  verify_attn_kernel<T, C><<<grid, kThreads, C::SMEM, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess || parts == 1) return err;
  const int64_t rows = int64_t(p.B) * p.n * p.Hq;
  combine_kernel<T, C::DV><<<static_cast<unsigned>(rows), C::DV / 4, 0, stream>>>(
      p.o_part, p.lse_part, parts, rows, static_cast<T*>(p.out), p.lse);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_layout(const VerifyAttnParams& p, VerifyAttnLayout layout, int head_dim, cudaStream_t stream) {
  if (layout == VerifyAttnLayout::kMLA) return launch<T, MlaCfg>(p, stream);
  switch (head_dim) {
    case 32: return launch<T, GqaCfg<32>>(p, stream);
    case 64: return launch<T, GqaCfg<64>>(p, stream);
    case 128: return launch<T, GqaCfg<128>>(p, stream);
    case 256: return launch<T, GqaCfg<256>>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

__device__ __forceinline__ float natural_lse(float l, float scale) {
  const float x = l * scale;
  return x == -kNegInf ? kNegInf : x;
}

// One row per D/8 threads, 16-byte loads; an empty side (weight 0) is skipped, so its O may hold anything.
template <class T>
__global__ void __launch_bounds__(256) merge_two_kernel(const T* __restrict__ oa, const float* __restrict__ la,
                                                        float sa, const T* __restrict__ ob,
                                                        const float* __restrict__ lb, float sb, int64_t rows,
                                                        int D, T* __restrict__ out, float* __restrict__ lse) {
  const int tpr = D / 8, rpb = blockDim.x / tpr;
  const int64_t row = int64_t(blockIdx.x) * rpb + threadIdx.x / tpr;
  const int c = (threadIdx.x % tpr) * 8;
  if (threadIdx.x >= rpb * tpr || row >= rows) return;
  const float a = natural_lse(la[row], sa), b = natural_lse(lb[row], sb);
  const float m = fmaxf(a, b), mu = m == kNegInf ? 0.f : m;
  const float wa = __expf(a - mu), wb = __expf(b - mu), tot = wa + wb;
  const float inv = tot > 0.f ? 1.f / tot : 0.f;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (wa > 0.f) {
    const uint4 v = *reinterpret_cast<const uint4*>(oa + row * D + c);
    const uint32_t* h = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = Elem<T>::unpack(h[k]);
      acc[2 * k] += wa * f.x, acc[2 * k + 1] += wa * f.y;
    }
  }
  if (wb > 0.f) {
    const uint4 v = *reinterpret_cast<const uint4*>(ob + row * D + c);
    const uint32_t* h = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = Elem<T>::unpack(h[k]);
      acc[2 * k] += wb * f.x, acc[2 * k + 1] += wb * f.y;
    }
  }
  uint4 o;
  o.x = Elem<T>::pack(acc[0] * inv, acc[1] * inv), o.y = Elem<T>::pack(acc[2] * inv, acc[3] * inv);
  o.z = Elem<T>::pack(acc[4] * inv, acc[5] * inv), o.w = Elem<T>::pack(acc[6] * inv, acc[7] * inv);
  *reinterpret_cast<uint4*>(out + row * D + c) = o;
  if (c == 0) lse[row] = tot > 0.f ? mu + __logf(tot) : kNegInf;
}

template <class T>
cudaError_t launch_merge(const void* o_a, const float* lse_a, float scale_a, const void* o_b, const float* lse_b,
                         float scale_b, int64_t rows, int D, void* out, float* lse_out, cudaStream_t stream) {
  if (D % 8 != 0 || D > 2048 || D <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int tpr = D / 8, rpb = 256 / tpr;
  const int64_t blocks = (rows + rpb - 1) / rpb;
  merge_two_kernel<T><<<static_cast<unsigned>(blocks), rpb * tpr, 0, stream>>>(
      static_cast<const T*>(o_a), lse_a, scale_a, static_cast<const T*>(o_b), lse_b, scale_b, rows, D,
      static_cast<T*>(out), lse_out);
  return cudaGetLastError();
}

// SGLang's prefix addressing for verify_attn_ragged: one block per request sums the lengths before it (its
// offset), writes indptr[b + 1] and copies its row of req_to_token. No host value is read.
template <class R, class L>
__global__ void __launch_bounds__(256) gather_prefix_slots_kernel(const int32_t* __restrict__ req_to_token,
                                                                   int64_t stride, const R* __restrict__ rows,
                                                                   const L* __restrict__ lens,
                                                                   int32_t* __restrict__ indptr,
                                                                   int32_t* __restrict__ indices) {
  const int b = blockIdx.x;
  __shared__ int64_t s_part[8];
  int64_t acc = 0;
  for (int i = threadIdx.x; i < b; i += blockDim.x) acc += static_cast<int64_t>(lens[i]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) s_part[threadIdx.x >> 5] = acc;
  __syncthreads();
  int64_t start = 0;
#pragma unroll
  for (int w = 0; w < 8; ++w) start += s_part[w];
  const int64_t len = static_cast<int64_t>(lens[b]);
  if (threadIdx.x == 0) {
    indptr[b + 1] = static_cast<int32_t>(start + len);
    if (b == 0) indptr[0] = 0;
  }
  const int32_t* src = req_to_token + static_cast<int64_t>(rows[b]) * stride;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) indices[start + j] = src[j];
}

}  // namespace

cudaError_t launch_gather_prefix_slots(const int32_t* req_to_token, int64_t stride, const void* rows, bool rows_64,
                                       const void* lens, bool lens_64, int B, int32_t* indptr, int32_t* indices,
                                       cudaStream_t stream) {
  if (B <= 0) return cudaSuccess;
#define DDTREE_GATHER(R, L)                                                                                   \
  gather_prefix_slots_kernel<R, L><<<B, 256, 0, stream>>>(req_to_token, stride, static_cast<const R*>(rows), \
                                                           static_cast<const L*>(lens), indptr, indices)
  if (rows_64 && lens_64) DDTREE_GATHER(int64_t, int64_t);
  else if (rows_64) DDTREE_GATHER(int64_t, int32_t);
  else if (lens_64) DDTREE_GATHER(int32_t, int64_t);
  else DDTREE_GATHER(int32_t, int32_t);
#undef DDTREE_GATHER
  return cudaGetLastError();
}

cudaError_t launch_merge_states(const void* o_a, const float* lse_a, float scale_a, const void* o_b,
                                const float* lse_b, float scale_b, int64_t rows, int D, void* out, float* lse_out,
                                bool fp16, cudaStream_t stream) {
  return fp16 ? launch_merge<f16>(o_a, lse_a, scale_a, o_b, lse_b, scale_b, rows, D, out, lse_out, stream)
              : launch_merge<bf16>(o_a, lse_a, scale_a, o_b, lse_b, scale_b, rows, D, out, lse_out, stream);
}

cudaError_t launch_verify_attn(const VerifyAttnParams& p, VerifyAttnLayout layout, int head_dim, bool fp16,
                               cudaStream_t stream) {
  return fp16 ? launch_layout<f16>(p, layout, head_dim, stream) : launch_layout<bf16>(p, layout, head_dim, stream);
}

}  // namespace ddtree
