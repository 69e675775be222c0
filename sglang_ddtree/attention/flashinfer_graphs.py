"""FlashInfer's kernels inside the served verify's CUDA graphs, with no host read of any length.

FlashInfer plans a batch on the host from its KV lengths, which SGLang knows there only as an upper bound under
overlap scheduling; reading the exact lengths would be a sync every round. So each prefix here keeps of
FlashInfer's plan only what does not depend on the lengths (made once), and one op writes the rest on the device
every round from the exact lengths: `FlashInferPrefix` (fa2 paged prefill, MHA/GQA; `fa2_schedule`) and
`FlashInferMLAPrefix` (FlashInfer-MLA; `mla_schedule`). The standalone cascade's library adapters, which plan on
the host per batch, is flashinfer.py.
"""
from __future__ import annotations

import torch

from .native import MLA_LATENT, MLA_ROPE

# --- FlashInfer's paged prefill (MHA/GQA) ----------------------------------------------------------------------
#
# FlashInfer plans a batch on the host (BatchPrefillWithPagedKVCacheWrapper.plan -> PrefillPlan in
# include/flashinfer/attention/scheduler.cuh): each request's KV is cut into chunks of kv_chunk_size, every
# (request, query tile, KV chunk) is one CTA, and the chunk counts come from the host's KV lengths. The kernel
# (BatchPrefillWithPagedKVCacheDevice, prefill.cuh) counts a request's chunks again from the *device* lengths
# (num_kv_chunks = ceil(kv_len / kv_chunk_size)) to place its partial outputs, and the merge
# (VariableLengthMergeStates) reads them at the plan's merge_indptr. Planned with a host upper bound of the
# prefix (what SGLang has under overlap scheduling), a request whose bound spans more chunks than its exact
# length writes with one stride and is merged with another: wrong rows, no error. Reading the exact lengths on
# the host is a sync every round. So the host plan is made once per (width, batch): in CUDA-graph mode its
# grid (padded_batch_size), query tile and buffer offsets depend on the batch and the width only. What depends
# on the lengths — the chunk size, which CTAs are live, the partial-output and merge offsets — is written on
# the device every round from the exact lengths (`Fa2Schedule`), where the kernel reads it.

FI_HEAD_DIMS = (64, 128, 256)  # fa2 prefill: head_dim_vo >= 64 (KernelTraits::IsInvalid: NUM_MMA_D_VO < 4)
FI_MIN_CHUNK = 128             # FlashInfer's smallest KV chunk at page size 1 (PrefillSplitQOKVIndptr)


def fa2_cta_tile_q(packed_qo_len: int, head_dim: int) -> int:
    """FlashInfer's FA2DetermineCtaTileQ (include/flashinfer/utils.cuh), sm80 and newer."""
    if head_dim >= 512:
        return 16 if packed_qo_len <= 32 else 32
    if packed_qo_len > 64 and head_dim < 256:
        return 128
    return 64 if packed_qo_len > 16 else 16


def fa2_graph_plan(bs: int, n: int, q_heads: int, kv_heads: int, head_dim: int, sms: int) -> dict:
    """What FlashInfer's CUDA-graph plan of `bs` requests of `n` queries fixes whatever the KV lengths
    (PrefillSplitQOKVIndptr and PrefillPlanImpl with enable_cuda_graph): the query tile, the grid
    (padded_batch_size), the CTA budget for splitting (max_batch_size_if_split), the int workspace's buffer
    offsets and both workspaces' sizes in bytes."""
    group, rows = q_heads // kv_heads, bs * n
    tile = fa2_cta_tile_q((rows - bs + 1) * group, head_dim)
    max_split = (2 * sms) // kv_heads
    padded = max(max_split, -(-rows * group // tile) + bs - 1)
    offsets, end = {}, 0
    for name, size, align in (("request_indices", 4 * padded, 16), ("qo_tile_indices", 4 * padded, 16),
                              ("kv_tile_indices", 4 * padded, 16), ("o_indptr", 4 * (bs + 1), 16),
                              ("kv_chunk_size", 4, 1), ("total_num_rows", 4, 16),
                              ("merge_indptr", 4 * (rows + 1), 16), ("block_valid_mask", padded, 16)):
        end = -(-end // align) * align
        offsets[name], end = end, end + size
    v_bytes = q_heads * padded * tile * head_dim * 4  # FlashInfer sizes tmp_v in floats
    s_offset = -(-v_bytes // 16) * 16
    return {"cta_tile_q": tile, "padded": padded, "max_split": max_split, "offsets": offsets, "int_bytes": end,
            "v_offset": 0, "s_offset": s_offset, "float_bytes": s_offset + q_heads * padded * tile * 4}


class Fa2Schedule:
    """The length-dependent part of one FlashInfer CUDA-graph plan, written on the device.

    The live CTAs are a fixed grid: request b, query tile t < ceil(n·G / cta_tile_q), chunk k < kmax, with
    kmax = max(1, max_batch_size_if_split // tiles // bs) (so the grid fits FlashInfer's own CTA budget, as its
    host search does), written once. Every round: chunk size C = max(128, ceil(max_b len_b / kmax)), request b's
    chunk count c_b = ceil(max(len_b, 1) / C) (the kernel's own count), CTA (b, t, k) live iff k < c_b,
    partial-output offsets o_indptr[b] = n·Σ_{b'<b} c_b' and merge offsets o_indptr[b] + (i + 1)·c_b for its
    query i — one launch (the fa2_schedule op; its rule is kernels/fa2_schedule.h), no host read. For requests of
    one length this is FlashInfer's own schedule (its search lands on the same C); with mixed lengths the shorter
    requests get fewer chunks than it would give them."""

    def __init__(self, int_ws: torch.Tensor, plan_info, bs: int, n: int, group: int, max_split: int):
        (padded, rows, rows_off, tile, req_off, qo_off, kv_off, merge_off, o_off, chunk_off, _v, _s, valid_off,
         graph, split) = (int(x) for x in plan_info)
        if not (graph and split) or rows != bs * n:
            raise RuntimeError(f"FlashInfer's plan for {bs} requests x {n} queries is not the CUDA-graph split plan "
                               f"this schedule writes (graph {graph}, split {split}, rows {rows})")
        if any(off % 4 for off in (rows_off, req_off, qo_off, kv_off, merge_off, o_off, chunk_off)):
            raise RuntimeError("FlashInfer's int workspace offsets are not 4-byte aligned")
        from .. import ops

        ops.ensure_backend("cuda" if int_ws.device.type == "cuda" else "cpu")
        self._write = ops.op("fa2_schedule")  # resolved once: write runs every forward
        tiles = -(-n * group // tile)
        self.bs, self.n, self.tiles, self.kmax = bs, n, tiles, max(1, max_split // tiles // bs)
        self.live = bs * tiles * self.kmax
        if self.live > padded:
            raise RuntimeError(f"{self.live} CTAs do not fit FlashInfer's grid of {padded}")
        i32 = int_ws[: int_ws.numel() // 4 * 4].view(torch.int32)
        view = lambda off, size: i32[off // 4: off // 4 + size]  # noqa: E731
        self.o_indptr, self.merge_indptr = view(o_off, bs + 1), view(merge_off, rows + 1)
        self.chunk, self.valid = view(chunk_off, 1), int_ws[valid_off: valid_off + padded].view(torch.bool)
        e = torch.arange(self.live, device=int_ws.device, dtype=torch.int64)
        for off, vals in ((req_off, e // (tiles * self.kmax)), (qo_off, (e // self.kmax) % tiles),
                          (kv_off, e % self.kmax)):
            buf = view(off, padded)
            buf.zero_()
            buf[: self.live].copy_(vals)
        self.valid.zero_()
        self.o_indptr[:1].zero_(), self.merge_indptr[:1].zero_()
        view(rows_off, 1).fill_(rows)

    def write(self, lens: torch.Tensor) -> None:
        """This round's schedule from the exact prefix lengths lens [bs] (device, int32 or int64)."""
        self._write(lens[: self.bs].contiguous(), self.n, self.tiles, self.kmax, FI_MIN_CHUNK, self.valid[: self.live],
                    self.o_indptr, self.merge_indptr, self.chunk)


def _host(values, device) -> torch.Tensor:
    """Plan inputs on the host, pinned where the device is CUDA: the plan's copies stay asynchronous."""
    t = torch.tensor(values, dtype=torch.int32)
    return t.pin_memory() if torch.device(device).type == "cuda" else t


def _float_workspace(workspace, need: int, device) -> torch.Tensor:
    """The target backend's own FlashInfer workspace where it is on this device and large enough (same stream as
    ours: never used concurrently), else a new one of `need` bytes."""
    if workspace is not None and workspace.device == device and workspace.numel() * workspace.element_size() >= need:
        return workspace
    return torch.empty(need, dtype=torch.uint8, device=device)


def _fi_wrapper_class():
    import flashinfer

    return flashinfer.BatchPrefillWithPagedKVCacheWrapper


class _Buffers:
    """The static buffers FlashInfer's graph-mode wrappers read, for batches of up to `cap` requests; each
    wrapper keeps the set it was made with (a captured graph reads those addresses for good)."""

    def __init__(self, cap: int, context: int, device):
        self.cap, self.device = cap, device
        self.kv_indptr = torch.zeros(cap + 1, dtype=torch.int32, device=device)
        self.kv_indices = torch.zeros(max(1, cap * context), dtype=torch.int32, device=device)
        self.last_page_len = torch.ones(cap, dtype=torch.int32, device=device)  # page size 1: every page full
        self.qo_indptr = {}

    def qo(self, n: int) -> torch.Tensor:
        if n not in self.qo_indptr:
            self.qo_indptr[n] = torch.arange(0, (self.cap + 1) * n, n, dtype=torch.int32, device=self.device)
        return self.qo_indptr[n]


class FlashInferPrefix:
    """FlashInfer's fa2 paged prefill (BatchPrefillWithPagedKVCacheWrapper, the kernel family of SGLang's own
    FlashInfer verify) over every request's prefix, all n queries of a request against its first lens[b] slots
    of req_to_token, no mask, returning the base-2 LSE — inside CUDA graphs, with no host read of any length.

    The cache is addressed by token slot (page size 1 to FlashInfer, [slots, Hkv, D] as SGLang's FlashInfer
    backend passes it), so every SGLang page size is served. One wrapper per (width, batch), made and planned
    once when first met (module docstring above `FI_HEAD_DIMS`: why once); `prepare` (the forward's metadata,
    out of the graph, every replay) writes the slot lists and the length-dependent schedule into that wrapper's
    static buffers; `run` (per layer, inside the graph) is FlashInfer's kernel and its merge."""

    def __init__(self, device, *, q_heads: int, kv_heads: int, head_dim: int, dtype, context: int, max_bs: int,
                 widths, sms: int, workspace: torch.Tensor | None = None):
        if head_dim not in FI_HEAD_DIMS:
            raise ValueError(f"FlashInfer's paged prefill takes head dims {FI_HEAD_DIMS}, got {head_dim}")
        if q_heads % kv_heads:
            raise ValueError(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")
        self.device, self.dtype = torch.device(device), dtype
        from .. import ops

        # prepare's gather_prefix_slots is the project's op: its library is loaded here, as native's entry points
        # load theirs (not loaded, a CUDA call finds only the CPU kernel: NotImplementedError)
        ops.ensure_backend("cuda" if self.device.type == "cuda" else "cpu")
        self.hq, self.hkv, self.d, self.context, self.sms = q_heads, kv_heads, head_dim, int(context), int(sms)
        self._bufs = _Buffers(int(max_bs), self.context, self.device)
        need = max(self._shape(int(max_bs), int(w))["float_bytes"] for w in widths)
        self.float_ws = _float_workspace(workspace, need, self.device)
        self._plans = {}  # (n, bs) -> (wrapper, schedule, buffers)

    def _shape(self, bs: int, n: int) -> dict:
        return fa2_graph_plan(bs, n, self.hq, self.hkv, self.d, self.sms)

    def plan(self, n: int, bs: int):
        """The wrapper of (n, bs), made and planned the first time. The plan writes its own placeholder lengths
        into the static buffers, so it runs before `prepare` writes the round's."""
        key = (int(n), int(bs))
        if key in self._plans:
            return self._plans[key]
        n, bs = key
        if bs > self._bufs.cap:  # an eager batch above every graph's: a new set, the old ones stay with theirs
            self._bufs = _Buffers(bs, self.context, self.device)
        bufs, shape = self._bufs, self._shape(bs, n)
        if self.float_ws.numel() * self.float_ws.element_size() < shape["float_bytes"]:
            self.float_ws = torch.empty(shape["float_bytes"], dtype=torch.uint8, device=self.device)
        wrapper = _fi_wrapper_class()(
            self.float_ws, "NHD", use_cuda_graph=True, backend="fa2", qo_indptr_buf=bufs.qo(n)[: bs + 1],
            paged_kv_indptr_buf=bufs.kv_indptr[: bs + 1], paged_kv_indices_buf=bufs.kv_indices,
            paged_kv_last_page_len_buf=bufs.last_page_len[:bs])
        # its own small int workspace: the static part of the schedule is written there once
        int_ws = torch.zeros(-(-(shape["int_bytes"] + 256) // 16) * 16, dtype=torch.uint8, device=self.device)
        wrapper.reset_workspace_buffer(self.float_ws, int_ws)
        # placeholder lengths (1 each: in CUDA-graph mode the plan's host result does not depend on them); host
        # values pinned and the indices on the device, so none of the plan's copies waits for the GPU
        host = lambda v: _host(v, self.device)  # noqa: E731
        wrapper.plan(host([i * n for i in range(bs + 1)]), host(list(range(bs + 1))),
                     torch.zeros(bs, dtype=torch.int32, device=self.device), host([1] * bs), self.hq, self.hkv,
                     self.d, 1, head_dim_vo=self.d, causal=False, q_data_type=self.dtype, kv_data_type=self.dtype,
                     non_blocking=True)
        # FlashInfer keeps the plan's host result in _plan_info (SGLang's fast_prefill_plan sets it the same way)
        sched = Fa2Schedule(int_ws, list(wrapper._plan_info), bs, n, self.hq // self.hkv, shape["max_split"])
        self._plans[key] = (wrapper, sched, bufs)
        return self._plans[key]

    def prepare(self, n: int, bs: int, req_to_token: torch.Tensor, rows: torch.Tensor, lens: torch.Tensor):
        """A forward's metadata: request b's prefix is req_to_token[rows[b], :lens[b]] (device tensors, [bs])."""
        from .. import ops

        _, sched, bufs = self.plan(n, bs)
        ops.op("gather_prefix_slots")(req_to_token, rows[:bs], lens[:bs], bufs.kv_indptr, bufs.kv_indices)
        sched.write(lens)

    def run(self, n: int, bs: int, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, sm_scale: float):
        """q [bs·n, Hq, D]; caches [slots, Hkv, D]. Returns (O [bs·n, Hq, D], LSE base 2 [bs·n, Hq])."""
        wrapper = self._plans[(n, bs)][0]
        wrapper._sm_scale = float(sm_scale)  # what its forward_return_lse sets; run() reads it
        # the merge writes every row, so the outputs need no zero-fill (run's own default is a memset a layer)
        o = torch.empty(*q.shape[:-1], v_cache.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        return wrapper.run(q, (k_cache, v_cache), out=o, lse=lse, return_lse=True)


# --- FlashInfer-MLA ---------------------------------------------------------------------------------------------
#
# FlashInfer-MLA (BatchMLAPagedAttentionWrapper, SGLang's flashinfer MLA backend's kernel; fa3 on Hopper, fa2
# elsewhere) plans on the host (MLAPlan, include/flashinfer/attention/scheduler.cuh): every (request, query tile,
# KV chunk) is a work with its own KV range, and the kernel reads no KV length but the work's — so a plan made from
# SGLang's host upper bound of a prefix attends past its end. What the plan fixes whatever the lengths is the grid
# (cluster size from the query shape, one cluster per SM or two SMs) and the buffers' offsets (sized for
# MLA_MAX_WORKS works and one merge CTA an SM); the works, their KV ranges, partial-output rows and merges are
# written on the device every round from the exact lengths (`mla_schedule`, kernels/mla_schedule.h).

MLA_MAX_WORKS = 16384  # MLAPlan's max_total_num_works: the int workspace holds this many works
MLA_CTA_TILE_Q = 64    # MLAPlan's cta_tile_q
# MLAPlanInfo's offsets (its vector's positions 2..15) in the order the mla_schedule op takes them
_MLA_INFO_ORDER = (2, 3, 4, 10, 11, 12, 13, 14, 15, 5, 6, 7, 8, 9)


def mla_graph_plan(n: int, heads: int, sms: int) -> dict:
    """What FlashInfer's MLA plan of requests of n queries x `heads` heads fixes whatever the KV lengths: the
    cluster size (2 CTAs where a request packs more than 64 query rows), clusters (its grid's y), the query tile of
    a cluster, and the bytes of both workspaces (AlignedAllocator, 16-byte aligned, in MLAPlan's order)."""
    cluster = 2 if n * heads > 64 else 1
    clusters, tile = sms // cluster, MLA_CTA_TILE_Q * cluster
    end = 0
    for size in [MLA_MAX_WORKS] * 3 + [sms] * 5 + [MLA_MAX_WORKS] * 6:
        end = -(-end // 16) * 16 + 4 * size
    o_bytes = 2 * clusters * tile * 2 * MLA_LATENT
    return {"cluster_size": cluster, "clusters": clusters, "tile": tile, "tiles": -(-n * heads // tile),
            "int_bytes": end, "float_bytes": -(-o_bytes // 16) * 16 + 2 * clusters * tile * 4}


def _fi_mla_wrapper_class():
    import flashinfer

    return flashinfer.mla.BatchMLAPagedAttentionWrapper


class FlashInferMLAPrefix:
    """FlashInfer's MLA kernel over every request's latent prefix, all n queries of a request against its first
    lens[b] slots of req_to_token, no mask, returning the base-2 LSE — inside CUDA graphs, with no host read of
    any length (above MLA_MAX_WORKS: why the schedule is written on the device).

    The cache is addressed by token slot ([slots, 1, 576] seen as pages of one slot), so every SGLang page size and
    MLA backend is served. One wrapper per width, planned once with placeholder lengths (its plan depends on the
    width only), reading the slot lists of batches up to max_bs (an eager batch above gets its own set and
    wrappers: captured graphs keep theirs); the widths share one int workspace, which `prepare` (the forward's
    metadata, out of the graph) fills with the slot lists and the round's schedule; `run` (per layer, inside the
    graph) is FlashInfer's kernel and its merge."""

    def __init__(self, device, *, heads: int, dtype, context: int, max_bs: int, widths, sms: int,
                 workspace: torch.Tensor | None = None):
        self.device, self.dtype, self.hq, self.sms = torch.device(device), dtype, int(heads), int(sms)
        from .. import ops

        ops.ensure_backend("cuda" if self.device.type == "cuda" else "cpu")
        self._schedule = ops.op("mla_schedule")  # resolved once: prepare runs every forward
        self.context, self.widths = int(context), tuple(int(w) for w in widths)
        self._sets = []  # slot-list buffers by capacity (a graph reads the set its wrapper was made with)
        self._buffers(int(max_bs))
        need = max(mla_graph_plan(w, self.hq, self.sms)["float_bytes"] for w in self.widths)
        self.float_ws = _float_workspace(workspace, need, self.device)
        size = -(-(mla_graph_plan(1, self.hq, self.sms)["int_bytes"] + 256) // 16) * 16
        self.int_ws = torch.zeros(size, dtype=torch.uint8, device=self.device)
        self._pinned = torch.zeros(size, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        self._plans = {}  # (n, buffer set) -> (wrapper, its schedule's shape, its 14 int32 offsets, the set)

    def _buffers(self, bs: int) -> int:
        """The index of the first slot-list set that holds bs requests, made if none does."""
        for i, bufs in enumerate(self._sets):
            if bs <= bufs.cap:
                return i
        for w in self.widths:
            s = mla_graph_plan(w, self.hq, self.sms)
            if s["tiles"] * bs + 2 * s["clusters"] > MLA_MAX_WORKS:
                raise ValueError(f"{bs} requests of width {w} x {self.hq} heads may need more than FlashInfer's "
                                 f"{MLA_MAX_WORKS} MLA works")
        self._sets.append(_Buffers(bs, self.context, self.device))
        return len(self._sets) - 1

    def plan(self, n: int, bs: int = 1):
        """The wrapper of width n for batches of bs, made and planned the first time (one request of one slot: in
        its plan only the grid and the offsets are kept, and those depend on the width alone)."""
        key = (int(n), self._buffers(int(bs)))
        if key in self._plans:
            return self._plans[key]
        n, bufs = key[0], self._sets[key[1]]
        dev = self.device
        wrapper = _fi_mla_wrapper_class()(
            self.float_ws, use_cuda_graph=True, qo_indptr=torch.zeros(2, dtype=torch.int32, device=dev),
            kv_indptr=torch.zeros(2, dtype=torch.int32, device=dev), kv_indices=bufs.kv_indices,
            kv_len_arr=torch.zeros(1, dtype=torch.int32, device=dev), backend="auto")
        # the widths share one small int workspace (FlashInfer's own is 8 MiB a wrapper): every forward's metadata
        # writes the whole schedule there before its layers read it
        wrapper._int_workspace_buffer, wrapper._pin_memory_int_workspace_buffer = self.int_ws, self._pinned
        wrapper.plan(_host([0, n], dev), _host([0, 1], dev), torch.zeros(1, dtype=torch.int32, device=dev),
                     _host([1], dev), self.hq, MLA_LATENT, MLA_ROPE, 1, False, 1.0, self.dtype, self.dtype)
        shape = mla_graph_plan(n, self.hq, self.sms)
        info = [int(x) for x in wrapper._plan_info]
        if info[0] != shape["cluster_size"] or info[1] != shape["clusters"]:
            raise RuntimeError(f"FlashInfer's MLA plan for width {n} has a grid of {info[0]} x {info[1]}, not the "
                               f"{shape['cluster_size']} x {shape['clusters']} this schedule writes")
        offsets = [info[i] for i in _MLA_INFO_ORDER]
        if any(off % 4 for off in offsets):
            raise RuntimeError("FlashInfer's MLA int workspace offsets are not 4-byte aligned")
        self._plans[key] = (wrapper, shape, [off // 4 for off in offsets], bufs)
        return self._plans[key]

    def prepare(self, n: int, bs: int, req_to_token: torch.Tensor, rows: torch.Tensor, lens: torch.Tensor):
        """A forward's metadata: request b's prefix is req_to_token[rows[b], :lens[b]] (device tensors, [bs])."""
        from .. import ops

        _, shape, offsets, bufs = self.plan(n, bs)
        ops.op("gather_prefix_slots")(req_to_token, rows[:bs], lens[:bs], bufs.kv_indptr, bufs.kv_indices)
        self._schedule(lens[:bs].contiguous(), bufs.kv_indptr, n, self.hq, shape["cluster_size"], shape["clusters"],
                       MLA_MAX_WORKS, self.sms, offsets, self.int_ws[: self.int_ws.numel() // 4 * 4].view(torch.int32))

    def run(self, n: int, q_nope: torch.Tensor, q_pe: torch.Tensor, cache: torch.Tensor, sm_scale: float):
        """q_nope [bs·n, H, 512], q_pe [bs·n, H, 64]; cache [slots, 1, 576] (latent ‖ rope). Returns (O [bs·n, H,
        512], LSE base 2 [bs·n, H])."""
        wrapper = self._plans[(n, self._buffers(q_nope.shape[0] // n))][0]
        wrapper._sm_scale = float(sm_scale)
        o = torch.empty_like(q_nope)  # the kernel or its merge writes every row
        lse = torch.empty(q_nope.shape[:2], dtype=torch.float32, device=q_nope.device)
        return wrapper.run(q_nope, q_pe, cache[..., :MLA_LATENT], cache[..., MLA_LATENT:], out=o, lse=lse,
                           return_lse=True)
