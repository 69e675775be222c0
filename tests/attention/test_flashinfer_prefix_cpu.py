"""The served verify's FlashInfer prefix on the CPU: the device-written schedule (flashinfer_graphs.Fa2Schedule) against
FlashInfer's own host schedule (a port of scheduler.cuh, fi_emulator.split_qo_kv), and FlashInferPrefix run
through a float64 emulation of FlashInfer's kernel that executes only what is in the buffers at run time, against
dense attention over each request's prefix. The real library: test_flashinfer_prefix_gpu.py."""
import math

import pytest
import torch

import fi_emulator as FE
from sglang_ddtree import ops
from sglang_ddtree.attention import flashinfer_graphs as L


def _schedule(bs, n, hq, hkv, d, sms, lens):
    """Fa2Schedule written for lens into an int workspace laid out as FlashInfer's CUDA-graph plan."""
    shape = L.fa2_graph_plan(bs, n, hq, hkv, d, sms)
    off = shape["offsets"]
    ws = torch.full((shape["int_bytes"] + 64,), 0xAB, dtype=torch.uint8)  # garbage: everything read is written
    info = [shape["padded"], bs * n, off["total_num_rows"], shape["cta_tile_q"], off["request_indices"],
            off["qo_tile_indices"], off["kv_tile_indices"], off["merge_indptr"], off["o_indptr"], off["kv_chunk_size"],
            shape["v_offset"], shape["s_offset"], off["block_valid_mask"], 1, 1]
    sched = L.Fa2Schedule(ws, info, bs, n, hq // hkv, shape["max_split"])
    sched.write(torch.tensor(lens))
    return FE.read_schedule(ws, info, bs, bs * n), sched


@pytest.mark.parametrize("bs", [1, 3, 4, 16])
@pytest.mark.parametrize("n", [16, 32, 64])
@pytest.mark.parametrize("length", [1, 100, 129, 1000, 8192, 32768])
def test_equal_lengths_give_flashinfers_own_schedule(bs, n, length):
    """Requests of one length (what the benchmarks run): the live CTAs, chunk size, partial-output and merge
    offsets are exactly those FlashInfer's host plan makes from the same lengths (H200: 132 SMs; Qwen3-8B heads)."""
    got, _ = _schedule(bs, n, 32, 8, 128, 132, [length] * bs)
    want = FE.split_qo_kv([n] * bs, [length] * bs, group=4, head_dim=128, kv_heads=8, sms=132)
    live = [e for e in range(got["padded"]) if got["valid"][e]]
    assert got["chunk"] == want["chunk"] and got["tile"] == want["tile"] and got["padded"] == want["padded"]
    for name in ("request_indices", "qo_tile_indices", "kv_tile_indices"):
        assert [got[name][e] for e in live] == want[name], name
    assert got["o_indptr"] == want["o_indptr"] and got["merge_indptr"] == want["merge_indptr"]
    assert got["total_num_rows"] == bs * n


@pytest.mark.parametrize("hkv,sms", [(8, 132), (2, 132), (1, 16), (4, 7)])
def test_any_lengths_give_a_schedule_the_kernel_reads_consistently(hkv, sms):
    """Mixed lengths (0 included: a key-less request still has one chunk, as the kernel counts it): every
    (request, query tile, chunk < c_b) is live exactly once with c_b = ceil(max(len, 1) / C), the live CTAs fit the
    grid, partial states are packed request by request and query by query, and rewriting with new lengths leaves
    nothing of the old ones."""
    g = torch.Generator().manual_seed(hkv * sms)
    hq, d = 4 * hkv, 128
    for bs, n in ((1, 16), (5, 9), (16, 64), (32, 33)):
        for lens in (torch.randint(0, 40000, (bs,), generator=g).tolist(), [0] * bs, [1] + [50000] * (bs - 1)):
            got, sched = _schedule(bs, n, hq, hkv, d, sms, lens)
            C = got["chunk"]
            assert C >= L.FI_MIN_CHUNK
            count = [-(-max(x, 1) // C) for x in lens]
            tiles = -(-n * (hq // hkv) // got["tile"])
            live = sorted((got["request_indices"][e], got["qo_tile_indices"][e], got["kv_tile_indices"][e])
                          for e in range(got["padded"]) if got["valid"][e])
            assert live == sorted((b, t, k) for b in range(bs) for t in range(tiles) for k in range(count[b]))
            assert len(live) <= 2 * sms // hkv or all(c == 1 for c in count)
            o = [0]
            for b in range(bs):
                o.append(o[-1] + n * count[b])
            assert got["o_indptr"] == o
            assert got["merge_indptr"] == [0] + [o[b] + (i + 1) * count[b] for b in range(bs) for i in range(n)]
            sched.write(torch.tensor(lens[::-1]))  # another round in the same buffers


def _dense(q, kc, vc, slots_of, lens, n, scale):
    """Every query of request b over kc/vc[slots_of[b][:lens[b]]]: (O float64, natural LSE)."""
    hq, hkv = q.shape[1], kc.shape[1]
    o = torch.zeros(q.shape[0], hq, vc.shape[-1], dtype=torch.float64)
    lse = torch.full((q.shape[0], hq), -math.inf, dtype=torch.float64)
    for b, L_ in enumerate(lens):
        if L_ == 0:
            continue
        sl = slots_of[b][:L_].long()
        for h in range(hq):
            s = (q[b * n: (b + 1) * n, h].double() @ kc[sl, h // (hq // hkv)].double().T) * scale
            o[b * n: (b + 1) * n, h] = torch.softmax(s, -1) @ vc[sl, h // (hq // hkv)].double()
            lse[b * n: (b + 1) * n, h] = torch.logsumexp(s, -1)
    return o, lse


@pytest.mark.parametrize("page", [1, 16, 64])
def test_flashinfer_prefix_attends_each_requests_prefix(monkeypatch, page):
    """FlashInferPrefix end to end on the emulated library: slot lists from req_to_token (pages scattered, any
    page size: FlashInfer reads token slots), the plan made once per (width, batch) before the slot lists, the
    schedule written per round, O and the base-2 LSE against dense attention; then a second round with new
    lengths and rows in the same buffers, which a plan made from the first round's lengths would get wrong."""
    monkeypatch.setattr(L, "_fi_wrapper_class", lambda: FE.Wrapper)
    ops.ensure_backend("cpu")
    g = torch.Generator().manual_seed(page)
    hq, hkv, d, ctx, rows, n, bs = 8, 2, 64, 1024, 5, 3, 3
    pages = torch.randperm(rows * ctx // page, generator=g).view(rows, ctx // page)
    offs = torch.arange(ctx)
    r2t = (pages[:, offs // page] * page + offs % page).to(torch.int32)
    kc = torch.randn(rows * ctx, hkv, d, generator=g, dtype=torch.float64).to(torch.float32)
    vc = torch.randn(rows * ctx, hkv, d, generator=g, dtype=torch.float64).to(torch.float32)
    FE.Wrapper.sms = 8  # 2·8 / 2 KV heads: at most 8 CTAs a split, so these prefixes are cut into chunks
    fi = L.FlashInferPrefix("cpu", q_heads=hq, kv_heads=hkv, head_dim=d, dtype=torch.float32, context=ctx, max_bs=4,
                            widths=(n,), sms=8)
    for req, lens in (([3, 0, 4], [700, 5, 0]), ([1, 4, 2], [1000, 129, 300])):
        fi.prepare(n, bs, r2t, torch.tensor(req), torch.tensor(lens))
        q = torch.randn(bs * n, hq, d, generator=g)
        o, lse = fi.run(n, bs, q, kc, vc, 0.1)
        want_o, want_l = _dense(q, kc, vc, [r2t[r] for r in req], lens, n, 0.1)
        live = torch.tensor(lens).repeat_interleave(n) > 0
        torch.testing.assert_close(o[live].double(), want_o[live], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse[live].double() * math.log(2), want_l[live], rtol=1e-5, atol=1e-5)
        assert (lse[~live] == -math.inf).all()  # a key-less request: weight 0 in the merge with the tree
    assert sorted(fi._plans) == [(n, bs)] and len(FE.Wrapper.made) >= 1
    wrapper, sched, bufs = fi._plans[(n, bs)]
    assert sched.kmax > 1 and wrapper._paged_kv_indptr_buf.data_ptr() == bufs.kv_indptr.data_ptr()


def test_flashinfer_prefix_refuses_head_dims_it_has_no_kernel_for():
    with pytest.raises(ValueError, match="head dims \\(64, 128, 256\\), got 32"):
        L.FlashInferPrefix("cpu", q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, context=64, max_bs=2,
                           widths=(3,), sms=8)
