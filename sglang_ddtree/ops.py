"""The project's torch custom ops: schemas, fake (meta) implementations and backend loading.

Schemas are declared here, once; kernels/cpu/*.cpp and kernels/torch_cuda/*.cpp only register
implementations (TORCH_LIBRARY_IMPL), so CPU and CUDA cannot disagree on a signature. Fake impls let
torch.compile / CUDA-graph tooling trace shapes without running kernels. Public wrappers with argument
checking live in tree.py / accept.py / sampling.py / attention.py; these ops trust their inputs' dtypes and shapes.
"""
from __future__ import annotations

import functools

import torch

from .sizes import verify_width

NS = "sglang_ddtree"

_TREE_OUT = ("num_nodes", "tokens", "parents", "depths", "ranks", "logw", "positions", "retrive_index",
             "retrive_next_token", "retrive_next_sibling", "tree_mask", "mask_bits", "flags")

SCHEMAS = {
    # lp f32 [B,L,k], ids i64 [B,L,k], root_tokens i64 [B], seq_lens i64 [B] -> the TreeBatch fields;
    #   chain_pops: the first min(chain_pops, budget, L) pops forced to the greedy chain (reference.py), in the
    #   requests anchored (bool [B]) marks, every request without it
    "build_tree_from_topk": "(Tensor lp, Tensor ids, Tensor root_tokens, Tensor seq_lens, int budget, "
                            "int chain_pops=0, Tensor? anchored=None) -> ("
                            + ", ".join("Tensor" for _ in _TREE_OUT) + ")",
    # the lattice tree (docs/DESIGN.md §3.10): lp f32 [B,L,K,K] (row (e, p) sorted descending), order i32
    #   [B,L,K,K] (the candidate index of each rank), cand i64 [B,L,K], root_tokens/seq_lens i64 [B] -> the
    #   TreeBatch fields; chain_pops and anchored as above (the chain: the lattice's argmax walk)
    "build_tree_from_lattice": "(Tensor lp, Tensor order, Tensor cand, Tensor root_tokens, Tensor seq_lens, "
                               "int budget, int chain_pops=0, Tensor? anchored=None) -> ("
                               + ", ".join("Tensor" for _ in _TREE_OUT) + ")",
    # the TreeBatch fields of a tree with n_big slots (all but retrive_index) -> the tree of a smaller budget
    #   (budget.truncate's definition, kernels/tree_truncate.h), every field in TreeBatch order, contiguous
    "truncate_tree": "(Tensor num_nodes, Tensor tokens, Tensor parents, Tensor depths, Tensor ranks, Tensor logw, "
                     "Tensor positions, Tensor next_token, Tensor next_sibling, Tensor tree_mask, Tensor mask_bits, "
                     "Tensor flags, int budget) -> (" + ", ".join("Tensor" for _ in _TREE_OUT) + ")",
    # tokens i64 [B,n], next_token i64 [B,n], next_sibling i64 [B,n], num_nodes i32 [B], target i64 [B,n]
    #   -> accept_index i32 [B,L+1], accept_len i32 [B], bonus i64 [B], flags i32 [B]
    "accept_tree": "(Tensor tokens, Tensor next_token, Tensor next_sibling, Tensor num_nodes, Tensor target, "
                   "int depth_limit) -> (Tensor, Tensor, Tensor, Tensor)",
    # the accept walk plus the round's commit plan (kernels/tree_walk.h), W = depth_limit + 1: tokens, links,
    #   target i64 [B,n], num_nodes i32 [B], prefix_lens i32/i64 [B], slots i64 [B,n] -> accept_index i32 [B,W],
    #   accept_len i32 [B], bonus i64 [B], flags i32 [B], out_tokens, kv_src, kv_dst, hidden_index, positions
    #   i64 [B,W], new_seq_lens [B] (prefix_lens' dtype)
    "commit_tree": "(Tensor tokens, Tensor next_token, Tensor next_sibling, Tensor num_nodes, Tensor target, "
                   "Tensor prefix_lens, Tensor slots, int depth_limit) -> Tensor[]",
    # logits [R, V] (bf16/fp16/fp32), scale f32 [R] or None (each row's multiplier c > 0, topk.py) -> lp f32 [R, k]
    #   = c*top - logsumexp(c*row), ids i64 [R, k] in canonical order of the raw logits (value desc, id asc)
    "topk_lse": "(Tensor logits, int k, Tensor? scale=None) -> (Tensor, Tensor)",
    # logits [R, V]; seed/step i64 [R]: per-row Gumbel-max sample of softmax(logits / T) (argmax where T == 0)
    #   -> i64 [R]; T: row_temperature f32 [R] when given (each request's, no scaled copy of the logits), else
    #   temperature; boundary i64 [R] (law_rows') when given: a sampled row draws only among the tokens its law keeps
    "sample_rows": "(Tensor logits, float temperature, Tensor seed, Tensor step, Tensor node, "
                   "Tensor? row_temperature=None, Tensor? boundary=None) -> Tensor",
    # every node's law without a sort (kernels/law_rule.h; sampling.law_rows_torch defines it): logits [R, V] (R =
    #   B * n, row r node r % n of request r / n), the requests' temperatures f32, top_ks i64, top_ps f32, min_ps f32
    #   [B] -> greedy i64 [R] (argmax), lse f32 [R] (the kept law's normaliser of logits / T), boundary i64 [R]
    "law_rows": "(Tensor logits, int n, Tensor temperatures, Tensor top_ks, Tensor top_ps, Tensor min_ps) -> "
                "(Tensor, Tensor, Tensor)",
    # a drawn tree (rejection.py; CUDA and CPU ops; the torch definition is rejection.drawn_targets_torch): the
    #   tree's tokens i64 [B,n], parents / depths i32 [B,n], num_nodes i32 [B], lp f32 / ids i64 [B,L,K], drawn bool
    #   [B], seed/step i64 [B] -> tokens with the drawn rows' children drawn (CUDA only)
    "draw_tree": "(Tensor tokens, Tensor parents, Tensor num_nodes, Tensor depths, Tensor lp, Tensor ids, "
                 "Tensor drawn, float sharpness, Tensor seed, Tensor step) -> Tensor",
    # ... and its verify along the round's walk: logits [B*n, V], temperatures f32 [B], law_rows' greedy / lse /
    #   boundary [B*n], the tree's tokens, parents, num_nodes, depths and links, cand i64 / q f32 [B,L,K], sampled
    #   bool [B], seed/step i64 [B] -> each walked node's target token i64 [B,n] (off the walk: the argmax)
    "drawn_targets": "(Tensor logits, Tensor temperatures, Tensor greedy, Tensor lse, Tensor boundary, "
                     "Tensor tokens, Tensor parents, Tensor num_nodes, Tensor depths, Tensor next_token, "
                     "Tensor next_sibling, Tensor cand, Tensor q, Tensor sampled, Tensor seed, Tensor step) -> Tensor",
}

_lib = torch.library.Library(NS, "DEF")
for _name, _schema in SCHEMAS.items():
    _lib.define(_name + _schema)


def mask_words(n: int) -> int:
    return (n + 31) // 32


def _tree_fake(like, B: int, n: int) -> tuple:
    """Empty TreeBatch fields of B trees with n slots (the tree ops' meta outputs)."""
    i32, i64 = dict(dtype=torch.int32), dict(dtype=torch.int64)
    return (like.new_empty((B,), **i32), like.new_empty((B, n), **i64), like.new_empty((B, n), **i32),
            like.new_empty((B, n), **i32), like.new_empty((B, n), **i32),
            like.new_empty((B, n), dtype=torch.float64), like.new_empty((B, n), **i64),
            like.new_empty((B, n), **i64), like.new_empty((B, n), **i64), like.new_empty((B, n), **i64),
            like.new_empty((B, n, n), dtype=torch.bool), like.new_empty((B, n, mask_words(n)), **i32),
            like.new_empty((B,), **i32))


@torch.library.register_fake(f"{NS}::build_tree_from_topk")
def _build_tree_fake(lp, ids, root_tokens, seq_lens, budget, chain_pops=0, anchored=None):
    return _tree_fake(lp, lp.shape[0], verify_width(budget))


@torch.library.register_fake(f"{NS}::build_tree_from_lattice")
def _build_lattice_fake(lp, order, cand, root_tokens, seq_lens, budget, chain_pops=0, anchored=None):
    return _tree_fake(lp, lp.shape[0], verify_width(budget))


@torch.library.register_fake(f"{NS}::truncate_tree")
def _truncate_tree_fake(num_nodes, tokens, parents, depths, ranks, logw, positions, next_token, next_sibling,
                        tree_mask, mask_bits, flags, budget):
    return _tree_fake(tokens, tokens.shape[0], verify_width(budget))


@torch.library.register_fake(f"{NS}::accept_tree")
def _accept_fake(tokens, next_token, next_sibling, num_nodes, target, depth_limit):
    B = tokens.shape[0]
    return (tokens.new_empty((B, depth_limit + 1), dtype=torch.int32), tokens.new_empty((B,), dtype=torch.int32),
            tokens.new_empty((B,), dtype=torch.int64), tokens.new_empty((B,), dtype=torch.int32))


@torch.library.register_fake(f"{NS}::commit_tree")
def _commit_fake(tokens, next_token, next_sibling, num_nodes, target, prefix_lens, slots, depth_limit):
    B, W = tokens.shape[0], depth_limit + 1
    i32, i64 = dict(dtype=torch.int32), dict(dtype=torch.int64)
    return [tokens.new_empty((B, W), **i32), tokens.new_empty((B,), **i32), tokens.new_empty((B,), **i64),
            tokens.new_empty((B,), **i32)] + [tokens.new_empty((B, W), **i64) for _ in range(5)] + \
           [prefix_lens.new_empty((B,))]


@torch.library.register_fake(f"{NS}::topk_lse")
def _topk_lse_fake(logits, k, scale=None):
    R = logits.shape[0]
    return logits.new_empty((R, k), dtype=torch.float32), logits.new_empty((R, k), dtype=torch.int64)


@torch.library.register_fake(f"{NS}::sample_rows")
def _sample_rows_fake(logits, temperature, seed, step, node, row_temperature=None, boundary=None):
    return logits.new_empty((logits.shape[0],), dtype=torch.int64)


@torch.library.register_fake(f"{NS}::law_rows")
def _law_rows_fake(logits, n, temperatures, top_ks, top_ps, min_ps):
    R = logits.shape[0]
    return (logits.new_empty((R,), dtype=torch.int64), logits.new_empty((R,), dtype=torch.float32),
            logits.new_empty((R,), dtype=torch.int64))


@torch.library.register_fake(f"{NS}::draw_tree")
def _draw_tree_fake(tokens, parents, num_nodes, depths, lp, ids, drawn, sharpness, seed, step):
    return torch.empty_like(tokens)


@torch.library.register_fake(f"{NS}::drawn_targets")
def _drawn_targets_fake(logits, temperatures, greedy, lse, boundary, tokens, parents, num_nodes, depths, next_token,
                        next_sibling, cand, q, sampled, seed, step):
    return torch.empty_like(tokens)


def op(name: str):
    return getattr(torch.ops.sglang_ddtree, name)


@functools.cache
def cuda_available() -> bool:
    """True when the CUDA extension is (or can be) built and loaded on this machine."""
    if not torch.cuda.is_available():
        return False
    from . import _build
    try:
        _build.load_cuda()
    except Exception as exc:  # surfaced loudly: a user asking for backend="cuda" gets the cause
        _cuda_error.append(exc)
        return False
    return True


_cuda_error: list = []


def ensure_backend(backend: str) -> None:
    """Load the native library that implements `backend` ('cpu' or 'cuda')."""
    from . import _build
    if backend == "cpu":
        _build.load_cpu()
    elif backend == "cuda":
        if not cuda_available():
            cause = f": {_cuda_error[0]!r}" if _cuda_error else " (no CUDA device)"
            raise RuntimeError("backend='cuda' is unavailable" + cause)
    else:
        raise ValueError(f"unknown native backend {backend!r}")


NATIVE_BACKENDS = ("auto", "cuda", "cpu")  # where the native ops run; 'auto': the tensors' device


def resolve_backend(backend: str, device: torch.device, *, allowed=(*NATIVE_BACKENDS, "reference")) -> str:
    """Map 'auto' to the native backend of the tensors' device and check the choice fits the device."""
    if backend not in allowed:
        raise ValueError(f"backend must be one of {allowed}, got {backend!r}")
    if backend == "auto":
        backend = "cuda" if device.type == "cuda" else "cpu"
    if backend == "cuda" and device.type != "cuda":
        raise ValueError(f"backend='cuda' needs CUDA tensors, got device {device}")
    if backend == "cpu" and device.type != "cpu":
        raise ValueError(f"backend='cpu' needs CPU tensors, got device {device}")
    if backend in ("cpu", "cuda"):
        ensure_backend(backend)
    return backend


# --- verify attention (kernels/verify_attn.cu) ----------------------------------------------------------
# q_a [T,Hq,Da] (+ q_b [T,Hq,Db] for MLA), k_cache [slots,Hkv,Dqk], v_cache [slots,Hkv,Dv] (strided views
# allowed), page_table i32 [B,P], prefix_lens i32 [B], k_tree [T,Hkv,Dqk], v_tree [T,Hkv,Dv], mask_bits
# i32 [B,n,W]; prefix keys in num_splits chunks of kv_chunk, the tree keys (masked) after the last one
# -> out [T,Hq,Dv] (q's dtype), natural-log lse f32 [T,Hq]
SCHEMAS["verify_attn"] = ("(Tensor q_a, Tensor? q_b, Tensor k_cache, Tensor v_cache, int page_size, Tensor page_table, "
                          "Tensor prefix_lens, Tensor k_tree, Tensor v_tree, Tensor mask_bits, float sm_scale, "
                          "int num_splits, int kv_chunk, bool with_tree) -> (Tensor, Tensor)")
_lib.define("verify_attn" + SCHEMAS["verify_attn"])


@torch.library.register_fake(f"{NS}::verify_attn")
def _verify_attn_fake(q_a, q_b, k_cache, v_cache, page_size, page_table, prefix_lens, k_tree, v_tree, mask_bits,
                      sm_scale, num_splits, kv_chunk, with_tree):
    T, Hq = q_a.shape[0], q_a.shape[1]
    return q_a.new_empty((T, Hq, v_cache.shape[-1])), q_a.new_empty((T, Hq), dtype=torch.float32)

# The same attention with SGLang's prefix addressing: request b's prefix slots are kv_indices[kv_indptr[b] ..
# kv_indptr[b+1]) (kv_indptr i32 [B+1], kv_indices i32/i64), each prefix split on the device into num_splits
# equal chunks (no host length: one CUDA graph serves any prefix lengths); the tree keys always included.
SCHEMAS["verify_attn_ragged"] = ("(Tensor q_a, Tensor? q_b, Tensor k_cache, Tensor v_cache, Tensor kv_indptr, "
                                 "Tensor kv_indices, Tensor k_tree, Tensor v_tree, Tensor mask_bits, float sm_scale, "
                                 "int num_splits) -> (Tensor, Tensor)")
_lib.define("verify_attn_ragged" + SCHEMAS["verify_attn_ragged"])


@torch.library.register_fake(f"{NS}::verify_attn_ragged")
def _verify_attn_ragged_fake(q_a, q_b, k_cache, v_cache, kv_indptr, kv_indices, k_tree, v_tree, mask_bits,
                             sm_scale, num_splits):
    T, Hq = q_a.shape[0], q_a.shape[1]
    return q_a.new_empty((T, Hq, v_cache.shape[-1])), q_a.new_empty((T, Hq), dtype=torch.float32)


# SGLang's prefix addressing for verify_attn_ragged, written in place into caller buffers (CUDA-graph static
# ones): indptr i32 [>= B+1] = cumsum of lens with a leading 0, indices i32 [>= B * context] = each request's
# req_to_token[rows[b], :lens[b]] (req_to_token i32 [R, context]; rows, lens i32/i64 [B]).
SCHEMAS["gather_prefix_slots"] = ("(Tensor req_to_token, Tensor rows, Tensor lens, Tensor(a!) indptr, "
                                  "Tensor(b!) indices) -> ()")
_lib.define("gather_prefix_slots" + SCHEMAS["gather_prefix_slots"])


@torch.library.register_fake(f"{NS}::gather_prefix_slots")
def _gather_prefix_slots_fake(req_to_token, rows, lens, indptr, indices):
    return None


# FlashInfer's CUDA-graph prefill schedule for this round's prefix lengths (flashinfer_graphs.Fa2Schedule; the rule is
# kernels/fa2_schedule.h), written in place into views of the plan's int workspace: lens i32/i64 [bs]; valid bool
# [bs * tiles * kmax]; o_indptr i32 [bs + 1], merge_indptr i32 [bs * n + 1], chunk i32 [1].
SCHEMAS["fa2_schedule"] = ("(Tensor lens, int n, int tiles, int kmax, int min_chunk, Tensor(a!) valid, "
                           "Tensor(b!) o_indptr, Tensor(c!) merge_indptr, Tensor(d!) chunk) -> ()")
_lib.define("fa2_schedule" + SCHEMAS["fa2_schedule"])


@torch.library.register_fake(f"{NS}::fa2_schedule")
def _fa2_schedule_fake(lens, n, tiles, kmax, min_chunk, valid, o_indptr, merge_indptr, chunk):
    return None


# FlashInfer-MLA's work schedule for this round's prefix lengths (flashinfer_graphs.FlashInferMLAPrefix; the rule is
# kernels/mla_schedule.h), written in place into the plan's int workspace ws (int32 [size]) at `offsets` (14 int32
# element offsets: q_indptr, kv_indptr, partial_indptr, q_len, kv_len, q_start, kv_start, kv_end, work_indptr,
# merge_start, merge_end, merge_partial_start, merge_partial_end, merge_stride): lens, kv_indptr i32/i64 [>= bs].
SCHEMAS["mla_schedule"] = ("(Tensor lens, Tensor kv_indptr, int n, int heads, int cluster_size, int clusters, "
                           "int max_works, int merge_slots, int[] offsets, Tensor(a!) ws) -> ()")
_lib.define("mla_schedule" + SCHEMAS["mla_schedule"])


@torch.library.register_fake(f"{NS}::mla_schedule")
def _mla_schedule_fake(lens, kv_indptr, n, heads, cluster_size, clusters, max_works, merge_slots, offsets, ws):
    return None


# o_a, o_b bf16/fp16 [..., D]; lse_* f32 [...] times lse_*_scale = natural log (1.0, or ln 2 for base 2)
#   -> merged O [..., D] (o_a's dtype), natural-log lse f32 [...]
SCHEMAS["merge_attn_states"] = ("(Tensor o_a, Tensor lse_a, float lse_a_scale, Tensor o_b, Tensor lse_b, "
                                "float lse_b_scale) -> (Tensor, Tensor)")
_lib.define("merge_attn_states" + SCHEMAS["merge_attn_states"])


@torch.library.register_fake(f"{NS}::merge_attn_states")
def _merge_attn_states_fake(o_a, lse_a, lse_a_scale, o_b, lse_b, lse_b_scale):
    return torch.empty_like(o_a), lse_a.new_empty(lse_a.shape, dtype=torch.float32)
