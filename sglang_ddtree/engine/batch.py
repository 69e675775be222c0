"""One batch of the standalone engine's requests as a host of the decode round (round.RoundHost): the prefill, the
caches, the outputs and the round's verbs on the engine's models (engine.py's Engine builds one per batch and
runs round.Round over it), and what a request's decode returns (GenerationResult)."""
from __future__ import annotations

import dataclasses

import torch

from ..budget import AutoWidth
from ..keys import DraftKeys
from ..round import RoundHost
from ..round_config import RoundConfig
from ..sampling import NodeLaw, node_tokens
from ..stage_clock import StageClock
from ..tree import build_tree, build_tree_from_topk
from .dflash2 import walk, walk_tree
from .model import prefix_tree_mask

STAGES = ("prefill", "cost", "loop", "draft", "build", "verify", "sample", "accept", "commit")
SELECTOR_METHODS = ("lattice", "walk")  # a DFlash2 drafter's own (engine/dflash2.py, docs/DESIGN.md §8.2)


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


class _EngineBatch(RoundHost):
    """One batch of requests decoded together: the prefill, the caches, the outputs, and the round's verbs
    (round.RoundHost) on the engine's models. Finished rows ride along in the batch until all are done."""

    stops_on_nonfinite = True

    def __init__(self, eng, ids, seeds, max_new, method, config: RoundConfig, draft_keys, costs, temperatures,
                 law, stops, on_round):
        """eng: the engine.Engine decoding the batch; config: the method's round (Engine.round_config); draft_keys:
        DDTree's keys.DraftKeys (None: the raw draft's top-k); costs: the auto budget's round cost per candidate
        (None: measured here)."""
        dev, tgt = eng.device, eng.target
        self.topk, self.anchor, self.keys = config.topk, config.anchor, draft_keys
        self.eng, self.max_new, self.on_round, self.stops = eng, max_new, on_round, stops
        self.use_draft = method != "ar"
        self.selector = method if method in SELECTOR_METHODS else None  # a DFlash2 drafter's round (draft)
        self.walk_law, self.walks = None, 0
        self.candidates = None  # the keys of the round's DDTree tree (draft_keys)
        self.B, L, Bs = len(ids), eng.block_size - 1, eng.block_size
        B = self.B
        self.widest = config.verify_width
        P = max(len(x) for x in ids)
        self.cap = -(-(P + max_new + self.widest + Bs + 2) // 64) * 64
        self.clock = StageClock(dev, STAGES)
        self.clock.mark("prefill")

        lens = torch.tensor([len(x) for x in ids], device=dev)
        x = torch.zeros(B, P, dtype=torch.long)
        for b, row in enumerate(ids):
            x[b, :len(row)] = torch.tensor(row)
        x = x.to(dev)
        self.seed = torch.tensor(seeds, dtype=torch.int64, device=dev)
        self.stop_t = torch.tensor(stops or [-1], dtype=torch.int64, device=dev)
        self.ar = torch.arange(self.cap, device=dev)
        pos = self.ar[:P].expand(B, P)
        # each request's law (sampling.node_tokens): None when every request is greedy (temperature 0)
        top_k, top_p, min_p = law
        full = lambda v, dt=torch.float32: torch.full((B,), v, dtype=dt, device=dev)  # noqa: E731
        self.law = None if not any(temperatures) else NodeLaw(
            torch.tensor(temperatures, dtype=torch.float32, device=dev), full(int(top_k), torch.int64), full(top_p),
            full(min_p), filtered=top_k > 0 or top_p < 1 or min_p > 0)
        self.key_law = self.law if config.keys == "law" else None  # the tree's keys: under each request's law, or the draft's

        # prefill: causal over each prompt; keys beyond a prompt's length are never visible
        self.tcache = tgt.new_cache(B, self.cap, eng.dtype, dev)
        mask = (self.ar[None, None, :] <= pos[:, :, None]) & (self.ar[None, None, :] < lens[:, None, None])
        logits, feats = tgt(x, pos, mask, self.tcache, pos, eng.capture if self.use_draft else (),
                            logits_index=(lens - 1)[:, None])
        root = node_tokens(eng.ops, logits, self.law, self.seed, torch.zeros_like(self.seed), no_token=True)[:, 0]
        self.seq_lens = lens.clone()
        if self.use_draft:
            self.dcache = eng.drafter.new_cache(B, self.cap, eng.dtype, dev)
            eng.drafter.add_context(self.dcache, feats, pos, pos)
            self.blk_off = torch.arange(Bs, device=dev)
            self.mask_ids = torch.full((B, L), eng.mask_token_id, dtype=torch.long, device=dev)

        self.auto = None
        if config.auto:  # budget='auto': candidates, and the cost table of this batch (measured if absent)
            cands = list(config.auto_budgets)
            self.root = root
            if costs is None:  # the round's fixed part (draft, top-k, largest build) plus each verify width
                self.clock.mark("cost")
                costs = eng._round_costs(cands, B, self.seq_lens, self.tcache, self.cap, lambda: self._tree(
                    self._draft_logits(), cands[-1]))
            # the costs are whole rounds of this batch (one bucket): nothing beyond them to learn, so no clock
            widths = list(config.widths)
            self.auto = AutoWidth(widths, [B], {(B, w): c for w, c in zip(widths, costs)},
                                  device=dev, clock=lambda: 0.0, first="own")

        W = max_new + 2 * L + 4
        self.out = torch.zeros(B, W, dtype=torch.long, device=dev)
        self.bad = root < 0  # the target's logits had no token (NaN / all -inf): the request stops, flagged
        self.root = torch.where(self.bad, 0, root)  # finished rows still ride along in the batch: a valid token
        self.out[:, 0] = self.root
        self.out_len = (~self.bad).to(torch.long)
        self.done = self.bad | torch.isin(self.root, self.stop_t) | (self.out_len >= max_new)
        self.acc_cols = torch.arange(L + 1 if self.use_draft else 2, device=dev)
        self.history, self.budgets = [], []

    # --- round.RoundHost ----------------------------------------------------------------------------
    def batch_size(self) -> int:
        return self.B

    def context(self) -> float:
        return 1.0  # the auto budget prices whole rounds here (no verify-attention table)

    def prefix(self) -> torch.Tensor:
        return self.seq_lens

    def sampled(self) -> bool:
        return self.law is not None

    def slots(self, n: int) -> torch.Tensor:
        return self.seq_lens[:, None] + self.ar[:n]

    def _draft_hidden(self) -> torch.Tensor:
        """The drafter over [root, MASK x L] -> its hidden states at the L draft slots [B, L, H]; the block's keys
        go to scratch slots past the context."""
        eng, B, Bs = self.eng, self.B, self.eng.block_size
        blk_pos = self.seq_lens[:, None] + self.blk_off
        noise = eng.target.embed(torch.cat([self.root[:, None], self.mask_ids], 1))
        dmask = self.ar[None, None, :] < (self.seq_lens[:, None, None] + Bs)
        return eng.drafter(noise, blk_pos, dmask.expand(B, Bs, self.cap), self.dcache, blk_pos)[:, 1:]

    def _draft_logits(self, h: torch.Tensor | None = None) -> torch.Tensor:
        """The target's head on the drafter's hidden states (default: a fresh draft) -> logits [B, L, V]."""
        h = self._draft_hidden() if h is None else h
        B, L = h.shape[:2]
        # one 2-D GEMM: a strided [B, L, H] operand makes it a batched GEMM reading the head once per request
        return self.eng.target.lm_head(h.reshape(B * L, -1)).view(B, L, -1)

    def _selector_tree(self):
        """A DFlash2 drafter's round (engine/dflash2.py): its lattice, then DDTree over it ('lattice') or the
        selector's walk ('walk', whose law q the verify's rejection sampling reads: draft_law)."""
        eng, h = self.eng, self._draft_hidden()
        self.draft_logits = self._draft_logits(h)
        self.clock.mark("build")
        temps = self.law.temperatures if self.law is not None else torch.zeros(self.B, device=eng.device)
        cand, scores = eng.drafter.lattice(h, self.draft_logits, self.root, eng.ops.backend)
        if self.selector == "lattice":
            # the server's op and anchor rule (the chain for greedy requests only): sglang/draft_head.py
            return eng.ops.build_lattice(cand, scores, self.widest - 1, temps, self.root, self.seq_lens,
                                         anchor=self.anchor,
                                         anchored=None if self.anchor is None else DraftKeys.anchored(self.law))
        self.walks += 1
        path, q = walk(scores, temps, self.seed, torch.full_like(self.seed, self.walks))
        self.walk_law = (cand, q) if self.law is not None else None
        return walk_tree(cand, path, self.root, self.seq_lens)

    def _tree(self, logits, budget: int):
        """The round's tree: DDTree's from its keys (keys.py: each request's law, or the draft's), the chain and AR
        from the raw draft."""
        if self.keys is None:
            return build_tree(logits, budget, topk=self.topk, root_tokens=self.root, seq_lens=self.seq_lens)
        k = min(max(budget, 1), logits.shape[-1])
        lp, ids = self.keys(logits, k, self.eng.ops.backend, self.key_law)
        self.candidates = lp, ids  # a drawn tree's children come from these (its shape: shape_keys)
        return build_tree_from_topk(self.keys.shape_keys(lp, self.key_law), ids, budget, root_tokens=self.root,
                                    seq_lens=self.seq_lens, anchor=self.anchor, anchored=self.keys.anchored(self.key_law))

    def draft(self, slots):
        if self.selector is not None:
            return self._selector_tree(), None
        if self.use_draft:
            self.draft_logits = self._draft_logits()
        else:
            self.draft_logits = torch.zeros(self.B, 1, 1, device=self.eng.device)
        self.clock.mark("build")
        return self._tree(self.draft_logits, self.widest - 1), None

    def verify(self, tree, slots, n: int) -> torch.Tensor:
        """One target forward over the tree: the project's tree attention op, or SDPA under a dense mask."""
        eng = self.eng
        if eng.attention == "tree":
            vmask, attn_fn = None, eng._op_attention(self.seq_lens, tree, self.cap)
        else:
            vmask, attn_fn = prefix_tree_mask(self.seq_lens, tree.tree_mask, self.cap), None
        logits, self.feats = eng.target(tree.tokens, tree.positions, vmask, self.tcache, slots,
                                        eng.capture if self.use_draft else (), attn_fn=attn_fn)
        self.tree = tree
        return logits

    def node_law(self, round_no: int):
        if self.law is None:
            return None, None, None
        return self.law, self.seed, torch.full_like(self.seed, round_no)

    def draft_law(self):
        return self.walk_law

    def draft_keys(self):
        return self.candidates

    def committed(self, plan, targets) -> None:
        self.targets = targets

    def move_kv(self, plan) -> None:
        self.tcache.move(plan.kv_src, plan.kv_dst)

    def append_draft_context(self, plan) -> None:
        if self.use_draft:
            feats = self.feats.reshape(self.B * self.tree.n, -1)[plan.hidden_index]
            self.eng.drafter.add_context(self.dcache, feats, plan.positions, plan.kv_dst)

    def result(self, plan, n: int) -> None:
        """The committed tokens into each live request's output; stop, length and non-finite end a request."""
        done = self.done
        nonfinite = (plan.bonus < 0) & ~done  # flags.NONFINITE_TARGET: no bonus token to emit
        alen = torch.where(done, 0, plan.commit_lens.to(torch.int64))
        emitted = alen - nonfinite.to(torch.int64)
        live = self.acc_cols[None, :] < emitted[:, None]
        self.out.scatter_(1, self.out_len[:, None] + self.acc_cols, torch.where(live, plan.tokens, 0))
        hit_stop = (torch.isin(plan.tokens, self.stop_t) & live).any(1)
        self.out_len += emitted
        self.seq_lens += alen
        self.bad |= nonfinite
        done = done | nonfinite
        self.root = torch.where(done, self.root, plan.bonus)
        self.done = done | hit_stop | (self.out_len >= self.max_new)
        self.history.append(alen)
        self.budgets.append(self.tree.budget)
        self.clock.mark(None)
        if self.on_round is not None:  # benchmarks: another tree path on the same inputs, untimed here
            self.on_round(self.draft_logits, self.tree.budget, self.targets)

    def mark(self, stage: str) -> None:
        self.clock.mark(stage)

    def results(self, rounds: int) -> list[GenerationResult]:
        times = self.clock.result()
        times["rounds"] = rounds
        B = self.B
        hist = torch.stack(self.history, 1).cpu() if self.history else torch.zeros(B, 0, dtype=torch.long)
        out, out_len, bad = self.out.cpu(), self.out_len.cpu(), self.bad.cpu()
        stop_set = set(self.stops)
        results = []
        for b in range(B):
            toks = out[b, :min(int(out_len[b]), self.max_new)].tolist()
            reason = "nonfinite" if bool(bad[b]) else "length"
            for j, t in enumerate(toks):
                if t in stop_set:
                    toks, reason = toks[:j + 1], "stop"
                    break
            al = [int(a) for a in hist[b] if a > 0]
            results.append(GenerationResult(toks, self.eng.tokenizer.decode(toks), al, times, reason,
                                            self.budgets[:len(al)]))
        return results
