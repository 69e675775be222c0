// CUDA bindings of the tree family's ops (schemas in sglang_ddtree/ops.py): topk_lse, build_tree_from_topk,
// build_tree_from_lattice, truncate_tree (kernels/topk_lse.cu, tree_build.cu, tree_truncate.cu). Thin: check
// arguments (checks.h), allocate outputs, call the launchers on the current stream (c10::cuda::getCurrentCUDAStream,
// the stream at::cuda::getCurrentCUDAStream returns; ATen/cuda/CUDAContext.h needs cuSPARSE headers). No host
// synchronisation anywhere, so a decode round built from these ops can be captured in a CUDA graph.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "check_logits.h"
#include "checks.h"
#include "cuda_stream.h"
#include "tree_kernels.cuh"
#include "tree_truncate_io.h"

namespace {

using ddtree::check_cuda;
using ddtree::TreeTuple;

// The launchers' view of a tree's 13 fields (ddtree::truncate_outputs allocates them, TreeBatch order).
ddtree::TreeOutputs tree_views(const std::array<at::Tensor, 13>& o) {
  return {o[0].data_ptr<int32_t>(), o[1].data_ptr<int64_t>(), o[2].data_ptr<int32_t>(), o[3].data_ptr<int32_t>(),
          o[4].data_ptr<int32_t>(), o[5].data_ptr<double>(),  o[6].data_ptr<int64_t>(), o[7].data_ptr<int64_t>(),
          o[8].data_ptr<int64_t>(), o[9].data_ptr<int64_t>(), o[10].data_ptr<bool>(),   o[11].data_ptr<int32_t>(),
          o[12].data_ptr<int32_t>()};
}

// The checks both builders share: per-request vectors (the anchored mask among them), the budget and chain_pops,
// the depth limit; the anchored mask's data, or null.
const bool* check_build_args(const at::Tensor& root_tokens, const at::Tensor& seq_lens,
                             const std::optional<at::Tensor>& anchored, int64_t B, int64_t L, int64_t budget,
                             int64_t chain_pops, const at::Device& dev) {
  check_cuda(root_tokens, "root_tokens", at::kLong, {B}, "[B]", dev);
  check_cuda(seq_lens, "seq_lens", at::kLong, {B}, "[B]", dev);
  const bool* anchored_data = ddtree::optional_data<bool>(anchored, "anchored", at::kBool, {B}, "[B]", dev);
  TORCH_CHECK(budget >= 0 && budget + 1 <= ddtree::kMaxTreeSlots, "budget must be in [0, ",
              ddtree::kMaxTreeSlots - 1, "] on CUDA, got ", budget);
  TORCH_CHECK(chain_pops >= 0, "chain_pops must be >= 0, got ", chain_pops);
  TORCH_CHECK(L <= ddtree::kMaxDepth, "depth limit L must be <= ", ddtree::kMaxDepth, ", got ", L);
  return anchored_data;
}

TreeTuple build_tree_from_topk_cuda(const at::Tensor& lp, const at::Tensor& ids, const at::Tensor& root_tokens,
                                    const at::Tensor& seq_lens, int64_t budget, int64_t chain_pops,
                                    const std::optional<at::Tensor>& anchored) {
  const at::Device dev = lp.device();
  check_cuda(lp, "lp", at::kFloat, 3, dev);
  check_cuda(ids, "ids", at::kLong, lp.sizes(), "[B, L, k] like lp", dev);
  const int64_t B = lp.size(0), L = lp.size(1), k = lp.size(2);
  const bool* anchored_data = check_build_args(root_tokens, seq_lens, anchored, B, L, budget, chain_pops, dev);
  TORCH_CHECK(k <= (int64_t{1} << 24) && B < (int64_t{1} << 31), "k or B too large");
  const c10::cuda::CUDAGuard guard(dev);
  const auto o = ddtree::truncate_outputs(lp, B, budget + 1);
  C10_CUDA_CHECK(ddtree::launch_tree_build(lp.data_ptr<float>(), ids.data_ptr<int64_t>(),
                                           root_tokens.data_ptr<int64_t>(), seq_lens.data_ptr<int64_t>(),
                                           static_cast<int>(B), static_cast<int>(L), static_cast<int>(k),
                                           static_cast<int>(budget),
                                           static_cast<int>(std::min<int64_t>(chain_pops, budget)), anchored_data,
                                           tree_views(o), c10::cuda::getCurrentCUDAStream()));
  return ddtree::as_tuple(o);
}

TreeTuple build_tree_from_lattice_cuda(const at::Tensor& lp, const at::Tensor& order, const at::Tensor& cand,
                                       const at::Tensor& root_tokens, const at::Tensor& seq_lens, int64_t budget,
                                       int64_t chain_pops, const std::optional<at::Tensor>& anchored) {
  const at::Device dev = lp.device();
  check_cuda(lp, "lp", at::kFloat, 4, dev);
  const int64_t B = lp.size(0), L = lp.size(1), K = lp.size(2);
  TORCH_CHECK(lp.size(3) == K, "lp must be [B, L, K, K]");
  check_cuda(order, "order", at::kInt, lp.sizes(), "[B, L, K, K] like lp", dev);
  check_cuda(cand, "cand", at::kLong, {B, L, K}, "[B, L, K]", dev);
  const bool* anchored_data = check_build_args(root_tokens, seq_lens, anchored, B, L, budget, chain_pops, dev);
  TORCH_CHECK(K <= ddtree::kMaxTopK, "K must be <= ", ddtree::kMaxTopK, " on CUDA, got ", K);
  TORCH_CHECK(B < (int64_t{1} << 31), "B too large");
  const c10::cuda::CUDAGuard guard(dev);
  const auto o = ddtree::truncate_outputs(lp, B, budget + 1);
  C10_CUDA_CHECK(ddtree::launch_lattice_build(lp.data_ptr<float>(), order.data_ptr<int32_t>(),
                                              cand.data_ptr<int64_t>(), root_tokens.data_ptr<int64_t>(),
                                              seq_lens.data_ptr<int64_t>(), static_cast<int>(B), static_cast<int>(L),
                                              static_cast<int>(K), static_cast<int>(budget),
                                              static_cast<int>(std::min<int64_t>(chain_pops, budget)), anchored_data,
                                              tree_views(o), c10::cuda::getCurrentCUDAStream()));
  return ddtree::as_tuple(o);
}

TreeTuple truncate_tree_cuda(const at::Tensor& num_nodes, const at::Tensor& tokens, const at::Tensor& parents,
                             const at::Tensor& depths, const at::Tensor& ranks, const at::Tensor& logw,
                             const at::Tensor& positions, const at::Tensor& next_token, const at::Tensor& next_sibling,
                             const at::Tensor& tree_mask, const at::Tensor& mask_bits, const at::Tensor& flags,
                             int64_t budget) {
  const at::Device dev = tokens.device();
  check_cuda(tokens, "tokens", at::kLong, 2, dev);
  const int64_t B = tokens.size(0), n_big = tokens.size(1), n = budget + 1;
  TORCH_CHECK(budget >= 0 && n <= n_big, "budget must be in [0, ", n_big - 1, "], got ", budget);
  TORCH_CHECK(n_big <= ddtree::kMaxBudget + 1 && B < (int64_t{1} << 31), "tree too large");
  check_cuda(num_nodes, "num_nodes", at::kInt, {B}, "[B]", dev);
  check_cuda(flags, "flags", at::kInt, {B}, "[B]", dev);
  const char* per_node = "[B, n] like tokens";
  check_cuda(parents, "parents", at::kInt, tokens.sizes(), per_node, dev);
  check_cuda(depths, "depths", at::kInt, tokens.sizes(), per_node, dev);
  check_cuda(ranks, "ranks", at::kInt, tokens.sizes(), per_node, dev);
  check_cuda(logw, "logw", at::kDouble, tokens.sizes(), per_node, dev);
  check_cuda(positions, "positions", at::kLong, tokens.sizes(), per_node, dev);
  check_cuda(next_token, "next_token", at::kLong, tokens.sizes(), per_node, dev);
  check_cuda(next_sibling, "next_sibling", at::kLong, tokens.sizes(), per_node, dev);
  check_cuda(tree_mask, "tree_mask", at::kBool, {B, n_big, n_big}, "[B, n, n]", dev);
  check_cuda(mask_bits, "mask_bits", at::kInt, {B, n_big, ddtree::mask_words(static_cast<int>(n_big))},
             "[B, n, ceil(n/32)]", dev);
  const c10::cuda::CUDAGuard guard(dev);
  const auto out = ddtree::truncate_outputs(tokens, B, n);
  C10_CUDA_CHECK(ddtree::launch_tree_truncate(
      ddtree::truncate_inputs({num_nodes, tokens, parents, depths, ranks, logw, positions, next_token, next_sibling,
                               tree_mask, mask_bits, flags}),
      ddtree::truncate_views(out), static_cast<int>(B), static_cast<int>(n_big), static_cast<int>(n),
      c10::cuda::getCurrentCUDAStream()));
  return ddtree::as_tuple(out);
}

std::tuple<at::Tensor, at::Tensor> topk_lse_cuda(const at::Tensor& logits, int64_t k,
                                                 const std::optional<at::Tensor>& scale) {
  const ddtree::LogitDtype dt = ddtree::check_logits(logits, logits.device());
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(k >= 1 && k <= ddtree::kMaxTopK, "k must be in [1, ", ddtree::kMaxTopK, "], got ", k);
  TORCH_CHECK(k <= V, "k must be <= V (", V, "), got ", k);
  TORCH_CHECK(V < (int64_t{1} << 31) && R < (int64_t{1} << 31), "logits too large");
  const float* sc = ddtree::optional_data<float>(scale, "scale", at::kFloat, {R}, "[R] (one per logits row)",
                                                 logits.device());
  const c10::cuda::CUDAGuard guard(logits.device());
  auto opt = logits.options();
  at::Tensor lp = at::empty({R, k}, opt.dtype(at::kFloat)), ids = at::empty({R, k}, opt.dtype(at::kLong));
  if (R == 0) return {lp, ids};
  C10_CUDA_CHECK(ddtree::launch_topk_lse(logits.data_ptr(), dt, R, V, static_cast<int>(k), sc, lp.data_ptr<float>(),
                                         ids.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream()));
  return {lp, ids};
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CUDA, m) {
  m.impl("topk_lse", &topk_lse_cuda);
  m.impl("build_tree_from_topk", &build_tree_from_topk_cuda);
  m.impl("build_tree_from_lattice", &build_tree_from_lattice_cuda);
  m.impl("truncate_tree", &truncate_tree_cuda);
}
