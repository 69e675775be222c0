// The tree of a smaller budget from a larger one (sglang_ddtree/budget.py `truncate`, the definition the tests
// hold every backend to), in one place for the CPU op (kernels/cpu/tree_truncate.cpp) and the CUDA kernel
// (kernels/tree_truncate.cu). The builders pop in one fixed order whatever the budget, so the first n slots of
// a tree with n_big >= n slots are the tree of budget n - 1 once the links leaving them are cut, the node
// count clamped, the exhausted-heap flag recomputed and the dropped nodes' mask columns removed.
#pragma once

#include <cstdint>

#include "tree_constants.h"
#include "tree_walk.h"  // DDTREE_HD

namespace ddtree {

struct TruncIn {  // a tree with n_big slots per request, contiguous (TreeBatch field order)
  const int32_t* num_nodes;
  const int64_t* tokens;
  const int32_t* parents;
  const int32_t* depths;
  const int32_t* ranks;
  const double* logw;
  const int64_t* positions;
  const int64_t* next_token;
  const int64_t* next_sibling;
  const bool* tree_mask;
  const int32_t* mask_bits;
  const int32_t* flags;
};

struct TruncOut {  // the tree with n slots per request, contiguous
  int32_t* num_nodes;
  int64_t* tokens;
  int32_t* parents;
  int32_t* depths;
  int32_t* ranks;
  double* logw;
  int64_t* positions;
  int64_t* retrive_index;
  int64_t* next_token;
  int64_t* next_sibling;
  bool* tree_mask;
  int32_t* mask_bits;
  int32_t* flags;
};

DDTREE_HD int mask_words(int n) { return (n + 31) / 32; }

// Request b's truncated tree; elements start, start + stride, ... of each field (the CPU op passes 0 and 1,
// the CUDA kernel its thread and block size).
DDTREE_HD void truncate_request(const TruncIn& in, const TruncOut& out, int64_t b, int n_big, int n, int start,
                                int stride) {
  if (start == 0) {
    const int32_t num = in.num_nodes[b] < n ? in.num_nodes[b] : n;
    const int32_t f = in.flags[b];
    out.num_nodes[b] = num;
    // the input's own faults stand; otherwise the heap ran dry iff fewer than n nodes exist
    out.flags[b] = (f & (kFlagNonfiniteInput | kFlagUnsortedInput)) ? f
                   : (num < n ? (f | kFlagHeapExhausted) : (f & ~kFlagHeapExhausted));
  }
  const int64_t src = b * n_big, dst = b * n;
  for (int i = start; i < n; i += stride) {
    out.tokens[dst + i] = in.tokens[src + i];
    out.parents[dst + i] = in.parents[src + i];
    out.depths[dst + i] = in.depths[src + i];
    out.ranks[dst + i] = in.ranks[src + i];
    out.logw[dst + i] = in.logw[src + i];
    out.positions[dst + i] = in.positions[src + i];
    out.retrive_index[dst + i] = dst + i;
    const int64_t nt = in.next_token[src + i], ns = in.next_sibling[src + i];
    out.next_token[dst + i] = nt >= n ? -1 : nt;  // a link to a dropped node ends its list
    out.next_sibling[dst + i] = ns >= n ? -1 : ns;
  }
  for (int e = start; e < n * n; e += stride) {
    const int i = e / n, j = e % n;
    out.tree_mask[dst * n + e] = in.tree_mask[(src + i) * n_big + j];
  }
  const int words = mask_words(n), words_big = mask_words(n_big);
  // ancestors precede a node, so no kept node has a dropped node's bit: clearing the last word's tail is exact
  const uint32_t tail = (n % 32) ? (uint32_t{1} << (n % 32)) - 1u : 0xffffffffu;
  for (int e = start; e < n * words; e += stride) {
    const int i = e / words, w = e % words;
    const uint32_t word = static_cast<uint32_t>(in.mask_bits[(src + i) * words_big + w]);
    out.mask_bits[dst * words + e] = static_cast<int32_t>(w == words - 1 ? word & tail : word);
  }
}

}  // namespace ddtree
