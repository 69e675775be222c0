"""Train the shipped tiny pairs: a byte-level target (Qwen3, or DeepSeek-V3 MLA) and its DFlash drafter.

    python -m sglang_ddtree train [--arch qwen3|mla] [--out DIR] [--threads 2]

--arch mla: the DeepSeek-V3 target of engine/mla.py (real MLA shapes, 2 layers) and its drafter, into
tiny-mla-target / tiny-mla-dflash, on the same split and corpus (split.json and the held-out prompts are
written by the qwen3 run only). Its log: train_log_mla_<stage>.txt.

1. Target: next-byte prediction on the training files (models/split.json records the split).
2. Drafter data: windows of training text continued by the target itself (greedy and sampled), so the
   drafter learns the target's own continuations, as at decode time.
3. Drafter (distillation): for random anchors s in each sequence, the block [x_s, MASK x L] over the
   target's features of x_<s must predict the target's next-token distributions at s .. s+L-1
   (soft cross-entropy, earlier positions weighted more, since acceptance stops at the first miss).

Deterministic: fixed seeds and a fixed thread count (results are bit-stable for a given torch build and
thread count). About 15 minutes on 2 idle CPU cores (`--stage target|drafter` runs one half).
"""
from __future__ import annotations

import json
import math
import os
import time

import torch
import torch.nn.functional as F

from .. import _cli
from ..engine import data
from ..engine.checkpoint import save_model
from ..engine.dflash import DFlashDraftModel, dflash_config
from ..engine.mla import DeepseekV3Config, DeepseekV3ForCausalLM
from ..engine.model import CausalLM, Qwen3Config, Qwen3ForCausalLM, init_weights
from ..engine.tokenizer import EOS_ID, MASK_ID, VOCAB_SIZE, write_tokenizer

TARGET = dict(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
              rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=False,
              bos_token_id=EOS_ID, eos_token_id=EOS_ID)
DRAFT = dict(num_layers=2, block_size=8, target_layer_ids=[0, 1, 2], mask_token_id=MASK_ID)
# MLA's real shapes (FlashMLA's: latent 512 + rope 64, 16 heads); 2 layers, so the drafter reads layer 0
MLA_TARGET = dict(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                  num_attention_heads=16, num_key_value_heads=16, kv_lora_rank=512, q_lora_rank=None,
                  qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, first_k_dense_replace=2,
                  rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=False,
                  bos_token_id=EOS_ID, eos_token_id=EOS_ID)
MLA_DRAFT = dict(num_layers=2, block_size=8, target_layer_ids=[0], mask_token_id=MASK_ID,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32)


def corpus(files: list[str]) -> torch.Tensor:
    """All training files, each followed by <|endoftext|>, as one int64 token stream."""
    parts = []
    for f in files:
        if not data.read(f):
            continue
        parts.append(torch.frombuffer(bytearray(data.read(f)), dtype=torch.uint8).long())
        parts.append(torch.tensor([EOS_ID]))
    return torch.cat(parts)


def windows(stream: torch.Tensor, n: int, length: int, g: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, stream.numel() - length, (n,), generator=g)
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train_target(arch, stream, steps, batch, seq, g, log) -> CausalLM:
    model = arch["model"](arch["config"](**arch["target"]))
    init_weights(model, seed=1)
    lr = arch["lr"]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.05)
    model.train()
    t0 = time.time()
    for step in range(steps):
        for pg in opt.param_groups:
            pg["lr"] = lr_at(step, steps, lr, 50)
        x = windows(stream, batch, seq + 1, g)
        logits, _ = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"target step {step}/{steps} loss {loss.item():.4f} ({time.time() - t0:.0f}s)")
    return model.eval()


@torch.no_grad()
def continue_text(model, prompts: torch.Tensor, new: int, temperature: float, g) -> torch.Tensor:
    """The target's own continuation of equal-length prompts [N, P] (KV cache, one token a step)."""
    N, P = prompts.shape
    cache = model.new_cache(N, P + new, torch.float32, "cpu")
    ar = torch.arange(P + new)
    out = torch.cat([prompts, torch.zeros(N, new, dtype=torch.long)], 1)
    pos = ar[:P].expand(N, P)
    logits, _ = model(prompts, pos, (ar[None, :] <= ar[:P, None]).expand(N, P, P + new), cache, pos)
    for t in range(P, P + new):
        last = logits[:, -1].float()
        nxt = last.argmax(-1) if temperature == 0 else \
            torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=g)[:, 0]
        out[:, t] = nxt
        if t == P + new - 1:
            break
        p = torch.full((N, 1), t)
        logits, _ = model(nxt[:, None], p, (ar <= t).expand(N, 1, P + new), cache, p)
    return out


@torch.no_grad()
def teacher_outputs(target, seqs, layer_ids, chunk=64):
    """The target's next-token distributions and context features over the drafter's data, once."""
    probs, feats = [], []
    for i in range(0, seqs.shape[0], chunk):
        logits, f = target(seqs[i:i + chunk], capture=tuple(layer_ids))
        probs.append(torch.softmax(logits.float(), -1))
        feats.append(f)
    return torch.cat(probs), torch.cat(feats)


def drafter_batch(target, drafter, seqs, teacher, feats, nb, g, weights):
    """Soft-CE loss of the drafter on nb random blocks per sequence (see module docstring)."""
    c, d = target.config, drafter.config
    Bs, L = d.block_size, d.block_size - 1
    N, T = seqs.shape
    anchors = torch.randint(8, T - Bs, (N, nb), generator=g)                       # s_j
    blk = torch.full((N, nb, Bs), MASK_ID)
    blk[:, :, 0] = seqs.gather(1, anchors)
    pos = anchors[:, :, None] + torch.arange(Bs)                                   # [N, nb, Bs]
    ctx_pos = torch.arange(T).expand(N, T)
    # query of block j sees context t < s_j and its own block (non-causal)
    ctx_vis = torch.arange(T)[None, None, :] < anchors[:, :, None]                 # [N, nb, T]
    ctx_vis = ctx_vis[:, :, None, :].expand(N, nb, Bs, T).reshape(N, nb * Bs, T)
    own = torch.eye(nb, dtype=torch.bool).repeat_interleave(Bs, 0).repeat_interleave(Bs, 1)
    mask = torch.cat([ctx_vis, own.expand(N, -1, -1)], dim=2)
    with torch.no_grad():
        noise = target.embed(blk.reshape(N, nb * Bs))
    hidden = drafter(noise, pos.reshape(N, nb * Bs), mask,
                     prefix_kv=drafter.context_kv(feats, ctx_pos))
    hidden = hidden.reshape(N, nb, Bs, -1)[:, :, 1:]                              # predictions of s+1..s+L
    logq = torch.log_softmax(target.lm_head(hidden).float(), -1)                   # [N, nb, L, V]
    tpos = (anchors[:, :, None] + torch.arange(L)).reshape(N, nb * L)              # teacher rows s..s+L-1
    p = teacher.gather(1, tpos[:, :, None].expand(-1, -1, c.vocab_size)).reshape(N, nb, L, -1)
    ce = -(p * logq).sum(-1)                                                       # [N, nb, L]
    hit = (logq.argmax(-1) == p.argmax(-1)).float().mean((0, 1))
    return (ce * weights).sum(-1).mean() / weights.sum(), hit


def train_drafter(target, draft_cfg, seqs, steps, batch, nb, g, log) -> DFlashDraftModel:
    drafter = DFlashDraftModel(dflash_config(target.config, **draft_cfg))
    init_weights(drafter, seed=2)
    for p in target.parameters():
        p.requires_grad_(False)
    teacher, feats = teacher_outputs(target, seqs, drafter.config.target_layer_ids)
    opt = torch.optim.AdamW(drafter.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.0)
    L = drafter.config.block_size - 1
    weights = torch.exp(-torch.arange(L, dtype=torch.float32) / 4.0)
    t0 = time.time()
    drafter.train()
    for step in range(steps):
        for pg in opt.param_groups:
            pg["lr"] = lr_at(step, steps, 2e-3, 30)
        idx = torch.randint(0, seqs.shape[0], (batch,), generator=g)
        loss, hit = drafter_batch(target, drafter, seqs[idx], teacher[idx], feats[idx], nb, g, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"drafter step {step}/{steps} loss {loss.item():.4f} top1 match by depth "
                f"{[round(h, 2) for h in hit.tolist()]} ({time.time() - t0:.0f}s)")
    return drafter.eval()


TARGET_EXTRA = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
                "torch_dtype": "float32", "attention_dropout": 0.0, "use_sliding_window": False,
                "sliding_window": None, "max_window_layers": TARGET["num_hidden_layers"]}
# HF DeepseekV3Config keys; the MoE ones are valid but unused (first_k_dense_replace = num_hidden_layers)
MLA_EXTRA = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_act": "silu",
             "torch_dtype": "bfloat16", "attention_dropout": 0.0, "rope_scaling": None, "rope_interleave": True,
             "num_nextn_predict_layers": 0, "moe_layer_freq": 1, "n_routed_experts": 8, "n_shared_experts": 1,
             "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_group": 1, "topk_group": 1,
             "routed_scaling_factor": 1.0, "norm_topk_prob": True, "scoring_func": "sigmoid",
             "topk_method": "noaux_tc", "initializer_range": 0.02}
# per architecture: model, config, its extra config.json keys, folders, shipped dtype, training shape.
# The MLA target ships bf16: fp32 would be 24 MB (kv_b_proj alone is 2.1M weights a layer); bf16 is also
# the dtype its MLA verify runs in on the GPU, so the GPU computes on the shipped weights exactly.
ARCHS = {
    "qwen3": dict(model=Qwen3ForCausalLM, config=Qwen3Config, target=TARGET, extra=TARGET_EXTRA, draft=DRAFT,
                  dirs=data.PAIRS["qwen3"], log="train_log_{}.txt", dtype=None, lr=3e-3,
                  steps=400, batch=32, seq=256),
    # ~15x the Qwen3 target's compute per token: fewer, shorter windows keep training near 10 min on 2 cores
    "mla": dict(model=DeepseekV3ForCausalLM, config=DeepseekV3Config, target=MLA_TARGET, extra=MLA_EXTRA,
                draft=MLA_DRAFT, dirs=data.PAIRS["mla"], log="train_log_mla_{}.txt",
                dtype=torch.bfloat16, lr=2e-3, steps=500, batch=16, seq=128),
}


def main(argv=None):
    ap = _cli.Parser(prog=_cli.prog("train"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--arch", default="qwen3", choices=sorted(ARCHS), help="which pair: the Qwen3 target or the "
                    "DeepSeek-V3 (MLA) one, each with its DFlash drafter (default qwen3)")
    ap.add_argument("--out", default=data.MODELS_DIR, help="folder for the two model directories (default: the shipped ones)")
    ap.add_argument("--threads", type=_cli.positive_int, default=2, help="torch CPU threads (results are bit-stable per count)")
    ap.add_argument("--stage", default="all", choices=("all", "target", "drafter"),
                    help="drafter: reuse the target already saved in --out")
    ap.add_argument("--target-steps", type=_cli.positive_int, default=None, help="default: the architecture's (ARCHS)")
    ap.add_argument("--drafter-steps", type=_cli.positive_int, default=800, help="drafter training steps (default 800)")
    ap.add_argument("--gen-seqs", type=_cli.positive_int, default=384, help="target continuations the drafter learns from")
    a = ap.parse_args(argv)
    arch = ARCHS[a.arch]
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    tdir, ddir = (os.path.join(a.out, d) for d in arch["dirs"])
    logs = []

    def log(msg):
        print(msg, flush=True)
        logs.append(msg)

    train_files, heldout_files = data.split()
    if a.arch != "qwen3":  # trained on the split the shipped prompts were held out from
        with open(os.path.join(data.MODELS_DIR, "split.json")) as f:
            if json.load(f)["train"] != train_files:
                raise SystemExit("this Python's stdlib does not give models/split.json's training files")
    stream = corpus(train_files)
    log(f"{len(train_files)} training files ({stream.numel()} bytes), {len(heldout_files)} held out")
    t0 = time.time()
    if a.stage in ("all", "target"):
        target = train_target(arch, stream, a.target_steps or arch["steps"], arch["batch"], arch["seq"], g, log)
        save_model(target, tdir, arch["extra"], dtype=arch["dtype"])
        with open(os.path.join(tdir, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "pad_token_id": 257}, f, indent=2)
        write_tokenizer(tdir)
    if a.stage in ("all", "target") and a.arch == "qwen3":  # the split and prompts every pair is tested on
        prompts = data.make_prompts(heldout_files, per_file=8)
        with open(os.path.join(a.out, "split.json"), "w") as f:
            json.dump({"rule": "sha256(relpath)[0] % 8 == 0 -> held out", "train": train_files,
                       "heldout": heldout_files}, f, indent=1)
        with open(os.path.join(a.out, "heldout_prompts.json"), "w") as f:
            json.dump({"source": "held-out stdlib files (split.json)", "prompts": prompts}, f, indent=1)
    if a.stage in ("all", "drafter"):
        from ..engine.checkpoint import load_target
        target = load_target(tdir)
        g = torch.Generator().manual_seed(5678)
        # the drafter's data: training text continued by the target itself (half greedy, half T=0.8)
        seqs = []
        for i in range(a.gen_seqs // 128):
            prompts = windows(stream, 128, 64, g)
            seqs.append(continue_text(target, prompts, 128, 0.0 if i % 2 == 0 else 0.8, g))
        seqs = torch.cat(seqs)
        log(f"generated {seqs.shape[0]} x {seqs.shape[1]} target continuations ({time.time() - t0:.0f}s)")
        drafter = train_drafter(target, arch["draft"], seqs, a.drafter_steps, 32, 16, g, log)
        # SGLang's --dtype auto serves each model in its declared dtype, and DFLASH's fc projects the target's
        # hidden states: the drafter declares the target's (its weights stay fp32; SGLang casts them)
        save_model(drafter, ddir, {"torch_dtype": arch["extra"]["torch_dtype"]})
        write_tokenizer(ddir)  # SGLang may load a tokenizer from the drafter path too
    with open(os.path.join(a.out, arch["log"].format(a.stage)), "w") as f:
        f.write("\n".join(logs) + f"\ntotal {time.time() - t0:.0f}s, torch {torch.__version__}, "
                f"threads {a.threads}\n")
    log(f"saved to {a.out} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
