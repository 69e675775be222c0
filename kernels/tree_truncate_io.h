// The truncate_tree op's tensors for both of its bindings (kernels/cpu/tree_truncate.cpp and
// kernels/torch_cuda/tree.cpp): the output tree's fields, allocated like the input's, and the rule's pointer views
// (kernels/tree_truncate.h) of both trees. Host-only (ATen); the bindings check shapes and dtypes first.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <tuple>

#include "tree_truncate.h"

namespace ddtree {

using TreeTuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The 12 input fields in the op's order (TreeBatch's, without retrive_index), contiguous and of the op's dtypes.
inline TruncIn truncate_inputs(const std::array<at::Tensor, 12>& t) {
  return {t[0].data_ptr<int32_t>(), t[1].data_ptr<int64_t>(), t[2].data_ptr<int32_t>(), t[3].data_ptr<int32_t>(),
          t[4].data_ptr<int32_t>(), t[5].data_ptr<double>(),  t[6].data_ptr<int64_t>(), t[7].data_ptr<int64_t>(),
          t[8].data_ptr<int64_t>(), t[9].data_ptr<bool>(),    t[10].data_ptr<int32_t>(), t[11].data_ptr<int32_t>()};
}

// The B trees of n slots the op returns (TreeBatch's 13 fields), on tokens' device.
inline std::array<at::Tensor, 13> truncate_outputs(const at::Tensor& tokens, int64_t B, int64_t n) {
  const auto i64 = tokens.options().dtype(at::kLong), i32 = i64.dtype(at::kInt);
  return {at::empty({B}, i32),      at::empty({B, n}, i64), at::empty({B, n}, i32), at::empty({B, n}, i32),
          at::empty({B, n}, i32),   at::empty({B, n}, i64.dtype(at::kDouble)),      at::empty({B, n}, i64),
          at::empty({B, n}, i64),   at::empty({B, n}, i64), at::empty({B, n}, i64),
          at::empty({B, n, n}, i64.dtype(at::kBool)),
          at::empty({B, n, mask_words(static_cast<int>(n))}, i32), at::empty({B}, i32)};
}

inline TruncOut truncate_views(const std::array<at::Tensor, 13>& o) {
  return {o[0].data_ptr<int32_t>(), o[1].data_ptr<int64_t>(), o[2].data_ptr<int32_t>(), o[3].data_ptr<int32_t>(),
          o[4].data_ptr<int32_t>(), o[5].data_ptr<double>(),  o[6].data_ptr<int64_t>(), o[7].data_ptr<int64_t>(),
          o[8].data_ptr<int64_t>(), o[9].data_ptr<int64_t>(), o[10].data_ptr<bool>(),   o[11].data_ptr<int32_t>(),
          o[12].data_ptr<int32_t>()};
}

inline TreeTuple as_tuple(const std::array<at::Tensor, 13>& o) {
  return {o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9], o[10], o[11], o[12]};
}

}  // namespace ddtree
