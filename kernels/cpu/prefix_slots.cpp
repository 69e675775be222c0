// CPU implementation of sglang_ddtree::gather_prefix_slots (the CUDA one is in kernels/verify_attn.cu):
// SGLang's prefix addressing for verify_attn_ragged, from its request -> token-slot table.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>

namespace {

void gather_prefix_slots_cpu(const at::Tensor& req_to_token, const at::Tensor& rows, const at::Tensor& lens,
                             at::Tensor& indptr, at::Tensor& indices) {
  TORCH_CHECK(req_to_token.scalar_type() == at::kInt && req_to_token.dim() == 2 && req_to_token.stride(1) == 1,
              "req_to_token must be int32 [rows, context] with contiguous rows");
  TORCH_CHECK(rows.dim() == 1 && lens.dim() == 1 && rows.numel() == lens.numel(), "rows and lens must be [B]");
  const int64_t B = rows.numel(), ctx = req_to_token.size(1);
  TORCH_CHECK(indptr.scalar_type() == at::kInt && indptr.is_contiguous() && indptr.numel() >= B + 1,
              "indptr must be contiguous int32 with at least B + 1 entries");
  TORCH_CHECK(indices.scalar_type() == at::kInt && indices.is_contiguous() && indices.numel() >= B * ctx,
              "indices must be contiguous int32 with at least B * context entries");
  const auto r = rows.to(at::kLong).contiguous(), l = lens.to(at::kLong).contiguous();
  const int32_t* table = req_to_token.data_ptr<int32_t>();
  int32_t* ip = indptr.data_ptr<int32_t>();
  int32_t* out = indices.data_ptr<int32_t>();
  int64_t at = 0;
  ip[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = l.data_ptr<int64_t>()[b];
    TORCH_CHECK(len >= 0 && len <= ctx, "gather_prefix_slots: length ", len, " outside [0, ", ctx, "]");
    const int32_t* src = table + r.data_ptr<int64_t>()[b] * req_to_token.stride(0);
    for (int64_t j = 0; j < len; ++j) out[at + j] = src[j];
    at += len;
    ip[b + 1] = static_cast<int32_t>(at);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) { m.impl("gather_prefix_slots", &gather_prefix_slots_cpu); }
