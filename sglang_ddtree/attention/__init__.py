"""Tree verify attention: the n tree queries of each request over its prefix KV and its own tree KV.

Cascade (docs/DESIGN.md §5): prefix attention without a mask, one KV pass per request shared by all n queries
(FlashMLA, FlashInfer, FA3: prefixes.py, one module and one object each, of which this eager path calls the
host-planned `run_host`; prefix_attention.py says why it plans apart from the server) → (O_p, LSE_p); the tree
tail with the ancestor mask (our kernel) → (O_t, LSE_t); merged by LSE with each library's base converted
explicitly. backend="tree" runs prefix and tail fused in one kernel (one online softmax per prefix chunk, the tree
tile last). Which one `auto` runs is choose.py's, the same policy the server's binding and launch gate ask.
"""
from __future__ import annotations

import torch

from . import choose as _choose
from . import fallback, native, prefixes
from .merge import LN2, lse_from_natural, lse_to_natural, merge_states
from .prefixes import Shape
from .problem import Problem, check_contents, make_problem, unpack_mask
from .reference import reference_tree_attention

BACKENDS = (*_choose.PREFIXES, "torch")  # the prefix vocabulary, and the portable torch path forced

__all__ = ["tree_verify_attention", "reference_tree_attention", "merge_states", "lse_to_natural",
           "lse_from_natural", "LN2", "BACKENDS", "resolve_backend", "engine_prefix", "make_problem", "unpack_mask", "Problem", "Shape"]


def resolve_backend(prob: Problem, backend: str) -> str:
    """What runs this call: `torch` (forced, or `auto` where the kernel does not take the tensors: the CPU, other
    dtypes or head dims), else the engine's prefix choice (choose.choose, host 'engine'): `tree` (our fused
    kernel over prefix and tree) or a library over the prefix with our kernel over the tree."""
    backend = _choose.canonical(backend, BACKENDS, _choose.PREFIX_ALIASES, "backend")
    if backend == "torch" or (backend == "auto" and not native.supports(prob)):
        return "torch"
    if backend == "tree" and not native.supports(prob):
        raise ValueError("backend='tree' needs CUDA bf16/fp16 tensors in the MLA (512+64 → 512) or GQA "
                         "(head dim 32, 64, 128 or 256) shapes")
    return engine_prefix(Shape.of(prob), backend)


def engine_prefix(shape: Shape, backend: str = "auto", setting: str = "backend") -> str:
    """The engine's prefix choice for a shape the kernel takes: choose.choose with host 'engine' (a ValueError naming
    `setting` where an asked library cannot serve)."""
    return _choose.choose(shape, backend, host="engine", setting=setting)


def tree_verify_attention(q, kv_cache, page_table, prefix_lens, tree_kv, tree_mask, sm_scale: float, *,
                          backend: str = "auto", max_prefix_len: int | None = None, plan: dict | None = None):
    """Attention of every tree node over its request's prefix and its tree ancestors (itself included).

    MLA absorbed form (DeepSeek-V3 / Kimi-K2):
      q = (q_nope [T, H, 512], q_pe [T, H, 64]); kv_cache [pages, page_size, 576] (c_kv ‖ k_pe, SGLang's
      MLA pool; [pages, page_size, 1, 576] too); tree_kv [T, 576]; output in latent space [T, H, 512].
    GQA (Qwen3): q [T, Hq, D]; kv_cache = (k [pages, ps, Hkv, D], v [pages, ps, Hkv, Dv]);
      tree_kv = (k [T, Hkv, D], v [T, Hkv, Dv]); output [T, Hq, Dv].
    Common: T = B·n (request b's node i at row b·n + i); page_table int [B, max_pages] lists each request's
    prefix pages in order; prefix_lens int [B] (the tree is not part of it); tree_mask: TreeBatch.mask_bits
    int32 [B, n, ⌈n/32⌉], a TreeBatch, or bool [B, n, n]; sm_scale: the model's softmax scale (MLA:
    1/sqrt(192)·mscale², not 1/sqrt(576)).
    backend: see BACKENDS and `resolve_backend`. max_prefix_len (≥ every prefix length) avoids reading
    prefix_lens on the host; with it the native path is CUDA-graph capturable, and a replay may change
    prefix_lens / page_table / mask contents in place (lengths up to max_prefix_len). plan: a dict reused by
    all layers of one batch (library planning state; the library cascades re-plan when lengths change).
    Returns (O in q's dtype, LSE float32 [T, Hq] (float64 for float64 q), natural log).

    Checked on CPU tensors, preconditions on CUDA (checking would read device memory on the host every
    call): 0 <= prefix_lens[b] <= page_table.shape[1] * page_size (and <= max_prefix_len); the pages a
    request uses, page_table[b, :ceil(prefix_lens[b] / page_size)], are pages of the cache (padding
    past them, e.g. −1, is never read). A NaN or inf in q or in the K/V a query attends gives a NaN
    output on the torch path, never a finite one; the CUDA kernels assume finite inputs.
    """
    prob = make_problem(q, kv_cache, page_table, prefix_lens, tree_kv, tree_mask, sm_scale)
    check_contents(prob, max_prefix_len)
    backend = resolve_backend(prob, backend)
    if backend == "torch":
        o, lse = fallback.attend(prob, max_prefix_len=max_prefix_len)
        return o.to(prob.dtype), lse.to(torch.float64 if prob.dtype == torch.float64 else torch.float32)
    if backend == "tree":
        return native.attend(prob, max_prefix_len=max_prefix_len)
    o_p, lse_p, base = prefixes.run(backend, prob, {} if plan is None else plan)
    o_t, lse_t = native.attend(prob, with_prefix=False)
    return native.merge(o_p, lse_p, base, o_t, lse_t, "e", prob.dtype)
