"""The shipped MLA pair on CUDA, the verify through tree_verify_attention's MLA form: fp32 greedy DDTree
and chain identical to AR, and in bf16 (the kernel path: FlashMLA cascade or the fused kernel) the verify
forward against the float64 plain (decompressed) forward on the CPU, its error bounded by that of the same
verify in bf16 through torch's dense-mask attention (the dtype's own rounding; H200 2026-12-03: a fixed
0.05 bound was off by 0.016 on 4 of 19,425 logits, so the bound is the dtype's, not a guess). bf16 greedy is not compared token by
token with AR: verify widths round differently (docs/benchmarks/engine-h200-2026-12-02.json: 191-199 of
200 identical for the Qwen3 pair)."""
import os

import pytest
import torch

from sglang_ddtree.attention import native
from sglang_ddtree.engine import Engine, checkpoint, data
from sglang_ddtree.engine.model import prefix_tree_mask
from sglang_ddtree.engine.data import heldout_prompts
from sglang_ddtree.tree import build_tree

pytestmark = pytest.mark.gpu


def test_mla_fp32_greedy_identical_to_ar_on_cuda():
    eng = Engine.from_pretrained(pair="mla", device="cuda", dtype=torch.float32)
    assert eng.attention == "tree"
    prompts = heldout_prompts(64)
    ar = [r.token_ids for r in eng.generate(prompts, 48, method="ar")]
    for method, budget, anchor in (("chain", None, None), ("ddtree", 8, None), ("ddtree", 64, None),
                                   ("ddtree", 32, "chain")):
        got = [r.token_ids for r in eng.generate(prompts, 48, method=method, budget=budget, anchor=anchor)]
        assert got == ar, (method, budget, anchor)


def test_mla_bf16_verify_through_kernel_matches_float64_plain_forward():
    eng = Engine.from_pretrained(pair="mla", device="cuda", dtype=torch.bfloat16)
    m, c = eng.target, eng.target.config
    ref = checkpoint.load_target(os.path.join(data.MODELS_DIR, data.PAIRS["mla"][0]), torch.float64)
    # what tree_verify_attention's `auto` needs to pick a kernel (FlashMLA cascade or the fused one) over torch
    assert native.supports_shape("cuda", torch.bfloat16, "mla", c.kv_lora_rank + c.qk_rope_head_dim,
                                 c.kv_lora_rank, c.kv_lora_rank)
    B, P, cap, budget = 3, 150, 256, 24
    n = budget + 1
    g = torch.Generator(device="cuda").manual_seed(0)
    lens = torch.tensor([150, 70, 129], device="cuda")
    ids = torch.randint(0, 256, (B, P), device="cuda", generator=g)
    tree = build_tree(torch.randn(B, 7, c.vocab_size, device="cuda", generator=g), budget,
                      root_tokens=ids[:, 0], seq_lens=lens)
    ar = torch.arange(cap, device="cuda")
    pos = ar[:P].expand(B, P)
    prefill_mask = (ar[None, None] <= pos[..., None]) & (ar[None, None] < lens[:, None, None])
    slots = lens[:, None] + ar[:n]
    with torch.no_grad():
        cache = m.new_cache(B, cap, torch.bfloat16, "cuda")
        m(ids, pos, prefill_mask, cache, pos)
        got, _ = m(tree.tokens, tree.positions, None, cache, slots, attn_fn=eng._op_attention(lens, tree, cap))
        # the same verify in bf16 through torch's attention under the dense prefix + ancestor mask
        cache = m.new_cache(B, cap, torch.bfloat16, "cuda")
        m(ids, pos, prefill_mask, cache, pos)
        dense, _ = m(tree.tokens, tree.positions, prefix_tree_mask(lens, tree.tree_mask, cap), cache, slots)
        # float64 reference on the CPU: the plain causal forward of [prompt ‖ tree nodes] under a dense mask
        lens_c, S = lens.cpu(), P + n
        j = torch.arange(S)
        mask = (j[None, :, None] >= j[None, None, :]) & (j[None, None, :] < lens_c[:, None, None])
        mask[:, P:, P:] = tree.tree_mask.cpu()
        want, _ = ref(torch.cat([ids, tree.tokens], 1).cpu(), torch.cat([pos, tree.positions], 1).cpu(), mask)
    want = want[:, P:].float()
    err_kernel = (got.float().cpu() - want).abs().max().item()
    err_dense = (dense.float().cpu() - want).abs().max().item()
    assert err_dense < 0.5, err_dense  # the bf16 model itself is sane
    assert err_kernel <= 1.5 * err_dense + 1e-2, (err_kernel, err_dense)
