// The sampled round's tail on the CPU, the same rule as the CUDA kernels (kernels/law_rule.h): every node's law
// (law_rows), per-row draws under it (sample_rows) and a drawn tree's walk with its tests and one bonus
// (drawn_targets). sglang_ddtree/sampling.py and rejection.py hold the torch definitions the tests compare with.
// The kept boundary is found here by sorting the row's rank keys (a CPU row is small; the CUDA kernel descends
// a histogram instead): both find the last token the rule keeps, in exact integer mass, so they agree.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "law_rule.h"

namespace {

using ddtree::kKeepAll;
using ddtree::kKeepNone;

void check_logits(const at::Tensor& logits, const char* op) {
  TORCH_CHECK(logits.device().is_cpu() && logits.dim() == 2, op, ": logits must be a [R, V] CPU tensor");
  const auto t = logits.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16, op,
              ": logits must be float32, float16 or bfloat16 (float64 rows take the torch definition), got ", t);
  TORCH_CHECK(logits.size(1) >= 1, op, ": logits must have a non-empty vocabulary");
}

at::Tensor vec(const at::Tensor& t, at::ScalarType dtype, int64_t size, const char* name, const char* op) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == size, op, ": ", name, " must be [", size, "]");
  return t.to(dtype).contiguous();
}

template <typename T>
void law_row(const T* x, int64_t V, float temperature, int64_t top_k, float top_p, float min_p, int64_t* greedy,
             float* lse, int64_t* boundary) {
  float best = -INFINITY;
  int64_t bidx = INT64_MAX;
  for (int64_t j = 0; j < V; ++j) {
    const float v = static_cast<float>(x[j]);
    if (ddtree::beats(v, j, best, bidx)) { best = v; bidx = j; }
  }
  *greedy = bidx;
  if (!(temperature > 0.f) || top_k == 1) { *lse = 0.f; *boundary = kKeepAll; return; }
  const float t = std::max(temperature, ddtree::kMinTemperature);
  const float s_max = ddtree::div_rn(best, t);
  if (std::isnan(best) || !std::isfinite(s_max)) { *lse = NAN; *boundary = kKeepNone; return; }
  const int F = ddtree::mass_bits(V);
  const bool filtered = ddtree::law_filtered(top_k, top_p, min_p, V);
  std::vector<std::pair<int64_t, int64_t>> items;  // (rank key, mass)
  if (filtered) items.reserve(V);
  int64_t Z = 0, npos = 0, nmin = 0;
  for (int64_t j = 0; j < V; ++j) {
    const float xv = static_cast<float>(x[j]);
    const double e = ddtree::law_weight(ddtree::div_rn(xv, t), s_max);
    const int64_t E = ddtree::fixed_mass(e, F);
    Z += E;
    npos += e > 0.0;
    nmin += e >= static_cast<double>(min_p);
    if (filtered) items.emplace_back(ddtree::law_key(xv, j), E);
  }
  if (!filtered) { *lse = ddtree::law_lse(s_max, Z, F); *boundary = kKeepAll; return; }
  const ddtree::LawLimits lim = ddtree::law_limits(top_k, top_p, V, npos, nmin, Z);
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  int64_t above = 0, last = items[0].first;
  for (int64_t r = 0; r < static_cast<int64_t>(items.size()) && ddtree::law_keeps(r, above, lim); ++r) {
    last = items[r].first;
    above += items[r].second;
  }
  *boundary = last;
  *lse = ddtree::law_lse(s_max, above, F);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> law_rows_cpu(const at::Tensor& logits_in, int64_t n,
                                                            const at::Tensor& temperatures, const at::Tensor& top_ks,
                                                            const at::Tensor& top_ps, const at::Tensor& min_ps) {
  check_logits(logits_in, "law_rows");
  const at::Tensor logits = logits_in.contiguous();
  const int64_t R = logits.size(0), V = logits.size(1);
  TORCH_CHECK(n >= 1 && R % n == 0, "law_rows: n must divide the rows (R = B * n)");
  const int64_t B = R / n;
  const at::Tensor tt = vec(temperatures, at::kFloat, B, "temperatures", "law_rows"),
                   tk = vec(top_ks, at::kLong, B, "top_ks", "law_rows"), tp = vec(top_ps, at::kFloat, B, "top_ps", "law_rows"),
                   mp = vec(min_ps, at::kFloat, B, "min_ps", "law_rows");
  auto opt = logits.options();
  at::Tensor greedy = at::empty({R}, opt.dtype(at::kLong)), lse = at::empty({R}, opt.dtype(at::kFloat)),
             boundary = at::empty({R}, opt.dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "law_rows", [&] {
    const scalar_t* x = logits.data_ptr<scalar_t>();
    at::parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / n;
        law_row(x + r * V, V, tt.data_ptr<float>()[b], tk.data_ptr<int64_t>()[b], tp.data_ptr<float>()[b],
                mp.data_ptr<float>()[b], greedy.data_ptr<int64_t>() + r, lse.data_ptr<float>() + r,
                boundary.data_ptr<int64_t>() + r);
      }
    });
  });
  return {greedy, lse, boundary};
}

at::Tensor sample_rows_cpu(const at::Tensor& logits_in, double temperature, const at::Tensor& seed,
                           const at::Tensor& step, const at::Tensor& node,
                           const std::optional<at::Tensor>& row_temperature, const std::optional<at::Tensor>& boundary) {
  check_logits(logits_in, "sample_rows");
  TORCH_CHECK(temperature >= 0.0, "sample_rows: temperature must be >= 0");
  const at::Tensor logits = logits_in.contiguous();
  const int64_t R = logits.size(0), V = logits.size(1);
  const at::Tensor sd = vec(seed, at::kLong, R, "seed", "sample_rows"), st = vec(step, at::kLong, R, "step", "sample_rows"),
                   nd = vec(node, at::kLong, R, "node", "sample_rows");
  const at::Tensor rt = row_temperature.has_value()
                            ? vec(*row_temperature, at::kFloat, R, "row_temperature", "sample_rows") : at::Tensor();
  const at::Tensor bd = boundary.has_value() ? vec(*boundary, at::kLong, R, "boundary", "sample_rows") : at::Tensor();
  at::Tensor out = at::empty({R}, logits.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "sample_rows", [&] {
    const scalar_t* x0 = logits.data_ptr<scalar_t>();
    at::parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const scalar_t* x = x0 + r * V;
        const float t = rt.defined() ? rt.data_ptr<float>()[r] : static_cast<float>(temperature);
        const bool greedy = !(t > 0.f);
        const int64_t bnd = bd.defined() ? bd.data_ptr<int64_t>()[r] : kKeepAll;
        float best = -INFINITY;
        int64_t bidx = INT64_MAX;
        ddtree::gumbel_scan(V, sd.data_ptr<int64_t>()[r], st.data_ptr<int64_t>()[r], nd.data_ptr<int64_t>()[r], greedy,
                            [&](int64_t j) {
                              const float v = static_cast<float>(x[j]);
                              if (greedy) return v;
                              return ddtree::law_key(v, j) >= bnd ? v / t : -INFINITY;
                            },
                            best, bidx, 0, 1);
        out.data_ptr<int64_t>()[r] = bidx;
      }
    });
  });
  return out;
}

template <typename T>
void drawn_request(const T* logits, int64_t V, int64_t n, int64_t L, int64_t K, float temperature, const int64_t* greedy,
                   const float* lse, const int64_t* boundary, const int64_t* tok, const int32_t* par, int32_t num_nodes,
                   const int32_t* depths, const int64_t* nt, const int64_t* ns, const int64_t* cand_b, const float* q_b,
                   int64_t seed, int64_t step, int64_t* out, std::vector<uint8_t>& is_cand) {
  const int64_t nn = std::min<int64_t>(std::max<int64_t>(num_nodes, 1), n);
  const float t = std::max(temperature, ddtree::kMinTemperature);
  std::vector<double> pc(K), q(K);
  std::vector<int64_t> kids(n);
  int64_t v = 0;
  for (int64_t hop = 0; hop < n; ++hop) {
    const T* x = logits + v * V;
    const int64_t bnd = boundary[v], g = greedy[v];
    const float z0 = lse[v];
    const int64_t d = std::min<int64_t>(std::max<int64_t>(depths[v], 0), L - 1);
    const int64_t* cand = cand_b + d * K;
    const bool point = bnd == kKeepNone;
    double total = 0.0;
    for (int64_t e = 0; e < K; ++e) {
      const int64_t c = cand[e];
      double p = 0.0;
      if (point) {
        p = c == g ? 1.0 : 0.0;
      } else if (c >= 0 && c < V) {
        const float xv = static_cast<float>(x[c]);
        if (ddtree::law_key(xv, c) >= bnd) p = std::exp(static_cast<double>(ddtree::sub_rn(ddtree::div_rn(xv, t), z0)));
      }
      pc[e] = p;
      q[e] = static_cast<double>(q_b[d * K + e]);
      total += p;
    }
    const double rest = std::fmax(1.0 - total, 0.0);
    int m = 0;
    for (int64_t j = v + 1; j < nn; ++j)
      if (par[j] == v) kids[m++] = tok[j];
    int64_t token = ddtree::test_children(kids.data(), m, cand, static_cast<int>(K), pc.data(), rest, q.data(), seed,
                                          step, v);
    if (token < 0 && point) token = g;
    if (token < 0) {  // the bonus: the row with the candidates at their residual values
      double left = rest;
      for (int64_t e = 0; e < K; ++e) left += pc[e];
      const bool residual = left > 0.0;
      if (residual)
        for (int64_t e = 0; e < K; ++e)
          if (cand[e] >= 0 && cand[e] < V) is_cand[cand[e]] = 1;
      float best = -INFINITY;
      int64_t bidx = INT64_MAX;
      const int64_t stream = ddtree::kBonusStream + v;
      ddtree::gumbel_scan(V, seed, step, stream, false, [&](int64_t j) {
        if (residual && is_cand[j]) return -INFINITY;
        const float xv = static_cast<float>(x[j]);
        return ddtree::law_key(xv, j) >= bnd ? ddtree::div_rn(xv, t) : -INFINITY;
      }, best, bidx, 0, 1);
      if (residual)
        for (int64_t e = 0; e < K; ++e) {
          const int64_t c = cand[e];
          if (c < 0 || c >= V) continue;
          is_cand[c] = 0;
          const float s = ddtree::residual_score(pc[e], z0, c, seed, step, stream);
          if (ddtree::beats(s, c, best, bidx)) { best = s; bidx = c; }
        }
      token = bidx;
    }
    out[v] = token;
    int64_t next = -1, prev = v, c = nt[v];
    for (int64_t guard = 0; c != -1 && guard < n; ++guard) {
      if (!(prev < c && c < nn)) break;  // a malformed link: the commit walk flags it
      if (tok[c] == token) { next = c; break; }
      prev = c;
      c = ns[c];
    }
    if (next < 0) return;
    v = next;
  }
}

at::Tensor drawn_targets_cpu(const at::Tensor& logits_in, const at::Tensor& temperatures, const at::Tensor& greedy_in,
                             const at::Tensor& lse_in, const at::Tensor& boundary_in, const at::Tensor& tokens_in,
                             const at::Tensor& parents_in, const at::Tensor& num_nodes_in, const at::Tensor& depths_in,
                             const at::Tensor& next_token_in, const at::Tensor& next_sibling_in,
                             const at::Tensor& cand_in, const at::Tensor& q_in, const at::Tensor& sampled_in,
                             const at::Tensor& seed_in, const at::Tensor& step_in) {
  const char* op = "drawn_targets";
  check_logits(logits_in, op);
  TORCH_CHECK(tokens_in.dim() == 2 && cand_in.dim() == 3, op, ": tokens must be [B, n], cand [B, L, K]");
  const int64_t B = tokens_in.size(0), n = tokens_in.size(1), V = logits_in.size(1), L = cand_in.size(1),
                K = cand_in.size(2);
  TORCH_CHECK(logits_in.size(0) == B * n, op, ": logits must be [B * n, V]");
  TORCH_CHECK(cand_in.size(0) == B && q_in.sizes() == cand_in.sizes() && L >= 1 && K >= 1, op,
              ": cand and q must be [B, L, K] with L, K >= 1");
  const at::Tensor logits = logits_in.contiguous(), tokens = tokens_in.to(at::kLong).contiguous(),
                   parents = parents_in.to(at::kInt).contiguous(), depths = depths_in.to(at::kInt).contiguous(),
                   nt = next_token_in.to(at::kLong).contiguous(), ns = next_sibling_in.to(at::kLong).contiguous(),
                   cand = cand_in.to(at::kLong).contiguous(), q = q_in.to(at::kFloat).contiguous();
  TORCH_CHECK(parents.sizes() == tokens.sizes() && depths.sizes() == tokens.sizes() && nt.sizes() == tokens.sizes() &&
                  ns.sizes() == tokens.sizes(),
              op, ": parents, depths and links must be [B, n] like tokens");
  const at::Tensor nn = vec(num_nodes_in, at::kInt, B, "num_nodes", op), tt = vec(temperatures, at::kFloat, B, "temperatures", op),
                   sampled = vec(sampled_in, at::kBool, B, "sampled", op), seed = vec(seed_in, at::kLong, B, "seed", op),
                   step = vec(step_in, at::kLong, B, "step", op), greedy = vec(greedy_in, at::kLong, B * n, "greedy", op),
                   lse = vec(lse_in, at::kFloat, B * n, "lse", op), boundary = vec(boundary_in, at::kLong, B * n, "boundary", op);
  at::Tensor out = greedy.view({B, n}).clone();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "drawn_targets", [&] {
    const scalar_t* x = logits.data_ptr<scalar_t>();
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      std::vector<uint8_t> is_cand(V, 0);
      for (int64_t b = b0; b < b1; ++b) {
        if (!sampled.data_ptr<bool>()[b]) continue;
        const int64_t o = b * n;
        drawn_request(x + o * V, V, n, L, K, tt.data_ptr<float>()[b], greedy.data_ptr<int64_t>() + o,
                      lse.data_ptr<float>() + o, boundary.data_ptr<int64_t>() + o, tokens.data_ptr<int64_t>() + o,
                      parents.data_ptr<int32_t>() + o, nn.data_ptr<int32_t>()[b], depths.data_ptr<int32_t>() + o,
                      nt.data_ptr<int64_t>() + o, ns.data_ptr<int64_t>() + o, cand.data_ptr<int64_t>() + b * L * K,
                      q.data_ptr<float>() + b * L * K, seed.data_ptr<int64_t>()[b], step.data_ptr<int64_t>()[b],
                      out.data_ptr<int64_t>() + o, is_cand);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) {
  m.impl("law_rows", &law_rows_cpu);
  m.impl("sample_rows", &sample_rows_cpu);
  m.impl("drawn_targets", &drawn_targets_cpu);
}
