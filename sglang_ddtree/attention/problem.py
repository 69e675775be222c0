"""Argument checking and the one internal form every verify-attention path works on.

Both layouts become: queries q_a [T, Hq, Da] (+ q_b [T, Hq, Db] for MLA's rope part), keys of width
Dqk = Da + Db and values of width Dv, for Hkv KV heads shared by G = Hq / Hkv query heads each:
  * MLA absorbed (DeepSeek-V3 / Kimi-K2): q_nope [T, H, 512] + q_pe [T, H, 64]; one latent "KV head"
    whose key is c_kv ‖ k_pe (576) and whose value is c_kv (512), i.e. a view of the key.
  * GQA (Qwen3): q [T, Hq, D]; K [.., Hkv, D] and V [.., Hkv, Dv] separately.
The cache is paged ([pages, page_size, ...] flattened to slots); the tree's own KV is dense [T, ...]
with T = B·n rows, request b's node i at row b·n + i.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from .. import _checks as C

FLOATS = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
INTS = (torch.int32, torch.int64)


@dataclasses.dataclass
class Problem:
    layout: str                  # "mla" | "gqa"
    q_a: torch.Tensor            # [T, Hq, Da]
    q_b: torch.Tensor | None     # [T, Hq, Db] (MLA rope part) or None
    k_cache: torch.Tensor        # [slots, Hkv, Dqk]
    v_cache: torch.Tensor        # [slots, Hkv, Dv] (MLA: a view of k_cache[..., :Dv])
    k_tree: torch.Tensor         # [T, Hkv, Dqk]
    v_tree: torch.Tensor         # [T, Hkv, Dv]
    page_size: int
    page_table: torch.Tensor     # int32 [B, max_pages]
    prefix_lens: torch.Tensor    # int32 [B]
    mask_bits: torch.Tensor      # int32 [B, n, ceil(n/32)]
    sm_scale: float
    B: int
    n: int

    @property
    def T(self) -> int:
        return self.B * self.n

    @property
    def Hq(self) -> int:
        return self.q_a.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k_cache.shape[1]

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def Dqk(self) -> int:
        return self.k_cache.shape[2]

    @property
    def Dv(self) -> int:
        return self.v_cache.shape[2]

    @property
    def dtype(self) -> torch.dtype:
        return self.q_a.dtype

    def q_full(self) -> torch.Tensor:
        """[T, Hq, Dqk] (a concatenation for MLA)."""
        return self.q_a if self.q_b is None else torch.cat([self.q_a, self.q_b], dim=-1)


def _mask_bits(tree_mask, B: int, n: int, device) -> torch.Tensor:
    bits = getattr(tree_mask, "mask_bits", tree_mask)  # a TreeBatch works too
    words = (n + 31) // 32
    if isinstance(bits, torch.Tensor) and bits.dtype == torch.bool:
        from ..tree import pack_mask
        C.tensor("tree_mask", bits, ndim=3, device=device)
        C.shape("tree_mask", bits, (B, n, n))
        return pack_mask(bits, words).contiguous()
    C.tensor("tree_mask", bits, ndim=3, dtypes=(torch.int32,), device=device)
    C.shape("tree_mask", bits, (B, n, words))
    return bits.contiguous()


def _page_size(name: str, cache: torch.Tensor, ps: int) -> None:
    if ps < 1:
        raise ValueError(f"{name} must have a page size (dimension 1) >= 1, got shape {tuple(cache.shape)}")


def make_problem(q, kv_cache, page_table, prefix_lens, tree_kv, tree_mask, sm_scale) -> Problem:
    """Check the public arguments (see `tree_verify_attention`) and build the internal form."""
    if isinstance(q, (tuple, list)):
        if len(q) != 2:
            raise ValueError(f"q must be a tensor (GQA) or a pair (q_nope, q_pe) (MLA), got {len(q)} items")
        layout = "mla"
        q_a = C.tensor("q_nope", q[0], ndim=3, dtypes=FLOATS)
        device = q_a.device
        q_b = C.tensor("q_pe", q[1], ndim=3, dtypes=(q_a.dtype,), device=device)
        if q_b.shape[:2] != q_a.shape[:2]:
            raise ValueError(f"q_pe must be [T, H, Dr] with q_nope's T, H; got {tuple(q_b.shape)} vs {tuple(q_a.shape)}")
    else:
        layout = "gqa"
        q_a = C.tensor("q", q, ndim=3, dtypes=FLOATS)
        q_b, device = None, q_a.device
    T, Hq, Da = q_a.shape
    Dqk = Da + (q_b.shape[2] if q_b is not None else 0)

    C.tensor("page_table", page_table, ndim=2, dtypes=INTS, device=device)
    B = page_table.shape[0]
    if B < 1:
        raise ValueError("page_table must have at least one row (one per request)")
    C.tensor("prefix_lens", prefix_lens, ndim=1, dtypes=INTS, device=device)
    C.shape("prefix_lens", prefix_lens, (B,))
    if T % B:
        raise ValueError(f"q has {T} rows, not a multiple of the batch size {B} (page_table rows)")
    n = T // B
    if not isinstance(sm_scale, (float, int)) or isinstance(sm_scale, bool) or not 0 < sm_scale < math.inf:
        raise ValueError(f"sm_scale must be a positive finite float, got {sm_scale!r}")

    if layout == "mla":
        cache = C.tensor("kv_cache", kv_cache, dtypes=(q_a.dtype,), device=device)
        if cache.dim() == 4 and cache.shape[2] == 1:
            cache = cache.squeeze(2)
        if cache.dim() != 3 or cache.shape[-1] != Dqk:
            raise ValueError(f"kv_cache must be [pages, page_size, {Dqk}] (c_kv ‖ k_pe), got {tuple(kv_cache.shape)}")
        P, ps, _ = cache.shape
        _page_size("kv_cache", kv_cache, ps)
        k_cache = cache.reshape(P * ps, 1, Dqk)
        v_cache = k_cache[..., :Da]
        tree = C.tensor("tree_kv", tree_kv, dtypes=(q_a.dtype,), device=device)
        if tree.dim() == 3 and tree.shape[1] == 1:
            tree = tree.squeeze(1)
        if tuple(tree.shape) != (T, Dqk):
            raise ValueError(f"tree_kv must be [{T}, {Dqk}] (the tree tokens' c_kv ‖ k_pe), got {tuple(tree_kv.shape)}")
        k_tree = tree.reshape(T, 1, Dqk)
        v_tree = k_tree[..., :Da]
    else:
        if not isinstance(kv_cache, (tuple, list)) or len(kv_cache) != 2:
            raise TypeError("kv_cache must be a pair (k_cache, v_cache) for GQA")
        kc = C.tensor("k_cache", kv_cache[0], ndim=4, dtypes=(q_a.dtype,), device=device)
        vc = C.tensor("v_cache", kv_cache[1], ndim=4, dtypes=(q_a.dtype,), device=device)
        P, ps, Hkv, D = kc.shape
        _page_size("k_cache", kc, ps)
        if D != Dqk:
            raise ValueError(f"k_cache head dim {D} differs from q's {Dqk}")
        if vc.shape[:3] != kc.shape[:3]:
            raise ValueError(f"v_cache must be [pages, page_size, Hkv, Dv] like k_cache, got {tuple(vc.shape)}")
        if Hkv < 1 or Hq % Hkv:
            raise ValueError(f"q heads ({Hq}) must be a multiple of k_cache heads ({Hkv})")
        k_cache, v_cache = kc.reshape(P * ps, Hkv, D), vc.reshape(P * ps, Hkv, vc.shape[3])
        if not isinstance(tree_kv, (tuple, list)) or len(tree_kv) != 2:
            raise TypeError("tree_kv must be a pair (k_tree, v_tree) for GQA")
        k_tree = C.tensor("k_tree", tree_kv[0], ndim=3, dtypes=(q_a.dtype,), device=device)
        v_tree = C.tensor("v_tree", tree_kv[1], ndim=3, dtypes=(q_a.dtype,), device=device)
        C.shape("k_tree", k_tree, (T, Hkv, D))
        C.shape("v_tree", v_tree, (T, Hkv, v_cache.shape[2]))
    mask_bits = _mask_bits(tree_mask, B, n, device)
    return Problem(layout, q_a, q_b, k_cache, v_cache, k_tree, v_tree, int(ps),
                   page_table.to(torch.int32).contiguous(), prefix_lens.to(torch.int32).contiguous(),
                   mask_bits, float(sm_scale), B, n)


def check_contents(prob: Problem, max_prefix_len: int | None = None) -> None:
    """The checks that read the tensors' contents: prefix lengths within [0, the page table's capacity]
    and max_prefix_len, and every page a request uses inside the cache. Cheap on CPU tensors; on CUDA they
    would cost a device sync per call, so there they are preconditions (see tree_verify_attention).
    Non-finite q / K / V need no check: they reach the output as NaN, never as a finite value."""
    if max_prefix_len is not None:
        C.integer("max_prefix_len", max_prefix_len, minimum=0)
    if prob.q_a.device.type != "cpu":
        return
    lens = prob.prefix_lens.to(torch.int64)
    capacity = prob.page_table.shape[1] * prob.page_size
    if bool((lens < 0).any()) or bool((lens > capacity).any()):
        raise ValueError(f"prefix_lens must be in [0, {capacity}] (page_table columns x page size), "
                         f"got {lens.tolist()}")
    if max_prefix_len is not None and bool((lens > max_prefix_len).any()):
        raise ValueError(f"max_prefix_len ({max_prefix_len}) must be >= every prefix length, got "
                         f"{int(lens.max())}")
    pages = prob.k_cache.shape[0] // prob.page_size
    used = torch.arange(prob.page_table.shape[1]) < ((lens + prob.page_size - 1) // prob.page_size)[:, None]
    table = prob.page_table.to(torch.int64)
    bad = used & ((table < 0) | (table >= pages))
    if bool(bad.any()):
        b, j = (int(x) for x in bad.nonzero()[0])
        raise ValueError(f"page_table[{b}, {j}] = {int(table[b, j])} is not a page of the cache (0..{pages - 1}) "
                         f"but request {b} uses it (prefix length {int(lens[b])})")


def unpack_mask(mask_bits: torch.Tensor, n: int) -> torch.Tensor:
    """int32 [..., n, W] → bool [..., n, n] (bit j%32 of word j//32)."""
    shifts = torch.arange(32, device=mask_bits.device, dtype=torch.int64)
    bits = (mask_bits.to(torch.int64).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*mask_bits.shape[:-1], -1)[..., :n].bool()


def prefix_slots(prob: Problem, keys: torch.Tensor) -> torch.Tensor:
    """Cache slot of key positions `keys` [K] for every request → int64 [B, K]. Positions past the table and
    page entries outside the cache (padding, e.g. −1) are clamped into range: only keys below a request's
    prefix length are ever visible, and those are checked (check_contents)."""
    pages = torch.clamp(keys // prob.page_size, max=prob.page_table.shape[1] - 1)
    table = prob.page_table.to(torch.int64)[:, pages].clamp(0, prob.k_cache.shape[0] // prob.page_size - 1)
    return table * prob.page_size + keys % prob.page_size


def cache_4d(flat: torch.Tensor, page_size: int) -> torch.Tensor:
    """[slots, Hkv, D] (a view of the paged cache) → [pages, page_size, Hkv, D], as the prefix libraries read it."""
    return flat.unflatten(0, (-1, page_size))


def empty_rows_to_neg_inf(prob: Problem, lse: torch.Tensor) -> torch.Tensor:
    """Requests with no prefix have no keys: force LSE −inf whatever a prefix library wrote there."""
    empty = (prob.prefix_lens == 0).repeat_interleave(prob.n).unsqueeze(1)
    return torch.where(empty, torch.full_like(lse, -math.inf), lse)
