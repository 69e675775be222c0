"""The dummy-weight round-cost pairs (examples/*-shaped/, served by scripts/gpu/80_round_cost.sh) are configs
SGLang's own ModelConfig reads as the intended architecture, each drafter fits its target (hidden size,
vocabulary, captured layer ids), and every DDTree server the script starts on the MLA pair passes start-up."""
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


@pytest.fixture
def kimi_pair(tmp_path):
    src = os.path.join(ROOT, "examples", "kimi-k2-shaped")
    dirs = {}
    for role, name in (("target", "target-config.json"), ("drafter", "dflash-b16-config.json")):
        d = tmp_path / role
        d.mkdir()
        shutil.copy(os.path.join(src, name), d / "config.json")
        dirs[role] = str(d)
    return dirs


@pytest.mark.parametrize("extra", [
    ["--speculative-num-draft-tokens", "16"],
    ["--speculative-num-draft-tokens", "64"],
    ["--speculative-num-draft-tokens", "16", "--attention-backend", "flashinfer"],
    ["--speculative-num-draft-tokens", "16", "--attention-backend", "flashmla", "--page-size", "64",
     "--speculative-draft-attention-backend", "triton"],
], ids=["b15", "b63", "flashinfer", "flashmla-page64"])
def test_round_cost_servers_of_the_mla_pair_start(resolve, kimi_pair, extra):
    """Every DDTree server 80_round_cost.sh starts on the Kimi-K2-shaped pair passes the plugin's start-up checks
    through SGLang's real argument path (a refusal there would cost a GPU call to find)."""
    sa = resolve("--load-format", "dummy", "--speculative-draft-load-format", "dummy", "--dtype", "bfloat16",
                 *extra, target=kimi_pair["target"], drafter=kimi_pair["drafter"])
    assert sa.speculative_num_draft_tokens == int(extra[1])
    assert sa.attention_backend == (extra[3] if len(extra) > 2 else "triton")


def test_auto_budget_server_of_the_mla_pair_starts(resolve, kimi_pair, monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "auto")
    sa = resolve("--load-format", "dummy", "--speculative-draft-load-format", "dummy", "--dtype", "bfloat16",
                 target=kimi_pair["target"], drafter=kimi_pair["drafter"])
    assert sa.speculative_num_draft_tokens == 64  # the widest default candidate (budget 63) + 1


def test_flashmla_prefix_server_of_the_mla_pair_starts(resolve, kimi_pair, monkeypatch):
    """The FlashMLA-prefix split demanded (SGLANG_DDTREE_MLA_PREFIX=flashmla) on the Kimi-K2-shaped pair passes
    start-up where sgl_kernel's FlashMLA is installed, and is refused at start-up naming it where not (the server
    binding's answer, attention/choose.py)."""
    from sglang_ddtree.attention import flashmla

    monkeypatch.setenv("SGLANG_DDTREE_MLA_PREFIX", "flashmla")
    start = lambda: resolve("--load-format", "dummy", "--speculative-draft-load-format", "dummy", "--dtype",  # noqa: E731
                            "bfloat16", "--speculative-num-draft-tokens", "16", "--attention-backend", "flashmla",
                            "--page-size", "64", "--speculative-draft-attention-backend", "triton",
                            target=kimi_pair["target"], drafter=kimi_pair["drafter"])
    monkeypatch.setattr(flashmla, "installed", lambda: True)
    sa = start()
    assert sa.attention_backend == "flashmla" and sa.page_size == 64
    monkeypatch.setattr(flashmla, "installed", lambda: False)
    with pytest.raises(ValueError, match="PREFIX=flashmla without sgl_kernel's FlashMLA"):
        start()
