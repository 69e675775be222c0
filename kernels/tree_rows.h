// The rows the best-first builders read (docs/DESIGN.md §3.2, §3.10), in one place for the CPU builder
// (kernels/cpu/tree_build.cpp) and the CUDA builder (kernels/tree_build.cu): where a node's children are read,
// which token and row a child gets, and the two float64 key updates.
//
// A DFlash drafter gives one row per depth (R = 1: every node's children are its depth's top-k). A selector's
// lattice gives R = K rows per depth, one per predecessor candidate: row (e, p) holds the conditional law of
// slot e's candidates after candidate p of slot e - 1, sorted, with order[e][p][r] the candidate index of rank
// r. A node's row index is its own candidate index (the root's is 0: slot 0's rows all follow the anchor), so
// its children are read from row (depth, its candidate index), and a child's token is cand[depth - 1][index].
#pragma once

#include <cstdint>

#include "tree_walk.h"  // DDTREE_HD

namespace ddtree {

// Offset of the row that the children of a node at `depth` whose row index is `row` are read from, in a table
// [L][R][stride] (stride: the columns kept per row; k, or fewer where a tree cannot reach further). The root's
// children are depth 0's row 0; a popped node's siblings are in its parent's row, children_row(depth - 1, ...).
DDTREE_HD int64_t children_row(int64_t depth, int64_t row, int64_t R, int64_t stride) {
  return (depth * R + row) * stride;
}

// The key of a popped node's next sibling, (w - lp[r]) + lp[r + 1] from the parent's own row, and of its first
// child, w + lp[0] from its own row: two float64 roundings each, in this order (the reference adds Python
// floats), never fused or reassociated.
DDTREE_HD double sibling_key(double w, double at_rank, double next_rank) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(__dsub_rn(w, at_rank), next_rank);
#else
  return (w - at_rank) + next_rank;
#endif
}

DDTREE_HD double child_key(double w, double first) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(w, first);
#else
  return w + first;
#endif
}

// A lattice order entry names a candidate of the slot (0 <= v < K). One outside is not a sorted row of
// candidates: the builders flag the request UNSORTED_INPUT (root-only) and never index with it.
template <class I>
DDTREE_HD bool candidate_in_range(I v, int64_t K) {
  return v >= 0 && static_cast<int64_t>(v) < K;
}

// The token of a lattice node at `depth` whose candidate index is `c`: cand is [L][K].
template <class Tok>
DDTREE_HD Tok lattice_token(const Tok* cand, int64_t depth, int64_t c, int64_t K) {
  return cand[(depth - 1) * K + c];
}

}  // namespace ddtree
