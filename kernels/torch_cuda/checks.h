// The argument checks every CUDA binding (kernels/torch_cuda/*.cpp) shares, so that an op states each argument's
// expectation in one line. A refusal raises c10::Error (RuntimeError in Python) whose message is formatted into one C
// string first: TORCH_CHECK's own formatting of a number crashed the process on the H200 instead of raising
// (docs/benchmarks/ragged-op-segv-h200-2026-12-04.txt), where a one-string message raises. Host-only (ATen).
#pragma once

#include <ATen/ATen.h>

#include <cstdarg>
#include <cstdio>
#include <optional>

namespace ddtree {

[[noreturn, gnu::format(printf, 1, 2)]] inline void refuse(const char* fmt, ...) {
  char msg[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, args);
  va_end(args);
  TORCH_CHECK(false, static_cast<const char*>(msg));
}

// t: a CUDA tensor on dev.
inline void check_on(const at::Tensor& t, const char* name, const at::Device& dev) {
  if (!t.is_cuda()) refuse("%s must be a CUDA tensor", name);
  if (t.device() != dev) refuse("%s must be on %s, got %s", name, dev.str().c_str(), t.device().str().c_str());
}

// t: a contiguous CUDA tensor of `dtype` with `dim` dimensions on dev.
inline void check_cuda(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t dim,
                       const at::Device& dev) {
  check_on(t, name, dev);
  if (t.scalar_type() != dtype)
    refuse("%s must be %s, got %s", name, c10::toString(dtype), c10::toString(t.scalar_type()));
  if (t.dim() != dim)
    refuse("%s must have %lld dimensions, got %lld", name, static_cast<long long>(dim),
           static_cast<long long>(t.dim()));
  if (!t.is_contiguous()) refuse("%s must be contiguous", name);
}

// ... of the sizes `sizes`, which `shape` spells for the message ("[B, n]").
inline void check_cuda(const at::Tensor& t, const char* name, at::ScalarType dtype, at::IntArrayRef sizes,
                       const char* shape, const at::Device& dev) {
  check_cuda(t, name, dtype, static_cast<int64_t>(sizes.size()), dev);
  if (t.sizes() != sizes) refuse("%s must be %s", name, shape);
}

// An optional argument: checked as above when given; its data, or null.
template <typename T>
const T* optional_data(const std::optional<at::Tensor>& t, const char* name, at::ScalarType dtype,
                       at::IntArrayRef sizes, const char* shape, const at::Device& dev) {
  if (!t.has_value()) return nullptr;
  check_cuda(*t, name, dtype, sizes, shape, dev);
  return t->data_ptr<T>();
}

// The predicates of checks that state their whole rule in one message.
inline bool is_cuda_contiguous(const at::Tensor& t, at::ScalarType dtype) {
  return t.is_cuda() && t.scalar_type() == dtype && t.is_contiguous();
}

// A contiguous CUDA tensor of int32 or int64: the index tensors the kernels read in either dtype.
inline bool is_cuda_index(const at::Tensor& t) {
  return t.is_cuda() && t.is_contiguous() && (t.scalar_type() == at::kInt || t.scalar_type() == at::kLong);
}

}  // namespace ddtree
