"""One prefix library as one object with `plan` and `run` (FlashInfer's wrapper pattern): the interface of the
verify cascade's prefix half, implemented once per library in the library's own module (native.TreePrefix — our
kernel over the whole prefix —, flashmla.FlashMLA, flashinfer.FlashInfer — FlashInfer's paged prefill on an MHA/GQA
target, FlashInfer-MLA on an MLA one —, fa3.FA3) and registered there as the module's PREFIX, so that the registry
(prefixes.py: `served`, `run`) finds it by the prefix's name.

The served verify (sglang/tree_attention.TreeVerifyAttention) holds one object, built for its target:

  construction (start-up): the static buffers for batches of up to `max_bs`; a library that cannot plan raises
      `Unavailable` here, never at a request;
  reserve(bs) (before any CUDA-graph capture, and at each forward's metadata): what a batch of bs needs allocated
      before a graph captures its address;
  grow(bs): an eager batch above every graph's gets new buffers (a captured graph keeps the ones it read);
  plan(req_to_token, rows, lens, width, bs) (each forward's metadata, out of the graph and at every replay):
      what this forward's layers read, written into static buffers from request b's prefix req_to_token[rows[b],
      :lens[b]] (device tensors) — no host read of a length, so a graph replays at any prefix length; `width` is the
      forward's rows a request where `needs_width`, else None;
  run(q, q_pe, k_cache, v_cache, bs, n, hq, scale, q_whole) (each layer, inside the graph): (O, LSE, its base) of
      every query over its request's prefix, or None where the tree kernel's own call reads the prefix;
  tail(bs, n, group, kv_heads): the prefix our kernel's call over the tree reads (kv_indptr, kv_indices, splits):
      none after a library (`CascadePrefix`), the whole of it for the tree kernel.

The engine's cascade (attention/__init__.tree_verify_attention) runs the same libraries through the same objects'
second entry points, `plan_host(prob, state)` / `run_host(prob, state)` (static: per batch, not per target). Its
planning differs for good: it is eager and is handed the exact prefix lengths with a dense page table of any page
size (`Problem`), so it plans on the host from those lengths, once a batch for all layers (FlashMLA's split metadata,
FlashInfer's wrapper planned from the real lengths, its partial outputs placed by that plan); the server knows the
lengths on the host only as an upper bound (overlap scheduling) and replays CUDA graphs, so it keeps of a host plan
only what no length changes and writes the rest on the device every forward, reading SGLang's req_to_token and
KV pool. Both call one kernel entry per library (flashmla.attend / metadata, fa3.attend, FlashInfer's wrappers'
run).
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Target:
    """What a served prefix reads of the target it serves, at construction. `sgl` is the target's model runner as
    sglang/adapters/target_runner.Runner reads it: its verbs, never SGLang's objects (those used here: page_size,
    kv_buffers, q_heads, workspace, flashmla_q_heads; each library asks only its own, at construction)."""

    sgl: object
    req_to_token: torch.Tensor  # [request rows, context] token slots
    max_bs: int                 # the largest batch the static buffers hold before any growth
    widths: tuple               # the verify widths served (rows a request), ascending; the last is the widest
    sms: int                    # the device's SMs (1 off CUDA)
    tp: int = 1                 # tensor-parallel ranks: this rank serves its share of the query heads
    mla: bool = False           # an MLA target (one latent KV head of 576, values its first 512)

    @property
    def device(self) -> torch.device:
        return self.req_to_token.device

    @property
    def context(self) -> int:
        """The longest prefix a request can have: req_to_token's columns."""
        return int(self.req_to_token.shape[1])

    @property
    def n(self) -> int:
        """The widest verify."""
        return int(self.widths[-1])


class Unavailable(Exception):
    """A library that cannot serve this target, found at construction (a JIT, import or plan failure): str() is
    the reason, `library` the library's name for the logs."""

    def __init__(self, library: str, why: str):
        super().__init__(why)
        self.library = library


class PrefixAttention:
    """The interface (module docstring). `name` is the library as the logs name it."""

    name = "a prefix library"
    needs_width = False  # plan reads the forward's width (its plan or schedule is made per width)

    def __init__(self, target: Target):
        self.device = target.device

    def reserve(self, bs: int) -> None:
        """What a batch of bs needs allocated before a CUDA graph captures it (nothing by default)."""

    def grow(self, bs: int) -> None:
        """An eager batch of bs above every graph's: new static buffers (nothing by default)."""

    def plan(self, req_to_token, rows, lens, width, bs: int) -> None:
        raise NotImplementedError

    def run(self, q, q_pe, k_cache, v_cache, bs: int, n: int, hq: int, scale: float, q_whole=None):
        """(O [bs·n, hq, Dv], LSE [bs·n, hq], its base 'e' or '2') over each request's prefix, or None where the
        tail reads the prefix. q [bs·n, hq, D] (MLA: the latent part, q_pe its rope part, q_whole the two as SGLang
        handed them whole [bs·n, hq, 576] where it did, else None); caches [slots, Hkv, D] as SGLang's pool holds
        them."""
        raise NotImplementedError

    def tail(self, bs: int, n: int, group: int, kv_heads: int):
        """(kv_indptr [bs + 1], kv_indices, num_splits): the prefix our kernel's call over the tree reads."""
        raise NotImplementedError


class CascadePrefix(PrefixAttention):
    """A library over the prefix, our kernel over the tree alone (an empty prefix), merged by LSE: the tail's
    kv_indptr is all zeros and its slot list one unread entry."""

    def __init__(self, target: Target):
        super().__init__(target)
        self.no_prefix = torch.zeros(int(target.max_bs) + 1, dtype=torch.int32, device=self.device)
        self.kv_indices = torch.zeros(1, dtype=torch.int32, device=self.device)  # the tail reads none: never read

    def grow(self, bs: int) -> None:
        self.no_prefix = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)

    def tail(self, bs: int, n: int, group: int, kv_heads: int):
        return self.no_prefix[: bs + 1], self.kv_indices, 1


class PagedPrefix(CascadePrefix):
    """A library that reads the prefix through SGLang's page table (req_to_token's page columns ÷ the page size, as
    SGLang's fa3 and flashmla backends build it) and the prefix lengths on the device, both in static buffers."""

    def __init__(self, target: Target):
        super().__init__(target)
        self.page = target.sgl.page_size()
        self.block_table = torch.zeros(int(target.max_bs), -(-target.context // self.page), dtype=torch.int32,
                                       device=self.device)
        self.prefix_lens = torch.zeros(int(target.max_bs), dtype=torch.int32, device=self.device)

    def grow(self, bs: int) -> None:
        super().grow(bs)
        self.block_table = torch.zeros(bs, self.block_table.shape[1], dtype=torch.int32, device=self.device)
        self.prefix_lens = torch.zeros(bs, dtype=torch.int32, device=self.device)

    def plan(self, req_to_token, rows, lens, width, bs: int) -> None:
        torch.div(req_to_token[:, :: self.page].index_select(0, rows), self.page, rounding_mode="floor",
                  out=self.block_table[:bs])  # page columns only, two launches
        self.prefix_lens[:bs].copy_(lens)
