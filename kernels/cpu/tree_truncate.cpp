// Native CPU op sglang_ddtree::truncate_tree (schema in sglang_ddtree/ops.py): the rule is
// kernels/tree_truncate.h, shared with the CUDA kernel; budget.truncate is the definition the tests hold it to.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <cstdint>

#include "tree_truncate_io.h"

namespace {

ddtree::TreeTuple truncate_tree_cpu(const at::Tensor& num_nodes, const at::Tensor& tokens, const at::Tensor& parents,
                                    const at::Tensor& depths, const at::Tensor& ranks, const at::Tensor& logw,
                                    const at::Tensor& positions, const at::Tensor& next_token,
                                    const at::Tensor& next_sibling, const at::Tensor& tree_mask,
                                    const at::Tensor& mask_bits, const at::Tensor& flags, int64_t budget) {
  TORCH_CHECK(tokens.dim() == 2, "truncate_tree: tokens must be [B, n]");
  const int64_t B = tokens.size(0), n_big = tokens.size(1), n = budget + 1;
  TORCH_CHECK(budget >= 0 && n <= n_big, "truncate_tree: budget must be in [0, ", n_big - 1, "], got ", budget);
  const auto c = [](const at::Tensor& t, at::ScalarType dtype) { return t.to(dtype).contiguous(); };
  const std::array<at::Tensor, 12> in{
      c(num_nodes, at::kInt),   c(tokens, at::kLong),       c(parents, at::kInt),      c(depths, at::kInt),
      c(ranks, at::kInt),       c(logw, at::kDouble),       c(positions, at::kLong),   c(next_token, at::kLong),
      c(next_sibling, at::kLong), c(tree_mask, at::kBool), c(mask_bits, at::kInt),    c(flags, at::kInt)};
  for (int i : {2, 3, 4, 5, 6, 7, 8})
    TORCH_CHECK(in[i].sizes() == tokens.sizes(), "truncate_tree: every per-node field must be [B, n] like tokens");
  TORCH_CHECK(in[0].numel() == B && in[11].numel() == B, "truncate_tree: num_nodes and flags must be [B]");
  TORCH_CHECK(in[9].sizes() == at::IntArrayRef({B, n_big, n_big}), "truncate_tree: tree_mask must be [B, n, n]");
  TORCH_CHECK(in[10].sizes() == at::IntArrayRef({B, n_big, ddtree::mask_words(static_cast<int>(n_big))}),
              "truncate_tree: mask_bits must be [B, n, ceil(n/32)]");
  const auto out = ddtree::truncate_outputs(in[1], B, n);
  const ddtree::TruncIn src = ddtree::truncate_inputs(in);
  const ddtree::TruncOut dst = ddtree::truncate_views(out);
  at::parallel_for(0, B, 64, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      ddtree::truncate_request(src, dst, b, static_cast<int>(n_big), static_cast<int>(n), 0, 1);
  });
  return ddtree::as_tuple(out);
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) { m.impl("truncate_tree", &truncate_tree_cpu); }
