"""Train the shipped tiny DFlash2 drafter: a candidate selector on the shipped DFlash backbone.

    python -m sglang_ddtree train_selector [--out DIR] [--threads 2] [--rank 32] [--top-k 16]

The backbone (tiny-dflash) and the target (tiny-target) stay frozen, so the selector's unary scores are the
shipped drafter's own marginals and only the codebooks A, B and the projection W learn (docs/DESIGN.md §8.2).
1. Data: windows of the training text continued by the target itself (half greedy, half T = 0.8), as the
   backbone's were (train.py), and the target's next-token law p at every position.
2. Blocks: at random anchors s, the frozen backbone's hidden states h_e and candidates cand[e] (the K best
   tokens of the target's head on h_e) for slots e = 0 … L − 1, computed once.
3. Objective: slot e predicts the token at s + e + 1, whose law under the target, given the actual prefix, is
   p(· | x_≤s+e). The selector scores slot e after the actual predecessor x_s+e (the row the walk and the tree
   read when they are on the target's path): score[e, c] = unary[e, c] + <A[x_s+e] ∘ W h_e, B[cand[e, c]]>, and
   the loss is the cross-entropy of the target's law restricted to the candidates against softmax(score):
   −Σ_c p(cand[e, c]) log softmax(score[e])_c, summed over slots. Its minimiser is p renormalised over the K
   candidates, the conditional law the tree ranks by (at T = 1, and its argmax the greedy target's token).
Deterministic (fixed seeds, a fixed thread count); a few minutes on 2 idle cores. The log goes to
models/train_log_selector.txt; held-out blocks (a tenth, never trained on) report the loss and how often the
row's top candidate is the target's argmax, against the unary marginals'.
"""
from __future__ import annotations

import json
import os
import time

import torch

from .. import _cli
from ..topk import topk_logprobs_torch
from ..engine import data
from ..engine.checkpoint import load_drafter, load_target, save_model
from ..engine.dflash2 import DFlash2DraftModel, attach_selector
from ..engine.tokenizer import MASK_ID, write_tokenizer
from .train import continue_text, corpus, lr_at, teacher_outputs, windows

DRAFTER_DIR = "tiny-dflash2"


@torch.no_grad()
def blocks(target, backbone, seqs, teacher, feats, per_seq: int, top_k: int, g, chunk: int = 16):
    """The frozen backbone over `per_seq` random blocks of each sequence -> per (block, slot) rows: hidden
    [R, L, H], candidate ids and unary logits [R, L, K], the target's law on the candidates [R, L, K], the
    predecessor token [R, L] and the target's argmax [R, L]."""
    d = backbone.config
    Bs, L = d.block_size, d.block_size - 1
    N, T = seqs.shape
    out = {k: [] for k in ("hidden", "cand", "unary", "p", "pred", "argmax")}
    for i in range(0, N, chunk):
        x, n = seqs[i:i + chunk], min(chunk, N - i)
        anchors = torch.randint(8, T - Bs, (n, per_seq), generator=g)
        blk = torch.full((n, per_seq, Bs), MASK_ID)
        blk[:, :, 0] = x.gather(1, anchors)
        pos = anchors[:, :, None] + torch.arange(Bs)
        ctx_vis = torch.arange(T)[None, None, :] < anchors[:, :, None]
        ctx_vis = ctx_vis[:, :, None, :].expand(n, per_seq, Bs, T).reshape(n, per_seq * Bs, T)
        own = torch.eye(per_seq, dtype=torch.bool).repeat_interleave(Bs, 0).repeat_interleave(Bs, 1)
        mask = torch.cat([ctx_vis, own.expand(n, -1, -1)], dim=2)
        h = backbone(target.embed(blk.reshape(n, per_seq * Bs)), pos.reshape(n, per_seq * Bs), mask,
                     prefix_kv=backbone.context_kv(feats[i:i + n], torch.arange(T).expand(n, T)))
        h = h.reshape(n * per_seq, Bs, -1)[:, 1:]                                  # slots 0..L-1
        logits = target.lm_head(h).float()
        _, cand = topk_logprobs_torch(logits, top_k)
        tpos = (anchors[:, :, None] + torch.arange(L)).reshape(n, per_seq * L)     # law of x_{s+e+1} at s+e
        p = teacher[i:i + n].gather(1, tpos[:, :, None].expand(-1, -1, teacher.shape[-1]))
        p = p.reshape(n * per_seq, L, -1)
        out["hidden"].append(h)
        out["cand"].append(cand)
        out["unary"].append(logits.gather(-1, cand))
        out["p"].append(p.gather(-1, cand))
        out["pred"].append(x.gather(1, tpos).reshape(n * per_seq, L))
        out["argmax"].append(p.argmax(-1))
    return {k: torch.cat(v) for k, v in out.items()}


def selector_loss(model: DFlash2DraftModel, rows: dict, idx) -> tuple[torch.Tensor, torch.Tensor]:
    """The objective (module docstring) on rows idx, and each row's top candidate."""
    sel = model.candidate_selector
    cand = rows["cand"][idx]
    pair = sel.pair_scores(rows["pred"][idx].unsqueeze(-1), rows["hidden"][idx], cand).squeeze(-2)
    score = model.unary(rows["unary"][idx]) + pair                                 # [R, L, K]
    ce = -(rows["p"][idx] * torch.log_softmax(score, -1)).sum(-1)                  # [R, L]
    return ce.sum(-1).mean(), cand.gather(-1, score.argmax(-1, keepdim=True)).squeeze(-1)


@torch.no_grad()
def report(model, rows, idx, name) -> str:
    loss, top = selector_loss(model, rows, idx)
    unary_top = rows["cand"][idx][..., 0]
    hit = (top == rows["argmax"][idx]).float().mean(0)
    base = (unary_top == rows["argmax"][idx]).float().mean(0)
    mass = rows["p"][idx].sum(-1).mean().item()
    return (f"{name}: loss {loss.item():.4f}, target argmax = top of the row by slot {[round(v, 3) for v in hit.tolist()]}"
            f" (unary: {[round(v, 3) for v in base.tolist()]}), target mass on the candidates {mass:.3f}")


def main(argv=None):
    ap = _cli.Parser(prog=_cli.prog("train_selector"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", default=data.MODELS_DIR, help="folder of the shipped models (reads tiny-target and "
                    "tiny-dflash, writes tiny-dflash2; default: the shipped folder)")
    ap.add_argument("--threads", type=_cli.positive_int, default=2, help="torch CPU threads (results are bit-stable per count)")
    ap.add_argument("--rank", type=_cli.positive_int, default=32, help="the selector's rank r (selector_rank)")
    ap.add_argument("--top-k", type=_cli.positive_int, default=16, help="candidates per slot K (selector_top_k; a "
                    "power of two, as SGLang's CUDA walk needs)")
    ap.add_argument("--steps", type=_cli.positive_int, default=3000, help="training steps (default 3000)")
    ap.add_argument("--gen-seqs", type=_cli.positive_int, default=512, help="target continuations to learn from "
                    "(a multiple of 128)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    logs, t0 = [], time.time()

    def log(msg):
        print(msg, flush=True)
        logs.append(msg)

    train_files, _ = data.split()
    with open(os.path.join(data.MODELS_DIR, "split.json")) as f:
        if json.load(f)["train"] != train_files:
            raise SystemExit("this Python's stdlib does not give models/split.json's training files")
    target_dir, backbone_dir = (os.path.join(a.out, d) for d in data.PAIRS["qwen3"])
    target, backbone = load_target(target_dir), load_drafter(backbone_dir)
    for p in list(target.parameters()) + list(backbone.parameters()):
        p.requires_grad_(False)
    stream = corpus(train_files)
    g = torch.Generator().manual_seed(91011)
    seqs = []
    for i in range(max(1, a.gen_seqs // 128)):
        seqs.append(continue_text(target, windows(stream, 128, 64, g), 128, 0.0 if i % 2 == 0 else 0.8, g))
    seqs = torch.cat(seqs)
    log(f"generated {seqs.shape[0]} x {seqs.shape[1]} target continuations ({time.time() - t0:.0f}s)")
    teacher, feats = teacher_outputs(target, seqs, backbone.config.target_layer_ids)
    rows = blocks(target, backbone, seqs, teacher, feats, 16, a.top_k, g)
    del teacher, feats
    R = rows["cand"].shape[0]
    perm = torch.randperm(R, generator=g)
    held, train_idx = perm[:R // 10], perm[R // 10:]
    log(f"{R} blocks of {backbone.config.block_size - 1} slots, {len(held)} held out ({time.time() - t0:.0f}s)")

    model = attach_selector(backbone, rank=a.rank, top_k=a.top_k, seed=3)
    params = list(model.candidate_selector.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0)
    log(report(model, rows, held, "held out, before"))
    for step in range(a.steps):
        for pg in opt.param_groups:
            pg["lr"] = lr_at(step, a.steps, 1e-2, 100)
        idx = train_idx[torch.randint(0, len(train_idx), (256,), generator=g)]
        loss, _ = selector_loss(model, rows, idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 500 == 0 or step == a.steps - 1:
            log(f"selector step {step}/{a.steps} loss {loss.item():.4f} ({time.time() - t0:.0f}s)")
    model.eval()
    log(report(model, rows, held, "held out, after"))
    out_dir = os.path.join(a.out, DRAFTER_DIR)
    save_model(model, out_dir)
    write_tokenizer(out_dir)
    with open(os.path.join(a.out, "train_log_selector.txt"), "w") as f:
        f.write("\n".join(logs) + f"\ntotal {time.time() - t0:.0f}s, torch {torch.__version__}, threads {a.threads}\n")
    log(f"saved {out_dir} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
