// Native CPU DDTree builder: docs/DESIGN.md §3 bit for bit, batched over requests (OpenMP via at::parallel_for).
//
// The heap holds (path log-weight, parent, depth, rank); its order is weight descending, then the ranks
// tuple (parent's ranks ++ rank) lexicographically with a prefix first — exactly Python's comparison of
// the reference's (-logw, ranks) heap items. Weights are doubles combined in the reference's order:
// sibling = (logw - lp[d-1][r]) + lp[d-1][r+1], child = logw + lp[d][0]. Compiled without fast-math.
// Chain-anchored (chain_pops > 0): the first min(chain_pops, budget, L) pops take the rank-0 child of the
// previous chain node wherever it sits in the heap (removed there, the heap restored around it), then the
// pops are best-first again; the heap's shape never changes which entry is the maximum. With `anchored`
// (bool [B]) only the requests it marks are anchored, the others get the paper's tree.
// One builder serves both inputs (kernels/tree_rows.h): a DFlash drafter's top-k, one row per depth, and a
// selector's lattice (docs/DESIGN.md §3.10), K rows per depth, a node's children read from its own row; the
// lattice is a template flag, so the top-k instantiation does none of the lattice's work.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "tree_constants.h"
#include "tree_rows.h"

namespace {

using ddtree::kFlagHeapExhausted;
using ddtree::kFlagNonfiniteInput;
using ddtree::kFlagUnsortedInput;

// Branch-free scan (vectorises): NaN or +inf anywhere (an exponent of all ones, except -inf, a masked token).
inline bool no_nan_or_posinf(const float* x, int64_t count) {
  uint32_t bad = 0;
  for (int64_t j = 0; j < count; ++j) {
    uint32_t bits;
    std::memcpy(&bits, x + j, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u && bits != 0xff800000u);
  }
  return bad == 0;
}

// Every row of [rows, k] non-increasing (NaN compares false, and is flagged by the scan above).
inline bool rows_sorted(const float* x, int64_t rows, int64_t k) {
  uint32_t bad = 0;
  for (int64_t d = 0; d < rows; ++d) {
    for (int64_t c = 1; c < k; ++c) bad |= static_cast<uint32_t>(x[d * k + c] > x[d * k + c - 1]);
  }
  return bad == 0;
}

// Every lattice order entry a candidate index in [0, K).
inline bool orders_in_range(const int32_t* order, int64_t count, int64_t K) {
  uint32_t bad = 0;
  for (int64_t j = 0; j < count; ++j) bad |= static_cast<uint32_t>(!ddtree::candidate_in_range(order[j], K));
  return bad == 0;
}

struct Entry {
  double logw;
  int32_t parent;
  int32_t depth;  // depth of the node this entry would emit (1-based)
  int32_t rank;
};

// Per-request scratch, reused across requests handled by one thread.
struct Scratch {
  std::vector<Entry> heap;
  std::vector<int32_t> paths;  // [n][L] ranks tuple of each emitted node
  std::vector<int64_t> last_child;
};

// The lattice's scratch adds each emitted node's row index (its candidate index): a type of its own, so the
// top-k instantiation's scratch, and with it its compiled loop, stays what it was before the lattice.
struct LatticeScratch : Scratch {
  std::vector<int32_t> row;  // [n]
};

template <bool kLattice>
class Builder {
 public:
  Builder(int64_t L, int64_t k, int64_t budget, int64_t chain_pops)
      : L_(L), k_(k), budget_(budget), n_(budget + 1), forced_(std::min({chain_pops, budget, L})) {}

  // One request's rows: lp [L][R][k] sorted descending; ids: the top-k's tokens [L][k] (R = 1) or the lattice's
  // candidate ids [L][K]; order [L][K][K]: the candidate index of each rank of a lattice row (null for the top-k).
  using Work = std::conditional_t<kLattice, LatticeScratch, Scratch>;
  void build(const float* lp, const int64_t* ids, const int32_t* order, int64_t root_token, int64_t seq_len,
             int64_t b, bool anchor, Work& s, int32_t* num_nodes, int64_t* tokens, int32_t* parents, int32_t* depths,
             int32_t* ranks, double* logw, int64_t* positions, int64_t* retrive_index, int64_t* next_token,
             int64_t* next_sibling, bool* mask, int32_t* bits, int32_t* flags) const {
    const int64_t n = n_, words = (n + 31) / 32;
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = 0; parents[i] = -1; depths[i] = 0; ranks[i] = -1;
      logw[i] = -INFINITY; positions[i] = seq_len; retrive_index[i] = b * n + i;
      next_token[i] = -1; next_sibling[i] = -1;
    }
    std::fill(mask, mask + n * n, false);
    std::fill(bits, bits + n * words, 0);
    for (int64_t i = 0; i < n; ++i) {
      mask[i * n + i] = true;
      bits[i * words + i / 32] |= static_cast<int32_t>(1u << (i % 32));
    }
    tokens[0] = root_token;
    logw[0] = 0.0;
    *num_nodes = 1;
    *flags = 0;
    const int64_t L = L_, k = k_, R = kLattice ? k_ : 1;  // lattice: K rows per depth
    // NaN / +inf, or a row not sorted descending (or, in a lattice, an order entry that is no candidate): the
    // request is root-only and flagged. -inf entries are masked tokens, never emitted (the pops stop when
    // only -inf candidates are left).
    *flags = (no_nan_or_posinf(lp, L * R * k) ? 0 : kFlagNonfiniteInput) |
             (rows_sorted(lp, L * R, k) ? 0 : kFlagUnsortedInput);
    if constexpr (kLattice) {
      if (!orders_in_range(order, L * R * k, k)) *flags |= kFlagUnsortedInput;
    }
    if (*flags) return;

    // only the rows of emitted nodes are ever read, and each is written when its node is emitted; a node's
    // depth is at most min(L, budget) (each ancestor is a pop), so that is the row stride, not L
    const int64_t P = std::max<int64_t>(1, std::min(L, budget_));
    s.paths.resize(static_cast<size_t>(n * P));
    s.heap.clear();
    const int32_t* paths = s.paths.data();
    // a before b (a has priority): higher weight, else lexicographically smaller ranks tuple.
    auto higher = [&](const Entry& a, const Entry& b) {
      if (a.logw != b.logw) return a.logw > b.logw;
      const int32_t* pa = paths + static_cast<int64_t>(a.parent) * P;
      const int32_t* pb = paths + static_cast<int64_t>(b.parent) * P;
      const int32_t la = a.depth, lb = b.depth;
      for (int32_t j = 0; j < std::min(la, lb); ++j) {
        const int32_t ra = j == la - 1 ? a.rank : pa[j];
        const int32_t rb = j == lb - 1 ? b.rank : pb[j];
        if (ra != rb) return ra < rb;
      }
      return la < lb;
    };
    // Binary max-heap by `higher`. A pop's sibling replaces the popped top in place (one sift-down instead
    // of a pop plus a push); the order of pops is the order of keys, so this matches heapq exactly.
    std::vector<Entry>& h = s.heap;
    auto sift_down = [&](size_t at) {
      const Entry e = h[at];
      const size_t size = h.size();
      for (size_t c = 2 * at + 1; c < size; at = c, c = 2 * at + 1) {
        if (c + 1 < size && higher(h[c + 1], h[c])) ++c;
        if (!higher(h[c], e)) break;
        h[at] = h[c];
      }
      h[at] = e;
    };
    auto sift_up = [&](size_t at) {
      const Entry e = h[at];
      for (size_t up = (at - 1) / 2; at > 0 && higher(e, h[up]); at = up, up = (at - 1) / 2) h[at] = h[up];
      h[at] = e;
    };
    auto push = [&](const Entry& e) {
      h.push_back(e);
      sift_up(h.size() - 1);
    };
    // Replace the entry at `at` (the popped one) by its sibling, or remove it, and restore the heap there.
    auto replace_at = [&](size_t at, bool has_sib, const Entry& sib) {
      if (has_sib) {
        h[at] = sib;
      } else {
        h[at] = h.back();
        h.pop_back();
        if (at == h.size()) return;
      }
      sift_up(at);
      sift_down(at);
    };

    int64_t count = 0;
    if (L > 0 && k > 0 && budget_ > 0) h.push_back({static_cast<double>(lp[0]), 0, 1, 0});
    int32_t* mutable_paths = s.paths.data();
    if constexpr (kLattice) {
      s.row.resize(static_cast<size_t>(n));
      s.row[0] = 0;  // the root's children: slot 0's row 0 (every row there follows the anchor)
    }
    int64_t forced = anchor ? forced_ : 0;
    while (!h.empty() && count < budget_) {
      size_t at = 0;
      if (count < forced) {  // the chain node of depth count + 1: rank-0 child of chain node `count`
        while (!(h[at].parent == count && h[at].rank == 0 && h[at].depth == count + 1)) ++at;
        if (h[at].logw == -INFINITY) { forced = count; at = 0; }  // a fully masked depth ends the chain
      }
      if (h[at].logw == -INFINITY) break;  // only masked candidates are left
      const Entry e = h[at];
      const int64_t i = ++count;
      const int64_t d = e.depth, r = e.rank;
      int64_t parent_row = 0, own_row = 0;  // row indices: the parent's, and node i's (where its children are read)
      if constexpr (kLattice) parent_row = s.row[e.parent];
      const int64_t row = ddtree::children_row(d - 1, parent_row, R, k);  // the parent's row
      if constexpr (kLattice) {
        own_row = order[row + r];
        s.row[i] = static_cast<int32_t>(own_row);
        tokens[i] = ddtree::lattice_token(ids, d, own_row, k);
      } else {
        tokens[i] = ids[row + r];
      }
      parents[i] = e.parent;
      depths[i] = static_cast<int32_t>(d);
      ranks[i] = static_cast<int32_t>(r);
      logw[i] = e.logw;
      positions[i] = seq_len + d;
      // ranks tuple of node i = parent's tuple ++ r
      std::copy(mutable_paths + static_cast<int64_t>(e.parent) * P,
                mutable_paths + static_cast<int64_t>(e.parent) * P + (d - 1), mutable_paths + i * P);
      mutable_paths[i * P + d - 1] = static_cast<int32_t>(r);
      // ancestor mask: parent's row plus self (parent < i, so its row is final)
      std::copy(mask + e.parent * n, mask + e.parent * n + i, mask + i * n);
      for (int64_t w = 0; w < words; ++w) bits[i * words + w] = bits[e.parent * words + w];
      bits[i * words + i / 32] |= static_cast<int32_t>(1u << (i % 32));
      // linked lists: the first child popped is the lowest index; later siblings chain in pop order
      if (next_token[e.parent] == -1) next_token[e.parent] = i;
      else next_sibling[s.last_child[e.parent]] = i;
      s.last_child[i] = -1;
      s.last_child[e.parent] = i;

      const bool has_sib = r + 1 < k;
      const double sib = has_sib ? ddtree::sibling_key(e.logw, static_cast<double>(lp[row + r]),
                                                       static_cast<double>(lp[row + r + 1]))
                                 : 0.0;
      replace_at(at, has_sib, {sib, e.parent, static_cast<int32_t>(d), static_cast<int32_t>(r + 1)});
      if (d < L) {
        const double first = static_cast<double>(lp[ddtree::children_row(d, own_row, R, k)]);
        push({ddtree::child_key(e.logw, first), static_cast<int32_t>(i), static_cast<int32_t>(d + 1), 0});
      }
    }
    if (count < budget_) *flags |= kFlagHeapExhausted;
    *num_nodes = static_cast<int32_t>(count + 1);
  }

 private:
  int64_t L_, k_, budget_, n_, forced_;
};

using TreeTuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// B requests of rows (lp [B, L, R, k] flat, ids [B, L, k], order [B, L, R, k] or null) -> the TreeBatch fields;
// anchored (bool [B], optional): the requests chain_pops applies to (every request without it).
template <bool kLattice>
TreeTuple build_batch(const at::Tensor& lp, const at::Tensor& ids, const int32_t* order,
                      const at::Tensor& root_tokens_in, const at::Tensor& seq_lens_in, int64_t B, int64_t L, int64_t k,
                      int64_t budget, int64_t chain_pops, const std::optional<at::Tensor>& anchored_in) {
  TORCH_CHECK(budget >= 0, "budget must be >= 0");
  TORCH_CHECK(chain_pops >= 0, "chain_pops must be >= 0");
  const auto root_tokens = root_tokens_in.to(at::kLong).contiguous();
  const auto seq_lens = seq_lens_in.to(at::kLong).contiguous();
  const int64_t n = budget + 1, words = (n + 31) / 32, R = kLattice ? k : 1;
  TORCH_CHECK(root_tokens.numel() == B && seq_lens.numel() == B, "root_tokens and seq_lens must be [B]");
  const auto anchored = anchored_in.has_value() ? anchored_in->to(at::kBool).contiguous() : at::Tensor();
  TORCH_CHECK(!anchored.defined() || anchored.numel() == B, "anchored must be [B]");
  const bool* anchor_rows = anchored.defined() ? anchored.data_ptr<bool>() : nullptr;
  const auto i32 = lp.options().dtype(at::kInt), i64 = lp.options().dtype(at::kLong);
  auto num_nodes = at::empty({B}, i32);
  auto tokens = at::empty({B, n}, i64);
  auto parents = at::empty({B, n}, i32);
  auto depths = at::empty({B, n}, i32);
  auto ranks = at::empty({B, n}, i32);
  auto logw = at::empty({B, n}, lp.options().dtype(at::kDouble));
  auto positions = at::empty({B, n}, i64);
  auto retrive_index = at::empty({B, n}, i64);
  auto next_token = at::empty({B, n}, i64);
  auto next_sibling = at::empty({B, n}, i64);
  auto mask = at::empty({B, n, n}, lp.options().dtype(at::kBool));
  auto bits = at::empty({B, n, words}, i32);
  auto flags = at::empty({B}, i32);

  const Builder<kLattice> builder(L, k, budget, chain_pops);
  // Threads only for big batches (>= 64k pops per chunk, several ms of work): a build is ~0.1 us per
  // pop, while waking a pool costs tens of us idle and several ms on a loaded machine (measured).
  const int64_t grain = std::max<int64_t>(1, 65536 / (budget + 1));
  at::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
    typename Builder<kLattice>::Work s;
    s.last_child.assign(static_cast<size_t>(n), -1);
    for (int64_t b = begin; b < end; ++b) {
      builder.build(lp.data_ptr<float>() + b * L * R * k, ids.data_ptr<int64_t>() + b * L * k,
                    kLattice ? order + b * L * R * k : nullptr, root_tokens.data_ptr<int64_t>()[b],
                    seq_lens.data_ptr<int64_t>()[b], b, anchor_rows == nullptr || anchor_rows[b], s,
                    num_nodes.data_ptr<int32_t>() + b, tokens.data_ptr<int64_t>() + b * n,
                    parents.data_ptr<int32_t>() + b * n, depths.data_ptr<int32_t>() + b * n,
                    ranks.data_ptr<int32_t>() + b * n, logw.data_ptr<double>() + b * n,
                    positions.data_ptr<int64_t>() + b * n, retrive_index.data_ptr<int64_t>() + b * n,
                    next_token.data_ptr<int64_t>() + b * n, next_sibling.data_ptr<int64_t>() + b * n,
                    mask.data_ptr<bool>() + b * n * n, bits.data_ptr<int32_t>() + b * n * words,
                    flags.data_ptr<int32_t>() + b);
    }
  });
  return {num_nodes, tokens, parents, depths, ranks, logw, positions, retrive_index, next_token, next_sibling,
          mask, bits, flags};
}

TreeTuple build_tree_from_topk_cpu(const at::Tensor& lp_in, const at::Tensor& ids_in, const at::Tensor& root_tokens,
                                   const at::Tensor& seq_lens, int64_t budget, int64_t chain_pops,
                                   const std::optional<at::Tensor>& anchored) {
  TORCH_CHECK(lp_in.dim() == 3 && lp_in.scalar_type() == at::kFloat, "lp must be float32 [B, L, k]");
  TORCH_CHECK(ids_in.sizes() == lp_in.sizes() && ids_in.scalar_type() == at::kLong, "ids must be int64 [B, L, k]");
  const auto lp = lp_in.contiguous();
  const auto ids = ids_in.contiguous();
  return build_batch<false>(lp, ids, nullptr, root_tokens, seq_lens, lp.size(0), lp.size(1), lp.size(2), budget,
                            chain_pops, anchored);
}

TreeTuple build_tree_from_lattice_cpu(const at::Tensor& lp_in, const at::Tensor& order_in, const at::Tensor& cand_in,
                                      const at::Tensor& root_tokens, const at::Tensor& seq_lens, int64_t budget,
                                      int64_t chain_pops, const std::optional<at::Tensor>& anchored) {
  TORCH_CHECK(lp_in.dim() == 4 && lp_in.scalar_type() == at::kFloat && lp_in.size(2) == lp_in.size(3),
              "lp must be float32 [B, L, K, K]");
  TORCH_CHECK(order_in.sizes() == lp_in.sizes() && order_in.scalar_type() == at::kInt,
              "order must be int32 [B, L, K, K]");
  TORCH_CHECK(cand_in.dim() == 3 && cand_in.sizes() == lp_in.sizes().slice(0, 3) &&
                  cand_in.scalar_type() == at::kLong, "cand must be int64 [B, L, K]");
  const auto lp = lp_in.contiguous();
  const auto order = order_in.contiguous();
  const auto cand = cand_in.contiguous();
  return build_batch<true>(lp, cand, order.data_ptr<int32_t>(), root_tokens, seq_lens, lp.size(0), lp.size(1),
                           lp.size(2), budget, chain_pops, anchored);
}

}  // namespace

TORCH_LIBRARY_IMPL(sglang_ddtree, CPU, m) {
  m.impl("build_tree_from_topk", &build_tree_from_topk_cpu);
  m.impl("build_tree_from_lattice", &build_tree_from_lattice_cpu);
}
