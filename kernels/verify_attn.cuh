// Tree verify attention (docs/DESIGN.md §5): the n tree queries of each request over its paged prefix KV
// (no mask) and its own tree KV (ancestor bitset mask), one online softmax per (row tile, prefix chunk).
// Pure CUDA, no torch headers; kernels/torch_cuda/attention.cpp binds it.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace ddtree {

// Element strides (last dimension contiguous). Rows of the query/output: t = b*n + i, heads h.
// KV head kvh serves query heads [kvh*G, (kvh+1)*G).
struct VerifyAttnParams {
  const void* q_a; int64_t q_a_t, q_a_h;        // [T, Hq, Da]
  const void* q_b; int64_t q_b_t, q_b_h;        // [T, Hq, Db] (MLA rope part) or null when Db == 0
  const void* k_cache; int64_t kc_s, kc_h;      // [slots, Hkv, Da+Db]; slot = page*page_size + offset
  const void* v_cache; int64_t vc_s, vc_h;      // [slots, Hkv, Dv]   (MLA: the first Dv dims of k_cache)
  const void* k_tree; int64_t kt_t, kt_h;       // [T, Hkv, Da+Db]
  const void* v_tree; int64_t vt_t, vt_h;       // [T, Hkv, Dv]
  const int32_t* page_table; int64_t pt_b;      // [B, max_pages] (when kv_indptr is null)
  const int32_t* prefix_lens;                   // [B]            (when kv_indptr is null)
  const int32_t* kv_indptr;                     // [B + 1] or null: request b's prefix slots are
  const void* kv_indices; int kv_indices_64;    //   kv_indices[kv_indptr[b] .. kv_indptr[b+1]) (int32 or int64)
  const uint32_t* mask_bits;                    // [B, n, mask_words]
  int page_size, mask_words;
  int B, n, Hq, Hkv, G;
  float scale_log2;                             // sm_scale * log2(e)
  int num_splits;                               // prefix chunks (0: tree only)
  int kv_chunk;                                 // keys per prefix chunk (multiple of the key tile); 0: each
                                                //   request's prefix in num_splits equal tile-aligned chunks
  int with_tree;                                // the last chunk's CTA also runs the tree keys
  void* out;                                    // [T, Hq, Dv] in the input dtype (written when parts == 1)
  float* lse;                                   // [T, Hq] natural log
  float* o_part;                                // [parts, T*Hq, Dv] float32 (parts > 1)
  float* lse_part;                              // [parts, T*Hq]
};

enum class VerifyAttnLayout { kMLA, kGQA };  // MLA: Da 512, Db 64, Dv 512 (V = K's latent); GQA: D/0/D
constexpr bool verify_attn_gqa_head_dim(int d) { return d == 32 || d == 64 || d == 128 || d == 256; }

// Number of prefix "parts" (CTA columns): max(1, num_splits).
inline int verify_attn_parts(const VerifyAttnParams& p) { return p.num_splits > 1 ? p.num_splits : 1; }

// Launches the attention kernel (and the split combine when parts > 1) on `stream`; 16-bit inputs (bf16, or
// fp16 when `fp16`), GQA head_dim one of verify_attn_gqa_head_dim (ignored for MLA).
cudaError_t launch_verify_attn(const VerifyAttnParams& p, VerifyAttnLayout layout, int head_dim, bool fp16,
                               cudaStream_t stream);

// out = (w_a O_a + w_b O_b) / (w_a + w_b) per row, w_x = e^{lse_x·scale_x − m}: scale_x converts each
// input LSE to natural log (1 for natural, ln 2 for base 2); +inf (FlashMLA's empty row) counts as −inf.
// o_*: bf16 (fp16 when `fp16`) [rows, D] contiguous, D % 8 == 0, D <= 2048; lse_*: float32 [rows];
// lse_out natural log.
cudaError_t launch_merge_states(const void* o_a, const float* lse_a, float scale_a, const void* o_b,
                                const float* lse_b, float scale_b, int64_t rows, int D, void* out, float* lse_out,
                                bool fp16, cudaStream_t stream);

// SGLang's prefix addressing from its request table: indptr[b+1] = sum(lens[:b+1]) (int32, indptr[0] = 0) and
// indices[indptr[b]:indptr[b+1]] = req_to_token[rows[b], :lens[b]]. rows / lens int32 or int64 [B].
// `indices` must hold sum(lens) entries (the caller sizes it B * max_context_len).
cudaError_t launch_gather_prefix_slots(const int32_t* req_to_token, int64_t stride, const void* rows, bool rows_64,
                                       const void* lens, bool lens_64, int B, int32_t* indptr, int32_t* indices,
                                       cudaStream_t stream);

// FlashInfer's CUDA-graph prefill schedule for this round's lengths (kernels/fa2_schedule.h), one launch: lens int32 or
// int64 [bs]; valid [live = bs * tiles * kmax]; o_indptr [bs + 1], merge_indptr [bs * n + 1] and chunk [1] int32.
cudaError_t launch_fa2_schedule(const void* lens, bool lens_64, int bs, int n, int tiles, int kmax, int min_chunk,
                                bool* valid, int live, int32_t* o_indptr, int32_t* merge_indptr, int32_t* chunk,
                                cudaStream_t stream);

// FlashInfer-MLA's work schedule for this round's lengths (kernels/mla_schedule.h), one launch: lens and kv_indptr
// int32 or int64 [bs]; the arrays in `out` as mla_schedule_view places them; merge_slots merge entries (those past
// the round's merges zeroed).
struct MlaShape;
struct MlaScheduleOut;
cudaError_t launch_mla_schedule(const void* lens, bool lens_64, const void* kv_indptr, bool kv_64, int bs,
                                const MlaShape& shape, int64_t merge_slots, const MlaScheduleOut& out,
                                cudaStream_t stream);

}  // namespace ddtree
