"""The tree kernel's wiring into SGLang's attention backend (sglang_ddtree/sglang/tree_attention.py), on CPU.

A stand-in backend records what reaches it; the kernel call is recorded too (its numerics are tested on the
GPU against the dense reference: tests/attention/test_attention_ragged_gpu.py). Checked: only TARGET_VERIFY
is rerouted, its metadata is the prefix slot list of req_to_token (computed here independently), the tree
tokens' K/V are stored at out_cache_loc before the kernel reads the cache, the mask the kernel reads is the
one the worker loaded, and unsupported targets are refused with the reason. The library prefixes (FlashMLA,
FlashInfer) are checked as cascades against attention over prefix and tree, the libraries replaced by float64
implementations of their contracts (FlashInfer's: fi_emulator, which runs only what is in its buffers), and on
the GPU with the real ones.
"""
import inspect
import math
import os
import sys
import types

import pytest
import torch
from sglang.srt.configs.model_config import AttentionArch  # an IntEnum: str() is a number

from sglang_ddtree import ops
from sglang_ddtree.attention import flashinfer_graphs, flashmla, prefixes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "attention"))
import fi_emulator as FE  # noqa: E402  (FlashInfer's graph-mode paged prefill, emulated on the CPU)
import fi_mla_emulator as FME  # noqa: E402  (FlashInfer's graph-mode MLA attention, emulated on the CPU)


class Mode:
    def __init__(self, name):
        self.name = name

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"


class TritonAttnBackend:  # the name the wrapper checks; every method records that it ran
    def __init__(self):
        self.calls = []

    def init_forward_metadata(self, fb):
        self.calls.append(("init", fb.forward_mode.name))

    def init_forward_metadata_out_graph(self, fb, in_capture=False):
        self.calls.append(("out_graph", fb.forward_mode.name, in_capture))

    def init_forward_metadata_in_graph(self, fb):
        self.calls.append(("in_graph", fb.forward_mode.name))

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.calls.append(("graph_state", max_bs, max_num_tokens))

    def forward_extend(self, q, k, v, layer, fb, save_kv_cache=True, **kw):
        self.calls.append(("extend", fb.forward_mode.name))
        return "base"


class MHATokenToKVPool:
    def __init__(self, slots, hkv, d):
        self.k = torch.randn(slots, hkv, d, dtype=torch.bfloat16)
        self.v = torch.randn(slots, hkv, d, dtype=torch.bfloat16)
        self.events = []

    def get_key_buffer(self, layer_id):
        self.events.append("read")
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v

    def set_kv_buffer(self, layer, loc, k, v):
        self.events.append("store")
        self.k[loc], self.v[loc] = k, v


def make_runner(ctx=64, rows=6, hkv=2, d=128, hq=8):
    g = torch.Generator().manual_seed(0)
    req_to_token = torch.randperm(rows * ctx, generator=g).to(torch.int32).view(rows, ctx)
    return types.SimpleNamespace(
        attn_backend=TritonAttnBackend(), token_to_kv_pool=MHATokenToKVPool(rows * ctx, hkv, d),
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token), sliding_window_size=None,
        model_config=types.SimpleNamespace(attention_arch=AttentionArch.MHA, num_attention_heads=hq),
        server_args=types.SimpleNamespace(dcp_size=1))


def test_only_target_verify_is_rerouted_and_its_metadata_is_the_prefix_slot_list(plugins_loaded, monkeypatch):
    from sglang_ddtree.sglang import tree_attention as TA

    runner = make_runner()
    base = runner.attn_backend
    n, hq, hkv, d = 5, 8, 2, 128
    ta = TA.TreeVerifyAttention(runner, n=n, max_bs=4, prefix="tree")
    ta.install()
    assert base.ddtree_tree_attention is ta
    decode = types.SimpleNamespace(forward_mode=Mode("DECODE"))
    base.init_forward_metadata(decode)
    base.init_forward_metadata_out_graph(decode, True)
    base.init_forward_metadata_in_graph(decode)
    assert base.forward_extend(None, None, None, None, decode) == "base"
    assert base.calls == [("init", "DECODE"), ("out_graph", "DECODE", True), ("in_graph", "DECODE"),
                          ("extend", "DECODE")]

    rows, lens = torch.tensor([4, 0, 2]), torch.tensor([7, 0, 33])
    fb = types.SimpleNamespace(forward_mode=Mode("TARGET_VERIFY"), batch_size=3, req_pool_indices=rows,
                               seq_lens=lens, out_cache_loc=torch.arange(100, 100 + 3 * n))
    for call in (lambda: base.init_forward_metadata(fb), lambda: base.init_forward_metadata_out_graph(fb, False),
                 lambda: base.init_forward_metadata_out_graph(fb, True)):
        ta.lib.kv_indices.fill_(-7)
        call()
        want = torch.cat([runner.req_to_token_pool.req_to_token[r, :L] for r, L in zip(rows.tolist(), lens.tolist())])
        assert ta.lib.kv_indptr[:4].tolist() == [0, 7, 7, 40]
        assert torch.equal(ta.lib.kv_indices[:40], want)
    base.init_forward_metadata_in_graph(fb)
    assert len(base.calls) == 4  # none of TARGET_VERIFY's metadata reached the backend

    mask = torch.randint(0, 2**16, (3, n, 1), dtype=torch.int32)
    ta.load_mask(mask)
    seen = {}
    runner.token_to_kv_pool.events.clear()  # the construction's read (the prefix choice reads the pool's head dims)

    def fake_kernel(q, q_pe, kc, vc, indptr, indices, kt, vt, mask_bits, scale, splits):
        seen.update(q=q, kc=kc, indptr=indptr.clone(), kt=kt, mask=mask_bits.clone(), scale=scale, splits=splits,
                    events=list(runner.token_to_kv_pool.events))
        return torch.zeros(q.shape[0], q.shape[1], vc.shape[-1], dtype=q.dtype), None

    monkeypatch.setattr(TA.native, "attend_ragged", fake_kernel)
    layer = types.SimpleNamespace(tp_q_head_num=hq, tp_k_head_num=hkv, qk_head_dim=d, v_head_dim=d, layer_id=0,
                                  scaling=0.125, logit_cap=0.0)
    q = torch.randn(3 * n, hq * d, dtype=torch.bfloat16)
    k = torch.randn(3 * n, hkv * d, dtype=torch.bfloat16)
    v = torch.randn(3 * n, hkv * d, dtype=torch.bfloat16)
    o = base.forward_extend(q, k, v, layer, fb)
    assert o.shape == (3 * n, hq * d)
    assert seen["events"] == ["store", "read"]  # the tree's K/V are in the cache before the kernel reads it
    pool = runner.token_to_kv_pool
    assert torch.equal(pool.k[fb.out_cache_loc], k.view(-1, hkv, d))
    assert seen["q"].shape == (3 * n, hq, d) and seen["kc"] is pool.k and seen["kt"].shape == (3 * n, hkv, d)
    assert seen["indptr"].tolist() == [0, 7, 7, 40] and torch.equal(seen["mask"], mask)
    assert seen["scale"] == 0.125 and seen["splits"] >= 1


def test_static_mask_buffer_is_shared_without_a_copy(plugins_loaded):
    from sglang_ddtree.sglang import tree_attention as TA

    ta = TA.TreeVerifyAttention(make_runner(), n=9, max_bs=4)
    static = torch.zeros(4, 9, 1, dtype=torch.int32)
    ta.mask_bits = static
    ta.load_mask(static[:2])  # the draft graph's own buffer: nothing to copy
    assert ta.mask_bits is static
    ta.load_mask(torch.ones(6, 9, 1, dtype=torch.int32))  # an eager batch above the graphs: grows, copies
    assert ta.mask_bits.shape[0] >= 6 and int(ta.mask_bits[:6].min()) == 1


def test_unsupported_targets_are_named(plugins_loaded):
    from sglang_ddtree.sglang import tree_attention as TA

    r = make_runner()
    assert TA.unsupported(r) == "a KV cache on cpu (the kernel runs on CUDA)"  # everything else would do
    r.sliding_window_size = 4096
    assert "sliding" in TA.unsupported(r)
    r = make_runner(d=96)
    assert "head dims 96" in TA.unsupported(r)
    r = make_runner()
    r.attn_backend = type("TRTLLMHAAttnBackend", (), {})()
    assert "TRTLLMHAAttnBackend" in TA.unsupported(r)
    r = make_runner()
    r.token_to_kv_pool.k = r.token_to_kv_pool.k.float()
    assert "float32" in TA.unsupported(r)


def test_gather_prefix_slots_rejects_short_buffers(plugins_loaded):
    ops.ensure_backend("cpu")
    table = torch.zeros(2, 8, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="indices"):
        ops.op("gather_prefix_slots")(table, torch.tensor([0, 1]), torch.tensor([3, 4]),
                                      torch.zeros(3, dtype=torch.int32), torch.zeros(5, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="outside"):
        ops.op("gather_prefix_slots")(table, torch.tensor([0, 1]), torch.tensor([3, 9]),
                                      torch.zeros(3, dtype=torch.int32), torch.zeros(16, dtype=torch.int32))


def test_one_backend_serves_every_verify_width_of_the_auto_budget(plugins_loaded, monkeypatch):
    """SGLANG_DDTREE_BUDGET=auto captures verify graphs at several widths on one target backend: each runner's
    init_cuda_graph_state reaches the backend's own once (the widest, first), each width reads its own mask
    buffer, and a forward's width is its query rows per request."""
    from sglang_ddtree.sglang import tree_attention as TA

    runner = make_runner()
    base = runner.attn_backend
    ta = TA.TreeVerifyAttention(runner, n=9, max_bs=4, widths=(5, 9))
    assert ta.widths == [5, 9] and sorted(ta.masks) == [5, 9]
    ta.install()
    base.init_cuda_graph_state(4, 36)
    base.init_cuda_graph_state(4, 20)  # the narrower runner: the backend's buffers stay those of the widest
    assert [c for c in base.calls if c[0] == "graph_state"] == [("graph_state", 4, 36)]
    with pytest.raises(ValueError, match="verify width 7"):
        ta.load_mask(torch.zeros(2, 7, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="widths"):
        TA.TreeVerifyAttention(runner, n=9, max_bs=4, widths=(5, 12))

    seen = []

    def fake_kernel(q, q_pe, kc, vc, indptr, indices, kt, vt, mask_bits, scale, splits):
        seen.append(mask_bits.clone())
        return torch.zeros(q.shape[0], q.shape[1], vc.shape[-1], dtype=q.dtype), None

    monkeypatch.setattr(TA.native, "attend_ragged", fake_kernel)
    hq, hkv, d = 8, 2, 128
    layer = types.SimpleNamespace(tp_q_head_num=hq, tp_k_head_num=hkv, qk_head_dim=d, v_head_dim=d, layer_id=0,
                                  scaling=0.125, logit_cap=0.0)
    rows, lens = torch.tensor([4, 0, 2]), torch.tensor([7, 0, 33])
    for n in (5, 9):
        fb = types.SimpleNamespace(forward_mode=Mode("TARGET_VERIFY"), batch_size=3, req_pool_indices=rows,
                                   seq_lens=lens, out_cache_loc=torch.arange(100, 100 + 3 * n))
        base.init_forward_metadata(fb)
        mask = torch.randint(0, 2**n, (3, n, 1), dtype=torch.int32)
        ta.load_mask(mask)
        qkv = [torch.randn(3 * n, h * d, dtype=torch.bfloat16) for h in (hq, hkv, hkv)]
        assert base.forward_extend(*qkv, layer, fb).shape == (3 * n, hq * d)
        assert torch.equal(seen[-1], mask)
    fb.out_cache_loc = torch.arange(100, 100 + 21)
    qkv = [torch.randn(21, h * d, dtype=torch.bfloat16) for h in (hq, hkv, hkv)]
    with pytest.raises(RuntimeError, match="no verify width"):
        base.forward_extend(*qkv, layer, fb)


class MLATokenToKVPool:
    """SGLang's MLA pool: one latent KV head of 576 per slot; the values are a view of its first 512."""

    def __init__(self, slots, latent=512, rope=64):
        self.kv = torch.randn(slots, 1, latent + rope, dtype=torch.bfloat16)
        self.latent, self.events = latent, []

    def get_key_buffer(self, layer_id):
        self.events.append("read")
        return self.kv

    def get_value_buffer(self, layer_id):
        return self.kv[..., : self.latent]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):  # stores the keys only, like SGLang's
        self.events.append("store")
        self.kv[loc] = cache_k


def make_mla_runner(backend="FlashMLABackend", ctx=64, rows=6, latent=512):
    runner = make_runner(ctx, rows)
    runner.attn_backend = type(backend, (TritonAttnBackend,), {})()
    runner.token_to_kv_pool = MLATokenToKVPool(rows * ctx, latent)
    runner.model_config = types.SimpleNamespace(attention_arch=AttentionArch.MLA)
    return runner


@pytest.mark.parametrize("convention", ["concat", "rope_split"])
def test_mla_verify_hands_the_kernel_the_latent_layout(plugins_loaded, monkeypatch, convention):
    """MLA (absorbed) targets: SGLang's triton / flashmla backends get q [T, H·576] and k [T, 1, 576] (latent ‖
    rope), flashinfer's get the latent parts with q_rope / k_rope apart. Either way the tree's latent keys are
    stored at out_cache_loc before the kernel reads the cache, and the kernel gets the latent queries, their
    rope part, the pool's keys with the values as their latent view, and the tree's keys with their latent
    view as values (kernels/verify_attn.cu's MLA layout)."""
    from sglang_ddtree.sglang import tree_attention as TA

    runner = make_mla_runner("FlashInferMLAAttnBackend" if convention == "rope_split" else "FlashMLABackend")
    base, pool = runner.attn_backend, runner.token_to_kv_pool
    ta = TA.TreeVerifyAttention(runner, n=5, max_bs=4)
    assert ta.mla
    ta.install()
    pool.events.clear()  # the construction's read (the prefix choice reads the pool's head dims)
    bs, n, h = 2, 5, 16
    fb = types.SimpleNamespace(forward_mode=Mode("TARGET_VERIFY"), batch_size=bs, req_pool_indices=torch.tensor([1, 3]),
                               seq_lens=torch.tensor([4, 9]), out_cache_loc=torch.arange(200, 200 + bs * n))
    base.init_forward_metadata(fb)
    ta.load_mask(torch.randint(0, 2**5, (bs, n, 1), dtype=torch.int32))
    seen = {}

    def fake_kernel(q, q_pe, kc, vc, indptr, indices, kt, vt, mask_bits, scale, splits):
        seen.update(q=q.clone(), q_pe=q_pe.clone(), kc=kc, vc=vc, kt=kt.clone(),
                    vt_is_view=vt.data_ptr() == kt.data_ptr(), vt_shape=tuple(vt.shape), events=list(pool.events))
        return torch.zeros(q.shape[0], q.shape[1], 512, dtype=q.dtype), None

    monkeypatch.setattr(TA.native, "attend_ragged", fake_kernel)
    layer = types.SimpleNamespace(tp_q_head_num=h, tp_k_head_num=1, qk_head_dim=576, v_head_dim=512, layer_id=0,
                                  scaling=0.1, logit_cap=0.0)
    q_full = torch.randn(bs * n, h, 576, dtype=torch.bfloat16)
    k_full = torch.randn(bs * n, 1, 576, dtype=torch.bfloat16)
    if convention == "concat":
        out = base.forward_extend(q_full.view(bs * n, h * 576), k_full, k_full[..., :512].clone(), layer, fb)
    else:
        out = base.forward_extend(q_full[..., :512].contiguous(), k_full[..., :512].contiguous(),
                                  k_full[..., :512].contiguous(), layer, fb, q_rope=q_full[..., 512:].contiguous(),
                                  k_rope=k_full[..., 512:].contiguous())
    assert out.shape == (bs * n, h * 512)
    assert seen["events"][:2] == ["store", "read"]
    assert torch.equal(pool.kv[fb.out_cache_loc], k_full)
    assert torch.equal(seen["q"], q_full[..., :512]) and torch.equal(seen["q_pe"], q_full[..., 512:])
    assert seen["kc"] is pool.kv and seen["vc"].data_ptr() == pool.kv.data_ptr() and seen["vc"].shape[-1] == 512
    assert torch.equal(seen["kt"], k_full) and seen["vt_is_view"] and seen["vt_shape"] == (bs * n, 1, 512)


def test_mla_targets_are_served_only_in_the_shapes_the_kernel_takes(plugins_loaded):
    from sglang_ddtree.sglang import tree_attention as TA

    for backend in TA.BACKENDS["MLATokenToKVPool"]:
        assert TA.unsupported(make_mla_runner(backend)) == "a KV cache on cpu (the kernel runs on CUDA)"
    assert "FlashInferAttnBackend" in TA.unsupported(make_mla_runner("FlashInferAttnBackend"))
    assert "latent 512 + rope 64" in TA.unsupported(make_mla_runner(latent=256))
    r = make_runner()
    r.model_config = types.SimpleNamespace(attention_arch=AttentionArch.MLA)
    assert "for an MLA target" in TA.unsupported(r)


def _attend(q, keys, values, scale):
    """Softmax attention of q [H, D] over keys [K, D] / values [K, Dv] in float64: (O [H, Dv], natural LSE [H])."""
    s = (q.double() @ keys.double().T) * scale
    return torch.softmax(s, -1) @ values.double(), torch.logsumexp(s, -1)


def _random_tree_masks(bs, n, g):
    """Ancestor bitsets int32 [bs, n, words] of random trees (node 0 the root, each node's parent before it)."""
    words = (n + 31) // 32
    out = torch.zeros(bs, n, words, dtype=torch.int32)
    for b in range(bs):
        bits = []  # Python ints: any width (a 64-node tree's bit 63 overflows an int64)
        for i in range(n):
            parent = int(torch.randint(0, i, (1,), generator=g)) if i else None
            bits.append((1 << i) | (bits[parent] if parent is not None else 0))
            for w in range(words):
                part = (bits[i] >> (32 * w)) & 0xFFFFFFFF
                out[b, i, w] = part - 2**32 if part >= 2**31 else part
    return out


def _fake_mla_tail(q, q_pe, kc, vc, indptr, indices, kt, vt, mask_bits, scale, splits):
    """Our kernel over an MLA tree alone (an empty prefix: the library has it), float64: (O, natural LSE)."""
    from sglang_ddtree.attention.problem import unpack_mask

    assert int(indptr.abs().sum()) == 0
    bs, n = mask_bits.shape[0], mask_bits.shape[1]
    vis = unpack_mask(mask_bits, n)
    o, lse = [], []
    for b in range(bs):
        for i in range(n):
            j = vis[b, i].nonzero().flatten() + b * n
            ob, lb = _attend(torch.cat([q[b * n + i], q_pe[b * n + i]], -1), kt[j, 0], vt[j, 0], scale)
            o.append(ob), lse.append(lb)
    return torch.stack(o).float(), torch.stack(lse).float()


def _mla_cascade_case(TA, device, dtype, h, n=3, lens=(70, 5), req=(3, 1), ctx=128, rows=4, seed=7,
                      backend="FlashMLABackend", prefix="flashmla", page=64):
    """An MLA runner (by default the FlashMLA backend at page size 64) whose requests' pages are scattered, verifying
    requests `req` with prefixes `lens` (by default one across a page boundary, one inside a page, with a chain and
    a fork; else random trees of n nodes) with the prefix through `prefix`; returns (runner, ta, forward batch,
    pages of the rows, q, k, the layer, the expected output [T, H, 512] in float64)."""
    bs = len(req)
    runner = make_mla_runner(backend, ctx=ctx, rows=rows)
    runner.page_size = page
    runner.attn_backend.num_q_heads = runner.model_config.num_attention_heads = h
    g = torch.Generator().manual_seed(seed)
    pages = torch.randperm(rows * ctx // page, generator=g).view(rows, ctx // page)
    offs = torch.arange(ctx)
    r2t = (pages[:, offs // page] * page + offs % page).to(torch.int32)
    runner.req_to_token_pool.req_to_token = r2t.to(device)
    runner.token_to_kv_pool.kv = torch.randn(rows * ctx, 1, 576, generator=g).to(device, dtype)
    ta = TA.TreeVerifyAttention(runner, n=n, max_bs=max(4, bs), prefix=prefix)
    ta.install()
    req, lens = torch.tensor(req), torch.tensor(lens)
    loc = torch.stack([r2t[r, L:L + n] for r, L in zip(req.tolist(), lens.tolist())]).flatten().long()
    fb = types.SimpleNamespace(forward_mode=Mode("TARGET_VERIFY"), batch_size=bs, req_pool_indices=req.to(device),
                               seq_lens=lens.to(device), out_cache_loc=loc.to(device),
                               positions=torch.zeros(bs * n, dtype=torch.int64, device=device))
    runner.attn_backend.init_forward_metadata(fb)
    if n == 3 and bs == 2:
        mask = torch.tensor([[[1], [3], [5]], [[1], [3], [7]]], dtype=torch.int32)  # a chain, a fork
    else:
        mask = _random_tree_masks(bs, n, g)
    ta.load_mask(mask.to(device))
    layer = types.SimpleNamespace(tp_q_head_num=h, tp_k_head_num=1, qk_head_dim=576, v_head_dim=512, layer_id=0,
                                  scaling=0.05, logit_cap=0.0)
    q = torch.randn(bs * n, h, 576, generator=g).to(device, dtype)
    k = torch.randn(bs * n, 1, 576, generator=g).to(device, dtype)
    kv = runner.token_to_kv_pool.kv.view(-1, 576).cpu()
    from sglang_ddtree.attention.problem import unpack_mask
    vis = unpack_mask(mask, n)
    want = torch.empty(bs * n, h, 512, dtype=torch.float64)
    for b in range(bs):
        prefix = kv[r2t[int(req[b]), : int(lens[b])].long()]
        for i in range(n):
            keys = torch.cat([prefix, k.cpu()[b * n + vis[b, i].nonzero().flatten(), 0]])
            want[b * n + i] = _attend(q.cpu()[b * n + i], keys, keys[:, :512], 0.05)[0]
    return runner, ta, fb, pages[req], q, k, layer, want


def test_flashmla_prefix_cascade_equals_attention_over_prefix_and_tree(plugins_loaded, monkeypatch):
    """SGLANG_DDTREE_PREFIX=flashmla: FlashMLA over each request's prefix through a page table built from
    req_to_token, our kernel over the tree alone (an empty prefix), merged by LSE. FlashMLA and our kernel are
    replaced by float64 references of their contracts (the real ones: the GPU test below); what is checked is
    the wiring — page table, lengths, layouts, the empty prefix, the merge — against attention over prefix +
    tree computed from req_to_token and the ancestor mask."""
    from sglang_ddtree.sglang import tree_attention as TA

    monkeypatch.setattr(prefixes, "installed", lambda name: True)
    runner = make_mla_runner("FlashMLABackend", ctx=128, rows=4)
    runner.page_size, runner.attn_backend.num_q_heads = 16, 4
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=flashmla at page size 16 \\(FlashMLA reads pages of 64\\)"):
        TA.TreeVerifyAttention(runner, n=3, max_bs=4, prefix="flashmla")
    h, n, bs, page = 4, 3, 2, 64
    plans = []

    def fake_plan(prefix_lens, n_, heads):  # a plan that encodes its lengths, so a stale one is seen
        plans.append((prefix_lens.tolist(), n_, heads))
        splits = torch.cat([prefix_lens.new_zeros(1), prefix_lens.cumsum(0)]).int()  # [bs + 1], as FlashMLA's
        return torch.full((2, 8), sum(prefix_lens.tolist()), dtype=torch.int32), splits

    monkeypatch.setattr(flashmla, "metadata", fake_plan)
    runner, ta, fb, pages, q, k, layer, want = _mla_cascade_case(TA, "cpu", torch.float32, h)
    assert plans == [([70, 5], n, h)]  # planned by the metadata, before any layer

    def fake_flashmla(q4, k4, table, plens, dv, plan, scale):
        assert plan[0] is ta.lib._plans[n][0] and plan[1].data_ptr() == ta.lib._plans[n][1].data_ptr()  # static buffers
        assert plan[0].unique().tolist() == [int(plens.sum())] and plan[1].tolist() == [0] + plens.cumsum(0).tolist()
        assert k4.shape[1:] == (page, 1, 576) and q4.shape == (bs, n, h, 576)
        o, lse = [], []
        for b in range(bs):
            j = torch.arange(int(plens[b]))
            keys = k4.reshape(-1, 576)[(table[b, j // page] * page + j % page).long()]
            for i in range(n):
                ob, lb = _attend(q4[b, i], keys, keys[:, :dv], scale)
                o.append(ob), lse.append(lb)
        return torch.stack(o).float(), torch.stack(lse).float()

    monkeypatch.setattr(flashmla, "attend", fake_flashmla)
    monkeypatch.setattr(TA.native, "attend_ragged", _fake_mla_tail)
    # SGLang's capture: one metadata call, then the forward run more than once (warm-up, capture); no layer plans
    for _ in range(3):
        out = runner.attn_backend.forward_extend(q.view(bs * n, h * 576), k, k[..., :512].clone(), layer, fb)
    assert plans == [([70, 5], n, h)]
    assert ta.lib.block_table[:bs, :2].tolist() == pages.tolist()
    torch.testing.assert_close(out.view(bs * n, h, 512).double(), want, rtol=1e-5, atol=1e-5)
    # a replay's metadata re-plans into the same buffers (the graph's addresses) for the new lengths
    static = [t.data_ptr() for t in ta.lib._plans[n]]
    fb.seq_lens = torch.tensor([71, 6])
    runner.attn_backend.init_forward_metadata(fb)
    assert plans[-1] == ([71, 6], n, h) and [t.data_ptr() for t in ta.lib._plans[n]] == static
    assert ta.lib._plans[n][0].unique().tolist() == [77]
    # a padded replay as SGLang's graph runner makes it (its own build_replay_fb_view): one request run in the
    # two-request graph; the view's batch is the graph's, its out_cache_loc the round's own (n rows, not 2n)
    from sglang.srt.model_executor.runner import decode_cuda_graph_runner as cgr

    class Round(types.SimpleNamespace):  # the fields the view copies that this round does not set are None
        def __getattr__(self, name):
            return None

    buffers = types.SimpleNamespace(input_ids=torch.zeros(bs * n, dtype=torch.int64), positions=torch.zeros(
        bs * n, dtype=torch.int64), req_pool_indices=torch.tensor([3, 0]), seq_lens=torch.tensor([72, 1]),
        seq_lens_cpu=None, encoder_lens=None, mamba_track_indices=None)
    args = dict(forward_batch=Round(forward_mode=Mode("TARGET_VERIFY"), out_cache_loc=fb.out_cache_loc[:n]),
                buffers=buffers, bs=bs, raw_bs=1, num_tokens=bs * n, seq_len_fill_value=1,
                capture_forward_mode=Mode("TARGET_VERIFY"), is_encoder_decoder=False)
    if "global_num_tokens_cpu" in inspect.signature(cgr.build_replay_fb_view).parameters:
        args["global_num_tokens_cpu"] = None
    runner.attn_backend.init_forward_metadata_out_graph(cgr.build_replay_fb_view(**args))
    assert plans[-1] == ([72, 1], n, h) and [t.data_ptr() for t in ta.lib._plans[n]] == static
    assert ta.lib._plan[1].tolist() == [0, 72, 73] and ta.lib.block_table[0, :2].tolist() == pages[0].tolist()


@pytest.mark.gpu
@pytest.mark.parametrize("h,n,bs", [(16, 3, 2), (64, 3, 2), (16, 17, 16), (64, 17, 5)])
def test_flashmla_prefix_cascade_on_the_gpu(plugins_loaded, h, n, bs):
    """The same wiring with the real FlashMLA (sgl_kernel) and our CUDA kernels, bf16, against float64; also the
    served shape (17 tree nodes, so 17·16 query rows a latent head: not a multiple of FlashMLA's 64-row tile) over
    random trees and prefixes of up to 15 pages, long enough that FlashMLA splits them."""
    from sglang_ddtree.sglang import tree_attention as TA

    if not prefixes.installed("flashmla"):
        pytest.skip("sgl_kernel's FlashMLA is not importable here")
    if n == 3:
        case = _mla_cascade_case(TA, "cuda", torch.bfloat16, h)
    else:
        g = torch.Generator().manual_seed(bs)
        ctx, rows = 1024, bs + 3
        lens = tuple(int(x) for x in torch.randint(1, ctx - n, (bs,), generator=g))
        req = tuple(int(x) for x in torch.randperm(rows, generator=g)[:bs])
        case = _mla_cascade_case(TA, "cuda", torch.bfloat16, h, n=n, lens=lens, req=req, ctx=ctx, rows=rows)
    runner, ta, fb, _, q, k, layer, want = case
    out = runner.attn_backend.forward_extend(q.reshape(q.shape[0], -1), k, k[..., :512].clone(), layer, fb)
    torch.testing.assert_close(out.view(want.shape).double().cpu(), want, rtol=2e-2, atol=2e-2)


def test_mla_prefix_auto_takes_flashmla_wherever_it_can(plugins_loaded, monkeypatch):
    """SGLANG_DDTREE_PREFIX=auto (the default): an MLA target on the flashmla backend at page size 64 has its
    prefix through FlashMLA; any other MLA backend or page size, or no importable FlashMLA, keeps the tree kernel
    over the whole prefix; an explicit `flashmla` there is refused with the reason."""
    from sglang_ddtree.sglang import tree_attention as TA
    from sglang_ddtree.sglang.settings import Settings

    for name in ("SGLANG_DDTREE_PREFIX", "SGLANG_DDTREE_MLA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.from_env().prefix == Settings.from_env().mla_prefix == "auto"
    have = {"flashmla": True}
    monkeypatch.setattr(prefixes, "installed", lambda name: have.get(name, True))
    for backend, page, importable, want in (("FlashMLABackend", 64, True, "flashmla"),
                                            ("FlashMLABackend", 1, True, "tree"),
                                            ("FlashMLABackend", 64, False, "tree"),
                                            ("TritonAttnBackend", 64, True, "tree"),
                                            ("FlashInferMLAAttnBackend", 64, True, "tree")):
        runner = make_mla_runner(backend, ctx=128, rows=2)
        runner.page_size, runner.attn_backend.num_q_heads, have["flashmla"] = page, 16, importable
        assert TA.TreeVerifyAttention(runner, n=3, max_bs=2).prefix == want, (backend, page, importable)
        if want == "tree":
            with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=flashmla (at page size|without sgl_kernel|on --attention-backend)"):
                TA.TreeVerifyAttention(runner, n=3, max_bs=2, prefix="flashmla")
    have["flashinfer"] = False
    assert TA.TreeVerifyAttention(make_runner(), n=3, max_bs=2).prefix == "tree"  # not MLA (and no FlashInfer)


def _mla_forward(runner, q, k, layer, fb):
    """A TARGET_VERIFY layer call as the runner's MLA backend makes it: flashinfer's hands the latent and rope parts
    apart (q_rope / k_rope), triton's and flashmla's whole."""
    t, h = q.shape[0], q.shape[1]
    if type(runner.attn_backend).__name__ == "FlashInferMLAAttnBackend":
        latent, rope = (lambda t: t[..., :512].contiguous()), (lambda t: t[..., 512:].contiguous())  # noqa: E731
        return runner.attn_backend.forward_extend(latent(q), latent(k), latent(k), layer, fb, q_rope=rope(q),
                                                  k_rope=rope(k))
    return runner.attn_backend.forward_extend(q.reshape(t, h * 576), k, k[..., :512].clone(), layer, fb)


@pytest.mark.parametrize("backend,page", [("FlashInferMLAAttnBackend", 1), ("TritonAttnBackend", 16),
                                          ("FlashMLABackend", 64)])
def test_flashinfer_mla_prefix_cascade_equals_attention_over_prefix_and_tree(plugins_loaded, monkeypatch, backend,
                                                                            page):
    """SGLANG_DDTREE_PREFIX=flashinfer on an MLA target, on each MLA backend (FlashInfer-MLA reads token slots:
    any page size): FlashInfer-MLA over each request's latent prefix, our kernel over the tree alone, merged with
    FlashInfer's base-2 LSE. FlashInfer-MLA is its CPU emulation (fi_mla_emulator: executes only what is in its
    buffers at run time, on 8 SMs so these prefixes are split), the tail a float64 implementation of its contract;
    checked against attention over prefix + tree from req_to_token and the ancestor mask, at a width of two
    clusters a CTA and another of one, then after a later round's metadata in the same buffers."""
    from sglang_ddtree.attention.problem import unpack_mask
    from sglang_ddtree.sglang import tree_attention as TA

    monkeypatch.setattr(prefixes, "installed", lambda name: True)
    monkeypatch.setattr(flashinfer_graphs, "_fi_mla_wrapper_class", lambda: FME.Wrapper)
    monkeypatch.setattr(TA, "_sm_count", lambda device: 8)
    monkeypatch.setattr(FME.Wrapper, "sms", 8)
    monkeypatch.setattr(FME.Wrapper, "made", [])
    monkeypatch.setattr(TA.native, "attend_ragged", _fake_mla_tail)
    h = 16
    for n, lens, req, seed in ((5, (300, 0, 77), (3, 1, 0), 1), (3, (1, 250), (2, 3), 2)):  # 80 rows: 2 CTAs
        runner, ta, fb, _, q, k, layer, want = _mla_cascade_case(
            TA, "cpu", torch.float32, h, n=n, lens=lens, req=req, ctx=512, rows=4, seed=seed, backend=backend,
            prefix="flashinfer", page=page)
        assert ta.prefix == "flashinfer" and isinstance(ta.lib.fi, flashinfer_graphs.FlashInferMLAPrefix)
        out = _mla_forward(runner, q, k, layer, fb)
        torch.testing.assert_close(out.view(want.shape).double(), want, rtol=1e-5, atol=1e-5)
        wrapper = ta.lib.fi._plans[(n, 0)][0]
        assert wrapper.runs == 1 and wrapper._plan_info[0] == (2 if n * h > 64 else 1)
    # a later round in the same buffers: longer prefixes, other rows
    fb.seq_lens, fb.req_pool_indices = torch.tensor([400, 3]), torch.tensor([0, 1])
    r2t = runner.req_to_token_pool.req_to_token
    fb.out_cache_loc = torch.stack([r2t[r, L:L + 3] for r, L in ((0, 400), (1, 3))]).flatten().long()
    runner.attn_backend.init_forward_metadata(fb)
    kv = runner.token_to_kv_pool.kv.view(-1, 576)
    mask = ta.masks[3][:2]
    vis = unpack_mask(mask, 3)
    out = _mla_forward(runner, q, k, layer, fb).view(-1, h, 512)
    for b, (r, L) in enumerate(((0, 400), (1, 3))):
        for i in range(3):
            keys = torch.cat([kv[r2t[r, :L].long()], k[b * 3 + vis[b, i].nonzero().flatten(), 0]])
            want_i = _attend(q[b * 3 + i], keys, keys[:, :512], 0.05)[0]
            torch.testing.assert_close(out[b * 3 + i].double(), want_i, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("backend,page", [("FlashInferMLAAttnBackend", 1), ("FlashMLABackend", 64)])
@pytest.mark.parametrize("h,n,bs", [(16, 3, 2), (16, 17, 16), (128, 17, 5)])
def test_flashinfer_mla_prefix_cascade_on_the_gpu(plugins_loaded, backend, page, h, n, bs):
    """The same wiring with the real FlashInfer-MLA and our CUDA kernels, bf16, against float64, over random trees
    and prefixes of up to 1k tokens, long enough that FlashInfer splits them."""
    from sglang_ddtree.sglang import tree_attention as TA

    if not prefixes.installed("flashinfer"):
        pytest.skip("flashinfer is not importable here")
    if n == 3:
        case = _mla_cascade_case(TA, "cuda", torch.bfloat16, h, backend=backend, prefix="flashinfer", page=page)
    else:
        g = torch.Generator().manual_seed(bs)
        ctx, rows = 1024, bs + 3
        lens = tuple(int(x) for x in torch.randint(0, ctx - n, (bs,), generator=g))
        req = tuple(int(x) for x in torch.randperm(rows, generator=g)[:bs])
        case = _mla_cascade_case(TA, "cuda", torch.bfloat16, h, n=n, lens=lens, req=req, ctx=ctx, rows=rows,
                                 backend=backend, prefix="flashinfer", page=page)
    runner, ta, fb, _, q, k, layer, want = case
    assert isinstance(ta.lib.fi, flashinfer_graphs.FlashInferMLAPrefix)
    out = _mla_forward(runner, q, k, layer, fb)
    torch.testing.assert_close(out.view(want.shape).double().cpu(), want, rtol=2e-2, atol=2e-2)


# --- the FlashInfer prefix for MHA/GQA targets (SGLANG_DDTREE_PREFIX=flashinfer) ------------------------------

def _gqa_runner(backend="TritonAttnBackend", ctx=256, rows=5, hq=8, hkv=2, d=64, page=1, dtype=torch.float32,
                device="cpu", seed=3):
    """An MHA/GQA runner on the named backend whose requests' KV pages (of `page` slots) are scattered."""
    runner = make_runner(ctx, rows, hkv, d, hq)
    runner.attn_backend = type(backend, (TritonAttnBackend,), {})()
    runner.page_size = page
    g = torch.Generator().manual_seed(seed)
    pages = torch.randperm(rows * ctx // page, generator=g).view(rows, ctx // page)
    offs = torch.arange(ctx)
    r2t = (pages[:, offs // page] * page + offs % page).to(torch.int32)
    runner.req_to_token_pool.req_to_token = r2t.to(device)
    pool = runner.token_to_kv_pool  # one slot more than req_to_token addresses: graph padding rows store there
    pool.k = torch.randn(rows * ctx + 1, hkv, d, generator=g).to(device, dtype)
    pool.v = torch.randn(rows * ctx + 1, hkv, d, generator=g).to(device, dtype)
    return runner, g


def _fake_flashinfer(monkeypatch, TA, sms=8):
    """FlashInfer replaced by its CPU emulation, on a device of `sms` SMs (small: so short prefixes are split)."""
    monkeypatch.setattr(prefixes, "installed", lambda name: True)
    monkeypatch.setattr(flashinfer_graphs, "_fi_wrapper_class", lambda: FE.Wrapper)
    monkeypatch.setattr(TA, "_sm_count", lambda device: sms)
    monkeypatch.setattr(FE.Wrapper, "sms", sms)
    monkeypatch.setattr(FE.Wrapper, "made", [])
    monkeypatch.setattr(FE.Wrapper, "fail_plan", None)


def _fake_tail(n_of):
    """Our kernel over the tree alone (an empty prefix), float64: (O, natural LSE)."""
    from sglang_ddtree.attention.problem import unpack_mask

    def tail(q, q_pe, kc, vc, indptr, indices, kt, vt, mask_bits, scale, splits):
        assert q_pe is None and int(indptr.abs().sum()) == 0  # the prefix is FlashInfer's: none here
        bs, n = mask_bits.shape[0], mask_bits.shape[1]
        group = q.shape[1] // kt.shape[1]
        vis = unpack_mask(mask_bits.cpu(), n)
        o = torch.zeros(q.shape[0], q.shape[1], vt.shape[-1], dtype=torch.float64)
        lse = torch.zeros(q.shape[0], q.shape[1], dtype=torch.float64)
        for b in range(bs):
            for i in range(n):
                j = vis[b, i].nonzero().flatten() + b * n
                for h in range(q.shape[1]):
                    o[b * n + i, h], lse[b * n + i, h] = _attend(q[b * n + i, h].cpu(), kt[j, h // group].cpu(),
                                                                 vt[j, h // group].cpu(), scale)
        return o.to(q.device, q.dtype), lse.float().to(q.device)
    return tail


def _verify_case(runner, g, req, lens, n, hq, hkv, d, device="cpu", dtype=torch.float32, mask=None):
    """A TARGET_VERIFY forward batch of requests `req` with prefixes `lens`, random trees (or `mask`), q/k/v, the
    layer and the expected output [T, Hq, D] (float64: every query over its prefix slots and its tree ancestors)."""
    from sglang_ddtree.attention.problem import unpack_mask

    r2t = runner.req_to_token_pool.req_to_token.cpu()
    bs = len(req)
    loc = torch.stack([r2t[r, L:L + n] for r, L in zip(req, lens)]).flatten().long()
    fb = types.SimpleNamespace(forward_mode=Mode("TARGET_VERIFY"), batch_size=bs, req_pool_indices=torch.tensor(req).to(device),
                               seq_lens=torch.tensor(lens).to(device), out_cache_loc=loc.to(device),
                               positions=torch.zeros(bs * n, dtype=torch.int64, device=device))
    mask = _random_tree_masks(bs, n, g) if mask is None else mask
    layer = types.SimpleNamespace(tp_q_head_num=hq, tp_k_head_num=hkv, qk_head_dim=d, v_head_dim=d, layer_id=0,
                                  scaling=d ** -0.5, logit_cap=0.0)
    q, k, v = (torch.randn(bs * n, h * d, generator=g).to(device, dtype) for h in (hq, hkv, hkv))
    pool = runner.token_to_kv_pool
    kp, vp = pool.k.cpu().clone(), pool.v.cpu().clone()
    kp[loc], vp[loc] = k.cpu().view(-1, hkv, d), v.cpu().view(-1, hkv, d)
    vis = unpack_mask(mask, n)
    want = torch.empty(bs * n, hq, d, dtype=torch.float64)
    for b in range(bs):
        for i in range(n):
            sl = torch.cat([r2t[req[b], : lens[b]].long(), loc[b * n + vis[b, i].nonzero().flatten()]])
            qi = q.cpu().view(-1, hkv, hq // hkv, d)[b * n + i].double()
            s = torch.einsum("kgd,jkd->kgj", qi, kp[sl].double()) * layer.scaling
            want[b * n + i] = torch.einsum("kgj,jkd->kgd", torch.softmax(s, -1), vp[sl].double()).reshape(hq, d)
    return fb, mask.to(device), layer, q, k, v, want


def _padded_replay(runner, ta, g, hq, hkv, d, n=9):
    """A padded replay as SGLang's graph runner makes it (its own build_replay_fb_view): 2 requests in the
    3-request graph, the padding row at seq_len 1 of request-pool row 0, the view's out_cache_loc the round's own
    (2n rows); the real rows' output must be attention over prefix + tree, the padding row's finite."""
    from sglang.srt.model_executor.runner import decode_cuda_graph_runner as cgr

    class Round(types.SimpleNamespace):  # the fields the view copies that this round does not set are None
        def __getattr__(self, name):
            return None

    base = runner.attn_backend
    fb2, mask2, layer, q2, k2, v2, want2 = _verify_case(runner, g, [4, 1], [199, 240], n, hq, hkv, d)
    buffers = types.SimpleNamespace(input_ids=torch.zeros(3 * n, dtype=torch.int64), positions=torch.zeros(
        3 * n, dtype=torch.int64), req_pool_indices=torch.tensor([4, 1, 0]), seq_lens=torch.tensor([199, 240, 1]),
        seq_lens_cpu=None, encoder_lens=None, mamba_track_indices=None)
    args = dict(forward_batch=Round(forward_mode=Mode("TARGET_VERIFY"), out_cache_loc=fb2.out_cache_loc),
                buffers=buffers, bs=3, raw_bs=2, num_tokens=3 * n, seq_len_fill_value=1,
                capture_forward_mode=Mode("TARGET_VERIFY"), is_encoder_decoder=False)
    if "global_num_tokens_cpu" in inspect.signature(cgr.build_replay_fb_view).parameters:
        args["global_num_tokens_cpu"] = None
    view = cgr.build_replay_fb_view(**args)
    base.init_forward_metadata_out_graph(view)
    ta.load_mask(torch.cat([mask2, mask2[:1]]))
    pad = lambda t: torch.cat([t, t[:n]])  # noqa: E731  (the padding row's tokens)
    view.out_cache_loc = pad(fb2.out_cache_loc)  # the layer's stores: the graph's static buffer
    out = base.forward_extend(pad(q2), pad(k2), pad(v2), layer, view).view(-1, hq, d)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[: 2 * n].double(), want2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend,page", [("TritonAttnBackend", 1), ("FlashInferAttnBackend", 16),
                                          ("TritonAttnBackend", 64)])
def test_flashinfer_prefix_cascade_equals_attention_over_prefix_and_tree(plugins_loaded, monkeypatch, backend, page):
    """SGLANG_DDTREE_PREFIX=flashinfer on an MHA/GQA target: FlashInfer over each request's token-level prefix
    slots (pages of 1/16/64 scattered: FlashInfer reads slots, so every page size), our kernel over the tree alone,
    merged with FlashInfer's base-2 LSE. FlashInfer is its CPU emulation (fi_emulator: executes only what is in
    its buffers at run time), the tail a float64 implementation of its contract, the merge the real one; checked
    against attention over prefix + tree from req_to_token and the ancestor mask, at both verify widths (each its
    own plan), for prefixes long enough to be split, again after the metadata of a later round (same buffers:
    the graph's addresses), and at a padded graph replay."""
    from sglang_ddtree.sglang import tree_attention as TA

    _fake_flashinfer(monkeypatch, TA)
    hq, hkv, d, widths = 8, 2, 64, (5, 9)
    runner, g = _gqa_runner(backend, page=page)
    if backend == "FlashInferAttnBackend":  # SGLang's own FlashInfer workspace is reused
        runner.attn_backend.workspace_buffer = torch.empty(16 << 20, dtype=torch.uint8)
    ta = TA.TreeVerifyAttention(runner, n=9, max_bs=4, widths=widths, prefix="flashinfer")
    assert ta.prefix == "flashinfer" and list(ta.lib.fi._plans) == [(9, 1)]  # planned at construction
    assert (ta.lib.fi.float_ws is getattr(runner.attn_backend, "workspace_buffer", None)) == (backend == "FlashInferAttnBackend")
    ta.install()
    base = runner.attn_backend
    monkeypatch.setattr(TA.native, "attend_ragged", _fake_tail(None))
    for n, req, lens in ((5, [3, 0, 4], [150, 7, 230]), (9, [1, 4, 2], [240, 129, 3])):
        fb, mask, layer, q, k, v, want = _verify_case(runner, g, req, lens, n, hq, hkv, d)
        base.init_forward_metadata(fb)
        ta.load_mask(mask)
        out = base.forward_extend(q, k, v, layer, fb)
        torch.testing.assert_close(out.view(-1, hq, d).double(), want, rtol=1e-5, atol=1e-5)
        wrapper, sched, bufs = ta.lib.fi._plans[(n, 3)]
        assert sched.kmax > 1 and int(sched.chunk) < max(lens)  # the prefixes were split
    assert sorted(ta.lib.fi._plans) == [(5, 3), (9, 1), (9, 3)]
    # a later round, same width and batch: re-written in place, the same buffers (what the graph captured)
    wrapper, sched, bufs = ta.lib.fi._plans[(9, 3)]
    addrs = [t.data_ptr() for t in (bufs.kv_indptr, bufs.kv_indices, wrapper._int_workspace_buffer)]
    fb, mask, layer, q, k, v, want = _verify_case(runner, g, [0, 2, 3], [60, 200, 245], 9, hq, hkv, d)
    base.init_forward_metadata_out_graph(fb, False)
    ta.load_mask(mask)
    torch.testing.assert_close(base.forward_extend(q, k, v, layer, fb).view(-1, hq, d).double(), want, rtol=1e-5,
                               atol=1e-5)
    assert ta.lib.fi._plans[(9, 3)][0] is wrapper and len(FE.Wrapper.made) == 3
    assert [t.data_ptr() for t in (bufs.kv_indptr, bufs.kv_indices, wrapper._int_workspace_buffer)] == addrs
    _padded_replay(runner, ta, g, hq, hkv, d)


def test_flashinfer_prefix_is_chosen_up_front(plugins_loaded, monkeypatch):
    """Which prefix each MHA/GQA target gets, decided at construction: `auto` is AUTO_GQA_PREFIX (FlashInfer
    since the H200 measured it ahead): FlashInfer wherever it serves (head dims 64 / 128 / 256, flashinfer
    importable, a plan that compiles) and our kernel elsewhere, or always our kernel with AUTO_GQA_PREFIX `tree`; an explicit `flashinfer`
    where it cannot serve is refused naming the reason; `tree` is always our kernel; FlashMLA is refused for a
    non-MLA target and FlashInfer for an MLA one."""
    from sglang_ddtree.sglang import tree_attention as TA

    _fake_flashinfer(monkeypatch, TA)
    have = {"flashinfer": True}
    monkeypatch.setattr(prefixes, "installed", lambda name: have.get(name, True))
    mk = lambda backend, d: _gqa_runner(backend, ctx=64, rows=2, d=d)[0]  # noqa: E731
    assert TA.choose.AUTO_GQA_PREFIX == "flashinfer"
    for backend in ("TritonAttnBackend", "FlashInferAttnBackend"):
        for d in (32, 64, 128):
            for importable in (True, False):
                have["flashinfer"] = importable
                serves = d in (64, 128) and importable
                got = TA.TreeVerifyAttention(mk(backend, d), n=3, max_bs=2).prefix
                assert got == ("flashinfer" if serves else "tree"), (backend, d, importable)
                assert TA.TreeVerifyAttention(mk(backend, d), n=3, max_bs=2, prefix="tree").prefix == "tree"
                with monkeypatch.context() as m:
                    m.setattr(TA.choose, "AUTO_GQA_PREFIX", "tree")
                    assert TA.TreeVerifyAttention(mk(backend, d), n=3, max_bs=2).prefix == "tree"
                if serves:
                    assert TA.TreeVerifyAttention(mk(backend, d), n=3, max_bs=2, prefix="flashinfer").prefix == "flashinfer"
                else:
                    why = "for a target of head dim 32" if d == 32 else "without flashinfer installed"
                    with pytest.raises(ValueError, match=f"SGLANG_DDTREE_PREFIX=flashinfer {why}"):
                        TA.TreeVerifyAttention(mk(backend, d), n=3, max_bs=2, prefix="flashinfer")
    have["flashinfer"] = True
    FE.Wrapper.fail_plan = RuntimeError("nvcc exited with status 1")  # a JIT failure, known before any request
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=flashinfer, but RuntimeError: nvcc exited"):
        TA.TreeVerifyAttention(mk("TritonAttnBackend", 128), n=3, max_bs=2, prefix="flashinfer")
    monkeypatch.setattr(TA.choose, "AUTO_GQA_PREFIX", "flashinfer")
    assert TA.TreeVerifyAttention(mk("TritonAttnBackend", 128), n=3, max_bs=2).prefix == "tree"
    FE.Wrapper.fail_plan = None
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=flashmla for an MHA/GQA target"):
        TA.TreeVerifyAttention(mk("TritonAttnBackend", 128), n=3, max_bs=2, prefix="flashmla")
    mla = make_mla_runner("FlashInferMLAAttnBackend", ctx=64, rows=2)
    have["flashinfer"] = False
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=flashinfer without flashinfer installed"):
        TA.TreeVerifyAttention(mla, n=3, max_bs=2, prefix="flashinfer")
    have["flashinfer"] = True
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX must be one of auto, tree, flashmla, flashinfer"):
        TA.TreeVerifyAttention(mk("TritonAttnBackend", 128), n=3, max_bs=2, prefix="flashattn")


# --- the FA3 prefix for MHA/GQA targets (SGLANG_DDTREE_PREFIX=fa3; `auto` on --attention-backend fa3) --------

def _fake_fa3(monkeypatch, calls):
    """sgl_kernel.flash_attn replaced by a float64 implementation of flash_attn_with_kvcache's documented contract
    (paged KV through page_table, lengths cache_seqlens, no mask; out [B, n, H, D], natural-log LSE [B, H, n]),
    recording how it was called; the library reported importable."""
    def flash_attn_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, page_table, softmax_scale, causal,
                                return_softmax_lse):
        calls.append(dict(q=tuple(q.shape), k=tuple(k_cache.shape), table=page_table.clone(),
                          lens=cache_seqlens.clone(), causal=causal, lse=return_softmax_lse))
        B, n, H, D = q.shape
        page, hkv = k_cache.shape[1], k_cache.shape[2]
        out = torch.zeros(B, n, H, v_cache.shape[-1], dtype=torch.float64)
        lse = torch.full((B, H, n), -math.inf, dtype=torch.float64)
        for b in range(B):
            j = torch.arange(int(cache_seqlens[b]))
            rows = (page_table[b, j // page].long() * page + j % page).cpu()
            keys, vals = k_cache.reshape(-1, hkv, D)[rows].cpu(), v_cache.reshape(-1, hkv, v_cache.shape[-1])[rows].cpu()
            for i in range(n):
                for h in range(H):
                    if rows.numel():
                        out[b, i, h], lse[b, h, i] = _attend(q[b, i, h].cpu(), keys[:, h // (H // hkv)],
                                                             vals[:, h // (H // hkv)], softmax_scale)
        return out.to(q.device, q.dtype), lse.float().to(q.device), None

    kernel = types.ModuleType("sgl_kernel")
    kernel.flash_attn = types.ModuleType("sgl_kernel.flash_attn")
    kernel.flash_attn.flash_attn_with_kvcache = flash_attn_with_kvcache
    monkeypatch.setitem(sys.modules, "sgl_kernel", kernel)
    monkeypatch.setitem(sys.modules, "sgl_kernel.flash_attn", kernel.flash_attn)


@pytest.mark.parametrize("backend,page", [("FlashAttentionBackend", 1), ("FlashAttentionBackend", 16),
                                          ("TritonAttnBackend", 64)])
def test_fa3_prefix_cascade_equals_attention_over_prefix_and_tree(plugins_loaded, monkeypatch, backend, page):
    """SGLANG_DDTREE_PREFIX=fa3 (`auto` on the fa3 backend): FA3's paged attention over each request's prefix
    through SGLang's page table (req_to_token's page columns / page size, in a static buffer) and the lengths on
    the device, our kernel over the tree alone, merged by natural-log LSE. FA3 is a float64 implementation of
    flash_attn_with_kvcache's contract (so attention/fa3.attend's layouts are the code under test), the tail a
    float64 one of our kernel's; checked against attention over prefix + tree from req_to_token and the ancestor
    mask at both verify widths, after a later round's metadata (same buffers: the graph's addresses), and at a
    padded graph replay."""
    from sglang_ddtree.sglang import tree_attention as TA

    calls = []
    _fake_fa3(monkeypatch, calls)
    monkeypatch.setattr(prefixes, "installed", lambda name: name in ("tree", "fa3"))
    hq, hkv, d = 8, 2, 64
    runner, g = _gqa_runner(backend, page=page)
    ta = TA.TreeVerifyAttention(runner, n=9, max_bs=4, widths=(5, 9),
                                prefix="auto" if backend == "FlashAttentionBackend" else "fa3")
    assert ta.prefix == "fa3" and ta.lib.block_table.shape == (4, 256 // page)
    ta.install()
    base = runner.attn_backend
    monkeypatch.setattr(TA.native, "attend_ragged", _fake_tail(None))
    r2t = runner.req_to_token_pool.req_to_token
    static = (ta.lib.block_table.data_ptr(), ta.lib.prefix_lens.data_ptr())
    for n, req, lens in ((5, [3, 0, 4], [150, 7, 230]), (9, [1, 4, 2], [240, 129, 3]), (9, [0, 2, 3], [60, 200, 245])):
        fb, mask, layer, q, k, v, want = _verify_case(runner, g, req, lens, n, hq, hkv, d)
        base.init_forward_metadata_out_graph(fb, False)
        ta.load_mask(mask)
        out = base.forward_extend(q, k, v, layer, fb)
        torch.testing.assert_close(out.view(-1, hq, d).double(), want, rtol=1e-5, atol=1e-5)
        c = calls[-1]
        assert c["q"] == (3, n, hq, d) and c["k"] == ((r2t.numel() + 1) // page, page, hkv, d)
        assert c["lens"].tolist() == lens and not c["causal"] and c["lse"]
        assert torch.equal(c["table"], r2t[req, ::page] // page)  # SGLang's fa3 page table of these rows
    assert (ta.lib.block_table.data_ptr(), ta.lib.prefix_lens.data_ptr()) == static
    _padded_replay(runner, ta, g, hq, hkv, d)
    assert calls[-1]["lens"].tolist() == [199, 240, 1]


def test_fa3_prefix_is_chosen_up_front(plugins_loaded, monkeypatch):
    """`auto` on SGLang's fa3 backend takes FA3's prefix where sgl_kernel's FA3 imports and the head dims are
    FA3's, else FlashInfer's, else our kernel; on triton / flashinfer `auto` stays FlashInfer's (measured); an
    explicit `fa3` where it cannot serve is refused naming the reason; SGLang's FULL_MASK verify is no fallback
    on fa3 (its tree mask needs topk > 1)."""
    from sglang_ddtree.sglang import tree_attention as TA

    _fake_flashinfer(monkeypatch, TA)
    have = {"fa3": True, "flashinfer": True}
    monkeypatch.setattr(prefixes, "installed", lambda name: have.get(name, True))
    mk = lambda backend, d=128: _gqa_runner(backend, ctx=64, rows=2, d=d)[0]  # noqa: E731
    for fa3, fi, want in ((True, True, "fa3"), (False, True, "flashinfer"), (False, False, "tree")):
        have.update(fa3=fa3, flashinfer=fi)
        assert TA.TreeVerifyAttention(mk("FlashAttentionBackend"), n=3, max_bs=2).prefix == want, (fa3, fi)
        assert TA.TreeVerifyAttention(mk("TritonAttnBackend"), n=3, max_bs=2).prefix == ("flashinfer" if fi else "tree")
    have.update(fa3=True, flashinfer=True)
    assert TA.TreeVerifyAttention(mk("FlashAttentionBackend", 32), n=3, max_bs=2).prefix == "tree"  # head dim 32
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=fa3 for a target of head dim 32 \\(FA3 takes head dims 64, 96, 128, 192, 256\\)"):
        TA.TreeVerifyAttention(mk("TritonAttnBackend", 32), n=3, max_bs=2, prefix="fa3")
    have["fa3"] = False
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=fa3 without sgl_kernel's FA3 library"):
        TA.TreeVerifyAttention(mk("FlashAttentionBackend"), n=3, max_bs=2, prefix="fa3")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=fa3 for an MLA target"):
        TA.TreeVerifyAttention(make_mla_runner("TritonAttnBackend", ctx=64, rows=2), n=3, max_bs=2, prefix="fa3")
    r = make_runner()  # bf16
    r.attn_backend = type("FlashAttentionBackend", (TritonAttnBackend,), {})()
    assert TA.unsupported(r) == "a KV cache on cpu (the kernel runs on CUDA)"  # everything else would do
    assert TA.no_full_mask(mk("FlashAttentionBackend")) == "--attention-backend fa3"
    assert TA.no_full_mask(mk("TritonAttnBackend")) is None and TA.no_full_mask(mk("FlashInferAttnBackend")) is None


def test_fa3_library_prefix_matches_the_reference(monkeypatch):
    """The standalone cascade (tree_verify_attention backend='fa3'): attention/fa3.FA3.run_host through FA3's contract
    (float64, above) equals the prefix part of the reference, its LSE natural, at page sizes 1 and 16 with an empty
    prefix among the requests (LSE -inf there)."""
    from sglang_ddtree.attention import Shape, fa3, fallback
    from sglang_ddtree.attention.problem import make_problem

    calls = []
    _fake_fa3(monkeypatch, calls)
    g = torch.Generator().manual_seed(5)
    for page in (1, 16):
        B, n, hq, hkv, d, pages = 3, 4, 8, 2, 64, 12
        k = torch.randn(pages * page + page, hkv, d, generator=g)
        v = torch.randn(pages * page + page, hkv, d, generator=g)
        table = torch.randperm(pages, generator=g)[: B * 4].view(B, 4).to(torch.int32)
        lens = torch.tensor([0, 3 * page + 1, 2], dtype=torch.int32)
        q = torch.randn(B * n, hq, d, generator=g)
        tree = (torch.randn(B * n, hkv, d, generator=g), torch.randn(B * n, hkv, d, generator=g))
        mask = torch.ones(B, n, 1, dtype=torch.int32)
        prob = make_problem(q, (k.view(-1, page, hkv, d), v.view(-1, page, hkv, d)), table, lens, tree, mask, 0.1)
        assert "on the CPU" in prefixes.refusal("fa3", Shape.of(prob))  # the standalone path never picks it here
        o, lse, base = fa3.FA3.run_host(prob, {})
        ref_o, ref_l = fallback.attend(prob, with_tree=False)
        assert base == "e" and calls[-1]["q"] == (B, n, hq, d) and calls[-1]["k"] == (pages + 1, page, hkv, d)
        assert torch.isinf(lse[:n]).all() and (lse[:n] < 0).all()
        torch.testing.assert_close(lse[n:].double(), ref_l[n:].double(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(o[n:].double(), ref_o[n:].double(), rtol=1e-5, atol=1e-5)


def _captured_layer(base, fb, q, k, v, layer, before=lambda: None):
    """One layer's verify captured as SGLang's graph runner captures it: static copies of the forward's inputs, the
    metadata out of the graph (then `before`), a warm-up on a side stream, the capture. Returns (graph, its output,
    the static fields, the static forward batch, the static q / k / v)."""
    static = {name: getattr(fb, name).clone() for name in ("req_pool_indices", "seq_lens", "out_cache_loc", "positions")}
    sfb = types.SimpleNamespace(forward_mode=fb.forward_mode, batch_size=int(fb.batch_size), **static)
    qkv = tuple(t.clone() for t in (q, k, v))
    base.init_forward_metadata_out_graph(sfb, True)
    before()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        base.forward_extend(*qkv, layer, sfb)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = base.forward_extend(*qkv, layer, sfb)
    return graph, out, static, sfb, qkv


@pytest.mark.gpu
@pytest.mark.parametrize("prefix,backend,page", [("flashinfer", "TritonAttnBackend", 1),
                                                 ("flashinfer", "FlashInferAttnBackend", 64),
                                                 ("fa3", "FlashAttentionBackend", 1),
                                                 ("fa3", "FlashAttentionBackend", 16)])
def test_library_prefix_cascade_on_the_gpu(plugins_loaded, prefix, backend, page):
    """The same wiring with the real library (FlashInfer, or sgl_kernel's FA3) and our CUDA kernels at Qwen3-8B
    attention shapes (32 / 8 heads, head dim 128, bf16), widths 16 and 64: eager forwards, then the verify
    captured as SGLang's graph runner does (metadata out of the graph, the layer inside) at batch 4 and replayed
    with other prefixes and trees and with a padded batch (1 real request + 3 padding rows at seq_len 1 of pool
    row 0), against float64 attention."""
    from sglang_ddtree.sglang import tree_attention as TA

    if not prefixes.installed(prefix):
        pytest.skip(f"{prefix} is not importable here")
    hq, hkv, d, bs = 32, 8, 128, 4
    runner, g = _gqa_runner(backend, ctx=4096, rows=6, hq=hq, hkv=hkv, d=d, page=page, dtype=torch.bfloat16,
                            device="cuda")
    ta = TA.TreeVerifyAttention(runner, n=64, max_bs=bs, widths=(16, 64), prefix=prefix)
    ta.install()
    base = runner.attn_backend
    tol = dict(rtol=2e-2, atol=2e-2)
    for n, req, lens in ((16, [3, 0, 5, 1], [4000, 1, 129, 2500]), (64, [2, 4], [3000, 700])):
        fb, mask, layer, q, k, v, want = _verify_case(runner, g, req, lens, n, hq, hkv, d, "cuda", torch.bfloat16)
        base.init_forward_metadata(fb)
        ta.load_mask(mask)
        out = base.forward_extend(q, k, v, layer, fb)
        torch.testing.assert_close(out.view(-1, hq, d).double().cpu(), want, **tol)
    # CUDA graph at batch 4, width 16: static inputs, metadata out of the graph before capture and each replay
    n = 16
    fb, mask, layer, q, k, v, _ = _verify_case(runner, g, [1, 2, 3, 4], [100, 200, 300, 400], n, hq, hkv, d, "cuda",
                                               torch.bfloat16)
    graph, out, static, sfb, (sq, sk, sv) = _captured_layer(base, fb, q, k, v, layer, lambda: ta.load_mask(mask))
    pad = runner.token_to_kv_pool.k.shape[0] - 1  # the padding rows' store slot, in no request's row
    for req, lens, real in (([5, 0, 2, 3], [3500, 2, 4000, 129], 4), ([3, 0, 0, 0], [2900, 1, 1, 1], 1)):
        fb, mask, layer, q, k, v, want = _verify_case(runner, g, req[:real], lens[:real], n, hq, hkv, d, "cuda",
                                                      torch.bfloat16)
        for name, val in (("req_pool_indices", req), ("seq_lens", lens)):
            static[name].copy_(torch.tensor(val))
        static["out_cache_loc"].fill_(pad)
        static["out_cache_loc"][: real * n].copy_(fb.out_cache_loc)
        sq.zero_(), sk.zero_(), sv.zero_()
        sq[: real * n].copy_(q), sk[: real * n].copy_(k), sv[: real * n].copy_(v)
        full = torch.zeros(bs, n, mask.shape[2], dtype=torch.int32, device="cuda")
        full[:real], full[real:, :, 0] = mask, 1  # padding rows: each node sees itself
        base.init_forward_metadata_out_graph(sfb, False)
        ta.load_mask(full)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.view(-1, hq, d)[: real * n].double().cpu(), want, **tol)


def test_sglangs_hybrid_backend_routes_target_verify_to_the_tree_kernel_on_its_verify_backend(plugins_loaded,
                                                                                              monkeypatch):
    """--prefill-attention-backend / --decode-attention-backend: SGLang's real HybridAttnBackend routes
    TARGET_VERIFY to its prefill backend (or its decode backend under --speculative-attention-mode decode). The
    tree kernel takes over that backend instance, so the hybrid's own TARGET_VERIFY calls reach it while every
    other mode stays the inner backends'; support and the FULL_MASK refusal are decided by that backend's class."""
    from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_ddtree.sglang import tree_attention as TA

    def hybrid(prefill, decode, spec_decode):
        h = object.__new__(HybridAttnBackend)  # its routing as SGLang wrote it; no model runner needed for it
        h.prefill_backend, h.decode_backend = prefill, decode
        h.spec_attn_is_decode, h.spec_attn_is_prefill = spec_decode, not spec_decode
        return h

    fa3 = lambda: type("FlashAttentionBackend", (TritonAttnBackend,), {})()  # noqa: E731
    for spec_decode in (False, True):
        runner = make_runner()
        prefill, decode = (TritonAttnBackend(), fa3()) if not spec_decode else (fa3(), TritonAttnBackend())
        runner.attn_backend = h = hybrid(prefill, decode, spec_decode)
        verify, other = (prefill, decode) if not spec_decode else (decode, prefill)
        assert TA.unsupported(runner) == "a KV cache on cpu (the kernel runs on CUDA)"  # Triton serves the verify
        assert TA.no_full_mask(runner) is None
        ta = TA.TreeVerifyAttention(runner, n=5, max_bs=4, prefix="tree")
        ta.install()
        assert ta.backend is verify and verify.ddtree_tree_attention is ta and not hasattr(other, "ddtree_tree_attention")
        rows, lens = torch.tensor([4, 0]), torch.tensor([7, 33])
        fb = types.SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, batch_size=2, req_pool_indices=rows,
                                   seq_lens=lens, out_cache_loc=torch.arange(100, 110), positions=torch.zeros(10))
        h.init_forward_metadata_out_graph(fb, in_capture=True)
        assert ta.lib.kv_indptr[:3].tolist() == [0, 7, 40] and verify.calls == []  # the tree kernel's metadata
        monkeypatch.setattr(TA.native, "attend_ragged", lambda q, *a: (torch.zeros(q.shape[0], q.shape[1], 128,
                                                                                    dtype=q.dtype), None))
        layer = types.SimpleNamespace(tp_q_head_num=8, tp_k_head_num=2, qk_head_dim=128, v_head_dim=128, layer_id=0,
                                      scaling=0.1, logit_cap=0.0)
        q, k, v = (torch.randn(10, h_ * 128, dtype=torch.bfloat16) for h_ in (8, 2, 2))
        ta.load_mask(torch.ones(2, 5, 1, dtype=torch.int32))
        calls = ta.calls
        assert h.forward_extend(q, k, v, layer, fb).shape == (10, 8 * 128) and ta.calls == calls + 1
        extend = types.SimpleNamespace(forward_mode=ForwardMode.EXTEND)
        assert h.forward_extend(None, None, None, None, extend) == "base"  # prefill: the inner backend's own
        assert prefill.calls[-1] == ("extend", "EXTEND") and other.calls in ([], [("extend", "EXTEND")])
    # the verify backend is fa3 (decode mode): no FULL_MASK fallback there; an unknown class is named
    runner = make_runner()
    runner.attn_backend = hybrid(TritonAttnBackend(), fa3(), True)
    assert TA.no_full_mask(runner) == "--attention-backend fa3"
    runner.attn_backend = hybrid(TritonAttnBackend(), type("TRTLLMHAAttnBackend", (), {})(), True)
    assert "attention backend TRTLLMHAAttnBackend" in TA.unsupported(runner)
