// Native CPU op sglang_ddtree::truncate_tree (schema in sglang_ddtree/ops.py): the rule is
// kernels/tree_truncate.h, shared with the CUDA kernel; budget.truncate is the definition the tests hold it to.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>

#include "tree_truncate.h"

namespace {

using TreeTuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

TreeTuple truncate_tree_cpu(const at::Tensor& num_nodes_in, const at::Tensor& tokens_in,
                            const at::Tensor& parents_in, const at::Tensor& depths_in, const at::Tensor& ranks_in,
                            const at::Tensor& logw_in, const at::Tensor& positions_in,
                            const at::Tensor& next_token_in, const at::Tensor& next_sibling_in,
                            const at::Tensor& tree_mask_in, const at::Tensor& mask_bits_in,
                            const at::Tensor& flags_in, int64_t budget) {
  TORCH_CHECK(tokens_in.dim() == 2, "truncate_tree: tokens must be [B, n]");
  const int64_t B = tokens_in.size(0), n_big = tokens_in.size(1), n = budget + 1;
  TORCH_CHECK(budget >= 0 && n <= n_big, "truncate_tree: budget must be in [0, ", n_big - 1, "], got ", budget);
  const auto c = [](const at::Tensor& t, at::ScalarType dtype) { return t.to(dtype).contiguous(); };
  const at::Tensor num_nodes = c(num_nodes_in, at::kInt), tokens = c(tokens_in, at::kLong),
                   parents = c(parents_in, at::kInt), depths = c(depths_in, at::kInt), ranks = c(ranks_in, at::kInt),
                   logw = c(logw_in, at::kDouble), positions = c(positions_in, at::kLong),
                   next_token = c(next_token_in, at::kLong), next_sibling = c(next_sibling_in, at::kLong),
                   tree_mask = c(tree_mask_in, at::kBool), mask_bits = c(mask_bits_in, at::kInt),
                   flags = c(flags_in, at::kInt);
  for (const at::Tensor* t : {&parents, &depths, &ranks, &logw, &positions, &next_token, &next_sibling})
    TORCH_CHECK(t->sizes() == tokens.sizes(), "truncate_tree: every per-node field must be [B, n] like tokens");
  TORCH_CHECK(num_nodes.numel() == B && flags.numel() == B, "truncate_tree: num_nodes and flags must be [B]");
  TORCH_CHECK(tree_mask.sizes() == at::IntArrayRef({B, n_big, n_big}), "truncate_tree: tree_mask must be [B, n, n]");
  TORCH_CHECK(mask_bits.sizes() == at::IntArrayRef({B, n_big, ddtree::mask_words(static_cast<int>(n_big))}),
              "truncate_tree: mask_bits must be [B, n, ceil(n/32)]");
  const auto opt = tokens.options();
  const auto i32 = opt.dtype(at::kInt);
  at::Tensor o_num = at::empty({B}, i32), o_tokens = at::empty({B, n}, opt), o_parents = at::empty({B, n}, i32),
             o_depths = at::empty({B, n}, i32), o_ranks = at::empty({B, n}, i32),
             o_logw = at::empty({B, n}, opt.dtype(at::kDouble)), o_positions = at::empty({B, n}, opt),
             o_index = at::empty({B, n}, opt), o_next = at::empty({B, n}, opt), o_sibling = at::empty({B, n}, opt),
             o_mask = at::empty({B, n, n}, opt.dtype(at::kBool)),
             o_bits = at::empty({B, n, ddtree::mask_words(static_cast<int>(n))}, i32), o_flags = at::empty({B}, i32);
  const ddtree::TruncIn in{num_nodes.data_ptr<int32_t>(), tokens.data_ptr<int64_t>(), parents.data_ptr<int32_t>(),
                           depths.data_ptr<int32_t>(), ranks.data_ptr<int32_t>(), logw.data_ptr<double>(),
                           positions.data_ptr<int64_t>(), next_token.data_ptr<int64_t>(),
                           next_sibling.data_ptr<int64_t>(), tree_mask.data_ptr<bool>(), mask_bits.data_ptr<int32_t>(),
                           flags.data_ptr<int32_t>()};
  const ddtree::TruncOut out{o_num.data_ptr<int32_t>(), o_tokens.data_ptr<int64_t>(), o_parents.data_ptr<int32_t>(),
                             o_depths.data_ptr<int32_t>(), o_ranks.data_ptr<int32_t>(), o_logw.data_ptr<double>(),
                             o_positions.data_ptr<int64_t>(), o_index.data_ptr<int64_t>(), o_next.data_ptr<int64_t>(),
                             o_sibling.data_ptr<int64_t>(), o_mask.data_ptr<bool>(), o_bits.data_ptr<int32_t>(),
                             o_flags.data_ptr<int32_t>()};
  at::parallel_for(0, B, 64, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      ddtree::truncate_request(in, out, b, static_cast<int>(n_big), static_cast<int>(n), 0, 1);
  });
  return {o_num, o_tokens, o_parents, o_depths, o_ranks, o_logw, o_positions, o_index, o_next, o_sibling, o_mask,
          o_bits, o_flags};
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) { m.impl("truncate_tree", &truncate_tree_cpu); }
