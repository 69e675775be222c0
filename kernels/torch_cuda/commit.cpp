// CUDA implementation of sglang_ddtree::commit_tree (schema in sglang_ddtree/ops.py): the walk and the
// round's commit plan in one launch (kernels/tree_accept.cu). Checks, output allocation, current stream.
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

#include <vector>

#include "tree_commit.cuh"
#include "tree_constants.h"

namespace {

void check_2d(const at::Tensor& t, const char* name, const at::Tensor& like) {
  TORCH_CHECK(t.is_cuda() && t.device() == like.device(), name, " must be on ", like.device());
  TORCH_CHECK(t.scalar_type() == at::kLong && t.sizes() == like.sizes() && t.is_contiguous(), name,
              " must be contiguous int64 [B, n]");
}

std::vector<at::Tensor> commit_tree_cuda(const at::Tensor& tokens, const at::Tensor& next_token,
                                         const at::Tensor& next_sibling, const at::Tensor& num_nodes,
                                         const at::Tensor& target, const at::Tensor& prefix_lens,
                                         const at::Tensor& slots, int64_t depth_limit) {
  TORCH_CHECK(tokens.is_cuda() && tokens.dim() == 2, "tokens must be a CUDA [B, n] tensor");
  check_2d(tokens, "tokens", tokens);
  check_2d(next_token, "next_token", tokens);
  check_2d(next_sibling, "next_sibling", tokens);
  check_2d(target, "target", tokens);
  check_2d(slots, "slots", tokens);
  const int64_t B = tokens.size(0), n = tokens.size(1);
  TORCH_CHECK(num_nodes.is_cuda() && num_nodes.scalar_type() == at::kInt && num_nodes.numel() == B &&
                  num_nodes.is_contiguous(), "num_nodes must be contiguous int32 [B]");
  TORCH_CHECK(prefix_lens.is_cuda() && prefix_lens.numel() == B && prefix_lens.is_contiguous() &&
                  (prefix_lens.scalar_type() == at::kInt || prefix_lens.scalar_type() == at::kLong),
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

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CUDA, m) { m.impl("commit_tree", &commit_tree_cuda); }
