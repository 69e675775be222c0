// Native CPU greedy walk over SGLang's child/sibling links (reference.walk_reference, bit for bit).
//
// Links must point strictly forward and stay inside [1, num_nodes); the path may not exceed the depth
// limit. Anything else sets MALFORMED_TREE and stops the walk, so every request finishes after at most
// n link reads, whatever the input (cyclic, out-of-range or corrupted trees included).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int32_t kMalformed = 4;

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> accept_tree_cpu(
    const at::Tensor& tokens_in, const at::Tensor& next_token_in, const at::Tensor& next_sibling_in,
    const at::Tensor& num_nodes_in, const at::Tensor& target_in, int64_t depth_limit) {
  TORCH_CHECK(tokens_in.dim() == 2, "tokens must be [B, n]");
  TORCH_CHECK(depth_limit >= 0, "depth_limit must be >= 0");
  const auto tokens = tokens_in.to(at::kLong).contiguous();
  const auto next_token = next_token_in.to(at::kLong).contiguous();
  const auto next_sibling = next_sibling_in.to(at::kLong).contiguous();
  const auto num_nodes = num_nodes_in.to(at::kInt).contiguous();
  const auto target = target_in.to(at::kLong).contiguous();
  const int64_t B = tokens.size(0), n = tokens.size(1), width = depth_limit + 1;
  TORCH_CHECK(next_token.sizes() == tokens.sizes() && next_sibling.sizes() == tokens.sizes() &&
                  target.sizes() == tokens.sizes() && num_nodes.numel() == B,
              "accept_tree: link, target and num_nodes shapes must match tokens [B, n]");
  auto accept_index = at::full({B, width}, -1, tokens.options().dtype(at::kInt));
  auto accept_len = at::empty({B}, tokens.options().dtype(at::kInt));
  auto bonus = at::empty({B}, tokens.options().dtype(at::kLong));
  auto flags = at::empty({B}, tokens.options().dtype(at::kInt));

  at::parallel_for(0, B, 16384,  // a walk is ~0.1 us: threads only pay for huge batches
                    [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t* tok = tokens.data_ptr<int64_t>() + b * n;
      const int64_t* nt = next_token.data_ptr<int64_t>() + b * n;
      const int64_t* ns = next_sibling.data_ptr<int64_t>() + b * n;
      const int64_t* tgt = target.data_ptr<int64_t>() + b * n;
      int32_t* idx = accept_index.data_ptr<int32_t>() + b * width;
      int32_t flag = 0;
      int64_t count = num_nodes.data_ptr<int32_t>()[b];
      if (count < 1 || count > n) {
        flag |= kMalformed;
        count = std::min<int64_t>(std::max<int64_t>(count, 1), n);
      }
      int64_t cur = 0, len = 1, steps = 0;
      idx[0] = 0;
      while (true) {
        int64_t matched = -1, prev = cur, c = nt[cur];
        bool bad = false;
        while (c != -1) {
          if (!(prev < c && c < count) || ++steps > n) { bad = true; break; }
          if (tok[c] == tgt[cur]) { matched = c; break; }
          prev = c;
          c = ns[c];
        }
        if (bad) { flag |= kMalformed; break; }
        if (matched == -1) break;
        if (len == width) { flag |= kMalformed; break; }
        idx[len++] = static_cast<int32_t>(matched);
        cur = matched;
      }
      accept_len.data_ptr<int32_t>()[b] = static_cast<int32_t>(len);
      bonus.data_ptr<int64_t>()[b] = tgt[cur];
      flags.data_ptr<int32_t>()[b] = flag;
    }
  });
  return {accept_index, accept_len, bonus, flags};
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) { m.impl("accept_tree", &accept_tree_cpu); }
