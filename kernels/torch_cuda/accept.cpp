// CUDA bindings of the accept family's ops (schemas in sglang_ddtree/ops.py): accept_tree, commit_tree,
// sample_rows, law_rows, draw_tree, drawn_targets (kernels/tree_accept.cu, law_rows.cu, tree_rejection.cu). Thin:
// check arguments (checks.h), allocate outputs, call the launchers on the current stream; no host synchronisation,
// so a decode round built from these ops can be captured in a CUDA graph.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "check_logits.h"
#include "checks.h"
#include "cuda_stream.h"
#include "tree_commit.cuh"
#include "tree_constants.h"
#include "tree_kernels.cuh"

namespace {

using ddtree::check_cuda;

// A tree's tokens i64 [B, n] and the i64 tensors of their shape that `links` names (links, targets, slots).
void check_links(const at::Tensor& tokens, std::initializer_list<std::pair<const at::Tensor*, const char*>> links) {
  check_cuda(tokens, "tokens", at::kLong, 2, tokens.device());
  for (const auto& [t, name] : links)
    check_cuda(*t, name, at::kLong, tokens.sizes(), "[B, n] like tokens", tokens.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> accept_tree_cuda(
    const at::Tensor& tokens, const at::Tensor& next_token, const at::Tensor& next_sibling,
    const at::Tensor& num_nodes, const at::Tensor& target, int64_t depth_limit) {
  const at::Device dev = tokens.device();
  check_links(tokens, {{&next_token, "next_token"}, {&next_sibling, "next_sibling"}, {&target, "target"}});
  const int64_t B = tokens.size(0), n = tokens.size(1);
  check_cuda(num_nodes, "num_nodes", at::kInt, {B}, "[B]", dev);
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

// The walk and the round's commit plan in one launch.
std::vector<at::Tensor> commit_tree_cuda(const at::Tensor& tokens, const at::Tensor& next_token,
                                         const at::Tensor& next_sibling, const at::Tensor& num_nodes,
                                         const at::Tensor& target, const at::Tensor& prefix_lens,
                                         const at::Tensor& slots, int64_t depth_limit) {
  check_links(tokens, {{&next_token, "next_token"}, {&next_sibling, "next_sibling"}, {&target, "target"},
                       {&slots, "slots"}});
  const int64_t B = tokens.size(0), n = tokens.size(1);
  TORCH_CHECK(ddtree::is_cuda_contiguous(num_nodes, at::kInt) && num_nodes.numel() == B,
              "num_nodes must be contiguous int32 [B]");
  TORCH_CHECK(ddtree::is_cuda_index(prefix_lens) && prefix_lens.numel() == B,
              "prefix_lens must be contiguous int32 or int64 [B]");
  TORCH_CHECK(n >= 1 && n <= ddtree::kMaxNodes, "n must be in [1, ", ddtree::kMaxNodes, "], got ", n);
  TORCH_CHECK(depth_limit >= 0 && depth_limit < ddtree::kMaxNodes, "depth_limit must be in [0, ", ddtree::kMaxNodes,
              ")");
  const c10::cuda::CUDAGuard guard(tokens.device());
  const int64_t W = depth_limit + 1;
  const auto opt = tokens.options();
  std::vector<at::Tensor> o = {at::empty({B, W}, opt.dtype(at::kInt)), at::empty({B}, opt.dtype(at::kInt)),
                               at::empty({B}, opt), at::empty({B}, opt.dtype(at::kInt)), at::empty({B, W}, opt),
                               at::empty({B, W}, opt), at::empty({B, W}, opt), at::empty({B, W}, opt),
                               at::empty({B, W}, opt), at::empty({B}, prefix_lens.options())};
  ddtree::CommitOutputs out{o[0].data_ptr<int32_t>(), o[1].data_ptr<int32_t>(), o[2].data_ptr<int64_t>(),
                            o[3].data_ptr<int32_t>(), o[4].data_ptr<int64_t>(), o[5].data_ptr<int64_t>(),
                            o[6].data_ptr<int64_t>(), o[7].data_ptr<int64_t>(), o[8].data_ptr<int64_t>(),
                            o[9].data_ptr()};
  C10_CUDA_CHECK(ddtree::launch_tree_commit(
      tokens.data_ptr<int64_t>(), next_token.data_ptr<int64_t>(), next_sibling.data_ptr<int64_t>(),
      num_nodes.data_ptr<int32_t>(), target.data_ptr<int64_t>(), prefix_lens.data_ptr(),
      prefix_lens.scalar_type() == at::kLong, slots.data_ptr<int64_t>(), static_cast<int>(B), static_cast<int>(n),
      static_cast<int>(depth_limit), out, c10::cuda::getCurrentCUDAStream()));
  return o;
}

at::Tensor sample_rows_cuda(const at::Tensor& logits, double temperature, const at::Tensor& seed,
                            const at::Tensor& step, const at::Tensor& node,
                            const std::optional<at::Tensor>& row_temperature,
                            const std::optional<at::Tensor>& boundary) {
  const at::Device dev = logits.device();
  const ddtree::LogitDtype dt = ddtree::check_logits(logits, dev);
  const int64_t R = logits.size(0), V = logits.size(1);
  check_cuda(seed, "seed", at::kLong, {R}, "[R]", dev);
  check_cuda(step, "step", at::kLong, {R}, "[R]", dev);
  check_cuda(node, "node", at::kLong, {R}, "[R]", dev);
  TORCH_CHECK(V >= 1, "logits must have a non-empty vocabulary");
  TORCH_CHECK(temperature >= 0.0, "temperature must be >= 0");
  const float* row_t = ddtree::optional_data<float>(row_temperature, "row_temperature", at::kFloat, {R}, "[R]", dev);
  const int64_t* bnd = ddtree::optional_data<int64_t>(boundary, "boundary", at::kLong, {R}, "[R]", dev);
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
  const at::Device dev = logits.device();
  const ddtree::LogitDtype dt = ddtree::check_logits(logits, dev);
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(n >= 1 && R % n == 0, "n must divide the rows (R = B * n)");
  const int64_t B = R / n;
  check_cuda(temperatures, "temperatures", at::kFloat, {B}, "[R / n]", dev);
  check_cuda(top_ks, "top_ks", at::kLong, {B}, "[R / n]", dev);
  check_cuda(top_ps, "top_ps", at::kFloat, {B}, "[R / n]", dev);
  check_cuda(min_ps, "min_ps", at::kFloat, {B}, "[R / n]", dev);
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

// The tree both drawn-tree ops read, and the batch and bounds of their draft [B, L, K] (lp or cand, 3-D already).
void check_drawn_tree(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& num_nodes,
                      const at::Tensor& depths, const at::Tensor& draft, const char* draft_name) {
  const at::Device dev = tokens.device();
  const int64_t B = tokens.size(0), n = tokens.size(1), L = draft.size(1), K = draft.size(2);
  check_cuda(parents, "parents", at::kInt, tokens.sizes(), "[B, n] like tokens", dev);
  check_cuda(depths, "depths", at::kInt, tokens.sizes(), "[B, n] like tokens", dev);
  check_cuda(num_nodes, "num_nodes", at::kInt, {B}, "[B]", dev);
  TORCH_CHECK(draft.size(0) == B, draft_name, " must be [B, L, K]");
  TORCH_CHECK(L >= 1 && K >= 1 && K <= ddtree::kMaxTopK && n <= ddtree::kMaxTreeSlots,
              "need L >= 1, 1 <= K <= ", ddtree::kMaxTopK, ", n <= ", ddtree::kMaxTreeSlots);
}

at::Tensor draw_tree_cuda(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& num_nodes,
                          const at::Tensor& depths, const at::Tensor& lp, const at::Tensor& ids,
                          const at::Tensor& drawn, double sharpness, const at::Tensor& seed, const at::Tensor& step) {
  const at::Device dev = tokens.device();
  check_cuda(tokens, "tokens", at::kLong, 2, dev);
  check_cuda(lp, "lp", at::kFloat, 3, dev);
  check_cuda(ids, "ids", at::kLong, lp.sizes(), "[B, L, K] like lp", dev);
  check_drawn_tree(tokens, parents, num_nodes, depths, lp, "lp");
  const int64_t B = tokens.size(0), n = tokens.size(1), L = lp.size(1), K = lp.size(2);
  check_cuda(drawn, "drawn", at::kBool, {B}, "[B]", dev);
  check_cuda(seed, "seed", at::kLong, {B}, "[B]", dev);
  check_cuda(step, "step", at::kLong, {B}, "[B]", dev);
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
  check_links(tokens, {{&next_token, "next_token"}, {&next_sibling, "next_sibling"}});
  check_cuda(cand, "cand", at::kLong, 3, dev);
  check_cuda(q, "q", at::kFloat, cand.sizes(), "[B, L, K] like cand", dev);
  check_drawn_tree(tokens, parents, num_nodes, depths, cand, "cand");
  const int64_t B = tokens.size(0), n = tokens.size(1), L = cand.size(1), K = cand.size(2);
  const ddtree::LogitDtype dt = ddtree::check_logits(logits, dev, "[B * n, V]");
  const int64_t V = logits.size(1);
  TORCH_CHECK(logits.size(0) == B * n && V >= 1, "logits must be [B * n, V], V >= 1");
  check_cuda(greedy, "greedy", at::kLong, {B * n}, "[B * n]", dev);
  check_cuda(lse, "lse", at::kFloat, {B * n}, "[B * n]", dev);
  check_cuda(boundary, "boundary", at::kLong, {B * n}, "[B * n]", dev);
  check_cuda(temperatures, "temperatures", at::kFloat, {B}, "[B]", dev);
  check_cuda(sampled, "sampled", at::kBool, {B}, "[B]", dev);
  check_cuda(seed, "seed", at::kLong, {B}, "[B]", dev);
  check_cuda(step, "step", at::kLong, {B}, "[B]", dev);
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
  m.impl("accept_tree", &accept_tree_cuda);
  m.impl("commit_tree", &commit_tree_cuda);
  m.impl("sample_rows", &sample_rows_cuda);
  m.impl("law_rows", &law_rows_cuda);
  m.impl("draw_tree", &draw_tree_cuda);
  m.impl("drawn_targets", &drawn_targets_cuda);
}
