"""The served verify's FlashInfer-MLA prefix on the CPU: the device-written schedule (the mla_schedule op, rule in
kernels/mla_schedule.h) against FlashInfer's own host schedule (a port of MLAPlan, fi_mla_emulator.mla_plan), and
FlashInferMLAPrefix run through a float64 emulation of FlashInfer's MLA kernel that executes only what is in the
buffers at run time, against dense attention over each request's latent prefix. The real library:
test_flashinfer_mla_prefix_gpu.py."""
import math

import pytest
import torch

import fi_mla_emulator as FE
from sglang_ddtree import ops
from sglang_ddtree.attention import flashinfer_graphs as L


def _write(n, heads, sms, lens, ws=None):
    """The op's schedule for lens, written into an int workspace laid out as FlashInfer's MLA plan (garbage
    before: everything the kernel reads must be written), read back as the kernel would."""
    ops.ensure_backend("cpu")
    shape = L.mla_graph_plan(n, heads, sms)
    off, end = FE.offsets(sms)
    if ws is None:
        ws = torch.full((end + 64,), 0xAB, dtype=torch.uint8)
    kv = [0]
    for x in lens:
        kv.append(kv[-1] + x)
    ops.op("mla_schedule")(torch.tensor(lens), torch.tensor(kv[:-1] or [0]), n, heads, shape["cluster_size"],
                           shape["clusters"], L.MLA_MAX_WORKS, sms, [off[name] // 4 for name in _OP_ORDER],
                           ws[: ws.numel() // 4 * 4].view(torch.int32))
    return FE.read(ws, sms, shape["clusters"]), shape, kv, ws


_OP_ORDER = ("q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start", "kv_start", "kv_end",
             "work_indptr", "merge_start", "merge_end", "merge_partial_start", "merge_partial_end", "merge_stride")
_WORK = ("q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start", "kv_start", "kv_end")


def _works(s):
    return sorted(zip(*(s[name] for name in _WORK)))


def _check_against_flashinfer(n, heads, sms, lens):
    got, shape, kv, _ = _write(n, heads, sms, lens)
    want = FE.mla_plan([b * n for b in range(len(lens) + 1)], kv, lens, heads, sms)
    assert (shape["cluster_size"], shape["clusters"]) == (want["cluster"], want["clusters"])
    assert _works(got) == _works(want), "the works differ from FlashInfer's"
    for name in FE.NAMES[3:8]:  # the merges: FlashInfer's own, in its order, the unused slots zero
        assert got[name] == want[name], name
    counts = [got["work_indptr"][c + 1] - got["work_indptr"][c] for c in range(shape["clusters"])]
    assert max(counts) - min(counts) <= 1  # round robin: balanced by count
    works = got["work_indptr"][-1]
    assert works <= shape["tiles"] * len(lens) + shape["clusters"] <= L.MLA_MAX_WORKS
    assert want["partial_rows"] < 2 * shape["clusters"] * shape["tile"] or want["partial_rows"] == 0
    return got, shape


@pytest.mark.parametrize("bs", [1, 3, 16])
@pytest.mark.parametrize("n,heads", [(1, 16), (4, 16), (16, 16), (32, 16), (16, 128), (32, 128)])
@pytest.mark.parametrize("length", [0, 1, 100, 1000, 8192, 32768])
def test_equal_lengths_give_flashinfers_own_works_and_merges(bs, n, heads, length):
    """Requests of one length (what the benchmarks run), H200 (132 SMs), tiny-MLA and DeepSeek head counts: the
    works (each request's query tile and KV range, its partial-output row or none), and the merge CTAs are exactly
    those FlashInfer's host plan makes from the same lengths; only which cluster runs a work differs."""
    _check_against_flashinfer(n, heads, 132, [length] * bs)


@pytest.mark.parametrize("sms", [132, 8, 7])
def test_any_lengths_give_flashinfers_works_and_merges(sms):
    """Mixed lengths (0, 1, at and around the chunk limit, long): the same works and merges as FlashInfer's plan,
    within the bounds its buffers are sized for; and rewriting with new lengths leaves nothing of the old ones
    (merge slots past the round's zeroed)."""
    g = torch.Generator().manual_seed(sms)
    for n, heads in ((3, 16), (9, 16), (16, 128)):
        ws = None
        for bs in (1, 5, 32):
            for lens in (torch.randint(0, 40000, (bs,), generator=g).tolist(), [0] * bs,
                         [50000] + [1] * (bs - 1), [256 * (b + 1) for b in range(bs)]):
                got, shape = _check_against_flashinfer(n, heads, sms, lens)
                again, _, _, ws = _write(n, heads, sms, lens, ws)  # the same workspace, after another round
                assert again == got


def _dense(q_nope, q_pe, cache, slots_of, lens, n, scale):
    """Every query of request b over cache[slots_of[b][:lens[b]]] (latent ‖ rope keys, latent values)."""
    o = torch.zeros(*q_nope.shape, dtype=torch.float64)
    lse = torch.full(q_nope.shape[:2], -math.inf, dtype=torch.float64)
    q = torch.cat([q_nope, q_pe], -1).double()
    for b, length in enumerate(lens):
        if length == 0:
            continue
        keys = cache[slots_of[b][:length].long(), 0].double()
        s = torch.einsum("ihd,kd->ihk", q[b * n: (b + 1) * n], keys) * scale
        o[b * n: (b + 1) * n] = torch.softmax(s, -1) @ keys[:, :512]
        lse[b * n: (b + 1) * n] = torch.logsumexp(s, -1)
    return o, lse


@pytest.mark.parametrize("n", [3, 9])
def test_flashinfer_mla_prefix_attends_each_requests_prefix(monkeypatch, n):
    """FlashInferMLAPrefix end to end on the emulated library (8 SMs, so prefixes are split and merged; one
    cluster a CTA at 3 x 16 query rows, two at 9 x 16): slot lists from req_to_token (pages scattered), one
    wrapper a width planned before any slot list, the schedule written per round; O and the base-2 LSE against
    dense attention; then rounds with other lengths, rows and batch sizes in the same buffers, which a plan made
    from the first round's lengths would get wrong."""
    monkeypatch.setattr(L, "_fi_mla_wrapper_class", lambda: FE.Wrapper)
    monkeypatch.setattr(FE.Wrapper, "sms", 8)
    g = torch.Generator().manual_seed(n)
    heads, ctx, rows, page = 16, 1024, 5, 16
    pages = torch.randperm(rows * ctx // page, generator=g).view(rows, ctx // page)
    offs = torch.arange(ctx)
    r2t = (pages[:, offs // page] * page + offs % page).to(torch.int32)
    cache = torch.randn(rows * ctx, 1, 576, generator=g, dtype=torch.float64).to(torch.float32)
    fi = L.FlashInferMLAPrefix("cpu", heads=heads, dtype=torch.float32, context=ctx, max_bs=4, widths=(n,), sms=8)
    for req, lens in (([3, 0, 4], [700, 5, 0]), ([1, 4, 2, 0], [1000, 129, 300, 64]), ([2], [1])):
        bs = len(req)
        fi.prepare(n, bs, r2t, torch.tensor(req), torch.tensor(lens))
        q_nope = torch.randn(bs * n, heads, 512, generator=g)
        q_pe = torch.randn(bs * n, heads, 64, generator=g)
        o, lse = fi.run(n, q_nope, q_pe, cache, 0.05)
        want_o, want_l = _dense(q_nope, q_pe, cache, [r2t[r] for r in req], lens, n, 0.05)
        live = torch.tensor(lens).repeat_interleave(n) > 0
        torch.testing.assert_close(o[live].double(), want_o[live], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse[live].double() * math.log(2), want_l[live], rtol=1e-5, atol=1e-5)
        assert (lse[~live] == -math.inf).all()  # a key-less request: weight 0 in the merge with the tree
    wrapper, shape, _, bufs = fi._plans[(n, 0)]
    assert sorted(fi._plans) == [(n, 0)] and wrapper.runs == 3 and wrapper._int_workspace_buffer is fi.int_ws
    assert bufs is fi._sets[0] and wrapper._kv_indices_buf is bufs.kv_indices
    assert shape["cluster_size"] == (2 if n * heads > 64 else 1)


def test_an_eager_batch_above_max_bs_gets_its_own_buffers(monkeypatch):
    """A batch above every graph's: its own slot lists and wrapper, the graphs' set left as it was."""
    monkeypatch.setattr(L, "_fi_mla_wrapper_class", lambda: FE.Wrapper)
    monkeypatch.setattr(FE.Wrapper, "sms", 8)
    g = torch.Generator().manual_seed(3)
    n, heads, ctx = 2, 16, 64
    r2t = torch.randperm(6 * ctx, generator=g).view(6, ctx).to(torch.int32)
    cache = torch.randn(6 * ctx, 1, 576, generator=g)
    fi = L.FlashInferMLAPrefix("cpu", heads=heads, dtype=torch.float32, context=ctx, max_bs=2, widths=(n,), sms=8)
    fi.prepare(n, 2, r2t, torch.tensor([0, 1]), torch.tensor([5, 9]))
    small = fi._sets[0].kv_indices.clone()
    lens = [7, 0, 64, 33, 1]
    fi.prepare(n, 5, r2t, torch.arange(1, 6), torch.tensor(lens))
    q_nope, q_pe = torch.randn(5 * n, heads, 512, generator=g), torch.randn(5 * n, heads, 64, generator=g)
    o, lse = fi.run(n, q_nope, q_pe, cache, 0.05)
    want_o, want_l = _dense(q_nope, q_pe, cache, [r2t[r] for r in range(1, 6)], lens, n, 0.05)
    live = torch.tensor(lens).repeat_interleave(n) > 0
    torch.testing.assert_close(o[live].double(), want_o[live], rtol=1e-5, atol=1e-5)
    assert sorted(fi._plans) == [(n, 0), (n, 1)] and torch.equal(fi._sets[0].kv_indices, small)


def test_flashinfer_mla_prefix_refuses_batches_past_flashinfers_work_list():
    with pytest.raises(ValueError, match="more than FlashInfer's 16384 MLA works"):
        L.FlashInferMLAPrefix("cpu", heads=128, dtype=torch.float32, context=64, max_bs=600, widths=(32,), sms=132)
