// Reading a row of logits in any dtype the ops take (float32, float16, bfloat16) as float32: exact upcasts, one
// helper for every kernel that reads target logits (the sampler, the law rows, the drawn tree's tail).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tree_kernels.cuh"

namespace ddtree {

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// f(T{}) with T the logits' element type: one switch for every launcher that takes a LogitDtype.
template <typename F>
cudaError_t with_logit_type(LogitDtype dtype, F&& f) {
  switch (dtype) {
    case LogitDtype::kFloat32: f(float{}); break;
    case LogitDtype::kFloat16: f(__half{}); break;
    case LogitDtype::kBFloat16: f(__nv_bfloat16{}); break;
  }
  return cudaGetLastError();
}

}  // namespace ddtree
