"""The standalone decode loop: DDTree, the DFlash chain and plain autoregressive decoding, one loop.

A round, for a batch of requests with ragged lengths (nothing is read on the host inside it, except the
one `all done?` check that ends the loop):
  draft   block [root, MASK x L] at positions seq_len .. seq_len+L through the drafter -> logits [B, L, V]
  build   build_tree(logits, budget)          (chain: budget L, topk 1; AR: budget 0 -> the root alone)
  verify  one target forward over the n tree nodes at positions seq_len + depth, prefix + ancestor mask
  sample  sample_node_tokens: the target's token at every node (argmax, or Gumbel-max at T > 0)
  accept  RoundOps.commit (sglang_ddtree/round.py, shared with the SGLang worker): the bounded walk down the
          tree with those tokens and the round's commit plan
  commit  apply the plan: the accepted nodes' KV move to slots seq_len .. seq_len+len-1; their target
          features become drafter context at the same slots; the bonus is the next root.
The three methods differ only in the tree's shape, so they are compared under identical conditions.
Stage "loop" is the per-round `all done?` check (a device->host read) and the Python between rounds.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time

import torch

from ..accept import sample_node_tokens
from ..round import RoundOps
from ..budget import budget_table, choose_budget, expected_commit, truncate
from ..tree import build_tree, chain_pops
from .checkpoint import load_drafter, load_target
from .data import MODELS_DIR, PAIRS
from .dflash import DFlashDraftModel
from .model import CausalLM, prefix_tree_mask
from .tokenizer import ByteTokenizer

STAGES = ("prefill", "cost", "loop", "draft", "build", "verify", "sample", "accept", "commit")
METHODS = ("ddtree", "chain", "ar")


@dataclasses.dataclass
class GenerationResult:
    token_ids: list[int]          # generated ids (a stop token, when hit, is the last one)
    text: str                     # decoded without special tokens
    accept_lengths: list[int]     # tokens committed per target forward, one per round
    stage_times: dict             # seconds per stage for the batch this request ran in
    finish_reason: str            # "stop", "length", or "nonfinite" (the target's logits had no token: NaN / all -inf)
    round_budgets: list = dataclasses.field(default_factory=list)  # the tree budget of each round

    @property
    def rounds(self) -> int:
        return len(self.accept_lengths)


class StageClock:
    """Per-stage wall time. On CUDA: events recorded between stages, read once at the end (no syncs)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.totals = dict.fromkeys(STAGES, 0.0)

    def mark(self, stage: str | None) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((stage, ev))
        else:
            self.marks.append((stage, time.perf_counter()))

    def result(self) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
        for (stage, a), (_, b) in zip(self.marks, self.marks[1:]):
            if stage is not None:
                self.totals[stage] += a.elapsed_time(b) / 1e3 if self.cuda else b - a
        self.marks = self.marks[-1:]
        return dict(self.totals)


class Engine:
    """Decode with a Qwen3 or DeepSeek-V3 (MLA) target and a DFlash drafter. `Engine.from_pretrained()`: the
    shipped tiny Qwen3 pair; `Engine.from_pretrained(pair="mla")`: the MLA one."""

    def __init__(self, target: CausalLM, drafter: DFlashDraftModel | None, tokenizer=None,
                 attention: str = "auto"):
        """attention: verify attention — 'op' (the project's tree_verify_attention: for a Qwen3 target its
        CUDA kernel, bf16, head_dim 128; for an MLA target its absorbed MLA form on any device, the torch path
        on the CPU), 'sdpa' (torch SDPA over the cache with a dense mask), 'auto' (op where it applies)."""
        self.target, self.drafter = target, drafter
        self.draft_dir = None  # from_pretrained's drafter directory (its calibration file, if any)
        self.tokenizer = tokenizer or ByteTokenizer()
        p = next(target.parameters())
        self.device, self.dtype = p.device, p.dtype
        if attention not in ("auto", "op", "sdpa"):
            raise ValueError(f"attention must be 'auto', 'op' or 'sdpa', got {attention!r}")
        fits = target.op_attention_fits(self.device, self.dtype)
        if attention == "op" and not fits:
            raise ValueError("attention='op' needs a CUDA bf16 target with head_dim 128 (or an MLA target)")
        self.attention = "op" if attention == "op" or (attention == "auto" and fits) else "sdpa"
        self.ops = RoundOps(self.device)
        if drafter is not None:
            d = drafter.config
            if d.hidden_size != target.config.hidden_size or max(d.target_layer_ids) >= target.config.num_hidden_layers:
                raise ValueError("drafter does not match the target (hidden size / target_layer_ids)")
            self.block_size, self.mask_token_id = d.block_size, d.mask_token_id
            self.capture = tuple(d.target_layer_ids)
        else:
            self.block_size, self.mask_token_id, self.capture = 1, 0, ()

    @classmethod
    def from_pretrained(cls, target_dir: str | None = None, draft_dir: str | None = None, device=None,
                        dtype=torch.float32, attention: str = "auto", pair: str = "qwen3") -> "Engine":
        """pair: which shipped tiny pair (data.PAIRS) when target_dir is None."""
        if target_dir is None:
            if pair not in PAIRS:
                raise ValueError(f"pair must be one of {sorted(PAIRS)}, got {pair!r}")
            target_dir = os.path.join(MODELS_DIR, PAIRS[pair][0])
            draft_dir = draft_dir or os.path.join(MODELS_DIR, PAIRS[pair][1])
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        target = load_target(target_dir, dtype, device)
        drafter = load_drafter(draft_dir, dtype, device) if draft_dir else None
        tok = ByteTokenizer.from_dir(target_dir) if os.path.exists(os.path.join(target_dir, "tokenizer.json")) \
            else None
        eng = cls(target, drafter, tok, attention)
        eng.draft_dir = draft_dir
        return eng

    # ------------------------------------------------------------------------------------------------
    def generate(self, prompts, max_new_tokens: int = 64, method: str = "ddtree", budget: int | None = None,
                 temperature: float = 0.0, seed=0, stop_token_ids=None, batch_size: int | None = None,
                 on_round=None, anchor=None, draft_temperature=None, auto_budgets=(8, 16, 32, 64),
                 round_cost=None) -> list[GenerationResult]:
        """prompts: strings or token-id lists. method: 'ddtree' | 'chain' | 'ar'. budget: DDTree's node
        budget (default 32), or 'auto': each round uses the budget of `auto_budgets` that the previous round's
        tree (the first round: its own) predicts commits the most tokens per unit of `round_cost` (one time per
        candidate, for this batch; default: measured here at start; sglang_ddtree/budget.py).
        anchor: DDTree's tree, None (the paper's) or 'chain' (the greedy chain always in the tree:
        tree.build_tree_from_topk). draft_temperature: None, L positive floats (depth d's draft logits divided
        by the d-th before the tree is built) or 'drafter' (the drafter directory's calibration file,
        sglang_ddtree/calibration.py); the output is lossless either way. seed: int (request i uses seed + i)
        or one int per prompt.
        stop_token_ids: default [eos]. batch_size: requests decoded together (default: all).
        on_round(draft_logits, budget, node_tokens): called after each round, outside the stage clock."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if method != "ar" and self.drafter is None:
            raise ValueError(f"method {method!r} needs a drafter (draft_dir)")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if isinstance(prompts, (str, bytes)) or not len(prompts):
            raise TypeError("prompts must be a non-empty list of strings or token-id lists")
        L = self.block_size - 1
        auto = None
        if method == "ddtree":
            budget = 32 if budget is None else budget
            if budget == "auto":
                cands = sorted({int(b) for b in auto_budgets}) if auto_budgets else []
                if not cands or cands[0] < 1:
                    raise ValueError(f"auto_budgets must be positive ints, got {auto_budgets!r}")
                if round_cost is not None and (len(round_cost) != len(cands) or min(round_cost) <= 0):
                    raise ValueError(f"round_cost must hold one positive time per auto budget {cands}, got "
                                     f"{round_cost!r}")
                auto, budget = (cands, None if round_cost is None else [float(c) for c in round_cost]), cands[-1]
            elif not isinstance(budget, int) or budget < 1:
                raise ValueError(f"budget must be a positive int or 'auto', got {budget!r}")
        chain_pops(anchor, L)  # a bad anchor is refused before any work
        if anchor is not None and method != "ddtree":
            raise ValueError(f"anchor applies to method 'ddtree' only, got method {method!r}")
        if isinstance(draft_temperature, str):
            if draft_temperature != "drafter" or self.draft_dir is None:
                raise ValueError("draft_temperature='drafter' needs an engine from from_pretrained with a drafter "
                                 f"directory, got {draft_temperature!r}")
            from ..calibration import load_depth_temperatures

            draft_temperature = load_depth_temperatures(self.draft_dir, L)
        if draft_temperature is not None:
            temps = [float(t) for t in draft_temperature]
            if method != "ddtree" or len(temps) != L or not all(math.isfinite(t) and t > 0 for t in temps):
                raise ValueError(f"draft_temperature must be {L} positive finite floats (one per draft depth) with "
                                 f"method 'ddtree', got {draft_temperature!r} with method {method!r}")
            draft_temperature = torch.tensor(temps, dtype=self.dtype, device=self.device)[:, None]  # [L, 1]
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
        if any(len(x) == 0 for x in ids):
            raise ValueError("every prompt must have at least one token")
        seeds = [seed + i for i in range(len(ids))] if isinstance(seed, int) else [int(s) for s in seed]
        if len(seeds) != len(ids):
            raise ValueError(f"seed must be an int or one int per prompt, got {len(seeds)} for {len(ids)}")
        stops = [self.tokenizer.eos_token_id] if stop_token_ids is None else list(stop_token_ids)
        tree_args = {"ddtree": (budget, None, anchor, draft_temperature, auto), "chain": (L, 1, None, None, None),
                     "ar": (0, 1, None, None, None)}[method]
        bs = batch_size or len(ids)
        out = []
        for i in range(0, len(ids), bs):
            out += self._decode(ids[i:i + bs], seeds[i:i + bs], max_new_tokens, method, tree_args,
                                float(temperature), stops, on_round)
        return out

    # ------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _decode(self, ids, seeds, max_new, method, tree_args, temperature, stops, on_round=None):
        dev, tgt, drf = self.device, self.target, self.drafter
        budget, topk, anchor, draft_temp, auto = tree_args
        use_draft = method != "ar"
        B, L, Bs = len(ids), self.block_size - 1, self.block_size
        n = budget + 1
        P = max(len(x) for x in ids)
        cap = -(-(P + max_new + n + Bs + 2) // 64) * 64
        clock = StageClock(dev)
        clock.mark("prefill")

        lens = torch.tensor([len(x) for x in ids], device=dev)
        x = torch.zeros(B, P, dtype=torch.long)
        for b, row in enumerate(ids):
            x[b, :len(row)] = torch.tensor(row)
        x = x.to(dev)
        seed_t = torch.tensor(seeds, dtype=torch.int64, device=dev)
        stop_t = torch.tensor(stops or [-1], dtype=torch.int64, device=dev)
        ar = torch.arange(cap, device=dev)
        pos = ar[:P].expand(B, P)

        # prefill: causal over each prompt; keys beyond a prompt's length are never visible
        tcache = tgt.new_cache(B, cap, self.dtype, dev)
        mask = (ar[None, None, :] <= pos[:, :, None]) & (ar[None, None, :] < lens[:, None, None])
        logits, feats = tgt(x, pos, mask, tcache, pos, self.capture if use_draft else (),
                            logits_index=(lens - 1)[:, None])
        root = sample_node_tokens(logits, temperature, seed=seed_t, step=0)[:, 0]
        seq_lens = lens.clone()
        if use_draft:
            dcache = drf.new_cache(B, cap, self.dtype, dev)
            drf.add_context(dcache, feats, pos, pos)
            blk_off = torch.arange(Bs, device=dev)
            mask_ids = torch.full((B, L), self.mask_token_id, dtype=torch.long, device=dev)

        def draft():  # block [root, MASK x L]; its keys go to scratch slots past the context
            blk_pos = seq_lens[:, None] + blk_off
            noise = tgt.embed(torch.cat([root[:, None], mask_ids], 1))
            dmask = ar[None, None, :] < (seq_lens[:, None, None] + Bs)
            h = drf(noise, blk_pos, dmask.expand(B, Bs, cap), dcache, blk_pos)
            # one 2-D GEMM: a strided [B, L, H] operand makes it a batched GEMM reading the head once per request
            return tgt.lm_head(h[:, 1:].reshape(B * L, -1)).view(B, L, -1)

        if auto is not None:  # budget='auto': candidates, and the cost table of this batch (measured if absent)
            cands, costs = auto

            def big_tree(logits):  # the largest candidate's tree predicts every smaller one (budget.py)
                return build_tree(logits, cands[-1], root_tokens=root, seq_lens=seq_lens, anchor=anchor)

            if costs is None:  # the round's fixed part (draft, top-k, largest build) plus each verify width
                clock.mark("cost")
                costs = self._round_costs(cands, B, seq_lens, tcache, cap, lambda: big_tree(draft()))
            table = budget_table(cands, costs, cands[-1] + 1, dev)  # validated once: no read-back per round
            cur_b, next_b, chosen = None, None, []

        W = max_new + 2 * L + 4
        out = torch.zeros(B, W, dtype=torch.long, device=dev)
        bad = root < 0  # the target's logits had no token (NaN / all -inf): the request stops, flagged
        root = torch.where(bad, 0, root)  # finished rows still ride along in the batch: a valid token
        out[:, 0] = root
        out_len = (~bad).to(torch.long)
        done = bad | torch.isin(root, stop_t) | (out_len >= max_new)
        acc_cols = torch.arange(L + 1 if use_draft else 2, device=dev)
        history = []
        step = 0
        while True:
            clock.mark("loop")
            if auto is not None and next_b is not None:  # the one host sync also brings the next budget
                finished, cur_b = torch.stack([done.all().to(torch.int64), next_b]).tolist()
                if finished:
                    break
            elif bool(done.all()):  # the loop's one host sync per round
                break
            step += 1
            clock.mark("draft")
            if use_draft:
                draft_logits = draft()
            else:
                draft_logits = torch.zeros(B, 1, 1, device=dev)
            clock.mark("build")
            keys = draft_logits if draft_temp is None else draft_logits / draft_temp
            if auto is None:
                tree = build_tree(keys, budget, topk=topk, root_tokens=root, seq_lens=seq_lens, anchor=anchor)
            else:  # this round's tree predicts the next round's budget, read at the loop's sync
                big = big_tree(keys)
                next_b = choose_budget(expected_commit(big), table)
                if cur_b is None:  # the first round has no earlier prediction: read its own (one sync, once)
                    cur_b = int(next_b)
                tree = truncate(big, cur_b)
                chosen.append(cur_b)
            n = tree.n
            clock.mark("verify")
            slots = seq_lens[:, None] + ar[:n]
            if self.attention == "op":
                vmask, attn_fn = None, self._op_attention(seq_lens, tree, cap)
            else:
                vmask, attn_fn = prefix_tree_mask(seq_lens, tree.tree_mask, cap), None
            logits, feats = tgt(tree.tokens, tree.positions, vmask, tcache, slots,
                                self.capture if use_draft else (), attn_fn=attn_fn)
            clock.mark("sample")
            node_tokens = sample_node_tokens(logits, temperature, seed=seed_t, step=step)
            clock.mark("accept")
            plan = self.ops.commit(tree, node_tokens, seq_lens, slots)  # the walk and the commit plan
            clock.mark("commit")
            nonfinite = (plan.bonus < 0) & ~done  # flags.NONFINITE_TARGET: no bonus token to emit
            alen = torch.where(done, 0, plan.commit_lens.to(torch.int64))
            tcache.move(plan.kv_src, plan.kv_dst)
            if use_draft:
                drf.add_context(dcache, feats.reshape(B * n, -1)[plan.hidden_index], plan.positions, plan.kv_dst)
            emitted = alen - nonfinite.to(torch.int64)
            live = acc_cols[None, :] < emitted[:, None]
            out.scatter_(1, out_len[:, None] + acc_cols, torch.where(live, plan.tokens, 0))
            hit_stop = (torch.isin(plan.tokens, stop_t) & live).any(1)
            out_len += emitted
            seq_lens += alen
            bad |= nonfinite
            done = done | nonfinite
            root = torch.where(done, root, plan.bonus)
            done = done | hit_stop | (out_len >= max_new)
            history.append(alen)
            clock.mark(None)
            if on_round is not None:  # benchmarks: another tree path on the same inputs, untimed here
                on_round(draft_logits, tree.budget, node_tokens)

        times = clock.result()
        times["rounds"] = step
        hist = torch.stack(history, 1).cpu() if history else torch.zeros(B, 0, dtype=torch.long)
        out, out_len, bad = out.cpu(), out_len.cpu(), bad.cpu()
        stop_set = set(stops)
        results = []
        for b in range(B):
            toks = out[b, :min(int(out_len[b]), max_new)].tolist()
            reason = "nonfinite" if bool(bad[b]) else "length"
            for j, t in enumerate(toks):
                if t in stop_set:
                    toks, reason = toks[:j + 1], "stop"
                    break
            al = [int(a) for a in hist[b] if a > 0]
            budgets = chosen[:len(al)] if auto is not None else [budget] * len(al)
            results.append(GenerationResult(toks, self.tokenizer.decode(toks), al, times, reason, budgets))
        return results


    def _round_costs(self, cands, B, seq_lens, tcache, cap, fixed, reps: int = 3) -> list[float]:
        """Seconds of one round at each candidate budget for this batch: the part every candidate pays
        (`fixed`: the draft forward, top-k and largest build) plus one verify forward at that width on a full
        tree of that budget (medians of `reps` after a warm-up). Their K/V land in the scratch slots past every
        context, which the first round rewrites, so the caches are unharmed."""
        V = self.target.config.vocab_size
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)

        def median_time(fn):
            times = []
            for _ in range(reps + 1):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                times.append(time.perf_counter() - t0)
            return sorted(times[1:])[reps // 2]

        base = median_time(fixed)
        out = []
        for b in cands:
            tree = build_tree(torch.zeros(B, self.block_size - 1, V, device=self.device), b,
                              root_tokens=0, seq_lens=seq_lens)
            slots = seq_lens[:, None] + torch.arange(tree.n, device=self.device)
            if self.attention == "op":
                vmask, attn_fn = None, self._op_attention(seq_lens, tree, cap)
            else:
                vmask, attn_fn = prefix_tree_mask(seq_lens, tree.tree_mask, cap), None
            out.append(base + median_time(
                lambda: self.target(tree.tokens, tree.positions, vmask, tcache, slots, self.capture, attn_fn=attn_fn)))
        return out

    def _op_attention(self, seq_lens, tree, cap):
        """The target's verify attention through the project's op (its `op_attention`), for this tree."""
        return self.target.op_attention(seq_lens, tree.mask_bits, cap)


def summarize(results: list[GenerationResult]) -> dict:
    """tau = tokens committed per target forward (the prefill's first token not counted), rounds, tokens."""
    committed = sum(sum(r.accept_lengths) for r in results)
    rounds = sum(r.rounds for r in results)
    return {"tau": committed / max(1, rounds), "rounds": rounds,
            "tokens": sum(len(r.token_ids) for r in results)}
