"""The dummy-weight round-cost pairs (examples/*-shaped/, served by scripts/gpu/80_round_cost.sh) are configs
SGLang's own ModelConfig reads as the intended architecture, and each drafter fits its target (hidden size,
vocabulary, captured layer ids)."""
import json
import os
import shutil

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PAIRS = {"qwen3-8b-shaped": "MHA", "kimi-k2-shaped": "MLA"}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_shaped_pair_is_read_by_sglang_as_intended(pair, tmp_path):
    from sglang.srt.configs.model_config import ModelConfig

    src = os.path.join(ROOT, "examples", pair)
    shutil.copy(os.path.join(src, "target-config.json"), tmp_path / "config.json")
    target = ModelConfig(str(tmp_path))
    assert target.attention_arch.name == PAIRS[pair]
    with open(os.path.join(src, "dflash-b16-config.json")) as f:
        drafter = json.load(f)
    hf = target.hf_config
    assert drafter["hidden_size"] == hf.hidden_size and drafter["vocab_size"] == hf.vocab_size
    assert drafter["num_target_layers"] == hf.num_hidden_layers
    # SGLang captures the context before layer id + 1: every id must leave a layer after it
    assert max(drafter["dflash_config"]["target_layer_ids"]) <= hf.num_hidden_layers - 2
    assert drafter["dflash_config"]["mask_token_id"] < hf.vocab_size
    if PAIRS[pair] == "MLA":  # the shapes the tree kernel's MLA layout takes, dense MLP (no MoE to load)
        assert (target.kv_lora_rank, target.qk_rope_head_dim) == (512, 64)
        assert hf.first_k_dense_replace >= hf.num_hidden_layers
