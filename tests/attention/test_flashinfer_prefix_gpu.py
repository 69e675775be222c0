"""GPU tests of the served verify's FlashInfer cascade: FlashInfer's paged prefill over each request's prefix
(flashinfer_graphs.FlashInferPrefix: planned once per width and batch, the length-dependent schedule written on the
device), our kernel over the tree alone, merged by LSE (base 2 with natural log) — at Qwen3-8B attention shapes
(32 / 8 heads, head dim 128, bf16), verify widths 16 / 32 / 64, batches 1 / 4 / 16, prefixes up to several
thousand tokens on pages of 1 / 16 / 64 scattered slots, DDTree trees, against the float reference; the plan's
shape and the device schedule against the real FlashInfer's own; and the whole verify captured in a CUDA graph
and replayed with other prefixes, slots, trees and a padded batch. Outputs start over NaN-poisoned memory."""
import math

import pytest
import torch

import attn_cases as A
import fi_emulator as FE
from sglang_ddtree import ops
from sglang_ddtree.attention import flashinfer_graphs as L
from sglang_ddtree.attention import prefixes
from sglang_ddtree.attention import native, reference_tree_attention

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU by scripts/gpu_check.sh)"),
              pytest.mark.skipif(not prefixes.installed("flashinfer"), reason="flashinfer is not installed here")]

HQ, HKV, D = 32, 8, 128
TOL = 1e-2  # bf16 relative error, as the kernel's own tests


@pytest.fixture(scope="module", autouse=True)
def _cuda_ops():
    """The project's CUDA library (FlashInferPrefix.prepare's gather_prefix_slots, the tree kernel, the merge),
    loaded by this module before any of its tests, whatever ran before them: until it is, those ops have only
    their CPU kernels (NotImplementedError on CUDA tensors; test_flashinfer_prefix_cpu.py loads the CPU one)."""
    ops.ensure_backend("cuda")


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def _poison():
    torch.empty(256 << 20, dtype=torch.uint8, device="cuda").view(torch.float32).fill_(math.nan)


def _served(args):
    """attn_cases' paged problem in the served form: flat [slots, Hkv, D] caches and req_to_token rows."""
    q, (kc, vc), table, lens, (kt, vt), mask, scale = args
    ps = kc.shape[1]
    ctx = table.shape[1] * ps
    pos = torch.arange(ctx, device="cuda")
    r2t = (table[:, pos // ps].to(torch.int64) * ps + pos % ps).to(torch.int32)
    return q, kc.reshape(-1, HKV, D), vc.reshape(-1, HKV, D), r2t, lens, kt, vt, mask, scale


def _cascade(fi, n, bs, q, kc, vc, kt, vt, mask, scale, no_prefix, dummy):
    o_p, lse_p = fi.run(n, bs, q, kc, vc, scale)
    o_t, lse_t = native.attend_ragged(q, None, kc, vc, no_prefix, dummy, kt, vt, mask, scale, 1)
    return native.merge(o_p, lse_p, "2", o_t, lse_t, "e", q.dtype)


def _prefix(n, bs, ctx, widths=None):
    return L.FlashInferPrefix("cuda", q_heads=HQ, kv_heads=HKV, head_dim=D, dtype=torch.bfloat16, context=ctx,
                              max_bs=bs, widths=widths or (n,), sms=_sms())


def _lens(bs, seed, longest=6000):
    g = torch.Generator().manual_seed(seed)
    pool = [1, 17, 127, 128, 129, 1000, 4096, longest]
    return [pool[i % len(pool)] if i < len(pool) else int(torch.randint(1, longest, (1,), generator=g))
            for i in torch.randperm(max(bs, len(pool)), generator=g)[:bs].tolist()]


@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("bs", [1, 4, 16])
@pytest.mark.parametrize("n", [16, 32, 64])
def test_cascade_matches_reference(n, bs, page):
    args, _ = A.make_case("gqa", bs, n - 1, _lens(bs, n + bs + page), page_size=page, dtype=torch.bfloat16,
                          device="cuda", heads=HQ, kv_heads=HKV, head_dim=D, seed=n * bs + page, depth=16)
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
    q, kc, vc, r2t, lens, kt, vt, mask, scale = _served(args)
    fi = _prefix(n, bs, r2t.shape[1])
    rows = torch.arange(bs, device="cuda")
    no_prefix = torch.zeros(bs + 1, dtype=torch.int32, device="cuda")
    dummy = torch.zeros(1, dtype=torch.int32, device="cuda")
    _poison()
    fi.prepare(n, bs, r2t, rows, lens)
    o, lse = _cascade(fi, n, bs, q, kc, vc, kt, vt, mask, scale, no_prefix, dummy)
    torch.cuda.synchronize()
    err_o, err_l = A.rel_err(o, ref_o), A.rel_err(lse, ref_l)
    assert err_o <= TOL and err_l <= TOL, f"O {err_o:.2e} LSE {err_l:.2e} (lens {lens.tolist()})"


@pytest.mark.parametrize("bs", [1, 4, 16])
@pytest.mark.parametrize("n", [16, 32, 64])
def test_plan_and_schedule_are_flashinfers_own(n, bs):
    """The real FlashInfer's CUDA-graph plan has the grid, query tile and int-workspace offsets of
    flashinfer_graphs.fa2_graph_plan; and for requests of equal length the schedule written on the device is exactly the
    one FlashInfer's host plan makes from those lengths (live CTAs, chunk size, output and merge offsets)."""
    for length in (1, 129, 3000, 32768):
        fi = _prefix(n, bs, 40000)
        wrapper, sched, bufs = fi.plan(n, bs)
        shape = L.fa2_graph_plan(bs, n, HQ, HKV, D, _sms())
        info = [int(x) for x in wrapper._plan_info]
        off = shape["offsets"]
        assert info[:10] + [info[12]] == [shape["padded"], bs * n, off["total_num_rows"], shape["cta_tile_q"],
                                          off["request_indices"], off["qo_tile_indices"], off["kv_tile_indices"],
                                          off["merge_indptr"], off["o_indptr"], off["kv_chunk_size"],
                                          off["block_valid_mask"]]
        r2t = torch.arange(bs * 40000, dtype=torch.int32, device="cuda").view(bs, 40000)
        fi.prepare(n, bs, r2t, torch.arange(bs, device="cuda"), torch.full((bs,), length, device="cuda"))
        ours = FE.read_schedule(wrapper._int_workspace_buffer.cpu(), info, bs, bs * n)
        # FlashInfer's own plan of the same (exact, host) lengths, in CUDA-graph mode
        own = L._fi_wrapper_class()(
            fi.float_ws, "NHD", use_cuda_graph=True, backend="fa2", qo_indptr_buf=torch.zeros_like(bufs.qo(n)[: bs + 1]),
            paged_kv_indptr_buf=torch.zeros_like(bufs.kv_indptr[: bs + 1]),
            paged_kv_indices_buf=torch.zeros_like(bufs.kv_indices), paged_kv_last_page_len_buf=torch.zeros_like(bufs.last_page_len[:bs]))
        own.plan(torch.arange(0, (bs + 1) * n, n, dtype=torch.int32), torch.arange(0, (bs + 1) * length, length, dtype=torch.int32),
                 torch.zeros(bs * length, dtype=torch.int32), torch.ones(bs, dtype=torch.int32), HQ, HKV, D, 1,
                 head_dim_vo=D, causal=False, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        torch.cuda.synchronize()
        theirs = FE.read_schedule(own._int_workspace_buffer.cpu(), [int(x) for x in own._plan_info], bs, bs * n)
        ctas = lambda s: [(s["request_indices"][e], s["qo_tile_indices"][e], s["kv_tile_indices"][e])  # noqa: E731
                          for e in range(s["padded"]) if s["valid"][e]]
        assert ctas(ours) == ctas(theirs), length  # the same CTAs in the same order (ours may leave gaps)
        assert (ours["padded"], ours["tile"]) == (theirs["padded"], theirs["tile"])
        for name in ("chunk", "o_indptr", "merge_indptr", "total_num_rows"):
            assert ours[name] == theirs[name], (name, length)


@pytest.mark.parametrize("bs,n,tiles,kmax", [(1, 16, 1, 33), (5, 9, 2, 3), (16, 64, 2, 1), (300, 16, 1, 1),
                                             (700, 33, 3, 2)])
def test_the_cuda_schedule_is_the_cpu_schedule(bs, n, tiles, kmax):
    """The fa2_schedule CUDA kernel (one block: a max, a block scan, then the fills) writes what the CPU op writes
    (kernels/fa2_schedule.h, held to FlashInfer's own host schedule in test_flashinfer_prefix_cpu.py), for mixed
    lengths (0 included) and batches above the block's 256 threads (several requests a thread), int32 and int64."""
    from sglang_ddtree import ops as O

    O.ensure_backend("cpu")
    g = torch.Generator().manual_seed(bs * n)
    for dtype in (torch.int32, torch.int64):
        for lens in (torch.randint(0, 40000, (bs,), generator=g), torch.zeros(bs, dtype=torch.int64),
                     torch.randint(0, 300, (bs,), generator=g)):
            lens = lens.to(dtype)
            out = {}
            for dev in ("cpu", "cuda"):
                bufs = (torch.ones(bs * tiles * kmax, dtype=torch.bool, device=dev),
                        torch.full((bs + 1,), -7, dtype=torch.int32, device=dev),
                        torch.full((bs * n + 1,), -7, dtype=torch.int32, device=dev),
                        torch.full((1,), -7, dtype=torch.int32, device=dev))
                O.op("fa2_schedule")(lens.to(dev), n, tiles, kmax, L.FI_MIN_CHUNK, *bufs)
                out[dev] = [t.cpu() for t in bufs]
            for name, a, b in zip(("valid", "o_indptr", "merge_indptr", "chunk"), out["cpu"], out["cuda"]):
                assert torch.equal(a, b), (name, dtype, lens[:8].tolist())


def _dense_reference(q, kc, vc, slots, kt, vt, mask, scale, n):
    """float64: request b's query i over kc/vc[slots[b]] and its tree ancestors (mask bits) — O [T, Hq, D]."""
    from sglang_ddtree.attention.problem import unpack_mask

    vis = unpack_mask(mask, n)
    out = torch.empty(q.shape[0], HQ, D, dtype=torch.float64, device="cuda")
    for b, sl in enumerate(slots):
        K = torch.cat([kc[sl.long()], kt[b * n:(b + 1) * n]]).double()   # [N + n, Hkv, D]
        V = torch.cat([vc[sl.long()], vt[b * n:(b + 1) * n]]).double()
        seen = torch.cat([torch.ones(n, len(sl), dtype=torch.bool, device="cuda"), vis[b]], 1)
        qb = q[b * n:(b + 1) * n].double().view(n, HKV, HQ // HKV, D)
        s = torch.einsum("ikgd,jkd->ikgj", qb, K) * scale
        s = s.masked_fill(~seen[:, None, None, :], -math.inf)
        out[b * n:(b + 1) * n] = torch.einsum("ikgj,jkd->ikgd", torch.softmax(s, -1), V).reshape(n, HQ, D)
    return out


def test_graph_capture_then_replay_other_prefixes_slots_trees_and_padding():
    """The verify's per-layer attention captured once in a CUDA graph (the schedule and slot lists written
    outside it, as the served metadata does every replay), then replayed: with much longer and different
    prefixes and slots, other trees and queries written in place, and with the last requests as graph padding
    (seq_len 1 and 0 of request-pool row 0): the real rows equal the reference, nothing is NaN."""
    n, bs, ctx = 16, 4, 12000
    slots_total = (bs + 1) * ctx + 64  # req_to_token has bs + 1 rows (pool row 0 is the padding's), slots distinct
    g = torch.Generator(device="cuda").manual_seed(7)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    kc, vc = rnd(slots_total, HKV, D), rnd(slots_total, HKV, D)
    fi = _prefix(n, bs, ctx)
    q, kt, vt = rnd(bs * n, HQ, D), rnd(bs * n, HKV, D), rnd(bs * n, HKV, D)
    mask = A.make_tree(bs, n - 1, depth=16, seed=1).mask_bits.cuda()
    rows, lens = torch.zeros(bs, dtype=torch.int64, device="cuda"), torch.zeros(bs, dtype=torch.int64, device="cuda")
    r2t = torch.zeros(bs + 1, ctx, dtype=torch.int32, device="cuda")
    no_prefix, dummy = torch.zeros(bs + 1, dtype=torch.int32, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda")
    scale = D ** -0.5

    def problem(seed, new_lens, new_rows):
        perm = torch.randperm(slots_total, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
        r2t.copy_(perm[: (bs + 1) * ctx].view(bs + 1, ctx).to(torch.int32))
        lens.copy_(torch.tensor(new_lens)), rows.copy_(torch.tensor(new_rows))
        q.copy_(rnd(bs * n, HQ, D)), kt.copy_(rnd(bs * n, HKV, D)), vt.copy_(rnd(bs * n, HKV, D))
        mask.copy_(A.make_tree(bs, n - 1, depth=16, seed=seed).mask_bits.cuda())
        fi.prepare(n, bs, r2t, rows, lens)  # the metadata: out of the graph

    problem(1, [3, 40, 200, 7], [1, 2, 3, 4])
    stream = torch.cuda.Stream()  # warm-up off the capture, after the metadata written on the default stream
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _cascade(fi, n, bs, q, kc, vc, kt, vt, mask, scale, no_prefix, dummy)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, _ = _cascade(fi, n, bs, q, kc, vc, kt, vt, mask, scale, no_prefix, dummy)
    for seed, new_lens, new_rows, real in ((2, [11000, 5, 129, 6000], [4, 1, 3, 2], bs),
                                           (3, [1, 9000, 1, 0], [2, 3, 0, 0], 2),   # two padding rows
                                           (1, [3, 40, 200, 7], [1, 2, 3, 4], bs)):
        problem(seed, new_lens, new_rows)
        _poison()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(out).all(), seed
        slots = [r2t[r, :L] for r, L in zip(new_rows[:real], new_lens[:real])]
        want = _dense_reference(q[: real * n], kc, vc, slots, kt, vt, mask, scale, n)
        err = A.rel_err(out[: real * n], want)
        assert err <= TOL, f"replay {seed}: O {err:.2e}"
