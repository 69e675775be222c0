// Native CPU greedy walk over SGLang's child/sibling links and the round's commit plan. The walk and the
// per-column plan rule live in kernels/tree_walk.h (shared with the CUDA kernels); reference.walk_reference
// is the oracle the tests hold both against.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>

#include "tree_walk.h"

namespace {

struct Inputs {
  at::Tensor tokens, next_token, next_sibling, num_nodes, target;
  int64_t B, n, width;
};

Inputs contiguous_inputs(const at::Tensor& tokens_in, const at::Tensor& next_token_in,
                         const at::Tensor& next_sibling_in, const at::Tensor& num_nodes_in,
                         const at::Tensor& target_in, int64_t depth_limit, const char* op) {
  TORCH_CHECK(tokens_in.dim() == 2, op, ": tokens must be [B, n]");
  TORCH_CHECK(depth_limit >= 0, op, ": depth_limit must be >= 0");
  Inputs in{tokens_in.to(at::kLong).contiguous(), next_token_in.to(at::kLong).contiguous(),
            next_sibling_in.to(at::kLong).contiguous(), num_nodes_in.to(at::kInt).contiguous(),
            target_in.to(at::kLong).contiguous(), tokens_in.size(0), tokens_in.size(1), depth_limit + 1};
  TORCH_CHECK(in.next_token.sizes() == in.tokens.sizes() && in.next_sibling.sizes() == in.tokens.sizes() &&
                  in.target.sizes() == in.tokens.sizes() && in.num_nodes.numel() == in.B,
              op, ": link, target and num_nodes shapes must match tokens [B, n]");
  TORCH_CHECK(in.n >= 1 || in.B == 0, op, ": a tree has at least the root slot");
  return in;
}

ddtree::WalkResult walk(const Inputs& in, int64_t b, int32_t* acc) {
  const int64_t off = b * in.n;
  return ddtree::walk_tree(in.tokens.data_ptr<int64_t>() + off, in.target.data_ptr<int64_t>() + off,
                           in.next_token.data_ptr<int64_t>() + off, in.next_sibling.data_ptr<int64_t>() + off,
                           in.num_nodes.data_ptr<int32_t>()[b], in.n, static_cast<int>(in.width - 1), acc);
}

constexpr int64_t kGrain = 16384;  // a walk is ~0.1 us: threads only pay for huge batches

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> accept_tree_cpu(
    const at::Tensor& tokens, const at::Tensor& next_token, const at::Tensor& next_sibling,
    const at::Tensor& num_nodes, const at::Tensor& target, int64_t depth_limit) {
  const Inputs in = contiguous_inputs(tokens, next_token, next_sibling, num_nodes, target, depth_limit, "accept_tree");
  const auto opt = in.tokens.options();
  auto accept_index = at::full({in.B, in.width}, -1, opt.dtype(at::kInt));
  auto accept_len = at::empty({in.B}, opt.dtype(at::kInt));
  auto bonus = at::empty({in.B}, opt.dtype(at::kLong));
  auto flags = at::empty({in.B}, opt.dtype(at::kInt));
  at::parallel_for(0, in.B, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const ddtree::WalkResult w = walk(in, b, accept_index.data_ptr<int32_t>() + b * in.width);
      accept_len.data_ptr<int32_t>()[b] = w.len;
      bonus.data_ptr<int64_t>()[b] = in.target.data_ptr<int64_t>()[b * in.n + w.last];
      flags.data_ptr<int32_t>()[b] = w.flags;
    }
  });
  return {accept_index, accept_len, bonus, flags};
}

template <class Len>
void commit_rows(const Inputs& in, const at::Tensor& prefix, const at::Tensor& slots, at::Tensor* o) {
  const Len* pre = prefix.data_ptr<Len>();
  at::parallel_for(0, in.B, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      int32_t* acc = o[0].data_ptr<int32_t>() + b * in.width;
      const ddtree::WalkResult w = walk(in, b, acc);
      const int64_t off = b * in.n, col = b * in.width;
      for (int64_t k = w.len; k < in.width; ++k) acc[k] = -1;
      for (int k = 0; k < in.width; ++k)
        ddtree::commit_column(k, w, acc, in.tokens.data_ptr<int64_t>() + off, in.target.data_ptr<int64_t>() + off,
                              slots.data_ptr<int64_t>() + off, pre[b], b, in.n, o[4].data_ptr<int64_t>() + col,
                              o[5].data_ptr<int64_t>() + col, o[6].data_ptr<int64_t>() + col,
                              o[7].data_ptr<int64_t>() + col, o[8].data_ptr<int64_t>() + col);
      o[1].data_ptr<int32_t>()[b] = w.len;
      o[2].data_ptr<int64_t>()[b] = in.target.data_ptr<int64_t>()[off + w.last];
      o[3].data_ptr<int32_t>()[b] = w.flags;
      o[9].data_ptr<Len>()[b] = pre[b] + static_cast<Len>(w.len);
    }
  });
}

std::vector<at::Tensor> commit_tree_cpu(const at::Tensor& tokens, const at::Tensor& next_token,
                                        const at::Tensor& next_sibling, const at::Tensor& num_nodes,
                                        const at::Tensor& target, const at::Tensor& prefix_lens,
                                        const at::Tensor& slots_in, int64_t depth_limit) {
  const Inputs in = contiguous_inputs(tokens, next_token, next_sibling, num_nodes, target, depth_limit, "commit_tree");
  TORCH_CHECK(prefix_lens.numel() == in.B && (prefix_lens.scalar_type() == at::kInt ||
                                               prefix_lens.scalar_type() == at::kLong),
              "commit_tree: prefix_lens must be int32 or int64 [B]");
  TORCH_CHECK(slots_in.sizes() == in.tokens.sizes(), "commit_tree: slots must be [B, n] like tokens");
  const auto prefix = prefix_lens.contiguous();
  const auto slots = slots_in.to(at::kLong).contiguous();
  const auto opt = in.tokens.options();
  at::Tensor o[10] = {at::empty({in.B, in.width}, opt.dtype(at::kInt)), at::empty({in.B}, opt.dtype(at::kInt)),
                      at::empty({in.B}, opt), at::empty({in.B}, opt.dtype(at::kInt)),
                      at::empty({in.B, in.width}, opt), at::empty({in.B, in.width}, opt),
                      at::empty({in.B, in.width}, opt), at::empty({in.B, in.width}, opt),
                      at::empty({in.B, in.width}, opt), at::empty({in.B}, prefix.options())};
  if (prefix.scalar_type() == at::kLong) {
    commit_rows<int64_t>(in, prefix, slots, o);
  } else {
    commit_rows<int32_t>(in, prefix, slots, o);
  }
  return {o, o + 10};
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) {
  m.impl("accept_tree", &accept_tree_cpu);
  m.impl("commit_tree", &commit_tree_cpu);
}
