// Host-side entry point of the fused walk + commit plan (kernels/tree_accept.cu; the per-column rule is
// commit_column in kernels/tree_walk.h). Plain declarations, so the torch binding includes it too.
#pragma once

#include <cuda_runtime_api.h>
#include <cstdint>

namespace ddtree {

struct CommitOutputs {   // W = depth_limit + 1 columns per request
  int32_t* accept_index;  // [B, W] accepted nodes (root first), -1 pad
  int32_t* accept_len;    // [B] tokens committed incl. the bonus
  int64_t* bonus;         // [B]
  int32_t* flags;         // [B] kFlagMalformedTree, kFlagNonfiniteTarget (tree_walk.h)
  int64_t* out_tokens;    // [B, W] committed tokens, then 0
  int64_t* kv_src;        // [B, W] KV move source slots
  int64_t* kv_dst;        // [B, W] KV move destination slots
  int64_t* hidden_index;  // [B, W] rows of the verify's [B*n, ...] hidden states
  int64_t* positions;     // [B, W] prefix + k
  void* new_seq_lens;     // [B] prefix + accept_len, prefix_lens' dtype
};

// tokens/next_token/next_sibling/target i64 [B, n], num_nodes i32 [B], prefix_lens i32 or i64 [B],
// slots i64 [B, n] (the KV slot of every tree node).
cudaError_t launch_tree_commit(const int64_t* tokens, const int64_t* next_token, const int64_t* next_sibling,
                               const int32_t* num_nodes, const int64_t* target, const void* prefix_lens,
                               bool prefix_is_64, const int64_t* slots, int B, int n, int depth_limit,
                               const CommitOutputs& out, cudaStream_t stream);

}  // namespace ddtree
