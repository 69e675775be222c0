// The project's sampling generator on the GPU (kernels/tree_accept.cu documents it; the CPU mirror is
// sglang_ddtree/sampling.py:uniform_noise / gumbel_noise): Philox4x32-10, key (seed lo, seed hi), counter
// (entry >> 2, stream, step lo, step hi), entry e's word e & 3.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ddtree {

__device__ __forceinline__ void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t lo0 = 0xD2511F53u * c[0], hi0 = __umulhi(0xD2511F53u, c[0]);
    const uint32_t lo1 = 0xCD9E8D57u * c[2], hi1 = __umulhi(0xCD9E8D57u, c[2]);
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// u = float32((x + 0.5) * 2^-32), rounded to nearest, clamped below 1 (sampling.uniform_noise).
__device__ __forceinline__ float uniform_from_word(uint32_t x) {
  const float u = __double2float_rn((static_cast<double>(x) + 0.5) * 0x1p-32);
  return fminf(u, 0x1.fffffep-1f);
}

__device__ __forceinline__ float gumbel_from_word(uint32_t x) { return -logf(-logf(uniform_from_word(x))); }

// The words of entries 4g .. 4g + 3 of stream `stream` under (seed, step).
__device__ __forceinline__ void philox_words(uint32_t c[4], int64_t seed, int64_t step, int64_t stream, uint32_t g) {
  const uint64_t sd = static_cast<uint64_t>(seed), st = static_cast<uint64_t>(step);
  c[0] = g;
  c[1] = static_cast<uint32_t>(static_cast<uint64_t>(stream));
  c[2] = static_cast<uint32_t>(st);
  c[3] = static_cast<uint32_t>(st >> 32);
  philox4x32_10(c, static_cast<uint32_t>(sd), static_cast<uint32_t>(sd >> 32));
}

}  // namespace ddtree
