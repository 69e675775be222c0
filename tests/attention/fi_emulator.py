"""FlashInfer 0.6.15's paged prefill in CUDA-graph mode, emulated on the CPU in float64 (test helper).

`split_qo_kv` is PrefillSplitQOKVIndptr (include/flashinfer/attention/scheduler.cuh) with enable_cuda_graph:
FlashInfer's own host schedule of a batch. `Wrapper` stands in for BatchPrefillWithPagedKVCacheWrapper
(use_cuda_graph=True, backend fa2, NHD): plan() writes that host schedule into its int workspace at
PrefillPlanImpl's offsets, and run() executes as the fa2 kernel and VariableLengthMergeStates do, from what
is in the buffers at run time only — the CTA list, chunk size, live mask and offsets from the int workspace,
the KV from the indptr / indices / last-page buffers, each request's chunk count from its device length
(prefill.cuh: num_kv_chunks = ceil(max(kv_len, 1) / kv_chunk_size)). It asserts what the real kernel would
silently get wrong: a partial state the merge reads that no live CTA wrote, or one written twice.
The real library is checked against the same schedule on the GPU (tests/attention/test_flashinfer_prefix_gpu.py).
"""
import math

import torch

from sglang_ddtree.attention import flashinfer_graphs


def split_qo_kv(qo_lens, kv_lens, *, group, head_dim, kv_heads, sms, page_size=1):
    """FlashInfer's graph-mode host schedule for requests of qo_lens queries over kv_lens (token) keys."""
    bs, rows = len(qo_lens), sum(qo_lens)
    tile = flashinfer_graphs.fa2_cta_tile_q((rows - bs + 1) * group, head_dim)
    max_split = (2 * sms) // kv_heads
    padded = max(max_split, -(-rows * group // tile) + bs - 1)
    pages = [-(-k // page_size) for k in kv_lens]
    tiles = [-(-q * group // tile) for q in qo_lens]
    low, high = max(128 // page_size, 1), max([1] + pages)
    while low < high:  # PrefillBinarySearchKVChunkSize
        mid = (low + high) // 2
        if sum(t * -(-max(p, 1) // mid) for t, p in zip(tiles, pages)) > max_split:
            low = mid + 1
        else:
            high = mid
    chunk = low
    req, qo, kv, merge, o = [], [], [], [0], [0]
    for b in range(bs):
        chunks = -(-max(pages[b], 1) // chunk)
        for t in range(tiles[b]):
            for k in range(chunks):
                req.append(b), qo.append(t), kv.append(k)
        for _ in range(qo_lens[b]):
            merge.append(merge[-1] + chunks)
        o.append(o[-1] + qo_lens[b] * chunks)
    assert len(req) <= padded
    return {"chunk": chunk * page_size, "padded": padded, "tile": tile, "request_indices": req,
            "qo_tile_indices": qo, "kv_tile_indices": kv, "merge_indptr": merge, "o_indptr": o, "live": len(req)}


def read_schedule(int_ws, plan_info, bs, rows):
    """The schedule a run would execute, read back from an int workspace at the plan's offsets."""
    (padded, _rows, rows_off, tile, req_off, qo_off, kv_off, merge_off, o_off, chunk_off, _v, _s, valid_off,
     graph, split) = (int(x) for x in plan_info)
    i32 = int_ws[: int_ws.numel() // 4 * 4].view(torch.int32)
    at = lambda off, n: i32[off // 4: off // 4 + n].tolist()  # noqa: E731
    return {"padded": padded, "tile": tile, "request_indices": at(req_off, padded), "qo_tile_indices": at(qo_off, padded),
            "kv_tile_indices": at(kv_off, padded), "o_indptr": at(o_off, bs + 1), "chunk": at(chunk_off, 1)[0],
            "total_num_rows": at(rows_off, 1)[0], "merge_indptr": at(merge_off, rows + 1),
            "valid": int_ws[valid_off: valid_off + padded].view(torch.bool).tolist()}


class Wrapper:
    """BatchPrefillWithPagedKVCacheWrapper(use_cuda_graph=True, backend="fa2", kv_layout="NHD") on the CPU."""

    sms = 66  # the emulated device's SM count (set it to what the code under test assumes)
    made = []
    fail_plan = None  # an exception plan() raises (a JIT or plan failure)

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None, backend="auto"):
        assert kv_layout == "NHD" and use_cuda_graph and backend == "fa2"
        self.bs = len(qo_indptr_buf) - 1
        assert len(paged_kv_indptr_buf) == self.bs + 1 and len(paged_kv_last_page_len_buf) == self.bs
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = torch.zeros(8 << 10, dtype=torch.uint8)
        self._qo_indptr_buf, self._paged_kv_indptr_buf = qo_indptr_buf, paged_kv_indptr_buf
        self._paged_kv_indices_buf, self._paged_kv_last_page_len_buf = paged_kv_indices_buf, paged_kv_last_page_len_buf
        self._plan_info, self._sm_scale, self.runs = None, None, 0
        Wrapper.made.append(self)

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        self._float_workspace_buffer, self._int_workspace_buffer = float_workspace_buffer, int_workspace_buffer

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
             head_dim_qk, page_size, head_dim_vo=None, causal=False, q_data_type=None, kv_data_type=None,
             non_blocking=True):
        if Wrapper.fail_plan is not None:
            raise Wrapper.fail_plan
        assert len(qo_indptr) - 1 == self.bs and not causal and head_dim_vo == head_dim_qk and page_size == 1
        assert all(t.device.type == "cpu" for t in (qo_indptr, paged_kv_indptr, paged_kv_last_page_len)), \
            "the plan reads host tensors (a device one would be a sync)"
        qo = qo_indptr.tolist()
        kv = paged_kv_indptr.tolist()
        qo_lens = [qo[b + 1] - qo[b] for b in range(self.bs)]
        kv_lens = [kv[b + 1] - kv[b] for b in range(self.bs)]  # page size 1: one slot a page
        group, rows = num_qo_heads // num_kv_heads, qo[-1]
        host = split_qo_kv(qo_lens, kv_lens, group=group, head_dim=head_dim_vo, kv_heads=num_kv_heads, sms=self.sms)
        shape = flashinfer_graphs.fa2_graph_plan(self.bs, qo_lens[0], num_qo_heads, num_kv_heads, head_dim_vo, self.sms)
        off = shape["offsets"]
        ws = self._int_workspace_buffer
        assert ws.numel() >= shape["int_bytes"], "int workspace too small"
        assert self._float_workspace_buffer.numel() >= shape["float_bytes"], "float workspace too small"
        i32 = ws[: ws.numel() // 4 * 4].view(torch.int32)
        for name, vals in (("request_indices", host["request_indices"]), ("qo_tile_indices", host["qo_tile_indices"]),
                           ("kv_tile_indices", host["kv_tile_indices"]), ("o_indptr", host["o_indptr"]),
                           ("kv_chunk_size", [host["chunk"]]), ("total_num_rows", [rows]),
                           ("merge_indptr", host["merge_indptr"])):
            i32[off[name] // 4: off[name] // 4 + len(vals)] = torch.tensor(vals, dtype=torch.int32)
        ws[off["block_valid_mask"]: off["block_valid_mask"] + shape["padded"]] = (
            torch.arange(shape["padded"]) < host["live"]).to(torch.uint8)
        # graph mode: the host values go into the static buffers (the round's lengths come after the plan)
        self._qo_indptr_buf.copy_(qo_indptr), self._paged_kv_indptr_buf.copy_(paged_kv_indptr)
        self._paged_kv_indices_buf[: len(paged_kv_indices)].copy_(paged_kv_indices)
        self._paged_kv_last_page_len_buf.copy_(paged_kv_last_page_len)
        self._plan_info = [shape["padded"], rows, off["total_num_rows"], shape["cta_tile_q"], off["request_indices"],
                           off["qo_tile_indices"], off["kv_tile_indices"], off["merge_indptr"], off["o_indptr"],
                           off["kv_chunk_size"], shape["v_offset"], shape["s_offset"], off["block_valid_mask"], 1, 1]
        self._qo_indptr_last, self.hq, self.hkv = rows, num_qo_heads, num_kv_heads

    def run(self, q, paged_kv_cache, out=None, lse=None, return_lse=False):
        assert self._plan_info is not None and return_lse and self._sm_scale is not None
        assert q.shape[0] == self._qo_indptr_last and q.shape[1] == self.hq
        self.runs += 1
        k_cache, v_cache = paged_kv_cache
        if k_cache.dim() == 3:  # page size 1 (FlashInfer's _expand_4d)
            k_cache, v_cache = k_cache.unsqueeze(1), v_cache.unsqueeze(1)
        ps, hkv = k_cache.shape[1], k_cache.shape[2]
        assert hkv == self.hkv
        group = self.hq // hkv
        s = read_schedule(self._int_workspace_buffer, self._plan_info, self.bs, self._qo_indptr_last)
        qo_ptr, kv_ptr = self._qo_indptr_buf.tolist(), self._paged_kv_indptr_buf.tolist()
        last, idx = self._paged_kv_last_page_len_buf.tolist(), self._paged_kv_indices_buf
        tile, chunk = s["tile"], s["chunk"]
        assert chunk > 0, "kv_chunk_size 0"
        parts = {}  # partial-state row -> (O [Hq, D], LSE base 2 [Hq]) of the heads written
        for e in range(s["padded"]):
            if not s["valid"][e]:
                continue
            b, t, k = s["request_indices"][e], s["qo_tile_indices"][e], s["kv_tile_indices"][e]
            pages = kv_ptr[b + 1] - kv_ptr[b]
            kv_len = 0 if pages == 0 else (pages - 1) * ps + last[b]
            chunks = -(-max(kv_len, 1) // chunk)
            lo, hi = min(k * chunk, kv_len), min((k + 1) * chunk, kv_len)
            j = torch.arange(lo, hi)
            slots = idx[kv_ptr[b] + j // ps].long() * ps + j % ps
            keys, vals = k_cache.reshape(-1, hkv, k_cache.shape[-1])[slots], v_cache.reshape(-1, hkv, v_cache.shape[-1])[slots]
            qo_len = qo_ptr[b + 1] - qo_ptr[b]
            for p in range(t * tile, min((t + 1) * tile, qo_len * group)):
                i, r = divmod(p, group)
                for kh in range(hkv):
                    h = kh * group + r
                    row = s["o_indptr"][b] + i * chunks + k
                    sc = (q[qo_ptr[b] + i, h].double() @ keys[:, kh].double().T) * self._sm_scale
                    if len(j):
                        o_h, l_h = torch.softmax(sc, -1) @ vals[:, kh].double(), torch.logsumexp(sc, -1) / math.log(2)
                    else:
                        o_h, l_h = torch.zeros(v_cache.shape[-1], dtype=torch.float64), torch.tensor(-math.inf)
                    assert (row, h) not in parts, f"partial state {row} head {h} written twice"
                    parts[(row, h)] = (o_h, l_h)
        out = torch.empty(q.shape[0], self.hq, v_cache.shape[-1], dtype=q.dtype) if out is None else out
        lse = torch.empty(q.shape[0], self.hq, dtype=torch.float32) if lse is None else lse
        merge = s["merge_indptr"]
        for row in range(s["total_num_rows"]):
            for h in range(self.hq):
                states = [parts.get((m, h)) for m in range(merge[row], merge[row + 1])]
                assert None not in states, f"row {row} head {h}: the merge reads a partial state no CTA wrote"
                if not states:
                    out[row, h], lse[row, h] = 0, -math.inf
                    continue
                ls = torch.stack([st[1] for st in states]) * math.log(2)
                w = torch.softmax(ls, 0) if torch.isfinite(ls).any() else torch.zeros_like(ls)
                out[row, h] = (w[:, None] * torch.stack([st[0] for st in states])).sum(0).to(out.dtype)
                lse[row, h] = float(torch.logsumexp(ls, 0) / math.log(2))
        return out, lse
