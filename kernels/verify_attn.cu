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
#include "verify_attn.cuh"

#include <cuda_bf16.h>

namespace ddtree {
namespace {

using bf16 = __nv_bfloat16;

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
  static constexpr size_t SMEM =
      size_t(Q_ELEMS + 2 * K_ELEMS + 2 * V_ELEMS + P_ELEMS) * sizeof(bf16) + 4 * kRows * sizeof(float);
  static constexpr int NB_S = BN / 2 / 8;  // 8-key n-blocks per warp in S
  static constexpr int NB_V = DV / 2 / 8;  // 8-column n-blocks per warp in O
  static constexpr int TPK = kThreads / BN;  // loader threads per key row
  static_assert(NB_S % 2 == 0 && NB_V % 2 == 0, "warp tiles are built from x4 ldmatrix pairs");
  static_assert(DQK % 16 == 0 && DA % 8 == 0 && BN % 32 == 0 && kThreads % BN == 0, "tile shapes");
  static_assert(!V_IS_K || DV <= DA, "MLA values are the first Dv key dims");
};
using MlaCfg = Cfg<512, 64, 512, true, 32>;   // 155.6 KB smem
using GqaCfg = Cfg<128, 0, 128, false, 64>;   //  97.3 KB smem

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

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <class C>
__global__ void __launch_bounds__(kThreads, 1) verify_attn_kernel(const VerifyAttnParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* Ks = Qs + C::Q_ELEMS;
  bf16* Vs = Ks + 2 * C::K_ELEMS;
  bf16* Ps = Vs + 2 * C::V_ELEMS;
  float* red_max = reinterpret_cast<float*>(Ps + C::P_ELEMS);  // [2][kRows]
  float* red_sum = red_max + 2 * kRows;                         // [2][kRows]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wr = warp & 3, wk = warp >> 2;  // row block, key half / value-column half
  const int g = lane >> 2, tq = lane & 3;
  const int rows_per_kv = p.n * p.G;
  const int row0 = blockIdx.x * kRows;
  const int part = blockIdx.y, parts = gridDim.y;
  const int b = blockIdx.z / p.Hkv, kvh = blockIdx.z % p.Hkv;

  const bf16* qa = static_cast<const bf16*>(p.q_a);
  const bf16* qb = static_cast<const bf16*>(p.q_b);
  const bf16* kc = static_cast<const bf16*>(p.k_cache);
  const bf16* vc = static_cast<const bf16*>(p.v_cache);
  const bf16* kt = static_cast<const bf16*>(p.k_tree);
  const bf16* vt = static_cast<const bf16*>(p.v_tree);

  // This CTA's keys: prefix [pbeg, pend), then (last part only) the n tree keys.
  const int plen = p.prefix_lens[b];
  int pbeg = 0, pend = 0;
  if (p.num_splits > 0) {
    pbeg = part * p.kv_chunk;
    pend = max(pbeg, min(plen, pbeg + p.kv_chunk));
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
    const bf16* src;
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
    const bf16* krow = kc;
    const bf16* vrow = vc;
    if (valid) {
      if (is_tree) {
        const int64_t t = int64_t(b) * p.n + j;
        krow = kt + t * p.kt_t + kvh * p.kt_h;
        vrow = vt + t * p.vt_t + kvh * p.vt_h;
      } else {
        const int64_t slot = int64_t(p.page_table[int64_t(b) * p.pt_b + j / p.page_size]) * p.page_size +
                             j % p.page_size;
        krow = kc + slot * p.kc_s + kvh * p.kc_h;
        vrow = vc + slot * p.vc_s + kvh * p.vc_h;
      }
    }
    bf16* kdst = Ks + buf * C::K_ELEMS + kr * C::KSTR;
#pragma unroll
    for (int col = sub * 8; col < C::DQK; col += C::TPK * 8) cp_async16(kdst + col, krow + (valid ? col : 0), valid);
    if constexpr (!C::V_IS_K) {
      bf16* vdst = Vs + buf * C::V_ELEMS + kr * C::VSTR;
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
    const bf16* Kb = Ks + buf * C::K_ELEMS;

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
        mma16816(s[2 * np], a, bb[0], bb[1]);
        mma16816(s[2 * np + 1], a, bb[2], bb[3]);
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

    // ---- online softmax; P (bf16) → smem ----
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
      *reinterpret_cast<uint32_t*>(Ps + (wr * 16 + g) * C::PSTR + col) = pack_bf16(s[nb][0], s[nb][1]);
      *reinterpret_cast<uint32_t*>(Ps + (wr * 16 + g + 8) * C::PSTR + col) = pack_bf16(s[nb][2], s[nb][3]);
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
    const bf16* Vb = C::V_IS_K ? Kb : Vs + buf * C::V_ELEMS;
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
        mma16816(o[2 * np], a, bb[0], bb[1]);
        mma16816(o[2 * np + 1], a, bb[2], bb[3]);
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
      bf16* orow = static_cast<bf16*>(p.out) + row * C::DV + wk * (C::DV / 2) + 2 * tq;
#pragma unroll
      for (int nb = 0; nb < C::NB_V; ++nb)
        *reinterpret_cast<uint32_t*>(orow + nb * 8) = pack_bf16(o[nb][hr * 2] * inv, o[nb][hr * 2 + 1] * inv);
      if (wk == 0 && tq == 0) p.lse[row] = lse;
    } else {
      float* orow = p.o_part + (int64_t(part) * total_rows + row) * C::DV + wk * (C::DV / 2) + 2 * tq;
#pragma unroll
      for (int nb = 0; nb < C::NB_V; ++nb)
        *reinterpret_cast<float2*>(orow + nb * 8) = make_float2(o[nb][hr * 2] * inv, o[nb][hr * 2 + 1] * inv);
      if (wk == 0 && tq == 0) p.lse_part[int64_t(part) * total_rows + row] = lse;
    }
  }
}

// Combines the prefix chunks of each row by their natural-log LSE; chunks without keys (LSE −inf) weigh 0.
template <int DV>
__global__ void __launch_bounds__(DV / 4) combine_kernel(const float* __restrict__ o_part,
                                                        const float* __restrict__ lse_part, int parts,
                                                        int64_t rows, bf16* __restrict__ out,
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
  uint2 packed = make_uint2(pack_bf16(acc.x * inv, acc.y * inv), pack_bf16(acc.z * inv, acc.w * inv));
  reinterpret_cast<uint2*>(out + row * DV)[threadIdx.x] = packed;
  if (threadIdx.x == 0) lse[row] = wsum > 0.f ? mu + logf(wsum) : kNegInf;
}

template <class C>
cudaError_t launch(const VerifyAttnParams& p, cudaStream_t stream) {
  const int parts = verify_attn_parts(p);
  if (p.B == 0 || p.n == 0) return cudaSuccess;
  const dim3 grid((p.n * p.G + kRows - 1) / kRows, parts, p.B * p.Hkv);
  cudaError_t err = cudaFuncSetAttribute(verify_attn_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(C::SMEM));
  if (err != cudaSuccess) return err;
  verify_attn_kernel<C><<<grid, kThreads, C::SMEM, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess || parts == 1) return err;
  const int64_t rows = int64_t(p.B) * p.n * p.Hq;
  combine_kernel<C::DV><<<static_cast<unsigned>(rows), C::DV / 4, 0, stream>>>(
      p.o_part, p.lse_part, parts, rows, static_cast<bf16*>(p.out), p.lse);
  return cudaGetLastError();
}

__device__ __forceinline__ float natural_lse(float l, float scale) {
  const float x = l * scale;
  return x == -kNegInf ? kNegInf : x;
}

// One row per D/8 threads, 16-byte loads; an empty side (weight 0) is skipped, so its O may hold anything.
__global__ void __launch_bounds__(256) merge_two_kernel(const bf16* __restrict__ oa, const float* __restrict__ la,
                                                        float sa, const bf16* __restrict__ ob,
                                                        const float* __restrict__ lb, float sb, int64_t rows,
                                                        int D, bf16* __restrict__ out, float* __restrict__ lse) {
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
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      acc[2 * k] += wa * f.x, acc[2 * k + 1] += wa * f.y;
    }
  }
  if (wb > 0.f) {
    const uint4 v = *reinterpret_cast<const uint4*>(ob + row * D + c);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      acc[2 * k] += wb * f.x, acc[2 * k + 1] += wb * f.y;
    }
  }
  uint4 o;
  o.x = pack_bf16(acc[0] * inv, acc[1] * inv), o.y = pack_bf16(acc[2] * inv, acc[3] * inv);
  o.z = pack_bf16(acc[4] * inv, acc[5] * inv), o.w = pack_bf16(acc[6] * inv, acc[7] * inv);
  *reinterpret_cast<uint4*>(out + row * D + c) = o;
  if (c == 0) lse[row] = tot > 0.f ? mu + __logf(tot) : kNegInf;
}

}  // namespace

cudaError_t launch_merge_states_bf16(const void* o_a, const float* lse_a, float scale_a, const void* o_b,
                                     const float* lse_b, float scale_b, int64_t rows, int D, void* out,
                                     float* lse_out, cudaStream_t stream) {
  if (D % 8 != 0 || D > 2048 || D <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int tpr = D / 8, rpb = 256 / tpr;
  const int64_t blocks = (rows + rpb - 1) / rpb;
  merge_two_kernel<<<static_cast<unsigned>(blocks), rpb * tpr, 0, stream>>>(
      static_cast<const bf16*>(o_a), lse_a, scale_a, static_cast<const bf16*>(o_b), lse_b, scale_b, rows, D,
      static_cast<bf16*>(out), lse_out);
  return cudaGetLastError();
}

cudaError_t launch_verify_attn_bf16(const VerifyAttnParams& p, VerifyAttnLayout layout, cudaStream_t stream) {
  return layout == VerifyAttnLayout::kMLA ? launch<MlaCfg>(p, stream) : launch<GqaCfg>(p, stream);
}

}  // namespace ddtree
