"""FlashInfer 0.6.15's MLA attention in CUDA-graph mode, emulated on the CPU in float64 (test helper).

`mla_plan` is MLAPlan (include/flashinfer/attention/scheduler.cuh, non-causal): FlashInfer's own host schedule of
a batch, its cost heap included (ties may pop in another order than std::pop_heap's: tests compare what does not
depend on that). `Wrapper` stands in for BatchMLAPagedAttentionWrapper(use_cuda_graph=True): plan() writes that
schedule into its int workspace at MLAPlan's offsets, and run() executes as the kernel (mla.cuh /
mla_hopper.cuh: BatchMLAPagedAttentionKernel and DevicePersistentMergeStates) does, from what is in the buffers at
run time only: each cluster's works from work_indptr, each work's query rows, KV range and partial-output row, then
the merge CTAs. It asserts what the real kernel would silently get wrong: a KV read past the work's kv_len, a
partial state the merge reads that no work wrote, an output row written twice or never.
The real library is checked against the same schedule on the GPU (tests/attention/test_flashinfer_mla_prefix_gpu.py).
"""
import heapq
import math

import torch

MAX_WORKS = 16384
NAMES = ("q_indptr", "kv_indptr", "partial_indptr", "merge_start", "merge_end", "merge_partial_start",
         "merge_partial_end", "merge_stride", "q_len", "kv_len", "q_start", "kv_start", "kv_end", "work_indptr")


def offsets(sms):
    """MLAPlan's int workspace layout (AlignedAllocator, 16-byte aligned): byte offset of each array, and the end."""
    off, end = {}, 0
    for name in NAMES:
        size = 4 * (sms if name.startswith("merge") else MAX_WORKS)
        end = -(-end // 16) * 16
        off[name], end = end, end + size
    return off, end


def _limit(x):
    x = max(x, 1)
    if x <= 8:
        return 32
    if x <= 16:
        return 64
    if x <= 32:
        return 128
    if x <= 64:
        return 192
    return -(-x // 256) * 256


def mla_plan(qo_indptr, kv_indptr, kv_lens, heads, sms):
    """MLAPlan on the host: {name: list} of the arrays it copies to the device, plus the grid and the limit."""
    bs = len(kv_lens)
    qo_lens = [qo_indptr[b + 1] - qo_indptr[b] for b in range(bs)]
    cluster = 2 if sum(q * heads for q in qo_lens) // bs > 64 else 1
    clusters, tile = sms // cluster, 64 * cluster
    total = sum(-(-q * heads // tile) * k for q, k in zip(qo_lens, kv_lens))
    limit = _limit(-(-total // clusters))
    heap = [(0.0, c) for c in range(clusters)]
    per = [[] for _ in range(clusters)]
    merges, partial = [], 0
    for b in range(bs):
        packed = qo_lens[b] * heads
        for j in reversed(range(-(-packed // tile))):
            remaining, start = kv_lens[b], 0
            split, rows = remaining > limit, min(tile, packed - j * tile)
            if split:
                chunks = max(remaining * cluster // limit, 1)
                step = -(-rows // chunks)
                row0 = qo_indptr[b] * heads + j * tile
                for o in range(0, rows, step):
                    merges.append((row0 + o, row0 + min(o + step, rows), partial + o,
                                   partial + -(-remaining // limit) * rows, rows))
            zero = remaining == 0
            while remaining > 0 or zero:
                cost, c = heapq.heappop(heap)
                take = min(remaining, limit)
                heapq.heappush(heap, (cost + 2 * tile + take, c))
                per[c].append((qo_indptr[b], kv_indptr[b], partial if split else -1, qo_lens[b], kv_lens[b], j * tile,
                               start, start + take))
                if split:
                    partial += rows
                remaining -= take
                start += take
                if zero:
                    break
    assert len(merges) <= sms
    works = [w for c in per for w in c]
    out = {name: [w[i] for w in works] for i, name in enumerate(
        ("q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start", "kv_start", "kv_end"))}
    out["work_indptr"] = [0]
    for c in per:
        out["work_indptr"].append(out["work_indptr"][-1] + len(c))
    for i, name in enumerate(("merge_start", "merge_end", "merge_partial_start", "merge_partial_end", "merge_stride")):
        out[name] = [m[i] for m in merges] + [0] * (sms - len(merges))
    out.update(cluster=cluster, clusters=clusters, limit=limit, partial_rows=partial)
    return out


def plan_info(sms, cluster, clusters, float_off=0):
    off, _ = offsets(sms)
    o_bytes = 2 * clusters * 64 * cluster * 2 * 512
    return [cluster, clusters] + [off[n] for n in NAMES] + [float_off, float_off + -(-o_bytes // 16) * 16]


def read(int_ws, sms, clusters):
    """The schedule a run would execute, read back from an int workspace at MLAPlan's offsets."""
    off, _ = offsets(sms)
    i32 = int_ws[: int_ws.numel() // 4 * 4].view(torch.int32)
    at = lambda name, n: i32[off[name] // 4: off[name] // 4 + n].tolist()  # noqa: E731
    s = {"work_indptr": at("work_indptr", clusters + 1)}
    works = s["work_indptr"][-1]
    for name in ("q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start", "kv_start", "kv_end"):
        s[name] = at(name, works)
    for name in NAMES[3:8]:
        s[name] = at(name, sms)
    return s


class Wrapper:
    """BatchMLAPagedAttentionWrapper(use_cuda_graph=True) on the CPU (page size 1 and above)."""

    sms = 8  # the emulated device's SM count (set it to what the code under test assumes)
    made = []
    fail_plan = None  # an exception plan() raises (a JIT or plan failure)

    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None, kv_indices=None,
                 kv_len_arr=None, backend="auto"):
        assert use_cuda_graph and kv_indices is not None
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = torch.zeros(8 << 20, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(8 << 20, dtype=torch.uint8)
        self._qo_indptr_buf, self._kv_indptr_buf = qo_indptr, kv_indptr
        self._kv_indices_buf, self._kv_len_arr_buf = kv_indices, kv_len_arr
        self._plan_info, self._sm_scale, self.runs = None, None, 0
        Wrapper.made.append(self)

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size,
             causal, sm_scale, q_data_type, kv_data_type, use_profiler=False):
        if Wrapper.fail_plan is not None:
            raise Wrapper.fail_plan
        assert not causal and head_dim_ckv == 512 and head_dim_kpe == 64
        assert all(t.device.type == "cpu" for t in (qo_indptr, kv_indptr, kv_len_arr)), \
            "the plan reads host tensors (a device one would be a sync)"
        host = mla_plan(qo_indptr.tolist(), kv_indptr.tolist(), kv_len_arr.tolist(), num_heads, self.sms)
        off, end = offsets(self.sms)
        assert self._int_workspace_buffer.numel() >= end, "int workspace too small"
        info = plan_info(self.sms, host["cluster"], host["clusters"])
        assert self._float_workspace_buffer.numel() >= info[-1] + 2 * host["clusters"] * 64 * host["cluster"] * 4, \
            "float workspace too small"
        i32 = self._int_workspace_buffer[: self._int_workspace_buffer.numel() // 4 * 4].view(torch.int32)
        for name in NAMES:
            vals = host[name]
            i32[off[name] // 4: off[name] // 4 + len(vals)] = torch.tensor(vals, dtype=torch.int32)
        self._qo_indptr_buf.copy_(qo_indptr), self._kv_indptr_buf.copy_(kv_indptr)
        self._kv_indices_buf[: len(kv_indices)].copy_(kv_indices), self._kv_len_arr_buf.copy_(kv_len_arr)
        self._plan_info, self._page_size, self._sm_scale = info, page_size, sm_scale

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False):
        assert self._plan_info is not None and return_lse and self._sm_scale is not None
        self.runs += 1
        cluster, clusters = self._plan_info[0], self._plan_info[1]
        tile, heads, ps = 64 * cluster, q_nope.shape[1], self._page_size
        capacity = 2 * clusters * tile  # partial rows the float workspace holds
        s = read(self._int_workspace_buffer, self.sms, clusters)
        assert s["work_indptr"][0] == 0 and s["work_indptr"][-1] <= MAX_WORKS
        idx = self._kv_indices_buf
        out = torch.empty_like(q_nope) if out is None else out
        lse = torch.empty(q_nope.shape[:2], dtype=torch.float32) if lse is None else lse
        written, parts = set(), {}
        for w in range(s["work_indptr"][-1]):
            qi, kvi, pi, q_len, kv_len, q0, k0, k1 = (s[n][w] for n in (
                "q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start", "kv_start", "kv_end"))
            assert k1 <= kv_len or k1 <= k0, f"work {w} reads keys {k0}..{k1} past its kv_len {kv_len}"
            j = torch.arange(k0, max(k0, k1))
            pos = kvi * ps + j
            slots = idx[pos // ps].long() * ps + pos % ps
            keys = torch.cat([ckv_cache.reshape(-1, 512)[slots], kpe_cache.reshape(-1, 64)[slots]], -1).double()
            for p in range(q0, min(q0 + tile, q_len * heads)):
                i, h = divmod(p, heads)
                qv = torch.cat([q_nope[qi + i, h], q_pe[qi + i, h]]).double()
                sc = (keys @ qv) * self._sm_scale
                if len(j):
                    o_h, l_h = torch.softmax(sc, 0) @ keys[:, :512], torch.logsumexp(sc, 0) / math.log(2)
                else:
                    o_h, l_h = torch.zeros(512, dtype=torch.float64), torch.tensor(-math.inf, dtype=torch.float64)
                if pi == -1:
                    assert (qi + i, h) not in written, f"row {qi + i} head {h} written twice"
                    written.add((qi + i, h))
                    out[qi + i, h], lse[qi + i, h] = o_h.to(out.dtype), float(l_h)
                else:
                    row = pi + (p - q0)
                    assert row < capacity, f"partial row {row} past the workspace's {capacity}"
                    assert row not in parts, f"partial row {row} written twice"
                    parts[row] = (o_h, l_h)
        for m in range(cluster * clusters):  # the merge CTAs of the grid
            start, end = s["merge_start"][m], s["merge_end"][m]
            p0, p1, stride = s["merge_partial_start"][m], s["merge_partial_end"][m], s["merge_stride"][m]
            for local in range(end - start):
                i, h = divmod(start + local, heads)
                states = [parts.get(r) for r in range(p0 + local, p1, stride)]
                assert states and None not in states, f"row {i} head {h}: the merge reads a partial no work wrote"
                ls = torch.stack([st[1] for st in states]) * math.log(2)
                wt = torch.softmax(ls, 0) if torch.isfinite(ls).any() else torch.zeros_like(ls)
                assert (i, h) not in written, f"row {i} head {h} written twice"
                written.add((i, h))
                out[i, h] = (wt[:, None] * torch.stack([st[0] for st in states])).sum(0).to(out.dtype)
                lse[i, h] = float(torch.logsumexp(ls, 0) / math.log(2))
        assert written == {(i, h) for i in range(q_nope.shape[0]) for h in range(heads)}, "rows never written"
        return out, lse
