// CPU implementations of sglang_ddtree::gather_prefix_slots (the CUDA one is in kernels/verify_attn.cu): SGLang's
// prefix addressing for verify_attn_ragged, from its request -> token-slot table; sglang_ddtree::fa2_schedule
// (kernels/fa2_schedule.h's rule, shared with kernels/fa2_schedule.cu) and sglang_ddtree::mla_schedule
// (kernels/mla_schedule.h's, shared with kernels/mla_schedule.cu).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fa2_schedule.h"
#include "mla_schedule.h"

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

void fa2_schedule_cpu(const at::Tensor& lens_in, int64_t n, int64_t tiles, int64_t kmax, int64_t min_chunk,
                      at::Tensor& valid, at::Tensor& o_indptr, at::Tensor& merge_indptr, at::Tensor& chunk_out) {
  const int64_t bs = lens_in.numel();
  TORCH_CHECK(n >= 1 && tiles >= 1 && kmax >= 1 && min_chunk >= 1, "fa2_schedule: n, tiles, kmax, min_chunk >= 1");
  TORCH_CHECK(valid.scalar_type() == at::kBool && valid.is_contiguous() && valid.numel() == bs * tiles * kmax,
              "fa2_schedule: valid must be contiguous bool [bs * tiles * kmax]");
  for (const at::Tensor* t : {&o_indptr, &merge_indptr, &chunk_out})
    TORCH_CHECK(t->scalar_type() == at::kInt && t->is_contiguous(), "fa2_schedule: indptrs and chunk must be int32");
  TORCH_CHECK(o_indptr.numel() == bs + 1 && merge_indptr.numel() == bs * n + 1 && chunk_out.numel() == 1,
              "fa2_schedule: o_indptr [bs + 1], merge_indptr [bs * n + 1], chunk [1]");
  const auto lens = lens_in.to(at::kLong).contiguous();
  const int64_t* len = lens.data_ptr<int64_t>();
  int64_t max_len = 1;
  for (int64_t b = 0; b < bs; ++b) max_len = std::max(max_len, ddtree::fa2_len(len[b]));
  const int64_t chunk = ddtree::fa2_chunk(max_len, kmax, min_chunk);
  std::vector<int64_t> counts(bs);
  int32_t* o = o_indptr.data_ptr<int32_t>();
  int32_t* merge = merge_indptr.data_ptr<int32_t>();
  o[0] = merge[0] = 0;
  for (int64_t b = 0; b < bs; ++b) {
    counts[b] = ddtree::fa2_count(len[b], chunk);
    o[b + 1] = static_cast<int32_t>(o[b] + n * counts[b]);
    for (int64_t i = 0; i < n; ++i) merge[1 + b * n + i] = static_cast<int32_t>(o[b] + (i + 1) * counts[b]);
  }
  bool* live = valid.data_ptr<bool>();
  for (int64_t e = 0; e < valid.numel(); ++e) live[e] = ddtree::fa2_live(e, kmax, counts[ddtree::fa2_request(e, tiles, kmax)]);
  chunk_out.data_ptr<int32_t>()[0] = static_cast<int32_t>(chunk);
}

void mla_schedule_cpu(const at::Tensor& lens_in, const at::Tensor& kv_indptr_in, int64_t n, int64_t heads,
                      int64_t cluster_size, int64_t clusters, int64_t max_works, int64_t merge_slots,
                      at::IntArrayRef offsets, at::Tensor& ws) {
  const int64_t bs = lens_in.numel();
  TORCH_CHECK(n >= 1 && heads >= 1 && cluster_size >= 1 && clusters >= 1, "mla_schedule: n, heads, clusters >= 1");
  TORCH_CHECK(kv_indptr_in.numel() >= bs, "mla_schedule: kv_indptr needs an entry a request");
  TORCH_CHECK(ws.scalar_type() == at::kInt && ws.dim() == 1 && ws.is_contiguous(),
              "mla_schedule: ws must be int32 [size]");
  ddtree::MlaScheduleOut o;
  TORCH_CHECK(offsets.size() == 14 && ddtree::mla_schedule_view(ws.data_ptr<int32_t>(), ws.numel(), offsets.data(),
                                                                max_works, merge_slots, clusters, &o),
              "mla_schedule: 14 array offsets inside the workspace");
  const auto lens = lens_in.to(at::kLong).contiguous(), kv = kv_indptr_in.to(at::kLong).contiguous();
  const int64_t* len = lens.data_ptr<int64_t>();
  const ddtree::MlaShape s{n, heads, cluster_size, clusters};
  int64_t total = 0;
  for (int64_t b = 0; b < bs; ++b) total += s.tiles() * len[b];
  const int64_t limit = ddtree::mla_kv_limit(total, clusters);
  std::vector<ddtree::MlaCounts> at(bs + 1, ddtree::MlaCounts{0, 0, 0});
  for (int64_t b = 0; b < bs; ++b) {
    const ddtree::MlaCounts c = ddtree::mla_counts(len[b], limit, s);
    at[b + 1] = {at[b].works + c.works, at[b].partial_rows + c.partial_rows, at[b].merges + c.merges};
  }
  TORCH_CHECK(at[bs].works <= max_works && at[bs].merges <= merge_slots, "mla_schedule: ", at[bs].works, " works and ",
              at[bs].merges, " merges exceed the plan's ", max_works, " and ", merge_slots);
  for (int64_t b = 0; b < bs; ++b)
    ddtree::mla_write_request(b, len[b], kv.data_ptr<int64_t>()[b], limit, s, at[b], at[bs].works, o);
  for (int64_t c = 0; c <= clusters; ++c)
    o.work_indptr[c] = static_cast<int32_t>(ddtree::mla_cluster_start(c, at[bs].works, clusters));
  for (int64_t m = at[bs].merges; m < merge_slots; ++m)
    o.merge_start[m] = o.merge_end[m] = o.merge_partial_start[m] = o.merge_partial_end[m] = o.merge_stride[m] = 0;
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) {
  m.impl("gather_prefix_slots", &gather_prefix_slots_cpu);
  m.impl("fa2_schedule", &fa2_schedule_cpu);
  m.impl("mla_schedule", &mla_schedule_cpu);
}
