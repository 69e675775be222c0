"""The drafter's attention through the verify cascade (sglang_ddtree/sglang/draft_attention.py), on CPU.

DFlash's draft block is one TARGET_VERIFY forward of the draft runner whose layers are bidirectional: every block
query attends the drafter's context (req_to_token[row, :seq_len]) and every key of the block. Checked against that
definition computed here in float64, with FlashInfer replaced by its CPU emulation and our tail kernel by a float64
implementation of its contract (as in test_sglang_tree_attention.py, whose helpers this reuses); which drafters
the cascade takes is read from SGLang's own RadixAttention modules.
"""
import dataclasses
import logging
import types

import pytest
import torch

from sglang_ddtree.attention import prefixes

import test_sglang_decode_round as R
import test_sglang_tree_attention as T
from test_sglang_decode_round import release  # noqa: F401  (its fixture: the installed release's adapter module)


@pytest.fixture
def adapter_module(release):  # noqa: F811
    return release


def _all_visible(bs, n):
    """The packed mask with every one of n keys visible, built bit by bit (independently of the module)."""
    words = (n + 31) // 32
    out = torch.zeros(bs, n, words, dtype=torch.int32)
    full = (1 << n) - 1
    for w in range(words):
        part = (full >> (32 * w)) & 0xFFFFFFFF
        out[:, :, w] = part - 2**32 if part >= 2**31 else part
    return out


@pytest.mark.parametrize("n", [1, 5, 16, 31, 32, 33, 64, 65])
def test_all_visible_bits_sets_exactly_the_block(n):
    from sglang_ddtree.attention.problem import unpack_mask
    from sglang_ddtree.sglang.draft_attention import all_visible_bits

    bits = all_visible_bits(3, n, "cpu")
    assert bits.dtype == torch.int32 and bits.shape == (3, n, (n + 31) // 32)
    assert torch.equal(bits, _all_visible(3, n))
    assert unpack_mask(bits, n).all()


@pytest.mark.parametrize("backend,page", [("TritonAttnBackend", 1), ("TritonAttnBackend", 16),
                                          ("FlashInferAttnBackend", 64)])
def test_draft_block_attends_the_whole_context_and_the_whole_block(plugins_loaded, monkeypatch, backend, page):
    """The draft runner's TARGET_VERIFY through the cascade equals attention over the context slots and every
    block key, for prefixes long enough to be split, after the batch outgrows the buffers (the grown mask is
    still all visible), and the backend's other modes stay its own; no mask is loaded a round."""
    from sglang_ddtree.sglang import draft_attention as DA
    from sglang_ddtree.sglang import tree_attention as TA

    T._fake_flashinfer(monkeypatch, TA)
    hq, hkv, d, block = 8, 2, 64, 6
    runner, g = T._gqa_runner(backend, page=page)
    if backend == "FlashInferAttnBackend":
        runner.attn_backend.workspace_buffer = torch.empty(16 << 20, dtype=torch.uint8)
    da = DA.DraftBlockAttention(runner, block=block, max_bs=2)
    assert da.prefix == "flashinfer" and da.widths == [block]
    da.install()
    base = runner.attn_backend
    monkeypatch.setattr(TA.native, "attend_ragged", T._fake_tail(None))
    for req, lens in (([3, 0], [150, 7]), ([1, 4, 2], [240, 129, 3])):  # the second outgrows max_bs = 2
        fb, _, layer, q, k, v, want = T._verify_case(runner, g, req, lens, block, hq, hkv, d,
                                                     mask=_all_visible(len(req), block))
        base.init_forward_metadata(fb)
        out = base.forward_extend(q, k, v, layer, fb)
        torch.testing.assert_close(out.view(-1, hq, d).double(), want, rtol=1e-5, atol=1e-5)
    assert da.calls == 2
    with pytest.raises(RuntimeError, match="fixed"):
        da.load_mask(_all_visible(1, block))
    other = types.SimpleNamespace(forward_mode=T.Mode("EXTEND"))
    assert base.forward_extend(None, None, None, None, other) == "base"


def test_which_drafters_the_cascade_takes(plugins_loaded, sglang_release):
    """Read from SGLang's RadixAttention modules of the draft model: bidirectional full attention (DFlash's
    ENCODER_ONLY layers) is taken; a causal layer, a sliding window or a logit cap is named."""
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    from sglang_ddtree.sglang import adapters

    Adapter = adapters.for_release(sglang_release).Adapter

    def drafter(**last):
        layers = [RadixAttention(4, 64, 0.125, 2, layer_id=0, attn_type=AttentionType.ENCODER_ONLY),
                  RadixAttention(4, 64, 0.125, 2, layer_id=1, **{"attn_type": AttentionType.ENCODER_ONLY, **last})]
        return Adapter(types.SimpleNamespace(draft_model=torch.nn.ModuleList(layers)))

    assert drafter().draft_layers_unsupported() is None
    assert "layer 1 is decoder attention (causal)" in drafter(attn_type=AttentionType.DECODER).draft_layers_unsupported()
    assert "sliding window of 128" in drafter(sliding_window_size=128).draft_layers_unsupported()
    assert "caps its logits" in drafter(logit_cap=30.0).draft_layers_unsupported()
    assert "no attention layer" in Adapter(types.SimpleNamespace(draft_model=torch.nn.Linear(2, 2))) \
        .draft_layers_unsupported()


def test_the_knob_is_refused_at_start_up_where_it_cannot_serve(adapter_module, caplog):
    """SGLANG_DDTREE_DRAFT_ATTENTION=ddtree where the cascade cannot serve stops the server at start-up with the
    knob and the fix named; the default leaves the draft backend alone."""
    rnd, _, host, _, _ = R.make_round(adapter_module, 7, 4, torch.tensor([5, 9]), [[1] * 5, [2] * 9], [1, 0, 0], True)
    rnd.choose_draft_attention()  # the default: nothing installed
    assert rnd.draft_attn is None
    rnd.knobs = dataclasses.replace(rnd.knobs, draft_attention="ddtree")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_DRAFT_ATTENTION=ddtree, but the CUDA ops are unavailable. "
                                         "Fix: unset SGLANG_DDTREE_DRAFT_ATTENTION"):
        rnd.choose_draft_attention()
    rnd.knobs = dataclasses.replace(rnd.knobs, draft_attention="auto")  # where it cannot serve: the backend's own
    with caplog.at_level(logging.INFO, logger="sglang_ddtree"):
        rnd.choose_draft_attention()
    assert rnd.draft_attn is None and "stays on its backend's kernel: the CUDA ops are unavailable" in caplog.text


def test_auto_installs_the_cascade_where_it_can_serve(adapter_module, monkeypatch):
    """SGLANG_DDTREE_DRAFT_ATTENTION=auto where the cascade can serve: the same DraftBlockAttention as `ddtree`, on
    the draft runner, with the drafter's block and the server's batch bound."""
    from sglang_ddtree.sglang import draft_attention as DA

    rnd, _, host, _, _ = R.make_round(adapter_module, 7, 4, torch.tensor([5, 9]), [[1] * 5, [2] * 9], [1, 0, 0], True)
    made = []

    class Fake:
        def __init__(self, runner, *, block, max_bs, tp=1):
            made.append((runner, block, max_bs))

        def install(self):
            made.append("installed")

    monkeypatch.setattr(DA, "DraftBlockAttention", Fake)
    monkeypatch.setattr(DA, "unsupported", lambda runner, layers_why: layers_why)
    rnd.sgl.draft_layers_unsupported = lambda: None  # a bidirectional drafter (the fake host has no layers)
    rnd.round.backend = "cuda"  # the CUDA ops load (the CPU harness has none)
    for choice in ("auto", "ddtree"):
        made.clear()
        rnd.knobs = dataclasses.replace(rnd.knobs, draft_attention=choice)
        rnd.choose_draft_attention()
        assert made == [(host.draft_model_runner, 4, rnd._max_bs), "installed"] and isinstance(rnd.draft_attn, Fake)


@pytest.mark.gpu
@pytest.mark.parametrize("backend,page", [("TritonAttnBackend", 1), ("FlashInferAttnBackend", 16)])
def test_draft_block_on_the_gpu(plugins_loaded, backend, page):
    """With the real FlashInfer and our CUDA kernels at a Qwen3-8B-shaped drafter's attention (32 / 8 heads of 128,
    bf16, block 16): eager, then captured as SGLang's graph runner does (metadata out of the graph) and replayed at
    other context lengths, against float64 attention over the context and the whole block."""
    from sglang_ddtree.sglang import draft_attention as DA
    from sglang_ddtree.sglang import tree_attention as TA

    if not prefixes.installed("flashinfer"):
        pytest.skip("flashinfer is not importable here")
    hq, hkv, d, bs, block = 32, 8, 128, 4, 16
    runner, g = T._gqa_runner(backend, ctx=8192, rows=6, hq=hq, hkv=hkv, d=d, page=page, dtype=torch.bfloat16,
                              device="cuda")
    da = DA.DraftBlockAttention(runner, block=block, max_bs=bs)
    da.install()
    base = runner.attn_backend
    tol = dict(rtol=2e-2, atol=2e-2)
    case = lambda req, lens: T._verify_case(runner, g, req, lens, block, hq, hkv, d, "cuda", torch.bfloat16,  # noqa: E731
                                            mask=_all_visible(len(req), block))
    fb, _, layer, q, k, v, want = case([3, 0, 5, 1], [8000, 1, 129, 4000])
    base.init_forward_metadata(fb)
    torch.testing.assert_close(base.forward_extend(q, k, v, layer, fb).view(-1, hq, d).double().cpu(), want, **tol)
    fb, _, layer, q, k, v, _ = case([1, 2, 3, 4], [100, 200, 300, 400])
    graph, out, static, sfb, (sq, sk, sv) = T._captured_layer(base, fb, q, k, v, layer)
    for req, lens in (([5, 0, 2, 3], [7900, 2, 6000, 129]), ([2, 4, 1, 0], [16, 8100, 33, 5000])):
        fb, _, layer, q, k, v, want = case(req, lens)
        for name in ("req_pool_indices", "seq_lens", "out_cache_loc"):
            static[name].copy_(getattr(fb, name))
        sq.copy_(q), sk.copy_(k), sv.copy_(v)
        base.init_forward_metadata_out_graph(sfb, False)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.view(-1, hq, d).double().cpu(), want, **tol)
