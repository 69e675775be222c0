"""The engine's own Qwen3 / DFlash code against transformers, and the shipped checkpoints' formats."""
import json
import os

import pytest
import torch

from sglang_ddtree.engine import checkpoint, data
from sglang_ddtree.engine.dflash import DFlashConfig
from sglang_ddtree.engine.model import KVCache, Qwen3Config, Qwen3ForCausalLM, init_weights, prefix_tree_mask
from sglang_ddtree.engine.tokenizer import MASK_ID, VOCAB_SIZE, ByteTokenizer

TARGET = os.path.join(data.MODELS_DIR, "tiny-target")
DRAFT = os.path.join(data.MODELS_DIR, "tiny-dflash")


@pytest.fixture(scope="module")
def target():
    return checkpoint.load_target(TARGET)


def test_logits_match_transformers(target):
    tf = pytest.importorskip("transformers")
    ref = tf.Qwen3ForCausalLM.from_pretrained(TARGET).float().eval()
    ids = torch.tensor([ByteTokenizer().encode("def f(x):\n    return x + 1\n" * 3)])
    with torch.no_grad():
        want = ref(ids, output_hidden_states=True)
        got, feats = target(ids, capture=(0, 1, 2))
    torch.testing.assert_close(got, want.logits, rtol=1e-4, atol=1e-4)
    # features = HF hidden_states[i + 1] (after layer i) for the drafter's target_layer_ids
    torch.testing.assert_close(feats, torch.cat([want.hidden_states[i + 1] for i in (0, 1, 2)], -1),
                               rtol=1e-4, atol=1e-4)


def test_tree_verify_equals_causal_forward_of_each_path():
    """Cache + positions seq_len + depth + ancestor mask == a plain causal forward of root..node."""
    torch.manual_seed(0)
    c = Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    m = Qwen3ForCausalLM(c).double()
    init_weights(m, std=0.3, seed=3)
    m.double()
    prefix = torch.randint(0, 50, (1, 7))
    parents = [-1, 0, 0, 1, 1, 3, 2]                 # a small tree, parent index < child index
    toks = torch.randint(0, 50, (1, len(parents)))
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    n, P, cap = len(parents), prefix.shape[1], 32
    tmask = torch.zeros(1, n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            tmask[0, i, j] = True
            j = parents[j]
    cache = KVCache(2, 1, 2, cap, 8, torch.float64, "cpu")
    ar = torch.arange(cap)
    pos = ar[:P][None]
    with torch.no_grad():
        m(prefix, pos, (ar[None, None] <= pos[..., None]), cache, pos)
        seq = torch.tensor([P])
        got, _ = m(toks, P + torch.tensor([depth]), prefix_tree_mask(seq, tmask, cap), cache, P + ar[:n][None])
        for i in range(n):
            path, j = [], i
            while j >= 0:
                path.append(int(toks[0, j]))
                j = parents[j]
            full = torch.cat([prefix, torch.tensor([path[::-1]])], 1)
            want, _ = m(full)
            torch.testing.assert_close(got[0, i], want[0, -1], rtol=1e-9, atol=1e-9)


def test_safetensors_roundtrip_matches_library(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    t = {"a": torch.randn(3, 4), "b": torch.arange(5), "c": torch.randn(2, 2).bfloat16()}
    checkpoint.save_safetensors(t, str(tmp_path / "x.safetensors"))
    back = st.load_file(str(tmp_path / "x.safetensors"))
    for k in t:
        assert torch.equal(back[k], t[k])
    st.save_file(t, str(tmp_path / "y.safetensors"))
    mine = checkpoint.load_safetensors(str(tmp_path / "y.safetensors"))
    for k in t:
        assert torch.equal(mine[k], t[k])


def test_tokenizer_files_load_in_transformers():
    tf = pytest.importorskip("transformers")
    tok = tf.AutoTokenizer.from_pretrained(TARGET)
    text = "for i in range(10):\n\tprint(i, 'é')\n"
    assert tok.encode(text, add_special_tokens=False) == ByteTokenizer().encode(text)
    assert tok.decode(ByteTokenizer().encode(text)) == text
    assert tok.eos_token_id == ByteTokenizer.eos_token_id
    assert tok.convert_tokens_to_ids("<|MASK|>") == MASK_ID
    assert len(tok) == VOCAB_SIZE


def test_drafter_checkpoint_has_sglang_fields_and_names(target):
    with open(os.path.join(DRAFT, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["DFlashDraftModel"]
    d = cfg["dflash_config"]
    assert 0 <= d["mask_token_id"] < VOCAB_SIZE                       # inside the tokenizer's vocabulary
    assert cfg["block_size"] == d["block_size"] >= 2
    assert cfg["num_target_layers"] == target.config.num_hidden_layers
    # SGLang captures the context before layer id + 1: that layer must exist
    assert all(0 <= i <= target.config.num_hidden_layers - 2 for i in d["target_layer_ids"])
    assert cfg["hidden_size"] == target.config.hidden_size and cfg["vocab_size"] == target.config.vocab_size
    names = set(checkpoint.load_safetensors(os.path.join(DRAFT, "model.safetensors")))
    per_layer = {f"layers.{i}.{w}.weight" for i in range(cfg["num_hidden_layers"]) for w in (
        "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    assert names == per_layer | {"fc.weight", "hidden_norm.weight", "norm.weight"}
    dc = DFlashConfig.load(DRAFT)
    assert dc.mask_token_id == d["mask_token_id"] and dc.target_layer_ids == d["target_layer_ids"]


def test_split_is_recorded_and_prompts_are_heldout():
    with open(os.path.join(data.MODELS_DIR, "split.json")) as f:
        split = json.load(f)
    train, held = set(split["train"]), set(split["heldout"])
    assert train and held and not train & held
    with open(data.PROMPTS_FILE) as f:
        prompts = json.load(f)["prompts"]
    assert len(prompts) >= 200
    assert all(p["file"] in held and p["file"] not in train for p in prompts)
