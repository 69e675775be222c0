// CUDA bindings of the attention family's ops (schemas in sglang_ddtree/ops.py): verify_attn, verify_attn_ragged,
// merge_attn_states, gather_prefix_slots (kernels/verify_attn.cu), fa2_schedule, mla_schedule (fa2_schedule.cu,
// mla_schedule.cu): shape/stride checks (checks.h), output and split-workspace allocation, launch on the current
// stream.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "checks.h"
#include "mla_schedule.h"
#include "verify_attn.cuh"

// The current stream through torch's stable C shim (in libtorch_cuda): c10/cuda headers are absent from
// CPU builds of torch, and the binding must compile against those too (CI).
extern "C" int32_t aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);

namespace {

using ddtree::is_cuda_contiguous;
using ddtree::is_cuda_index;
using ddtree::refuse;

cudaStream_t current_stream(const at::Tensor& t) {
  void* stream = nullptr;
  TORCH_CHECK(aoti_torch_get_current_cuda_stream(t.get_device(), &stream) == 0, "no current CUDA stream");
  return static_cast<cudaStream_t>(stream);
}

void check_launch(cudaError_t err, const char* op) {
  if (err != cudaSuccess) refuse("%s launch failed: %s", op, cudaGetErrorString(err));
}

void check_rows(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  if (!t.is_cuda() || t.scalar_type() != dtype)
    refuse("%s must be a CUDA %s tensor (like q_a)", name, c10::toString(dtype));
  if (t.dim() != 3 || t.stride(2) != 1) refuse("%s must be 3-D with a contiguous last dimension", name);
  if (t.stride(0) % 8 != 0 || t.stride(1) % 8 != 0) refuse("%s strides must be multiples of 8 elements", name);
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) refuse("%s must be 16-byte aligned", name);
}

struct Launch {
  ddtree::VerifyAttnParams p{};
  ddtree::VerifyAttnLayout layout;
  int head_dim;
  bool fp16;
  at::Tensor out, lse, o_part, lse_part;
};

// Shape checks shared by both prefix forms; fills everything but the prefix addressing and the split plan.
Launch prepare(const at::Tensor& q_a, const std::optional<at::Tensor>& q_b, const at::Tensor& k_cache,
               const at::Tensor& v_cache, int64_t B, const at::Tensor& k_tree, const at::Tensor& v_tree,
               const at::Tensor& mask_bits, double sm_scale) {
  TORCH_CHECK(q_a.scalar_type() == at::kBFloat16 || q_a.scalar_type() == at::kHalf,
              "verify_attn takes bfloat16 or float16 inputs");
  const auto dt = q_a.scalar_type();
  check_rows(q_a, "q_a", dt);
  check_rows(k_cache, "k_cache", dt);
  check_rows(v_cache, "v_cache", dt);
  check_rows(k_tree, "k_tree", dt);
  check_rows(v_tree, "v_tree", dt);
  const bool mla = q_b.has_value();
  if (mla) check_rows(*q_b, "q_b", dt);
  const int64_t T = q_a.size(0), Hq = q_a.size(1), Hkv = k_cache.size(1);
  const int64_t Da = q_a.size(2), Db = mla ? q_b->size(2) : 0, Dv = v_cache.size(2);
  if (mla) {
    TORCH_CHECK(Da == 512 && Db == 64 && Dv == 512 && k_cache.size(2) == 576 && Hkv == 1,
                "verify_attn MLA takes q_nope 512 + q_pe 64, one latent head of 576, values 512");
    TORCH_CHECK(v_cache.data_ptr() == k_cache.data_ptr() && v_cache.stride(0) == k_cache.stride(0) &&
                    v_tree.data_ptr() == k_tree.data_ptr() && v_tree.stride(0) == k_tree.stride(0),
                "verify_attn MLA: values must be the latent part (a view) of the keys");
    TORCH_CHECK(q_b->size(0) == T && q_b->size(1) == Hq, "q_b must match q_a in T and heads");
  } else {
    // refuse(), not TORCH_CHECK with the number (checks.h); test_attention_ragged_gpu.py checks that it raises
    if (!(ddtree::verify_attn_gqa_head_dim(static_cast<int>(Da)) && Dv == Da && k_cache.size(2) == Da))
      refuse("verify_attn GQA takes head dim 32, 64, 128 or 256 with equal key and value dims, got %lld",
             static_cast<long long>(Da));
  }
  TORCH_CHECK(Hkv >= 1 && Hq % Hkv == 0, "query heads must be a multiple of KV heads");
  TORCH_CHECK(v_cache.size(1) == Hkv && k_tree.size(1) == Hkv && v_tree.size(1) == Hkv, "KV head counts differ");
  TORCH_CHECK(B > 0 && T % B == 0, "T must be a multiple of B");
  const int64_t n = T / B;
  const int64_t words = (n + 31) / 32;
  TORCH_CHECK(mask_bits.scalar_type() == at::kInt && mask_bits.is_contiguous() && mask_bits.numel() == B * n * words,
              "mask_bits must be contiguous int32 [B, n, ceil(n/32)]");
  TORCH_CHECK(k_tree.size(0) == T && v_tree.size(0) == T, "tree KV must have T rows");
  TORCH_CHECK(B * Hkv <= 65535, "B * Hkv too large for one launch");

  Launch L;
  L.layout = mla ? ddtree::VerifyAttnLayout::kMLA : ddtree::VerifyAttnLayout::kGQA;
  L.head_dim = static_cast<int>(Da);
  L.fp16 = dt == at::kHalf;
  L.out = at::empty({T, Hq, Dv}, q_a.options());
  L.lse = at::empty({T, Hq}, q_a.options().dtype(at::kFloat));
  auto& p = L.p;
  p.q_a = q_a.data_ptr(), p.q_a_t = q_a.stride(0), p.q_a_h = q_a.stride(1);
  if (mla) p.q_b = q_b->data_ptr(), p.q_b_t = q_b->stride(0), p.q_b_h = q_b->stride(1);
  p.k_cache = k_cache.data_ptr(), p.kc_s = k_cache.stride(0), p.kc_h = k_cache.stride(1);
  p.v_cache = v_cache.data_ptr(), p.vc_s = v_cache.stride(0), p.vc_h = v_cache.stride(1);
  p.k_tree = k_tree.data_ptr(), p.kt_t = k_tree.stride(0), p.kt_h = k_tree.stride(1);
  p.v_tree = v_tree.data_ptr(), p.vt_t = v_tree.stride(0), p.vt_h = v_tree.stride(1);
  p.mask_bits = reinterpret_cast<const uint32_t*>(mask_bits.data_ptr<int32_t>());
  p.mask_words = static_cast<int>(words);
  p.B = static_cast<int>(B), p.n = static_cast<int>(n), p.Hq = static_cast<int>(Hq);
  p.Hkv = static_cast<int>(Hkv), p.G = static_cast<int>(Hq / Hkv);
  p.scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  p.out = L.out.data_ptr(), p.lse = L.lse.data_ptr<float>();
  return L;
}

std::tuple<at::Tensor, at::Tensor> run(Launch& L, const at::Tensor& q_a) {
  auto& p = L.p;
  const int parts = ddtree::verify_attn_parts(p);
  if (parts > 1) {
    const int64_t rows = int64_t(p.B) * p.n * p.Hq, dv = L.out.size(2);
    L.o_part = at::empty({parts, rows, dv}, q_a.options().dtype(at::kFloat));
    L.lse_part = at::empty({parts, rows}, q_a.options().dtype(at::kFloat));
    p.o_part = L.o_part.data_ptr<float>(), p.lse_part = L.lse_part.data_ptr<float>();
  }
  check_launch(ddtree::launch_verify_attn(p, L.layout, L.head_dim, L.fp16, current_stream(q_a)), "verify_attn");
  return {L.out, L.lse};
}

std::tuple<at::Tensor, at::Tensor> verify_attn(const at::Tensor& q_a, const std::optional<at::Tensor>& q_b,
                                               const at::Tensor& k_cache, const at::Tensor& v_cache,
                                               int64_t page_size, const at::Tensor& page_table,
                                               const at::Tensor& prefix_lens, const at::Tensor& k_tree,
                                               const at::Tensor& v_tree, const at::Tensor& mask_bits,
                                               double sm_scale, int64_t num_splits, int64_t kv_chunk,
                                               bool with_tree) {
  TORCH_CHECK(page_table.is_cuda() && page_table.scalar_type() == at::kInt && page_table.dim() == 2 &&
                  page_table.stride(1) == 1,
              "page_table must be CUDA int32 [B, pages] with contiguous rows");
  const int64_t B = page_table.size(0);
  TORCH_CHECK(is_cuda_contiguous(prefix_lens, at::kInt) && prefix_lens.numel() == B,
              "prefix_lens must be CUDA int32 [B]");
  TORCH_CHECK(page_size >= 1 && num_splits >= 0 && kv_chunk >= 1, "bad page_size / num_splits / kv_chunk");
  TORCH_CHECK(kv_chunk % (q_b.has_value() ? 32 : 64) == 0, "kv_chunk must be a multiple of the key tile");
  const c10::DeviceGuard guard(q_a.device());
  Launch L = prepare(q_a, q_b, k_cache, v_cache, B, k_tree, v_tree, mask_bits, sm_scale);
  auto& p = L.p;
  p.page_table = page_table.data_ptr<int32_t>(), p.pt_b = page_table.stride(0);
  p.prefix_lens = prefix_lens.data_ptr<int32_t>();
  p.page_size = static_cast<int>(page_size);
  p.num_splits = static_cast<int>(num_splits), p.kv_chunk = static_cast<int>(kv_chunk);
  p.with_tree = with_tree ? 1 : 0;
  return run(L, q_a);
}

// SGLang's form: request b's prefix slots are kv_indices[kv_indptr[b] .. kv_indptr[b+1]), split into
// num_splits equal chunks per request on the device (no host value of any length is needed, so one CUDA
// graph serves every prefix length).
std::tuple<at::Tensor, at::Tensor> verify_attn_ragged(const at::Tensor& q_a, const std::optional<at::Tensor>& q_b,
                                                      const at::Tensor& k_cache, const at::Tensor& v_cache,
                                                      const at::Tensor& kv_indptr, const at::Tensor& kv_indices,
                                                      const at::Tensor& k_tree, const at::Tensor& v_tree,
                                                      const at::Tensor& mask_bits, double sm_scale,
                                                      int64_t num_splits) {
  TORCH_CHECK(is_cuda_contiguous(kv_indptr, at::kInt) && kv_indptr.numel() >= 2,
              "kv_indptr must be contiguous CUDA int32 [B + 1]");
  TORCH_CHECK(is_cuda_index(kv_indices), "kv_indices must be contiguous CUDA int32 or int64");
  TORCH_CHECK(num_splits >= 1 && num_splits <= 1024, "num_splits must be in [1, 1024]");
  const int64_t B = kv_indptr.numel() - 1;
  const c10::DeviceGuard guard(q_a.device());
  Launch L = prepare(q_a, q_b, k_cache, v_cache, B, k_tree, v_tree, mask_bits, sm_scale);
  auto& p = L.p;
  p.kv_indptr = kv_indptr.data_ptr<int32_t>();
  p.kv_indices = kv_indices.data_ptr();
  p.kv_indices_64 = kv_indices.scalar_type() == at::kLong ? 1 : 0;
  p.page_size = 1;
  p.num_splits = static_cast<int>(num_splits), p.kv_chunk = 0;
  p.with_tree = 1;
  return run(L, q_a);
}

std::tuple<at::Tensor, at::Tensor> merge_attn_states(const at::Tensor& o_a, const at::Tensor& lse_a, double scale_a,
                                                     const at::Tensor& o_b, const at::Tensor& lse_b, double scale_b) {
  TORCH_CHECK(o_a.is_cuda() && (o_a.scalar_type() == at::kBFloat16 || o_a.scalar_type() == at::kHalf) &&
                  o_b.scalar_type() == o_a.scalar_type(),
              "merge_attn_states takes CUDA bfloat16 or float16 outputs of one dtype");
  TORCH_CHECK(o_a.sizes() == o_b.sizes() && o_a.dim() >= 2, "o_a and o_b must have the same shape [..., D]");
  const int64_t D = o_a.size(-1), rows = o_a.numel() / std::max<int64_t>(D, 1);
  TORCH_CHECK(D % 8 == 0 && D <= 2048, "merge_attn_states: D must be a multiple of 8, at most 2048");
  TORCH_CHECK(lse_a.numel() == rows && lse_b.numel() == rows, "lse must have one value per row of O");
  const at::Tensor a = o_a.contiguous(), b = o_b.contiguous();
  const at::Tensor la = lse_a.to(at::kFloat).contiguous(), lb = lse_b.to(at::kFloat).contiguous();
  const c10::DeviceGuard guard(o_a.device());
  at::Tensor out = at::empty_like(a);
  at::Tensor lse = at::empty(lse_a.sizes(), la.options());
  check_launch(ddtree::launch_merge_states(a.data_ptr(), la.data_ptr<float>(), static_cast<float>(scale_a),
                                           b.data_ptr(), lb.data_ptr<float>(), static_cast<float>(scale_b), rows,
                                           static_cast<int>(D), out.data_ptr(), lse.data_ptr<float>(),
                                           o_a.scalar_type() == at::kHalf, current_stream(o_a)),
               "merge_attn_states");
  return {out, lse};
}

void gather_prefix_slots(const at::Tensor& req_to_token, const at::Tensor& rows, const at::Tensor& lens,
                         at::Tensor& indptr, at::Tensor& indices) {
  TORCH_CHECK(req_to_token.is_cuda() && req_to_token.scalar_type() == at::kInt && req_to_token.dim() == 2 &&
                  req_to_token.stride(1) == 1, "req_to_token must be CUDA int32 [rows, context] with contiguous rows");
  TORCH_CHECK(is_cuda_index(rows) && rows.dim() == 1 && is_cuda_index(lens) && lens.dim() == 1 &&
                  rows.numel() == lens.numel(), "rows and lens must be CUDA int [B]");
  const int64_t B = rows.numel();
  TORCH_CHECK(is_cuda_contiguous(indptr, at::kInt) && indptr.numel() >= B + 1,
              "indptr must be contiguous CUDA int32 with at least B + 1 entries");
  TORCH_CHECK(is_cuda_contiguous(indices, at::kInt) && indices.numel() >= B * req_to_token.size(1),
              "indices must be contiguous CUDA int32 with at least B * context entries");
  const c10::DeviceGuard guard(rows.device());
  check_launch(ddtree::launch_gather_prefix_slots(
                   req_to_token.data_ptr<int32_t>(), req_to_token.stride(0), rows.data_ptr(),
                   rows.scalar_type() == at::kLong, lens.data_ptr(), lens.scalar_type() == at::kLong,
                   static_cast<int>(B), indptr.data_ptr<int32_t>(), indices.data_ptr<int32_t>(), current_stream(rows)),
               "gather_prefix_slots");
}

void fa2_schedule(const at::Tensor& lens, int64_t n, int64_t tiles, int64_t kmax, int64_t min_chunk, at::Tensor& valid,
                  at::Tensor& o_indptr, at::Tensor& merge_indptr, at::Tensor& chunk) {
  TORCH_CHECK(is_cuda_index(lens) && lens.dim() == 1, "lens must be CUDA int [bs]");
  const int64_t bs = lens.numel();
  TORCH_CHECK(n >= 1 && tiles >= 1 && kmax >= 1 && min_chunk >= 1, "n, tiles, kmax and min_chunk must be >= 1");
  TORCH_CHECK(is_cuda_contiguous(valid, at::kBool) && valid.numel() == bs * tiles * kmax,
              "valid must be contiguous CUDA bool [bs * tiles * kmax]");
  for (const at::Tensor* t : {&o_indptr, &merge_indptr, &chunk})
    TORCH_CHECK(is_cuda_contiguous(*t, at::kInt), "indptrs and chunk must be CUDA int32");
  TORCH_CHECK(o_indptr.numel() == bs + 1 && merge_indptr.numel() == bs * n + 1 && chunk.numel() == 1,
              "o_indptr [bs + 1], merge_indptr [bs * n + 1], chunk [1]");
  TORCH_CHECK(bs * n < (int64_t{1} << 31) && valid.numel() < (int64_t{1} << 31), "schedule too large");
  if (bs == 0) return;
  const c10::DeviceGuard guard(lens.device());
  check_launch(ddtree::launch_fa2_schedule(
                   lens.data_ptr(), lens.scalar_type() == at::kLong, static_cast<int>(bs), static_cast<int>(n),
                   static_cast<int>(tiles), static_cast<int>(kmax), static_cast<int>(min_chunk),
                   valid.data_ptr<bool>(), static_cast<int>(valid.numel()), o_indptr.data_ptr<int32_t>(),
                   merge_indptr.data_ptr<int32_t>(), chunk.data_ptr<int32_t>(), current_stream(lens)),
               "fa2_schedule");
}

void mla_schedule(const at::Tensor& lens, const at::Tensor& kv_indptr, int64_t n, int64_t heads, int64_t cluster_size,
                  int64_t clusters, int64_t max_works, int64_t merge_slots, at::IntArrayRef offsets, at::Tensor& ws) {
  for (const at::Tensor* t : {&lens, &kv_indptr})
    TORCH_CHECK(is_cuda_index(*t) && t->dim() == 1, "lens and kv_indptr must be CUDA int");
  const int64_t bs = lens.numel();
  TORCH_CHECK(kv_indptr.numel() >= bs, "kv_indptr needs an entry a request");
  TORCH_CHECK(n >= 1 && heads >= 1 && cluster_size >= 1 && clusters >= 1, "n, heads and clusters must be >= 1");
  TORCH_CHECK(is_cuda_contiguous(ws, at::kInt) && ws.dim() == 1, "ws must be a contiguous CUDA int32 [size]");
  const ddtree::MlaShape shape{n, heads, cluster_size, clusters};
  // the rule's bounds (kernels/mla_schedule.h): this many works and merges always fit
  if (!(shape.tiles() * bs + 2 * clusters <= max_works && cluster_size * clusters <= merge_slots))
    refuse("mla_schedule: %lld requests may need more works or merges than the plan holds", static_cast<long long>(bs));
  ddtree::MlaScheduleOut out;
  TORCH_CHECK(offsets.size() == 14 && ddtree::mla_schedule_view(ws.data_ptr<int32_t>(), ws.numel(), offsets.data(),
                                                                max_works, merge_slots, clusters, &out),
              "mla_schedule: 14 array offsets inside the workspace");
  if (bs == 0) return;
  const c10::DeviceGuard guard(lens.device());
  check_launch(ddtree::launch_mla_schedule(lens.data_ptr(), lens.scalar_type() == at::kLong, kv_indptr.data_ptr(),
                                           kv_indptr.scalar_type() == at::kLong, static_cast<int>(bs), shape,
                                           merge_slots, out, current_stream(lens)),
               "mla_schedule");
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CUDA, m) {
  m.impl("fa2_schedule", &fa2_schedule);
  m.impl("mla_schedule", &mla_schedule);
  m.impl("verify_attn", &verify_attn);
  m.impl("verify_attn_ragged", &verify_attn_ragged);
  m.impl("gather_prefix_slots", &gather_prefix_slots);
  m.impl("merge_attn_states", &merge_attn_states);
}
