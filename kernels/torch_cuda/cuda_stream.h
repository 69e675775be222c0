// The c10 CUDA headers the tree and accept bindings launch through (the current stream, the device guard, the launch
// check), included once for both.
#pragma once

#if defined(__has_include)
#if !__has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
// CPU-only torch wheels (CI's compile check) lack this generated header; torch's documented escape hatch.
#define C10_CUDA_NO_CMAKE_CONFIGURE_FILE
#endif
#endif
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
