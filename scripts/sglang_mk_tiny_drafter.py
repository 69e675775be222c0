"""Write a tiny DFlash drafter dir for a tiny target made by scripts/mk_tiny_llama.py (config + tokenizer only;
serve it with --speculative-draft-load-format dummy). usage: sglang_mk_tiny_drafter.py TARGET_DIR OUT_DIR [BLOCK]

The drafter's mask token must lie inside the tokenizer's vocabulary (SGLang refuses otherwise): use <pad>.
"""
import json
import os
import shutil
import sys

target, out = sys.argv[1], sys.argv[2]
block = int(sys.argv[3]) if len(sys.argv) > 3 else 8
os.makedirs(out, exist_ok=True)
cfg = json.load(open(os.path.join(target, "config.json")))
tok = json.load(open(os.path.join(target, "tokenizer.json")))
pad = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<pad>")
n_target = cfg["num_hidden_layers"]
# SGLang captures the hidden state *before* layer id + 1, so ids must stay <= n_target - 2 (a 2-layer target
# offers one feature; listing both layers made the drafter expect a feature the target never captures).
draft = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                             "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                             "hidden_act", "bos_token_id", "eos_token_id", "torch_dtype")}
draft.update({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 1,
              "tie_word_embeddings": False, "block_size": block, "num_target_layers": n_target,
              "dflash_config": {"target_layer_ids": list(range(max(1, n_target - 1))), "mask_token_id": pad}})
json.dump(draft, open(os.path.join(out, "config.json"), "w"), indent=1)
for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    if os.path.exists(os.path.join(target, f)):
        shutil.copy(os.path.join(target, f), out)
print("tiny DFlash drafter at", out, "block", block, "mask", pad)
