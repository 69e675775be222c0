// Host-side entry points of the CUDA tree stage (top-k + log-normaliser, best-first build, truncation, accept
// walk, per-row sampling). Plain C++ (no CUDA syntax), so both the .cu files and the torch bindings
// (kernels/torch_cuda/tree.cpp and accept.cpp, compiled by the host compiler) include it. Every launcher enqueues
// on `stream`, never synchronises, and returns cudaGetLastError() of its launches.
#pragma once

#include <cuda_runtime_api.h>
#include <cstdint>

#include "tree_constants.h"
#include "tree_truncate.h"

namespace ddtree {

// Limits of the CUDA builder (the binding checks them): n = budget + 1 <= kMaxTreeSlots (tree_constants.h);
// ranks and depths are packed into 10 + 11 bits of the frontier metadata.
constexpr int kMaxDepth = 2047;
constexpr int kMaxTopK = 1024;

enum class LogitDtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct TreeOutputs {
  int32_t* num_nodes;              // [B]
  int64_t* tokens;                 // [B, n]
  int32_t* parents;                // [B, n]
  int32_t* depths;                 // [B, n]
  int32_t* ranks;                  // [B, n]
  double* logw;                    // [B, n]
  int64_t* positions;              // [B, n]
  int64_t* retrive_index;          // [B, n]
  int64_t* retrive_next_token;     // [B, n]
  int64_t* retrive_next_sibling;   // [B, n]
  bool* tree_mask;                 // [B, n, n]
  int32_t* mask_bits;              // [B, n, ceil(n/32)]
  int32_t* flags;                  // [B]
};

// docs/DESIGN.md §3 for B requests in one launch: lp f32 [B, L, k], ids i64 [B, L, k]; the first
// min(chain_pops, budget, L) pops forced to the greedy chain (0: the paper's tree), in the requests
// anchored[b] marks (every request when anchored is null).
cudaError_t launch_tree_build(const float* lp, const int64_t* ids, const int64_t* root_tokens,
                              const int64_t* seq_lens, int B, int L, int k, int budget, int chain_pops,
                              const bool* anchored, const TreeOutputs& out, cudaStream_t stream);

// The lattice tree (docs/DESIGN.md §3.10, rows as kernels/tree_rows.h) for B requests in one launch: lp f32
// [B, L, K, K] (each row sorted descending), order i32 [B, L, K, K] (the candidate index of each rank), cand i64
// [B, L, K]; K <= kMaxTopK; chain_pops and anchored as launch_tree_build's (the chain: the lattice's argmax walk).
cudaError_t launch_lattice_build(const float* lp, const int32_t* order, const int64_t* cand,
                                 const int64_t* root_tokens, const int64_t* seq_lens, int B, int L, int K, int budget,
                                 int chain_pops, const bool* anchored, const TreeOutputs& out, cudaStream_t stream);

// reference.walk_reference for B requests: tokens/next_token/next_sibling/target i64 [B, n],
// num_nodes i32 [B] -> accept_index i32 [B, L+1], accept_len i32 [B], bonus i64 [B], flags i32 [B].
cudaError_t launch_tree_accept(const int64_t* tokens, const int64_t* next_token, const int64_t* next_sibling,
                               const int32_t* num_nodes, const int64_t* target, int B, int n, int depth_limit,
                               int32_t* accept_index, int32_t* accept_len, int64_t* bonus, int32_t* flags,
                               cudaStream_t stream);

// The first n of n_big slots of B trees as the tree of budget n - 1 (kernels/tree_truncate.h), one launch.
cudaError_t launch_tree_truncate(const TruncIn& in, const TruncOut& out, int B, int n_big, int n,
                                 cudaStream_t stream);

// Per-row Gumbel-max sample of softmax(logits / T) (argmax, first index on ties, where T == 0): logits [R, V];
// T = row_temperature[row] (f32 [R]) when given, else temperature. The division is the kernel's (float32, IEEE),
// so a caller need not write a scaled copy of the logits. boundary (i64 [R], law_rows' output) when given: a sampled
// row draws only among the tokens its law keeps (kernels/law_rule.h).
cudaError_t launch_sample_rows(const void* logits, LogitDtype dtype, int64_t R, int64_t V, float temperature,
                               const float* row_temperature, const int64_t* boundary, const int64_t* seed,
                               const int64_t* step, const int64_t* node, int64_t* out, cudaStream_t stream);

// Every node's law (kernels/law_rule.h) of logits [R, V], row r node r % n of request r / n, under the requests'
// temperatures, top_ks, top_ps, min_ps [R / n] -> greedy i64 [R], lse f32 [R], boundary i64 [R]; no sort.
cudaError_t launch_law_rows(const void* logits, LogitDtype dtype, int64_t R, int64_t V, int n,
                            const float* temperatures, const int64_t* top_ks, const float* top_ps,
                            const float* min_ps, int64_t* greedy, float* lse, int64_t* boundary, cudaStream_t stream);

// A drawn tree's two steps (kernels/tree_rejection.cu; sglang_ddtree/rejection.py defines them), B requests of n
// nodes: draw_tree (one thread a node) writes into out (the tree's tokens) the drawn children of the rows `drawn`
// marks, from lp f32 / ids i64 [B, L, K] (scratch f32 [B, n, K]); drawn_targets (one block a request) walks the
// tree from the root, testing each node's children against its law (law_rows' greedy / lse / boundary [B * n]
// over logits [B * n, V]) and the draft law q f32 [B, L, K] over cand i64 [B, L, K], drawing the bonus where the
// walk stops, in the requests `sampled` marks -> target tokens i64 [B, n] (off the walk: the argmax).
cudaError_t launch_draw_tree(const int32_t* parents, const int32_t* num_nodes,
                             const int32_t* depths, const float* lp, const int64_t* ids, const bool* drawn,
                             float sharpness, const int64_t* seed, const int64_t* step, int B, int n, int L, int K,
                             float* scratch, int64_t* out, cudaStream_t stream);
cudaError_t launch_drawn_targets(const void* logits, LogitDtype dtype, int64_t V, const float* temperatures,
                                 const int64_t* greedy, const float* lse, const int64_t* boundary,
                                 const int64_t* tokens, const int32_t* parents, const int32_t* num_nodes,
                                 const int32_t* depths, const int64_t* next_token, const int64_t* next_sibling,
                                 const int64_t* cand, const float* q, const bool* sampled, const int64_t* seed,
                                 const int64_t* step, int B, int n, int L, int K, int64_t* out, cudaStream_t stream);

// Exact top-k (value desc, id asc) and lp = c*top - logsumexp(c*row) over logits [R, V], c = scale[row] (> 0;
// 1 when scale is null). One launch, no workspace: the CTAs that share a row merge through distributed shared
// memory (thread-block clusters).
cudaError_t launch_topk_lse(const void* logits, LogitDtype dtype, int64_t R, int64_t V, int k, const float* scale,
                            float* lp, int64_t* ids, cudaStream_t stream);

}  // namespace ddtree
