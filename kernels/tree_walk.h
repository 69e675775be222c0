// The bounded greedy walk over SGLang's child/sibling links (reference.walk_reference, bit for bit), in one
// place for every backend: the CPU ops (kernels/cpu/*.cpp) and the CUDA kernels (kernels/*.cu) include it.
//
// Links must point strictly forward and stay inside [1, num_nodes); the path may not exceed the depth limit.
// Anything else sets kFlagMalformedTree and stops the walk, so a request finishes after at most n link reads,
// whatever the input (cyclic, out-of-range or corrupted trees included). Link values outside [-1, n) may be
// passed as they are or squashed to n (the CUDA kernels stage 32-bit links): both fail the range check.
#pragma once

#include <cstdint>

#include "hd.h"
#include "tree_constants.h"

namespace ddtree {

struct WalkResult {
  int len;        // accepted nodes incl. the root (= tokens committed incl. the bonus)
  int last;       // the last accepted node (its target token is the bonus)
  int32_t flags;  // kFlagMalformedTree, kFlagNonfiniteTarget (the bonus tgt[last] is -1: no token), or 0
};

// tok/tgt/nt/ns: one request's n tokens, per-node target tokens and links; acc: depth_limit + 1 slots,
// filled with the accepted node indices (root first); entries past `len` are left untouched.
template <class Tok, class Link>
DDTREE_HD WalkResult walk_tree(const Tok* tok, const Tok* tgt, const Link* nt, const Link* ns, int64_t num_nodes,
                               int64_t n, int depth_limit, int32_t* acc) {
  int32_t flg = 0;
  int64_t nn = num_nodes;
  if (nn < 1 || nn > n) {
    flg |= kFlagMalformedTree;
    nn = nn < 1 ? 1 : n;
  }
  acc[0] = 0;
  int len = 1;
  int64_t cur = 0, steps = 0;
  while (true) {
    int64_t matched = -1, prev = cur, c = nt[cur];
    bool broken = false;
    while (c != -1) {
      ++steps;
      if (!(prev < c && c < nn) || steps > n) {
        flg |= kFlagMalformedTree;
        broken = true;
        break;
      }
      if (tok[c] == tgt[cur]) {
        matched = c;
        break;
      }
      prev = c;
      c = ns[c];
    }
    if (broken || matched == -1) break;
    if (len == depth_limit + 1) {
      flg |= kFlagMalformedTree;
      break;
    }
    acc[len++] = static_cast<int32_t>(matched);
    cur = matched;
  }
  if (tgt[cur] < 0) flg |= kFlagNonfiniteTarget;  // the walk ends at a node the target gave no token
  return {len, static_cast<int>(cur), flg};
}

// The commit plan of one request from its walk (kernels/tree_commit.cu and kernels/cpu/tree_accept.cpp):
// with W = depth_limit + 1 output columns k,
//   out_tokens[k]   = tokens of accepted nodes 1..len-1, then the bonus at k = len-1, then 0;
//   kv_src/kv_dst   = slots[acc[k]] -> slots[k] for k < len (the accepted node's KV to its committed slot);
//                     pads move slots[min(k, n-1)] onto itself (W may exceed n when budget < depth_limit);
//   hidden_index[k] = row * n + acc[k] (pads: row * n, the root) — rows of the verify's hidden states;
//   positions[k]    = prefix + k.
template <class Tok, class Len>
DDTREE_HD void commit_column(int k, const WalkResult& w, const int32_t* acc, const Tok* tok, const Tok* tgt,
                             const int64_t* slots, Len prefix, int64_t row, int64_t n, int64_t* out_tokens,
                             int64_t* kv_src, int64_t* kv_dst, int64_t* hidden_index, int64_t* positions) {
  const bool live = k < w.len;
  out_tokens[k] = k + 1 < w.len ? static_cast<int64_t>(tok[acc[k + 1]])
                                : (k + 1 == w.len ? static_cast<int64_t>(tgt[w.last]) : int64_t(0));
  const int64_t own = slots[k < n ? k : n - 1];
  kv_dst[k] = live ? slots[k] : own;
  kv_src[k] = live ? slots[acc[k]] : own;
  hidden_index[k] = row * n + (live ? acc[k] : 0);
  positions[k] = static_cast<int64_t>(prefix) + k;
}

}  // namespace ddtree
