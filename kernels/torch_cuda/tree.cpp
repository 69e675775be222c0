// CUDA implementations of the tree-stage ops declared in sglang_ddtree/ops.py: topk_lse, build_tree_from_topk,
// build_tree_from_lattice, truncate_tree, accept_tree, sample_rows, law_rows, draw_tree, drawn_targets. Thin: check devices/dtypes/shapes, allocate
// outputs, call the launchers in kernels/*.cu on the current stream (c10::cuda::getCurrentCUDAStream, the stream
// at::cuda::getCurrentCUDAStream returns; ATen/cuda/CUDAContext.h needs cuSPARSE headers). No host
// synchronisation anywhere, so a decode round built from these ops can be captured in a CUDA graph.
#if defined(__has_include)
#if !__has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
// CPU-only torch wheels (CI's compile check) lack this generated header; torch's documented escape hatch.
#define C10_CUDA_NO_CMAKE_CONFIGURE_FILE
#endif
#endif
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "tree_kernels.cuh"
#include "tree_truncate_io.h"

namespace {

void check_cuda(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t dim, const at::Device& dev) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.device() == dev, name, " must be on ", dev, ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.dim() == dim, name, " must have ", dim, " dimensions, got ", t.dim());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

ddtree::LogitDtype logit_dtype(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return ddtree::LogitDtype::kFloat32;
    case at::kHalf: return ddtree::LogitDtype::kFloat16;
    case at::kBFloat16: return ddtree::LogitDtype::kBFloat16;
    default: TORCH_CHECK(false, name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
  }
}

using ddtree::TreeTuple;

// The launchers' view of a tree's 13 fields (ddtree::truncate_outputs allocates them, TreeBatch order).
ddtree::TreeOutputs tree_views(const std::array<at::Tensor, 13>& o) {
  return {o[0].data_ptr<int32_t>(), o[1].data_ptr<int64_t>(), o[2].data_ptr<int32_t>(), o[3].data_ptr<int32_t>(),
          o[4].data_ptr<int32_t>(), o[5].data_ptr<double>(),  o[6].data_ptr<int64_t>(), o[7].data_ptr<int64_t>(),
          o[8].data_ptr<int64_t>(), o[9].data_ptr<int64_t>(), o[10].data_ptr<bool>(),   o[11].data_ptr<int32_t>(),
          o[12].data_ptr<int32_t>()};
}

// The checks both builders share: per-request vectors (the anchored mask among them), the budget and chain_pops,
// the depth limit.
void check_build_args(const at::Tensor& root_tokens, const at::Tensor& seq_lens,
                      const std::optional<at::Tensor>& anchored, int64_t B, int64_t L, int64_t budget,
                      int64_t chain_pops, const at::Device& dev) {
  check_cuda(root_tokens, "root_tokens", at::kLong, 1, dev);
  check_cuda(seq_lens, "seq_lens", at::kLong, 1, dev);
  TORCH_CHECK(root_tokens.size(0) == B && seq_lens.size(0) == B, "root_tokens and seq_lens must be [B]");
  if (anchored.has_value()) check_cuda(*anchored, "anchored", at::kBool, 1, dev);
  TORCH_CHECK(!anchored.has_value() || anchored->size(0) == B, "anchored must be [B]");
  TORCH_CHECK(budget >= 0 && budget + 1 <= ddtree::kMaxTreeSlots, "budget must be in [0, ",
              ddtree::kMaxTreeSlots - 1, "] on CUDA, got ", budget);
  TORCH_CHECK(chain_pops >= 0, "chain_pops must be >= 0, got ", chain_pops);
  TORCH_CHECK(L <= ddtree::kMaxDepth, "depth limit L must be <= ", ddtree::kMaxDepth, ", got ", L);
}

TreeTuple build_tree_from_topk_cuda(const at::Tensor& lp, const at::Tensor& ids, const at::Tensor& root_tokens,
                                    const at::Tensor& seq_lens, int64_t budget, int64_t chain_pops,
                                    const std::optional<at::Tensor>& anchored) {
  const at::Device dev = lp.device();
  check_cuda(lp, "lp", at::kFloat, 3, dev);
  check_cuda(ids, "ids", at::kLong, 3, dev);
  TORCH_CHECK(ids.sizes() == lp.sizes(), "ids must have the shape of lp [B, L, k]");
  const int64_t B = lp.size(0), L = lp.size(1), k = lp.size(2);
  check_build_args(root_tokens, seq_lens, anchored, B, L, budget, chain_pops, dev);
  TORCH_CHECK(k <= (int64_t{1} << 24) && B < (int64_t{1} << 31), "k or B too large");
  const c10::cuda::CUDAGuard guard(dev);
  const auto o = ddtree::truncate_outputs(lp, B, budget + 1);
  C10_CUDA_CHECK(ddtree::launch_tree_build(lp.data_ptr<float>(), ids.data_ptr<int64_t>(),
                                           root_tokens.data_ptr<int64_t>(), seq_lens.data_ptr<int64_t>(),
                                           static_cast<int>(B), static_cast<int>(L), static_cast<int>(k),
                                           static_cast<int>(budget),
                                           static_cast<int>(std::min<int64_t>(chain_pops, budget)),
                                           anchored.has_value() ? anchored->data_ptr<bool>() : nullptr, tree_views(o),
                                           c10::cuda::getCurrentCUDAStream()));
  return ddtree::as_tuple(o);
}

TreeTuple build_tree_from_lattice_cuda(const at::Tensor& lp, const at::Tensor& order, const at::Tensor& cand,
                                       const at::Tensor& root_tokens, const at::Tensor& seq_lens, int64_t budget,
                                       int64_t chain_pops, const std::optional<at::Tensor>& anchored) {
  const at::Device dev = lp.device();
  check_cuda(lp, "lp", at::kFloat, 4, dev);
  check_cuda(order, "order", at::kInt, 4, dev);
  check_cuda(cand, "cand", at::kLong, 3, dev);
  const int64_t B = lp.size(0), L = lp.size(1), K = lp.size(2);
  TORCH_CHECK(lp.size(3) == K && order.sizes() == lp.sizes(), "lp and order must be [B, L, K, K]");
  TORCH_CHECK(cand.sizes() == lp.sizes().slice(0, 3), "cand must be [B, L, K]");
  check_build_args(root_tokens, seq_lens, anchored, B, L, budget, chain_pops, dev);
  TORCH_CHECK(K <= ddtree::kMaxTopK, "K must be <= ", ddtree::kMaxTopK, " on CUDA, got ", K);
  TORCH_CHECK(B < (int64_t{1} << 31), "B too large");
  const c10::cuda::CUDAGuard guard(dev);
  const auto o = ddtree::truncate_outputs(lp, B, budget + 1);
  C10_CUDA_CHECK(ddtree::launch_lattice_build(lp.data_ptr<float>(), order.data_ptr<int32_t>(),
                                              cand.data_ptr<int64_t>(), root_tokens.data_ptr<int64_t>(),
                                              seq_lens.data_ptr<int64_t>(), static_cast<int>(B), static_cast<int>(L),
                                              static_cast<int>(K), static_cast<int>(budget),
                                              static_cast<int>(std::min<int64_t>(chain_pops, budget)),
                                              anchored.has_value() ? anchored->data_ptr<bool>() : nullptr,
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
  check_cuda(num_nodes, "num_nodes", at::kInt, 1, dev);
  check_cuda(flags, "flags", at::kInt, 1, dev);
  TORCH_CHECK(num_nodes.size(0) == B && flags.size(0) == B, "num_nodes and flags must be [B]");
  const auto per_node = [&](const at::Tensor& t, const char* name, at::ScalarType dtype) {
    check_cuda(t, name, dtype, 2, dev);
    TORCH_CHECK(t.sizes() == tokens.sizes(), name, " must be [B, n] like tokens");
  };
  per_node(parents, "parents", at::kInt);
  per_node(depths, "depths", at::kInt);
  per_node(ranks, "ranks", at::kInt);
  per_node(logw, "logw", at::kDouble);
  per_node(positions, "positions", at::kLong);
  per_node(next_token, "next_token", at::kLong);
  per_node(next_sibling, "next_sibling", at::kLong);
  check_cuda(tree_mask, "tree_mask", at::kBool, 3, dev);
  check_cuda(mask_bits, "mask_bits", at::kInt, 3, dev);
  TORCH_CHECK(tree_mask.sizes() == at::IntArrayRef({B, n_big, n_big}), "tree_mask must be [B, n, n]");
  TORCH_CHECK(mask_bits.sizes() == at::IntArrayRef({B, n_big, ddtree::mask_words(static_cast<int>(n_big))}),
              "mask_bits must be [B, n, ceil(n/32)]");
  const c10::cuda::CUDAGuard guard(dev);
  const auto out = ddtree::truncate_outputs(tokens, B, n);
  C10_CUDA_CHECK(ddtree::launch_tree_truncate(
      ddtree::truncate_inputs({num_nodes, tokens, parents, depths, ranks, logw, positions, next_token, next_sibling,
                               tree_mask, mask_bits, flags}),
      ddtree::truncate_views(out), static_cast<int>(B), static_cast<int>(n_big), static_cast<int>(n),
      c10::cuda::getCurrentCUDAStream()));
  return ddtree::as_tuple(out);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> accept_tree_cuda(
    const at::Tensor& tokens, const at::Tensor& next_token, const at::Tensor& next_sibling,
    const at::Tensor& num_nodes, const at::Tensor& target, int64_t depth_limit) {
  const at::Device dev = tokens.device();
  check_cuda(tokens, "tokens", at::kLong, 2, dev);
  check_cuda(next_token, "next_token", at::kLong, 2, dev);
  check_cuda(next_sibling, "next_sibling", at::kLong, 2, dev);
  check_cuda(target, "target", at::kLong, 2, dev);
  check_cuda(num_nodes, "num_nodes", at::kInt, 1, dev);
  TORCH_CHECK(next_token.sizes() == tokens.sizes() && next_sibling.sizes() == tokens.sizes() &&
                  target.sizes() == tokens.sizes(), "tokens, next_token, next_sibling, target must all be [B, n]");
  const int64_t B = tokens.size(0), n = tokens.size(1);
  TORCH_CHECK(num_nodes.size(0) == B, "num_nodes must be [B]");
  TORCH_CHECK(n >= 1 && n <= ddtree::kMaxNodes, "n must be in [1, ", ddtree::kMaxNodes, "], got ", n);
  TORCH_CHECK(depth_limit >= 0 && depth_limit < (int64_t{1} << 20), "depth_limit must be >= 0");
  const c10::cuda::CUDAGuard guard(dev);
  auto opt = tokens.options();
  at::Tensor accept_index = at::empty({B, depth_limit + 1}, opt.dtype(at::kInt));
  at::Tensor accept_len = at::empty({B}, opt.dtype(at::kInt)), bonus = at::empty({B}, opt.dtype(at::kLong));
  at::Tensor flags = at::empty({B}, opt.dtype(at::kInt));
  C10_CUDA_CHECK(ddtree::launch_tree_accept(
      tokens.data_ptr<int64_t>(), next_token.data_ptr<int64_t>(), next_sibling.data_ptr<int64_t>(),
      num_nodes.data_ptr<int32_t>(), target.data_ptr<int64_t>(), static_cast<int>(B), static_cast<int>(n),
      static_cast<int>(depth_limit), accept_index.data_ptr<int32_t>(), accept_len.data_ptr<int32_t>(),
      bonus.data_ptr<int64_t>(), flags.data_ptr<int32_t>(), c10::cuda::getCurrentCUDAStream()));
  return {accept_index, accept_len, bonus, flags};
}

std::tuple<at::Tensor, at::Tensor> topk_lse_cuda(const at::Tensor& logits, int64_t k,
                                                 const std::optional<at::Tensor>& scale) {
  TORCH_CHECK(logits.is_cuda(), "logits must be a CUDA tensor");
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous(), "logits must be a contiguous [R, V] tensor");
  const ddtree::LogitDtype dt = logit_dtype(logits, "logits");
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(k >= 1 && k <= ddtree::kMaxTopK, "k must be in [1, ", ddtree::kMaxTopK, "], got ", k);
  TORCH_CHECK(k <= V, "k must be <= V (", V, "), got ", k);
  TORCH_CHECK(V < (int64_t{1} << 31) && R < (int64_t{1} << 31), "logits too large");
  if (scale.has_value()) check_cuda(*scale, "scale", at::kFloat, 1, logits.device());
  TORCH_CHECK(!scale.has_value() || scale->size(0) == R, "scale must be [R] (one per logits row)");
  const c10::cuda::CUDAGuard guard(logits.device());
  auto opt = logits.options();
  at::Tensor lp = at::empty({R, k}, opt.dtype(at::kFloat)), ids = at::empty({R, k}, opt.dtype(at::kLong));
  if (R == 0) return {lp, ids};
  const float* sc = scale.has_value() ? scale->data_ptr<float>() : nullptr;
  C10_CUDA_CHECK(ddtree::launch_topk_lse(logits.data_ptr(), dt, R, V, static_cast<int>(k), sc, lp.data_ptr<float>(),
                                         ids.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream()));
  return {lp, ids};
}

// An optional per-row vector on the logits' device: its pointer, or null.
template <typename V>
const V* optional_rows(const std::optional<at::Tensor>& t, const char* name, at::ScalarType dtype, int64_t R,
                       const at::Device& dev) {
  if (!t.has_value()) return nullptr;
  check_cuda(*t, name, dtype, 1, dev);
  TORCH_CHECK(t->size(0) == R, name, " must be [R]");
  return t->data_ptr<V>();
}

at::Tensor sample_rows_cuda(const at::Tensor& logits, double temperature, const at::Tensor& seed,
                            const at::Tensor& step, const at::Tensor& node,
                            const std::optional<at::Tensor>& row_temperature,
                            const std::optional<at::Tensor>& boundary) {
  TORCH_CHECK(logits.is_cuda(), "logits must be a CUDA tensor");
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous(), "logits must be a contiguous [R, V] tensor");
  const ddtree::LogitDtype dt = logit_dtype(logits, "logits");
  const at::Device dev = logits.device();
  check_cuda(seed, "seed", at::kLong, 1, dev);
  check_cuda(step, "step", at::kLong, 1, dev);
  check_cuda(node, "node", at::kLong, 1, dev);
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(seed.size(0) == R && step.size(0) == R && node.size(0) == R, "seed, step, node must be [R]");
  TORCH_CHECK(V >= 1, "logits must have a non-empty vocabulary");
  TORCH_CHECK(temperature >= 0.0, "temperature must be >= 0");
  const float* row_t = optional_rows<float>(row_temperature, "row_temperature", at::kFloat, R, dev);
  const int64_t* bnd = optional_rows<int64_t>(boundary, "boundary", at::kLong, R, dev);
  const c10::cuda::CUDAGuard guard(dev);
  at::Tensor out = at::empty({R}, logits.options().dtype(at::kLong));
  C10_CUDA_CHECK(ddtree::launch_sample_rows(logits.data_ptr(), dt, R, V, static_cast<float>(temperature), row_t, bnd,
                                            seed.data_ptr<int64_t>(), step.data_ptr<int64_t>(),
                                            node.data_ptr<int64_t>(), out.data_ptr<int64_t>(),
                                            c10::cuda::getCurrentCUDAStream()));
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> law_rows_cuda(const at::Tensor& logits, int64_t n,
                                                             const at::Tensor& temperatures, const at::Tensor& top_ks,
                                                             const at::Tensor& top_ps, const at::Tensor& min_ps) {
  TORCH_CHECK(logits.is_cuda() && logits.dim() == 2 && logits.is_contiguous(),
              "logits must be a contiguous [R, V] CUDA tensor");
  const ddtree::LogitDtype dt = logit_dtype(logits, "logits");
  const at::Device dev = logits.device();
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(n >= 1 && R % n == 0, "n must divide the rows (R = B * n)");
  const int64_t B = R / n;
  check_cuda(temperatures, "temperatures", at::kFloat, 1, dev);
  check_cuda(top_ks, "top_ks", at::kLong, 1, dev);
  check_cuda(top_ps, "top_ps", at::kFloat, 1, dev);
  check_cuda(min_ps, "min_ps", at::kFloat, 1, dev);
  TORCH_CHECK(temperatures.size(0) == B && top_ks.size(0) == B && top_ps.size(0) == B && min_ps.size(0) == B,
              "the law's vectors must be [R / n]");
  TORCH_CHECK(V >= 1, "logits must have a non-empty vocabulary");
  const c10::cuda::CUDAGuard guard(dev);
  auto opt = logits.options();
  at::Tensor greedy = at::empty({R}, opt.dtype(at::kLong)), lse = at::empty({R}, opt.dtype(at::kFloat)),
             boundary = at::empty({R}, opt.dtype(at::kLong));
  C10_CUDA_CHECK(ddtree::launch_law_rows(logits.data_ptr(), dt, R, V, static_cast<int>(n),
                                         temperatures.data_ptr<float>(), top_ks.data_ptr<int64_t>(),
                                         top_ps.data_ptr<float>(), min_ps.data_ptr<float>(),
                                         greedy.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                         boundary.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream()));
  return {greedy, lse, boundary};
}

at::Tensor draw_tree_cuda(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& num_nodes,
                          const at::Tensor& depths, const at::Tensor& lp, const at::Tensor& ids,
                          const at::Tensor& drawn, double sharpness, const at::Tensor& seed, const at::Tensor& step) {
  const at::Device dev = tokens.device();
  check_cuda(tokens, "tokens", at::kLong, 2, dev);
  check_cuda(parents, "parents", at::kInt, 2, dev);
  check_cuda(num_nodes, "num_nodes", at::kInt, 1, dev);
  check_cuda(depths, "depths", at::kInt, 2, dev);
  check_cuda(lp, "lp", at::kFloat, 3, dev);
  check_cuda(ids, "ids", at::kLong, 3, dev);
  check_cuda(drawn, "drawn", at::kBool, 1, dev);
  check_cuda(seed, "seed", at::kLong, 1, dev);
  check_cuda(step, "step", at::kLong, 1, dev);
  const int64_t B = tokens.size(0), n = tokens.size(1), L = lp.size(1), K = lp.size(2);
  TORCH_CHECK(parents.sizes() == tokens.sizes() && depths.sizes() == tokens.sizes() && num_nodes.size(0) == B,
              "parents and depths must be [B, n] like tokens, num_nodes [B]");
  TORCH_CHECK(lp.size(0) == B && ids.sizes() == lp.sizes(), "lp and ids must be [B, L, K]");
  TORCH_CHECK(drawn.size(0) == B && seed.size(0) == B && step.size(0) == B, "drawn, seed and step must be [B]");
  TORCH_CHECK(L >= 1 && K >= 1 && K <= ddtree::kMaxTopK && n <= ddtree::kMaxTreeSlots,
              "need L >= 1, 1 <= K <= ", ddtree::kMaxTopK, ", n <= ", ddtree::kMaxTreeSlots);
  const c10::cuda::CUDAGuard guard(dev);
  at::Tensor out = tokens.clone();
  at::Tensor scratch = at::empty({B * n * K}, lp.options());
  C10_CUDA_CHECK(ddtree::launch_draw_tree(
      parents.data_ptr<int32_t>(), num_nodes.data_ptr<int32_t>(),
      depths.data_ptr<int32_t>(), lp.data_ptr<float>(), ids.data_ptr<int64_t>(), drawn.data_ptr<bool>(),
      static_cast<float>(sharpness), seed.data_ptr<int64_t>(), step.data_ptr<int64_t>(), static_cast<int>(B),
      static_cast<int>(n), static_cast<int>(L), static_cast<int>(K), scratch.data_ptr<float>(),
      out.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream()));
  return out;
}

at::Tensor drawn_targets_cuda(const at::Tensor& logits, const at::Tensor& temperatures, const at::Tensor& greedy,
                              const at::Tensor& lse, const at::Tensor& boundary, const at::Tensor& tokens,
                              const at::Tensor& parents, const at::Tensor& num_nodes, const at::Tensor& depths,
                              const at::Tensor& next_token, const at::Tensor& next_sibling, const at::Tensor& cand,
                              const at::Tensor& q, const at::Tensor& sampled, const at::Tensor& seed,
                              const at::Tensor& step) {
  const at::Device dev = tokens.device();
  TORCH_CHECK(logits.is_cuda() && logits.device() == dev && logits.dim() == 2 && logits.is_contiguous(),
              "logits must be a contiguous [B * n, V] tensor on the tree's device");
  const ddtree::LogitDtype dt = logit_dtype(logits, "logits");
  check_cuda(tokens, "tokens", at::kLong, 2, dev);
  check_cuda(parents, "parents", at::kInt, 2, dev);
  check_cuda(num_nodes, "num_nodes", at::kInt, 1, dev);
  check_cuda(depths, "depths", at::kInt, 2, dev);
  check_cuda(next_token, "next_token", at::kLong, 2, dev);
  check_cuda(next_sibling, "next_sibling", at::kLong, 2, dev);
  check_cuda(temperatures, "temperatures", at::kFloat, 1, dev);
  check_cuda(greedy, "greedy", at::kLong, 1, dev);
  check_cuda(lse, "lse", at::kFloat, 1, dev);
  check_cuda(boundary, "boundary", at::kLong, 1, dev);
  check_cuda(cand, "cand", at::kLong, 3, dev);
  check_cuda(q, "q", at::kFloat, 3, dev);
  check_cuda(sampled, "sampled", at::kBool, 1, dev);
  check_cuda(seed, "seed", at::kLong, 1, dev);
  check_cuda(step, "step", at::kLong, 1, dev);
  const int64_t B = tokens.size(0), n = tokens.size(1), V = logits.size(1), L = cand.size(1), K = cand.size(2);
  TORCH_CHECK(parents.sizes() == tokens.sizes() && depths.sizes() == tokens.sizes() &&
                  next_token.sizes() == tokens.sizes() && next_sibling.sizes() == tokens.sizes() &&
                  num_nodes.size(0) == B,
              "parents, depths and links must be [B, n] like tokens, num_nodes [B]");
  TORCH_CHECK(logits.size(0) == B * n && greedy.size(0) == B * n && lse.size(0) == B * n &&
                  boundary.size(0) == B * n,
              "logits must be [B * n, V] and greedy, lse, boundary [B * n]");
  TORCH_CHECK(cand.size(0) == B && q.sizes() == cand.sizes(), "cand and q must be [B, L, K]");
  TORCH_CHECK(temperatures.size(0) == B && sampled.size(0) == B && seed.size(0) == B && step.size(0) == B,
              "temperatures, sampled, seed and step must be [B]");
  TORCH_CHECK(L >= 1 && K >= 1 && K <= ddtree::kMaxTopK && n <= ddtree::kMaxTreeSlots && V >= 1,
              "need L >= 1, 1 <= K <= ", ddtree::kMaxTopK, ", n <= ", ddtree::kMaxTreeSlots);
  const c10::cuda::CUDAGuard guard(dev);
  at::Tensor out = at::empty({B, n}, tokens.options());
  C10_CUDA_CHECK(ddtree::launch_drawn_targets(
      logits.data_ptr(), dt, V, temperatures.data_ptr<float>(), greedy.data_ptr<int64_t>(), lse.data_ptr<float>(),
      boundary.data_ptr<int64_t>(), tokens.data_ptr<int64_t>(), parents.data_ptr<int32_t>(),
      num_nodes.data_ptr<int32_t>(), depths.data_ptr<int32_t>(), next_token.data_ptr<int64_t>(),
      next_sibling.data_ptr<int64_t>(), cand.data_ptr<int64_t>(), q.data_ptr<float>(), sampled.data_ptr<bool>(),
      seed.data_ptr<int64_t>(), step.data_ptr<int64_t>(), static_cast<int>(B), static_cast<int>(n),
      static_cast<int>(L), static_cast<int>(K), out.data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream()));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CUDA, m) {
  m.impl("build_tree_from_topk", &build_tree_from_topk_cuda);
  m.impl("build_tree_from_lattice", &build_tree_from_lattice_cuda);
  m.impl("truncate_tree", &truncate_tree_cuda);
  m.impl("draw_tree", &draw_tree_cuda);
  m.impl("drawn_targets", &drawn_targets_cuda);
  m.impl("law_rows", &law_rows_cuda);
  m.impl("accept_tree", &accept_tree_cuda);
  m.impl("topk_lse", &topk_lse_cuda);
  m.impl("sample_rows", &sample_rows_cuda);
}
