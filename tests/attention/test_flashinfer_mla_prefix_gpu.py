"""GPU tests of the served verify's FlashInfer-MLA prefix (flashinfer_graphs.FlashInferMLAPrefix: one wrapper a width,
planned once; the works, KV ranges and merges written on the device every round by the mla_schedule op): the CUDA
op against the CPU op; the real FlashInfer kernel run on that schedule against dense float64 attention over each
request's latent prefix and against FlashInfer planned on the host from the exact lengths — at tiny-MLA (16 heads)
and DeepSeek (128 heads) head counts, widths 1 / 16 / 32, batches 1 / 4 / 16, prefixes up to 8k tokens on scattered
slots, key-less requests included; and captured in a CUDA graph, then replayed with other lengths and rows.
Outputs start over NaN-poisoned memory."""
import math

import pytest
import torch

import fi_mla_emulator as FE
from sglang_ddtree import ops
from sglang_ddtree.attention import flashinfer_graphs as L
from sglang_ddtree.attention import prefixes

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="needs a CUDA device (run on the GPU by scripts/gpu_check.sh)"),
              pytest.mark.skipif(not prefixes.installed("flashinfer"), reason="flashinfer is not installed here")]

TOL = 2e-2  # bf16 inputs, 512-wide latent values
SCALE = 0.07


@pytest.fixture(scope="module", autouse=True)
def _cuda_ops():
    ops.ensure_backend("cuda")
    ops.ensure_backend("cpu")


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def _poison():
    torch.empty(256 << 20, dtype=torch.uint8, device="cuda").view(torch.float32).fill_(math.nan)


def _prefix(heads, ctx, bs, widths):
    return L.FlashInferMLAPrefix("cuda", heads=heads, dtype=torch.bfloat16, context=ctx, max_bs=bs, widths=widths,
                                 sms=_sms())


def _lens(bs, seed):
    g = torch.Generator().manual_seed(seed)
    pool = [0, 1, 31, 32, 33, 255, 256, 257, 1000, 4096, 8192]
    return [pool[int(i)] for i in torch.randint(0, len(pool), (bs,), generator=g)]


@pytest.mark.parametrize("n,heads", [(1, 16), (16, 16), (32, 16), (16, 128)])
def test_the_cuda_schedule_is_the_cpu_schedule(n, heads):
    """Both ops write the same int workspace from the same lengths, over garbage, round after round."""
    sms = _sms()
    shape = L.mla_graph_plan(n, heads, sms)
    off, end = FE.offsets(sms)
    offsets = [off[name] // 4 for name in ("q_indptr", "kv_indptr", "partial_indptr", "q_len", "kv_len", "q_start",
                                           "kv_start", "kv_end", "work_indptr", "merge_start", "merge_end",
                                           "merge_partial_start", "merge_partial_end", "merge_stride")]
    ws_cpu = torch.full((end,), 0xAB, dtype=torch.uint8)
    ws_gpu = ws_cpu.cuda()
    for seed, bs in ((1, 1), (2, 4), (3, 16), (4, 300), (5, 16)):
        lens = torch.tensor(_lens(bs, seed))
        kv = torch.cumsum(lens, 0) - lens
        args = (n, heads, shape["cluster_size"], shape["clusters"], L.MLA_MAX_WORKS, sms, offsets)
        ops.op("mla_schedule")(lens, kv, *args, ws_cpu.view(torch.int32))
        ops.op("mla_schedule")(lens.cuda().to(torch.int32), kv.cuda(), *args, ws_gpu.view(torch.int32))
        got, want = FE.read(ws_gpu.cpu(), sms, shape["clusters"]), FE.read(ws_cpu, sms, shape["clusters"])
        assert got == want, (seed, bs)


def _problem(bs, n, heads, lens, ctx, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = bs + 1
    r2t = torch.randperm(rows * ctx, device="cuda", generator=g)[: rows * ctx].view(rows, ctx).to(torch.int32)
    cache = torch.randn(rows * ctx, 1, 576, device="cuda", generator=g, dtype=torch.bfloat16)
    q_nope = torch.randn(bs * n, heads, 512, device="cuda", generator=g, dtype=torch.bfloat16)
    q_pe = torch.randn(bs * n, heads, 64, device="cuda", generator=g, dtype=torch.bfloat16)
    req = torch.randperm(rows, device="cuda", generator=g)[:bs]
    return r2t, cache, q_nope, q_pe, req, torch.tensor(lens, device="cuda")


def _dense(q_nope, q_pe, cache, r2t, req, lens, n):
    o = torch.zeros(*q_nope.shape, dtype=torch.float64, device="cuda")
    lse = torch.full(q_nope.shape[:2], -math.inf, dtype=torch.float64, device="cuda")
    q = torch.cat([q_nope, q_pe], -1).double()
    for b, (r, length) in enumerate(zip(req.tolist(), lens.tolist())):
        if length:
            keys = cache[r2t[r, :length].long(), 0].double()
            s = torch.einsum("ihd,kd->ihk", q[b * n: (b + 1) * n], keys) * SCALE
            o[b * n: (b + 1) * n] = torch.softmax(s, -1) @ keys[:, :512]
            lse[b * n: (b + 1) * n] = torch.logsumexp(s, -1)
    return o, lse


def _check(o, lse, want_o, want_l, lens, n, what):
    live = lens.repeat_interleave(n) > 0
    assert (lse[~live] == -math.inf).all(), what
    if not live.any():  # every prefix empty: nothing attended, only the -inf LSE to check
        return
    assert torch.isfinite(o[live]).all() and torch.isfinite(lse[live]).all(), what
    err = ((o[live].double() - want_o[live]).norm() / want_o[live].norm().clamp_min(1e-9)).item()
    assert err <= TOL, f"{what}: O {err:.2e}"
    assert (lse[live].double() * math.log(2) - want_l[live]).abs().max().item() <= 2e-2, what


@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("bs", [1, 4, 16])
@pytest.mark.parametrize("n", [1, 16, 32])
def test_prefix_matches_dense_and_flashinfers_own_plan(n, bs, heads):
    """The real kernel on the device-written schedule: O and LSE against dense float64 attention, and O against the
    same kernel planned by FlashInfer on the host from the exact lengths."""
    ctx = 8192
    lens = _lens(bs, n * 100 + bs + heads)
    r2t, cache, q_nope, q_pe, req, lens_t = _problem(bs, n, heads, lens, ctx, seed=bs + n)
    fi = _prefix(heads, ctx, bs, (n,))
    fi.prepare(n, bs, r2t, req, lens_t)
    _poison()
    o, lse = fi.run(n, q_nope, q_pe, cache, SCALE)
    want_o, want_l = _dense(q_nope, q_pe, cache, r2t, req, lens_t, n)
    _check(o, lse, want_o, want_l, lens_t, n, "device schedule")
    # FlashInfer's own host plan of the same batch (eager: no graph buffers)
    own = L._fi_mla_wrapper_class()(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"), backend="auto")
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(torch.tensor(lens), 0)]).to(torch.int32)
    indices = torch.cat([r2t[r, :length] for r, length in zip(req.tolist(), lens)]
                        + [torch.zeros(1, dtype=torch.int32, device="cuda")])
    own.plan(torch.arange(0, (bs + 1) * n, n, dtype=torch.int32), kv_indptr, indices,
             torch.tensor(lens, dtype=torch.int32), heads, 512, 64, 1, False, SCALE, torch.bfloat16, torch.bfloat16)
    o_own, _ = own.run(q_nope, q_pe, cache[..., :512], cache[..., 512:], return_lse=True)
    live = lens_t.repeat_interleave(n) > 0
    err = ((o[live].float() - o_own[live].float()).norm() / o_own[live].float().norm().clamp_min(1e-9)).item()
    assert err <= TOL, f"against FlashInfer's own plan: {err:.2e}"


def test_graph_capture_then_replay_other_lengths_and_rows():
    """run captured once in a CUDA graph after one round's metadata (written outside it, as the served metadata
    is every replay), replayed after metadata for much longer, shorter and key-less prefixes on other rows: every
    replay equals dense attention, nothing live is NaN."""
    n, heads, bs, ctx = 16, 16, 4, 9000
    r2t, cache, q_nope, q_pe, req, lens = _problem(bs, n, heads, [3, 40, 200, 7], ctx, seed=11)
    fi = _prefix(heads, ctx, bs, (8, n))
    fi.prepare(n, bs, r2t, req, lens)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fi.run(n, q_nope, q_pe, cache, SCALE)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = fi.run(n, q_nope, q_pe, cache, SCALE)
    g = torch.Generator(device="cuda").manual_seed(5)
    for new_lens in ([8500, 5, 129, 6000], [1, 9000, 0, 0], [3, 40, 200, 7], [256, 257, 255, 8192]):
        lens.copy_(torch.tensor(new_lens))
        req.copy_(torch.randperm(bs + 1, device="cuda", generator=g)[:bs])
        q_nope.copy_(torch.randn(q_nope.shape, device="cuda", generator=g, dtype=torch.bfloat16))
        fi.prepare(n, bs, r2t, req, lens)
        _poison()
        graph.replay()
        torch.cuda.synchronize()
        want_o, want_l = _dense(q_nope, q_pe, cache, r2t, req, lens, n)
        _check(o, lse, want_o, want_l, lens, n, f"replay {new_lens}")
