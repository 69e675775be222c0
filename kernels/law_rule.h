// A sampled request's law at one tree node, and the drawn tree's test of a node's children, as the round's tail
// reads them: one rule for the CUDA kernels (kernels/law_rows.cu, kernels/tree_rejection.cu) and the native CPU ops
// (kernels/cpu/sampled.cpp). sglang_ddtree/sampling.py:law_rows_torch and rejection.py are the torch definitions;
// reference.filtered_law is the oracle the tests hold them against.
//
// Row r of logits x [R, V] is node r % n of request r / n. A sampled request's law at a node is softmax(s) over a
// kept set, s_j = float32(x_j / T) (T: the request's temperature, at least kMinTemperature):
//   order   tokens ranked by x descending, ties by the lower id: law_key(x_j, j) descending. A positive T never
//           reorders x; ranking by x rather than s keeps two logits whose scores round to one value in the
//           reference's order.
//   mass    e_j = exp(s_j - s_max) in float64 and E_j = floor(e_j * 2^F), F = mass_bits(V): integer sums, exact in
//           any order, so every backend keeps the same set (the kept test is the only place mass is compared).
//   kept    the longest prefix of the order whose every rank r has r < top_k (0 < top_k < V), e_r >= min_p
//           (min_p > 0), e_r > 0 and, for top_p < 1, mass before r <= top_p * Z in float64 (Z = sum E); rank 0
//           always (reference.kept_ranks: the plain sampler's filters). A request that sets no filter keeps all.
//   row out boundary = law_key of the last kept token (kept: law_key >= boundary; kKeepAll keeps every token),
//           lse = float32(s_max + log(sum of the kept E * 2^-F)), greedy = argmax x (first index; a NaN first).
//   degenerate  a row with a NaN or a non-finite s_max has no law to draw from: it is the point mass at its argmax
//           (boundary kKeepNone, lse NaN), the rule the plain sampler's argmax and the engine's no-token flag share.
// Products and quotients are rounded before sums (no FMA contraction), as torch computes the definitions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "philox.h"

namespace ddtree {

constexpr int64_t kKeepAll = INT64_MIN;   // boundary of a row that keeps every token
constexpr int64_t kKeepNone = INT64_MAX;  // boundary of a degenerate row (its token is its argmax)
constexpr float kMinTemperature = 1e-6f;  // a sampled row's temperature floor (sampling.MIN_TEMPERATURE)
// the drawn tree's Philox streams (2, 3 and 4 << 24: clear of the node draws' streams, one a node); rejection.py reads them
constexpr int64_t kAcceptStream = 33554432;
constexpr int64_t kBonusStream = 50331648;
constexpr int64_t kDrawStream = 67108864;
constexpr float kGumbelMax = 16.64f;      // > -log(-log(1 - 2^-24)) = 16.6355...: no Gumbel value reaches it

DDTREE_HD float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
DDTREE_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
DDTREE_HD double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DDTREE_HD double dsub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

// (score, index) order of every argmax here: the higher score, a NaN above everything, then the lower index.
DDTREE_HD bool beats(float s, int64_t i, float bs, int64_t bi) {
  const bool sn = s != s, bn = bs != bs;
  if (sn != bn) return sn;
  if (!sn && s != bs) return s > bs;
  return i < bi;
}

// The rank key of token j with logit x: larger is earlier (x descending, then j ascending); -0 ranks with +0.
DDTREE_HD int64_t law_key(float x, int64_t j) {
  if (x == 0.f) x = 0.f;
  uint32_t u;
#ifdef __CUDA_ARCH__
  u = __float_as_uint(x);
#else
  std::memcpy(&u, &x, sizeof u);
#endif
  const int32_t hi = static_cast<int32_t>(u) >= 0 ? static_cast<int32_t>(u) : static_cast<int32_t>(u ^ 0x7FFFFFFFu);
  return static_cast<int64_t>(hi) * 4294967296LL + static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(j));
}

// F: V * 2^F < 2^63, so the mass of a whole row fits an int64.
DDTREE_HD int mass_bits(int64_t V) {
  int b = 0;
  while (b < 62 && (int64_t(1) << b) <= V) ++b;
  return 63 - b;
}

// e_j = exp(s_j - s_max) and its fixed-point mass E_j.
DDTREE_HD double law_weight(float s, float s_max) { return exp(static_cast<double>(s) - static_cast<double>(s_max)); }
DDTREE_HD int64_t fixed_mass(double e, int F) { return static_cast<int64_t>(ldexp(e, F)); }

struct LawLimits {
  int64_t rank_limit;  // ranks below it may be kept (top_k, min_p, e > 0)
  double mass_limit;   // mass before a kept rank is at most this (top_p * Z, or +inf)
};

// Whether the token at `rank` with `mass_before` (fixed point) is kept: the rule on one rank, for the descent.
DDTREE_HD bool law_keeps(int64_t rank, int64_t mass_before, const LawLimits& lim) {
  return rank < lim.rank_limit && static_cast<double>(mass_before) <= lim.mass_limit;
}

DDTREE_HD bool law_filtered(int64_t top_k, float top_p, float min_p, int64_t V) {
  return (top_k > 0 && top_k < V) || top_p < 1.f || min_p > 0.f;
}

// count_pos: tokens with e > 0; count_min_p: tokens with e >= min_p (both prefixes of the order); Z: sum E.
DDTREE_HD LawLimits law_limits(int64_t top_k, float top_p, int64_t V, int64_t count_pos, int64_t count_min_p, int64_t Z) {
  int64_t r = (top_k > 0 && top_k < V) ? top_k : V;
  r = r < count_pos ? r : count_pos;
  r = r < count_min_p ? r : count_min_p;
  const double m = top_p < 1.f ? fmax(dmul(static_cast<double>(top_p), static_cast<double>(Z)), 0.0) : INFINITY;
  return {r < 1 ? 1 : r, m};
}

DDTREE_HD float law_lse(float s_max, int64_t kept_mass, int F) {
  return static_cast<float>(static_cast<double>(s_max) + log(ldexp(static_cast<double>(kept_mass), -F)));
}

// A Gumbel-max scan of one row (kernels/tree_accept.cu documents the generator and the score): entries in groups
// of 4 (one Philox call of stream `stream` each), groups first_group, first_group + stride, ... (a CUDA thread's
// share of a block's row, or the whole row with 0, 1); value(j) is entry j's score before the noise (logit / T;
// -inf for a token the law drops). Updates this scanner's best (score, index); greedy: the argmax of value(j).
// Entries that cannot win are skipped without drawing, invisible in the result (counter-based draws).
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class Value>
DDTREE_HD void gumbel_scan(int64_t V, int64_t seed, int64_t step, int64_t stream, bool greedy, Value value,
                           float& best, int64_t& bidx, int64_t first_group, int64_t stride) {
  const uint64_t sd = static_cast<uint64_t>(seed), st = static_cast<uint64_t>(step);
  const uint32_t k0 = static_cast<uint32_t>(sd), k1 = static_cast<uint32_t>(sd >> 32);
  const uint32_t c1 = static_cast<uint32_t>(static_cast<uint64_t>(stream));
  const uint32_t c2 = static_cast<uint32_t>(st), c3 = static_cast<uint32_t>(st >> 32);
  const int64_t groups = (V + 3) >> 2;
  for (int64_t g = first_group; g < groups; g += stride) {
    const int64_t v0 = g << 2;
    float z[4];
    bool any = false;
    for (int t = 0; t < 4; ++t) {
      z[t] = v0 + t < V ? value(v0 + t) : -INFINITY;
      any |= !(z[t] + (greedy ? 0.f : kGumbelMax) < best) && v0 + t < V;
    }
    if (!any) continue;
    if (greedy) {
      for (int t = 0; t < 4; ++t)
        if (v0 + t < V && beats(z[t], v0 + t, best, bidx)) { best = z[t]; bidx = v0 + t; }
    } else {
      uint32_t c[4] = {static_cast<uint32_t>(g), c1, c2, c3};
      philox4x32_10(c, k0, k1);
      for (int t = 0; t < 4; ++t) {
        if (v0 + t >= V || z[t] + kGumbelMax < best) continue;
        const float sc = z[t] + gumbel_from_word(c[t]);
        if (beats(sc, v0 + t, best, bidx)) { best = sc; bidx = v0 + t; }
      }
    }
  }
}

// The bonus's score of candidate c at its residual value (rejection.residual_logits writes log pc + lse there).
DDTREE_HD float residual_score(double pc, float lse, int64_t c, int64_t seed, int64_t step, int64_t stream) {
  uint32_t w[4];
  philox_words(w, seed, step, stream, static_cast<uint32_t>(c >> 2));
  return static_cast<float>(log(pc) + static_cast<double>(lse)) + gumbel_from_word(w[c & 3]);
}

// Node v's children (their tokens kids[0..m) in index order) tested in order against the target's law p (pc at the
// node's K candidates, unnormalised; rest: p off them) and the children's draft law q over the candidates
// (rejection.accept_children, float64, its operation order): the accepted child's token, or -1 with pc left as the
// last residual. Child i's uniform is entry i of stream kAcceptStream + v; a child whose token is not a candidate,
// or drawn after q ran out of mass, is not tested.
DDTREE_HD int64_t test_children(const int64_t* kids, int m, const int64_t* cand, int K, double* pc, double rest,
                                double* q, int64_t seed, int64_t step, int64_t v) {
  uint32_t c[4];
  for (int i = 0; i < m; ++i) {
    if ((i & 3) == 0) philox_words(c, seed, step, kAcceptStream + v, static_cast<uint32_t>(i >> 2));
    const float u = uniform_from_word(c[i & 3]);
    int at = -1;
    for (int e = 0; e < K; ++e)
      if (cand[e] == kids[i]) { at = e; break; }
    if (at < 0) continue;
    double mass = 0.0, zsum = 0.0;
    for (int e = 0; e < K; ++e) {
      mass += q[e];
      zsum += pc[e];
    }
    const double z = zsum + rest;
    if (!(mass > 0.0)) continue;
    if (dmul(dmul(static_cast<double>(u), q[at] / mass), z) < pc[at]) return kids[i];
    for (int e = 0; e < K; ++e) pc[e] = fmax(dsub(pc[e], dmul(z, q[e] / mass)), 0.0);
    q[at] = 0.0;
  }
  return -1;
}

}  // namespace ddtree
