// Best-first DDTree build (docs/DESIGN.md §3, bit for bit) for a whole batch in one launch.
//
// One block per request. Warp 0 runs the pops; the other warps only help to stage the input and to emit
// the outputs. The frontier is one slot per emitted node: a node's pending candidate is
// its lowest unpopped child rank, so slot p holds (key, rank, depth) of the next child of node p. Slot p
// lives in lane p % 32, register p / 32. Every pop is a warp argmax:
//   key = float64 path log-weight mapped to a monotone uint64 (0 = empty slot; -0.0 folded into +0.0 as
//         Python compares them equal, with one metadata bit restoring the sign for the output);
//   two __reduce_max_sync on the key halves + one ballot; when several lanes hold the maximum, the exact
//   tie-break runs: the candidates' ranks tuples (parent's ranks ++ rank) compared lexicographically by
//   walking both up the emitted tree to their common parent (two distinct frontier candidates are never
//   prefixes of one another, so the walk always ends at a rank difference).
// Weights are doubles added in the reference's order: sibling = (logw - lp[d-1][r]) + lp[d-1][r+1],
// child = logw + lp[d][0] (kernels/tree_rows.h: explicit _rn intrinsics, so no contraction can change them).
// Chain-anchored (chain_pops > 0): pop c < min(chain_pops, budget, L) takes slot c (the rank-0 child of chain
// node c, which nothing has popped yet) instead of the argmax; everything after the choice is the same code.
// With `anchored` (bool [B], nullable) only the requests it marks are anchored, the others get the paper's tree.
// The lattice (LAT, docs/DESIGN.md §3.10; rows as kernels/tree_rows.h defines them): R = K rows per depth, a
// node's children read from the row of its own candidate index (s_row); the top-k instantiations (LAT false)
// do none of the lattice's work.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tree_kernels.cuh"
#include "tree_rows.h"

namespace ddtree {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr uint64_t kSign = 0x8000000000000000ull;
constexpr uint32_t kNegZero = 1u << 31;       // metadata bit: the weight is -0.0

__device__ __forceinline__ uint64_t order_key(double x) {
  const uint64_t b = static_cast<uint64_t>(__double_as_longlong(__dadd_rn(x, 0.0)));
  return (b & kSign) ? ~b : (b | kSign);
}

__device__ __forceinline__ double key_value(uint64_t k) {
  const uint64_t b = (k & kSign) ? (k & ~kSign) : ~k;
  return __longlong_as_double(static_cast<long long>(b));
}

__device__ __forceinline__ uint32_t neg_zero_bit(double x) {
  return static_cast<uint64_t>(__double_as_longlong(x)) == kSign ? kNegZero : 0u;
}

// Slot metadata: rank (10 bits) | depth (11 bits) << 10 | previous sibling's node index (10 bits) << 21 |
// -0.0 bit << 31. The slot's parent is its index (lane + 32 * register).
__device__ __forceinline__ uint32_t meta_rank(uint32_t m) { return m & 1023u; }
__device__ __forceinline__ uint32_t meta_depth(uint32_t m) { return (m >> 10) & 2047u; }
__device__ __forceinline__ uint32_t meta_prev(uint32_t m) { return (m >> 21) & 1023u; }

// Ranks-tuple order of two distinct frontier candidates (parent, meta): true when a comes first.
// s_pr[node] holds parent | rank << 16 of every emitted node.
__device__ __noinline__ bool tuple_less(uint32_t pa, uint32_t ma, uint32_t pb, uint32_t mb, const uint32_t* s_pr) {
  uint32_t ra = meta_rank(ma), da = meta_depth(ma);
  uint32_t rb = meta_rank(mb), db = meta_depth(mb);
  while (da > db) { const uint32_t pr = s_pr[pa]; ra = pr >> 16; pa = pr & 0xffffu; --da; }
  while (db > da) { const uint32_t pr = s_pr[pb]; rb = pr >> 16; pb = pr & 0xffffu; --db; }
  while (pa != pb) {
    const uint32_t qa = s_pr[pa], qb = s_pr[pb];
    ra = qa >> 16; pa = qa & 0xffffu;
    rb = qb >> 16; pb = qb & 0xffffu;
  }
  return ra < rb;
}

// Shared-memory layout of one request (all offsets in bytes, 8-byte aligned sections). rows = L * R rows of
// kc columns; the lattice adds each row's order (int16) and each node's row index; the top-k's layout is
// unchanged (its sections are empty).
struct Layout {
  int n, W, kc;
  int64_t rows;
  bool lp_in_smem;
  size_t off_logw, off_bits, off_pr, off_depth, off_links, off_lp, off_order, off_row, off_misc, total;

  __host__ __device__ Layout(int n_, int64_t rows_, int kc_, bool lp_smem, bool lattice) : n(n_), W((n_ + 31) / 32),
      kc(kc_), rows(rows_), lp_in_smem(lp_smem) {
    auto up8 = [](size_t x) { return (x + 7) & ~static_cast<size_t>(7); };
    const size_t table = lp_in_smem ? static_cast<size_t>(rows) * kc : 0;
    off_logw = 0;
    off_bits = up8(off_logw + sizeof(double) * n);
    off_pr = up8(off_bits + sizeof(uint32_t) * n * W);
    off_depth = up8(off_pr + sizeof(uint32_t) * n);
    off_links = up8(off_depth + sizeof(int32_t) * n);
    off_lp = up8(off_links + sizeof(int16_t) * 3 * n);
    off_order = up8(off_lp + sizeof(double) * table);
    off_row = up8(off_order + (lattice ? sizeof(int16_t) * table : 0));
    off_misc = up8(off_row + (lattice ? sizeof(int16_t) * n : 0));
    total = off_misc + 16;
  }
};

// ids: the top-k's tokens [B, L, k], or the lattice's candidate ids [B, L, K]; order: the lattice's [B, L, K, K]
// (null for the top-k). R = K rows per depth for the lattice, 1 for the top-k.
template <int S, bool LPS, bool LAT>
__global__ void __launch_bounds__(256) tree_build_kernel(const float* __restrict__ lp,
                                                         const int32_t* __restrict__ order,
                                                         const int64_t* __restrict__ ids,
                                                         const int64_t* __restrict__ root_tokens,
                                                         const int64_t* __restrict__ seq_lens, int L, int k,
                                                         int budget, int kc, int forced,
                                                         const bool* __restrict__ anchored, TreeOutputs out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int n = budget + 1;
  const int R = LAT ? k : 1;
  const Layout lay(n, static_cast<int64_t>(L) * R, kc, LPS, LAT);
  const int W = lay.W;
  double* s_logw = reinterpret_cast<double*>(smem + lay.off_logw);
  uint32_t* s_bits = reinterpret_cast<uint32_t*>(smem + lay.off_bits);
  uint32_t* s_pr = reinterpret_cast<uint32_t*>(smem + lay.off_pr);
  int32_t* s_depth = reinterpret_cast<int32_t*>(smem + lay.off_depth);
  int16_t* s_next_tok = reinterpret_cast<int16_t*>(smem + lay.off_links);
  int16_t* s_next_sib = s_next_tok + n;
  int16_t* s_prev = s_next_sib + n;   // previous sibling of each node (rank > 0)
  double* s_lp = reinterpret_cast<double*>(smem + lay.off_lp);
  int16_t* s_order = reinterpret_cast<int16_t*>(smem + lay.off_order);  // LAT && LPS: [L * R][kc]
  int16_t* s_row = reinterpret_cast<int16_t*>(smem + lay.off_row);      // LAT: each node's row index
  int* s_count = reinterpret_cast<int*>(smem + lay.off_misc);

  const int b = blockIdx.x;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t Lk = static_cast<int64_t>(L) * k, LRk = Lk * R;
  const float* lp_b = lp + b * LRk;
  const int32_t* order_b = LAT ? order + b * LRk : nullptr;

  // ---- stage: lp table (only the columns a tree of this budget can reach), NaN / +inf, row order, identity
  // rows. -inf entries are masked tokens: their candidates get key 0 (never in the frontier), never emitted.
  // A lattice order entry that is no candidate index makes the rows unusable: flagged like a rising row.
  bool bad = false, unsorted = false;
  for (int64_t e = tid; e < LRk; e += nthreads) {
    const float v = lp_b[e];
    bad |= isnan(v) || v == INFINITY;
    const int64_t q = e / k, c = e - q * k;  // row q = depth * R + row index, column c
    unsorted |= c > 0 && v > lp_b[e - 1];
    if (LPS && c < kc) s_lp[q * kc + c] = static_cast<double>(v);
    if (LAT) {
      const int32_t o = order_b[e];
      unsorted |= !candidate_in_range(o, k);
      if (LPS && c < kc) s_order[q * kc + c] = static_cast<int16_t>(o);
    }
  }
  for (int e = tid; e < n * W; e += nthreads) {
    const int i = e / W, w = e - i * W;
    s_bits[e] = (w == (i >> 5)) ? (1u << (i & 31)) : 0u;
  }
  for (int i = tid; i < n; i += nthreads) { s_next_tok[i] = -1; s_next_sib[i] = -1; }
  if (tid == 0) {
    s_pr[0] = 0xffffu; s_depth[0] = 0; s_logw[0] = 0.0; *s_count = 0;
    if (LAT) s_row[0] = 0;  // the root's children: slot 0's row 0 (every row there follows the anchor)
  }
  const bool nonfinite = __syncthreads_or(bad);
  const bool out_of_order = __syncthreads_or(unsorted);
  const bool refused = nonfinite || out_of_order;

  // ---- pops (warp 0)
  const int lps = LPS ? kc : k;
  auto lp_at = [&](int64_t off) -> double { return LPS ? s_lp[off] : static_cast<double>(__ldg(lp_b + off)); };
  auto order_at = [&](int64_t off) -> int { return LPS ? s_order[off] : __ldg(order_b + off); };
  if (warp == 0 && !refused && budget > 0 && L > 0 && k > 0) {
    uint64_t key[S];
    uint32_t meta[S];
#pragma unroll
    for (int j = 0; j < S; ++j) { key[j] = 0; meta[j] = 0; }
    if (lane == 0) {
      const double w0 = lp_at(0);
      key[0] = w0 == -INFINITY ? 0 : order_key(w0);
      meta[0] = (1u << 10) | neg_zero_bit(w0);
    }
    uint64_t bkey = 0;
    uint32_t bmeta = 0, bslot = 0;
    auto rescan = [&]() {
      bkey = 0; bmeta = 0; bslot = 0;
#pragma unroll
      for (int j = 0; j < S; ++j) {
        const uint32_t slot = static_cast<uint32_t>(j * 32 + lane);
        if (key[j] > bkey || (key[j] != 0 && key[j] == bkey && tuple_less(slot, meta[j], bslot, bmeta, s_pr))) {
          bkey = key[j]; bmeta = meta[j]; bslot = slot;
        }
      }
    };
    rescan();
    int count = 0;
    int chain = anchored == nullptr || anchored[b] ? forced : 0;
    while (count < budget) {
      uint32_t mhi = 0, mlo = 0, wm = 0, p = 0;
      if (count < chain) {  // warp-uniform: the chain node of depth count + 1 sits in slot `count`
        uint64_t fk = 0;
        uint32_t fm = 0;
#pragma unroll
        for (int j = 0; j < S; ++j) {
          fk = j == (count >> 5) ? key[j] : fk;
          fm = j == (count >> 5) ? meta[j] : fm;
        }
        fk = __shfl_sync(kFull, fk, count & 31);
        wm = __shfl_sync(kFull, fm, count & 31);
        mhi = static_cast<uint32_t>(fk >> 32); mlo = static_cast<uint32_t>(fk);
        p = static_cast<uint32_t>(count);
        if (fk == 0) chain = count;  // a fully masked depth ends the chain; best-first goes on
      }
      if (count >= chain) {
        const uint32_t hi = static_cast<uint32_t>(bkey >> 32), lo = static_cast<uint32_t>(bkey);
        mhi = __reduce_max_sync(kFull, hi);
        mlo = __reduce_max_sync(kFull, hi == mhi ? lo : 0u);
        if ((mhi | mlo) == 0u) break;  // heap exhausted
        const uint32_t tied = __ballot_sync(kFull, hi == mhi && lo == mlo);
        const int src = __ffs(tied) - 1;
        wm = __shfl_sync(kFull, bmeta, src); p = __shfl_sync(kFull, bslot, src);
        if (tied & (tied - 1u)) {  // equal weights in several lanes: ranks-tuple order decides
          uint32_t rest = tied & (tied - 1u);
          while (rest) {
            const int o = __ffs(rest) - 1;
            rest &= rest - 1u;
            const uint32_t om = __shfl_sync(kFull, bmeta, o), op = __shfl_sync(kFull, bslot, o);
            if (tuple_less(op, om, p, wm, s_pr)) { wm = om; p = op; }
          }
        }
      }
      const uint32_t r = meta_rank(wm), d = meta_depth(wm);
      const double logw = (wm & kNegZero) ? -0.0 : key_value((static_cast<uint64_t>(mhi) << 32) | mlo);
      const int i = ++count;
      const int64_t row = children_row(d - 1, LAT ? s_row[p] : 0, R, lps);  // the parent's row
      const int own = LAT ? order_at(row + r) : 0;                      // node i's row index (lattice)
      const bool has_sib = static_cast<int>(r) + 1 < k;
      const bool has_child = static_cast<int>(d) < L;
      const double a = lp_at(row + r);
      const double bn = has_sib ? lp_at(row + r + 1) : 0.0;
      const double c = has_child ? lp_at(children_row(d, own, R, lps)) : 0.0;
      const double sib = sibling_key(logw, a, bn);
      const double child = child_key(logw, c);
      const uint64_t sib_key = has_sib && sib != -INFINITY ? order_key(sib) : 0;
      const uint32_t sib_meta = has_sib ? ((r + 1) | (d << 10) | (static_cast<uint32_t>(i) << 21) | neg_zero_bit(sib)) : 0u;
      const uint64_t child_key = has_child && child != -INFINITY ? order_key(child) : 0;
      const uint32_t child_meta = has_child ? (((d + 1) << 10) | neg_zero_bit(child)) : 0u;

      if (lane == 0) {
        s_pr[i] = p | (r << 16);
        s_depth[i] = static_cast<int32_t>(d);
        s_logw[i] = logw;
        s_prev[i] = static_cast<int16_t>(r ? static_cast<int>(meta_prev(wm)) : -1);
        if (LAT) s_row[i] = static_cast<int16_t>(own);
      }
      if (lane < W) {
        s_bits[i * W + lane] = s_bits[p * W + lane] | (lane == (i >> 5) ? (1u << (i & 31)) : 0u);
      }
      __syncwarp();

      // Slot p <- its next sibling, slot i <- its first child (predicated, no divergent branches).
      const bool own_p = lane == static_cast<int>(p & 31), own_i = lane == (i & 31);
      const int j_p = static_cast<int>(p >> 5), j_i = i >> 5;
#pragma unroll
      for (int j = 0; j < S; ++j) {
        const bool set_p = own_p && j == j_p, set_i = own_i && j == j_i;
        key[j] = set_p ? sib_key : (set_i ? child_key : key[j]);
        meta[j] = set_p ? sib_meta : (set_i ? child_meta : meta[j]);
      }
      if (own_p) {
        rescan();
      } else if (own_i && child_key != 0) {  // a masked (-inf) child never enters the frontier
        const uint32_t slot = static_cast<uint32_t>(i);
        if (child_key > bkey || (child_key == bkey && tuple_less(slot, child_meta, bslot, bmeta, s_pr))) {
          bkey = child_key; bmeta = child_meta; bslot = slot;
        }
      }
    }
    if (lane == 0) *s_count = count;
  }
  __syncthreads();

  // Links from (parent, rank, previous sibling): every target is written once.
  const int count = *s_count;
  for (int i = 1 + tid; i <= count; i += nthreads) {
    const uint32_t pr = s_pr[i];
    if ((pr >> 16) == 0) s_next_tok[pr & 0xffffu] = static_cast<int16_t>(i);
    else s_next_sib[s_prev[i]] = static_cast<int16_t>(i);
  }
  __syncthreads();

  // ---- emit every TreeBatch field
  const int64_t nn = n;
  const int64_t seq = seq_lens[b];
  const int64_t* ids_b = ids + b * Lk;
  for (int i = tid; i < n; i += nthreads) {
    const int64_t o = b * nn + i;
    const bool real = i >= 1 && i <= count;
    const uint32_t pr = s_pr[real ? i : 0];
    const int d = real ? s_depth[i] : 0;
    const int r = static_cast<int>(pr >> 16);
    const int col = LAT ? (real ? static_cast<int>(s_row[i]) : 0) : r;  // lattice: candidate index; top-k: rank
    out.tokens[o] = i == 0 ? root_tokens[b] : (real ? ids_b[static_cast<int64_t>(d - 1) * k + col] : 0);
    out.parents[o] = real ? static_cast<int32_t>(pr & 0xffffu) : -1;
    out.depths[o] = d;
    out.ranks[o] = real ? r : -1;
    out.logw[o] = i == 0 ? 0.0 : (real ? s_logw[i] : -INFINITY);
    out.positions[o] = seq + d;
    out.retrive_index[o] = o;
    out.retrive_next_token[o] = s_next_tok[i];
    out.retrive_next_sibling[o] = s_next_sib[i];
  }
  if (tid == 0) {
    out.num_nodes[b] = count + 1;
    out.flags[b] = refused ? ((nonfinite ? kFlagNonfiniteInput : 0) | (out_of_order ? kFlagUnsortedInput : 0))
                           : (count < budget ? kFlagHeapExhausted : 0);
  }
  int32_t* bits_b = out.mask_bits + b * nn * W;
  for (int e = tid; e < n * W; e += nthreads) bits_b[e] = static_cast<int32_t>(s_bits[e]);

  // Bool mask [n, n]: 16-byte stores over the request's block, byte stores for the unaligned ends.
  unsigned char* mb = reinterpret_cast<unsigned char*>(out.tree_mask) + b * nn * nn;
  const int64_t total = nn * nn;
  auto bit_at = [&](int i, int j) -> uint32_t { return (s_bits[i * W + (j >> 5)] >> (j & 31)) & 1u; };
  int64_t head = static_cast<int64_t>((16 - (reinterpret_cast<uintptr_t>(mb) & 15)) & 15);
  if (head > total) head = total;
  const int64_t chunks = (total - head) / 16;
  for (int64_t e = tid; e < head; e += nthreads) mb[e] = static_cast<unsigned char>(bit_at(e / n, e % n));
  for (int64_t c = tid; c < chunks; c += nthreads) {
    const int64_t e0 = head + c * 16;
    int i = static_cast<int>(e0 / n), j = static_cast<int>(e0 - static_cast<int64_t>(i) * n);
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      w[t >> 2] |= bit_at(i, j) << (8 * (t & 3));
      if (++j == n) { j = 0; ++i; }
    }
    *reinterpret_cast<uint4*>(mb + e0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
  for (int64_t e = head + chunks * 16 + tid; e < total; e += nthreads) {
    mb[e] = static_cast<unsigned char>(bit_at(static_cast<int>(e / n), static_cast<int>(e % n)));
  }
}

template <int S, bool LAT>
cudaError_t launch_s(const float* lp, const int32_t* order, const int64_t* ids, const int64_t* roots,
                     const int64_t* seqs, int B, int L, int k, int budget, int forced, const bool* anchored,
                     const TreeOutputs& out, cudaStream_t stream) {
  const int n = budget + 1;
  const int kc = k < n ? k : n;
  const int64_t rows = static_cast<int64_t>(L) * (LAT ? k : 1);
  constexpr size_t kSmemCap = 200 * 1024;
  const bool lp_in_smem = Layout(n, rows, kc, true, LAT).total <= kSmemCap;
  const size_t bytes = Layout(n, rows, kc, lp_in_smem, LAT).total;
  auto kern = lp_in_smem ? tree_build_kernel<S, true, LAT> : tree_build_kernel<S, false, LAT>;
  if (bytes > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  const int threads = n > 256 ? 256 : 128;
  kern<<<B, threads, bytes, stream>>>(lp, order, ids, roots, seqs, L, k, budget, kc, forced, anchored, out);
  return cudaGetLastError();
}

template <bool LAT>
cudaError_t launch_build(const float* lp, const int32_t* order, const int64_t* ids, const int64_t* root_tokens,
                         const int64_t* seq_lens, int B, int L, int k, int budget, int chain_pops,
                         const bool* anchored, const TreeOutputs& out, cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  if (budget < 0 || budget + 1 > kMaxTreeSlots || L < 0 || L > kMaxDepth || k < 0 || chain_pops < 0 ||
      (LAT && k > kMaxTopK)) {
    return cudaErrorInvalidValue;
  }
  int forced = chain_pops;  // min(chain_pops, budget, L)
  if (forced > budget) forced = budget;
  if (forced > L) forced = L;
  const int slots = (budget + 1 + 31) / 32;
  auto go = [&](auto s) {
    return launch_s<decltype(s)::value, LAT>(lp, order, ids, root_tokens, seq_lens, B, L, k, budget, forced,
                                             anchored, out, stream);
  };
  if (slots <= 1) return go(std::integral_constant<int, 1>());
  if (slots <= 2) return go(std::integral_constant<int, 2>());
  if (slots <= 3) return go(std::integral_constant<int, 3>());
  if (slots <= 5) return go(std::integral_constant<int, 5>());
  if (slots <= 9) return go(std::integral_constant<int, 9>());
  if (slots <= 17) return go(std::integral_constant<int, 17>());
  return go(std::integral_constant<int, 32>());
}

}  // namespace

cudaError_t launch_tree_build(const float* lp, const int64_t* ids, const int64_t* root_tokens,
                              const int64_t* seq_lens, int B, int L, int k, int budget, int chain_pops,
                              const bool* anchored, const TreeOutputs& out, cudaStream_t stream) {
  return launch_build<false>(lp, nullptr, ids, root_tokens, seq_lens, B, L, k, budget, chain_pops, anchored, out,
                             stream);
}

cudaError_t launch_lattice_build(const float* lp, const int32_t* order, const int64_t* cand,
                                 const int64_t* root_tokens, const int64_t* seq_lens, int B, int L, int K, int budget,
                                 int chain_pops, const bool* anchored, const TreeOutputs& out, cudaStream_t stream) {
  return launch_build<true>(lp, order, cand, root_tokens, seq_lens, B, L, K, budget, chain_pops, anchored, out,
                            stream);
}

}  // namespace ddtree
