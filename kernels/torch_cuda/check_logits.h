// The target logits the tree and accept families' kernels read, checked and tagged with their dtype for the
// launchers. Apart from checks.h, which the attention family includes too, so that its build key does not cover
// tree_kernels.cuh. Host-only (ATen).
#pragma once

#include "checks.h"
#include "tree_kernels.cuh"

namespace ddtree {

// logits: a contiguous 2-D CUDA tensor on dev (`shape` spells it) of float32, float16 or bfloat16.
inline LogitDtype check_logits(const at::Tensor& t, const at::Device& dev, const char* shape = "[R, V]") {
  check_on(t, "logits", dev);
  if (t.dim() != 2 || !t.is_contiguous()) refuse("logits must be a contiguous %s tensor", shape);
  switch (t.scalar_type()) {
    case at::kFloat: return LogitDtype::kFloat32;
    case at::kHalf: return LogitDtype::kFloat16;
    case at::kBFloat16: return LogitDtype::kBFloat16;
    default: refuse("logits must be float32, float16 or bfloat16, got %s", c10::toString(t.scalar_type()));
  }
}

}  // namespace ddtree
