"""The engine on CUDA: fp32 losslessness of the shipped pair, and the verify forward through the project's tree
attention (the engine's own prefix choice, and the server's: `server_prefix`) against the dense-mask SDPA path."""
import pytest
import torch

from sglang_ddtree.attention import Shape, choose, prefixes
from sglang_ddtree.engine import Engine
from sglang_ddtree.engine.data import heldout_prompts
from sglang_ddtree.engine.dflash import DFlashDraftModel, dflash_config
from sglang_ddtree.engine.model import KVCache, Qwen3Config, Qwen3ForCausalLM, init_weights, prefix_tree_mask
from sglang_ddtree.tree import build_tree

pytestmark = pytest.mark.gpu


def test_fp32_greedy_identical_to_ar_on_cuda():
    eng = Engine.from_pretrained(device="cuda", dtype=torch.float32)
    prompts = heldout_prompts(100)
    ar = [r.token_ids for r in eng.generate(prompts, 48, method="ar")]
    for method, budget in (("chain", None), ("ddtree", 8), ("ddtree", 64)):
        got = [r.token_ids for r in eng.generate(prompts, 48, method=method, budget=budget, paper=True)]
        assert got == ar, (method, budget)


def server_prefix(config, n: int, backend: str = "triton") -> str:
    """The prefix a server on `--attention-backend backend` runs for this target's verify of width n (the server
    binding's choice: choose.choose with host 'server'), so the engine can run the same cascade."""
    shape = Shape("gqa", config.head_dim, config.head_dim,
                  rows=n * (config.num_attention_heads // config.num_key_value_heads), backend=backend)
    return choose.choose(shape, host="server")


def _tiny_bf16():
    c = Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=128)
    m = Qwen3ForCausalLM(c)
    init_weights(m, std=0.05, seed=0)
    m = m.cuda().bfloat16().eval()
    d = DFlashDraftModel(dflash_config(c, num_layers=1, block_size=8, target_layer_ids=[0], mask_token_id=5))
    return c, m, d.cuda().bfloat16()


@pytest.mark.parametrize("prefix", ["auto", "server"], ids=["engine-auto", "server-choice"])
def test_verify_forward_tree_attention_matches_sdpa(prefix):
    """The verify forward through the tree attention (the engine's own `auto`, and the cascade a server picks for
    this shape) against the dense-mask SDPA path."""
    c, m, d = _tiny_bf16()
    B, P, cap, budget = 3, 40, 128, 24
    if prefix == "server":
        prefix = server_prefix(c, budget + 1)
        assert prefix in ("flashinfer", "tree") and (prefix == "flashinfer") == prefixes.installed("flashinfer")
    eng = Engine(m, d, attention="tree", prefix=prefix)
    g = torch.Generator(device="cuda").manual_seed(0)
    lens = torch.tensor([40, 17, 29], device="cuda")
    ids = torch.randint(0, 512, (B, P), device="cuda", generator=g)
    tree = build_tree(torch.randn(B, 7, 512, device="cuda", generator=g), budget,
                      root_tokens=ids[:, 0], seq_lens=lens)
    outs = []
    for op in (True, False):
        cache = KVCache(2, B, 2, cap, 128, torch.bfloat16, "cuda")
        ar = torch.arange(cap, device="cuda")
        pos = ar[:P].expand(B, P)
        with torch.no_grad():
            m(ids, pos, (ar[None, None] <= pos[..., None]) & (ar[None, None] < lens[:, None, None]), cache, pos)
            slots = lens[:, None] + ar[:budget + 1]
            if op:
                logits, _ = m(tree.tokens, tree.positions, None, cache, slots,
                              attn_fn=eng._op_attention(lens, tree, cap))
            else:
                logits, _ = m(tree.tokens, tree.positions, prefix_tree_mask(lens, tree.tree_mask, cap), cache, slots)
        outs.append(logits.float())
    torch.testing.assert_close(outs[0], outs[1], rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("sampled", [{}, {"temperature": 0.8, "top_p": 0.95, "keys": "law", "children": "drawn"}],
                         ids=["greedy", "sampled-drawn"])
def test_decode_loop_host_syncs_are_one_per_round(sampled):
    """The round reads nothing on the host except the `all done?` check: count synchronizing calls (sampled with
    drawn children too: the draws and the children's tests are device ops, rejection.py)."""
    import warnings

    eng = Engine.from_pretrained(device="cuda", dtype=torch.float32)
    prompts = heldout_prompts(16)
    eng.generate(prompts, 8, method="ddtree", budget=32, paper=True, **sampled)  # warm-up (kernel loading may sync)
    torch.cuda.synchronize()

    def count(max_new):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                res = eng.generate(prompts, max_new, method="ddtree", budget=32, stop_token_ids=[], paper=True,
                                   **sampled)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught), int(res[0].stage_times["rounds"])

    # setup and teardown cost the same for both lengths, so the difference is the rounds' own syncs
    (s1, r1), (s2, r2) = count(24), count(72)
    assert r2 > r1 and s2 - s1 <= r2 - r1, ((s1, r1), (s2, r2))
