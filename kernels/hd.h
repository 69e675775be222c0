// DDTREE_HD: a function both the CUDA kernels and the native CPU ops compile (host and device under nvcc; plain inline
// for the host compiler). One definition for every shared rule header (tree_walk.h, philox.h, law_rule.h).
#pragma once

#ifdef __CUDACC__
#define DDTREE_HD __host__ __device__ __forceinline__
#else
#define DDTREE_HD inline
#endif
