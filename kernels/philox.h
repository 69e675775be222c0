// The project's sampling generator, for the CUDA kernels and the native CPU ops alike (kernels/tree_accept.cu
// documents it; the torch mirror is sglang_ddtree/sampling.py:uniform_noise / gumbel_noise): Philox4x32-10, key
// (seed lo, seed hi), counter (entry >> 2, stream, step lo, step hi), entry e's word e & 3.
#pragma once

#include <cmath>
#include <cstdint>

#include "hd.h"

namespace ddtree {

DDTREE_HD uint32_t mul_hi32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

DDTREE_HD void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const uint32_t lo0 = 0xD2511F53u * c[0], hi0 = mul_hi32(0xD2511F53u, c[0]);
    const uint32_t lo1 = 0xCD9E8D57u * c[2], hi1 = mul_hi32(0xCD9E8D57u, c[2]);
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// u = float32((x + 0.5) * 2^-32), rounded to nearest, clamped below 1 (sampling.uniform_noise).
DDTREE_HD float uniform_from_word(uint32_t x) {
  const double d = (static_cast<double>(x) + 0.5) * 0x1p-32;
#ifdef __CUDA_ARCH__
  const float u = __double2float_rn(d);
#else
  const float u = static_cast<float>(d);
#endif
  return fminf(u, 0x1.fffffep-1f);
}

// g = -log(-log(u)) in float32 (CUDA logf and the CPU's libm may differ by 1 ulp: draws agree except on near-ties)
DDTREE_HD float gumbel_from_word(uint32_t x) { return -logf(-logf(uniform_from_word(x))); }

// The words of entries 4g .. 4g + 3 of stream `stream` under (seed, step).
DDTREE_HD void philox_words(uint32_t c[4], int64_t seed, int64_t step, int64_t stream, uint32_t g) {
  const uint64_t sd = static_cast<uint64_t>(seed), st = static_cast<uint64_t>(step);
  c[0] = g;
  c[1] = static_cast<uint32_t>(static_cast<uint64_t>(stream));
  c[2] = static_cast<uint32_t>(st);
  c[3] = static_cast<uint32_t>(st >> 32);
  philox4x32_10(c, static_cast<uint32_t>(sd), static_cast<uint32_t>(sd >> 32));
}

}  // namespace ddtree
