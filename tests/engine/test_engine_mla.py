"""The engine's DeepSeek-V3 MLA target (engine/mla.py) against transformers, its absorbed latent-cache verify
against the plain (decompressed) attention, and the shipped MLA pair's checkpoint format."""
import json
import os

import pytest
import torch

from sglang_ddtree.engine import Engine, checkpoint, data
from sglang_ddtree.engine.dflash import DFlashConfig, dflash_config
from sglang_ddtree.engine.mla import DeepseekV3Config, DeepseekV3ForCausalLM
from sglang_ddtree.engine.model import init_weights, prefix_tree_mask
from sglang_ddtree.engine.tokenizer import VOCAB_SIZE, ByteTokenizer

TARGET, DRAFT = (os.path.join(data.MODELS_DIR, d) for d in data.PAIRS["mla"])


def hf_deepseek_v3():
    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "DeepseekV3ForCausalLM"):
        pytest.skip("this transformers has no DeepseekV3ForCausalLM")
    return tf.DeepseekV3ForCausalLM


@pytest.fixture(scope="module")
def target():
    return checkpoint.load_target(TARGET)


def test_shipped_logits_match_transformers(target):
    ref = hf_deepseek_v3().from_pretrained(TARGET, torch_dtype=torch.float32).eval()
    assert set(ref.state_dict()) == set(checkpoint.load_safetensors(os.path.join(TARGET, "model.safetensors")))
    ids = torch.tensor([ByteTokenizer().encode("def f(x):\n    return x + 1\n" * 3)])
    with torch.no_grad():
        want = ref(ids, output_hidden_states=True)
        got, feats = target(ids, capture=(0,))
    torch.testing.assert_close(got, want.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(feats, want.hidden_states[1], rtol=1e-4, atol=1e-4)  # the drafter's context


def test_q_lora_and_other_widths_match_transformers(tmp_path):
    """q_lora (q_a_proj, q_a_layernorm, q_b_proj), attention bias and non-default widths, random weights."""
    cls = hf_deepseek_v3()
    c = DeepseekV3Config(vocab_size=61, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=24, q_lora_rank=20,
                         qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, first_k_dense_replace=2,
                         attention_bias=True, rope_theta=500.0,
                         extra={"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                                "rope_scaling": None, "num_nextn_predict_layers": 0})
    m = DeepseekV3ForCausalLM(c)
    init_weights(m, std=0.2, seed=4)
    with torch.no_grad():  # norms and biases away from their init, so a missed one shows
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(len(name))) + 0.5)
    checkpoint.save_model(m, str(tmp_path))
    ref = cls.from_pretrained(str(tmp_path), torch_dtype=torch.float32).eval()
    ids = torch.randint(0, 61, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(m(ids)[0], ref(ids).logits, rtol=1e-4, atol=1e-4)


def tiny_mla(seed=3) -> DeepseekV3ForCausalLM:
    """MLA's real widths (latent 512, rope 64, nope 128, v 128, 16 heads), a small body, float64."""
    c = DeepseekV3Config(vocab_size=50, hidden_size=32, intermediate_size=64)
    m = DeepseekV3ForCausalLM(c)
    init_weights(m, std=0.2, seed=seed)
    return m.double().eval()


@pytest.mark.parametrize("attention", ["tree", "mask"])
def test_absorbed_tree_verify_equals_plain_causal_forward_of_each_path(attention):
    """Latent cache + q absorbed through kv_b_proj (the verify op's MLA layout, or SDPA over the latent cache)
    at positions seq_len + depth under the ancestor mask == the plain decompressed causal forward of
    prefix + root..node. Two ragged requests, prefixes across cache pages."""
    torch.manual_seed(0)
    m = tiny_mla()
    parents = [-1, 0, 0, 1, 1, 3, 2]
    n, B, P, cap = len(parents), 2, 70, 192
    lens = torch.tensor([70, 45])
    prefix = torch.randint(0, 50, (B, P))
    toks = torch.randint(0, 50, (B, n))
    depth = [0] * n
    tmask = torch.zeros(1, n, n, dtype=torch.bool)
    for i in range(n):
        depth[i] = depth[parents[i]] + 1 if i else 0
        j = i
        while j >= 0:
            tmask[0, i, j] = True
            j = parents[j]
    tmask = tmask.expand(B, n, n)
    cache = m.new_cache(B, cap, torch.float64, "cpu")
    ar = torch.arange(cap)
    pos = ar[:P].expand(B, P)
    with torch.no_grad():
        m(prefix, pos, (ar[None, None] <= pos[..., None]) & (ar[None, None] < lens[:, None, None]), cache, pos)
        slots, positions = lens[:, None] + ar[:n], lens[:, None] + torch.tensor(depth)
        if attention == "tree":
            from sglang_ddtree.tree import pack_mask
            got, _ = m(toks, positions, None, cache, slots, attn_fn=m.op_attention(lens, pack_mask(tmask, 1), cap))
        else:
            got, _ = m(toks, positions, prefix_tree_mask(lens, tmask, cap), cache, slots)
        for b in range(B):
            for i in range(n):
                path, j = [], i
                while j >= 0:
                    path.append(int(toks[b, j]))
                    j = parents[j]
                full = torch.cat([prefix[b, :lens[b]], torch.tensor(path[::-1])])[None]
                torch.testing.assert_close(got[b, i], m(full)[0][0, -1], rtol=1e-9, atol=1e-9)


def test_shipped_config_is_deepseek_v3_with_real_mla_shapes(target):
    with open(os.path.join(TARGET, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
    widths = (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"])
    assert widths == (512, 64, 128, 128)
    assert cfg["num_attention_heads"] in (16, 64)                          # what FlashMLA takes
    assert "q_lora_rank" in cfg and cfg["q_lora_rank"] is None             # absent would read as 1536
    assert cfg["rope_scaling"] is None and cfg["first_k_dense_replace"] >= cfg["num_hidden_layers"]
    assert cfg["vocab_size"] == VOCAB_SIZE and cfg["torch_dtype"] == "bfloat16"
    weights = checkpoint.load_safetensors(os.path.join(TARGET, "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    tok = ByteTokenizer.from_dir(TARGET)
    assert tok.encode("x = 1\n") == ByteTokenizer().encode("x = 1\n")


def test_shipped_drafter_reads_the_mla_target(target):
    dc = DFlashConfig.load(DRAFT)
    assert dc.extra["num_target_layers"] == target.config.num_hidden_layers
    assert dc.hidden_size == target.config.hidden_size and dc.vocab_size == target.config.vocab_size
    assert all(0 <= i <= target.config.num_hidden_layers - 2 for i in dc.target_layer_ids)
    eng = Engine.from_pretrained(pair="mla", device="cpu")
    assert isinstance(eng.target, DeepseekV3ForCausalLM) and eng.attention == "tree"


def test_bad_mla_configs_are_refused():
    with pytest.raises(ValueError, match="first_k_dense_replace"):
        DeepseekV3Config(num_hidden_layers=3, first_k_dense_replace=1)
    with pytest.raises(ValueError, match="rope_scaling"):
        DeepseekV3Config(extra={"rope_scaling": {"type": "yarn", "factor": 40}})
    with pytest.raises(ValueError, match="head_dim"):
        dflash_config(DeepseekV3Config(), num_layers=1, block_size=4, target_layer_ids=[0], mask_token_id=1,
                      num_attention_heads=4, num_key_value_heads=2)
    with pytest.raises(ValueError, match="pair"):
        Engine.from_pretrained(pair="llama")
    m = tiny_mla()
    with pytest.raises(ValueError, match="prefix_kv"):
        m.model.layers[0].self_attn(torch.zeros(1, 2, 32, dtype=torch.float64), None, None, None, prefix_kv=[])
    ids = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="mask"):
        m(ids, None, None, m.new_cache(1, 8, torch.float64, "cpu"), torch.arange(2)[None])


@pytest.mark.parametrize("pair", ["qwen3", "mla"])
def test_shipped_pair_declares_one_serving_dtype(pair):
    """SGLang's --dtype auto serves each model in its config's torch_dtype (fp32 as fp16) and DFLASH's fc
    multiplies the target's hidden states by the drafter's weights: a pair declaring two dtypes crashes at the
    first decode round (bf16 x fp16), which the MLA pair once did."""
    target_dir, drafter_dir = (os.path.join(data.MODELS_DIR, d) for d in data.PAIRS[pair])
    dtypes = []
    for d in (target_dir, drafter_dir):
        with open(os.path.join(d, "config.json")) as f:
            dtypes.append(json.load(f)["torch_dtype"])
    assert dtypes[0] == dtypes[1], f"{pair}: target {dtypes[0]}, drafter {dtypes[1]}"


def test_engine_attention_and_prefix_speak_the_one_vocabulary():
    """Engine(attention=) takes auto / tree / mask (the earlier op / sdpa read as tree / mask), Engine(prefix=) the
    server's SGLANG_DDTREE_PREFIX values; a bad value, or a prefix library this target cannot use (the CPU: the
    libraries are CUDA kernels), is one ValueError naming the argument at construction. On the CPU `tree` is the
    torch path, as on a CPU server."""
    for given, want in (("tree", "tree"), ("op", "tree"), ("mask", "mask"), ("sdpa", "mask"), ("auto", "tree")):
        assert Engine.from_pretrained(pair="mla", device="cpu", attention=given).attention == want, given
    with pytest.raises(ValueError, match="attention must be one of auto, tree, mask, got 'dense'"):
        Engine.from_pretrained(pair="mla", device="cpu", attention="dense")
    with pytest.raises(ValueError, match="prefix must be one of auto, tree, flashmla, flashinfer, fa3, got 'fa2'"):
        Engine.from_pretrained(pair="mla", device="cpu", prefix="fa2")
    for lib in ("flashmla", "flashinfer", "fa3"):
        with pytest.raises(ValueError, match=f"prefix={lib} on the CPU"):
            Engine.from_pretrained(pair="mla", device="cpu", prefix=lib)
    Engine.from_pretrained(pair="mla", device="cpu", attention="mask", prefix="fa3")  # no tree attention: unused
    eng = Engine.from_pretrained(pair="mla", device="cpu", prefix="tree")
    ref = Engine.from_pretrained(pair="mla", device="cpu")
    prompts = ["the tree verify", "of two requests"]
    assert [r.token_ids for r in eng.generate(prompts, 12, budget=8, paper=True)] == \
        [r.token_ids for r in ref.generate(prompts, 12, budget=8, paper=True)]
