"""The contexts of real decode rounds, and the exact value of any tree on them.

Sampled τ is noisy: each method's run draws its own samples, so two key choices compared by τ differ by their
trees and by their luck. Here the luck is fixed: `collect` keeps every round of a sampled run — its context
(prompt + committed output, the round's root last) and the drafter's logits — and `expected_commit` scores a
tree on such a context exactly: the walk reaches node i with probability Π q(t_j | path to j) over its path,
q the target's law (its logits at the parent node, sampling.law_probs), so a round commits
E = 1 + Σ_i P(reach i) tokens in expectation (docs/DESIGN.md §3.9; the budget predicts the same sum from the
keys). Every candidate's tree is scored on the same rounds, so their differences are paired. `Rounds.target`
holds the target's logits at each drafted position, what the sampling calibration is fitted against
(calibration.py).
"""
from __future__ import annotations

import dataclasses

import torch

from ..sampling import law_probs
from ..tree import TreeBatch


@dataclasses.dataclass
class Rounds:
    """N rounds of decode runs: tokens [N, S] (0 padded) and lens [N] (the root is tokens[i, lens[i] − 1]), the
    drafter's logits draft [N, L, V], the request each came from [N], and target [N, L, V]: the target's logits
    at the positions the round drafted (depth d: the logits the committed token at lens − 1 + d was drawn from;
    NaN past the request's output)."""

    tokens: torch.Tensor
    lens: torch.Tensor
    draft: torch.Tensor
    request: torch.Tensor
    target: torch.Tensor

    def roots(self) -> torch.Tensor:
        return self.tokens.gather(1, (self.lens - 1)[:, None])[:, 0]


def collect(engine, prompts, max_new: int, *, batch_size: int = 64, **generate) -> Rounds:
    """Decode prompts with engine.generate(**generate) and keep every round: its context, the draft logits, and
    the target's logits at the positions it drafted (one causal target forward per request)."""
    L = engine.block_size - 1
    toks, drafts, reqs, targets = [], [], [], []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        rounds = []
        res = engine.generate(chunk, max_new, batch_size=len(chunk), **generate,
                              on_round=lambda logits, *_: rounds.append(logits.float().cpu()))
        for b, r in enumerate(res):
            prompt = engine.tokenizer.encode(chunk[b]) if isinstance(chunk[b], str) else list(chunk[b])
            seq = torch.tensor(prompt + r.token_ids, dtype=torch.int64, device=engine.device)
            with torch.inference_mode():
                logits = engine.target(seq[None])[0][0].float().cpu()
            start = 0  # output index of the round's root: the prefill's token is out[0]
            for k, alen in enumerate(r.accept_lengths):
                ctx = len(prompt) + start + 1
                toks.append(seq[:ctx].cpu())
                drafts.append(rounds[k][b])
                reqs.append(i + b)
                rows = torch.full((L, logits.shape[-1]), float("nan"))
                have = min(L, len(seq) - ctx)
                rows[:have] = logits[ctx - 1:ctx - 1 + have]
                targets.append(rows)
                start += alen
    tokens = torch.zeros(len(toks), max(len(t) for t in toks), dtype=torch.int64)
    for j, t in enumerate(toks):
        tokens[j, :len(t)] = t
    return Rounds(tokens, torch.tensor([len(t) for t in toks]), torch.stack(drafts), torch.tensor(reqs),
                  torch.stack(targets))


def node_laws(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
              min_p: float = 0.0) -> torch.Tensor:
    """Probabilities [..., V] of the target's law at each row of logits [..., V] (the argmax, one-hot, at T 0)."""
    V = logits.shape[-1]
    flat = logits.reshape(-1, V).float()
    if temperature <= 0:
        return torch.nn.functional.one_hot(flat.argmax(-1), V).to(flat.dtype).view(logits.shape)
    return law_probs(flat, temperature, top_k, top_p, min_p).view(logits.shape)


@torch.inference_mode()
def expected_commit(engine, rounds: Rounds, trees: list[TreeBatch], law: dict, batch: int = 32,
                    drafts=None) -> torch.Tensor:
    """float64 [N, len(trees)]: each tree's expected tokens committed on each round (trees[j] holds one tree per
    round, built with seq_lens = lens − 1), the target's law given as node_laws' keyword arguments: 1 + Σ_i P(reach
    i), node_steps' probabilities multiplied along each path. drafts: as node_steps'."""
    out = torch.zeros(rounds.tokens.shape[0], len(trees), dtype=torch.float64)
    for j, (t, step) in enumerate(zip(trees, node_steps(engine, rounds, trees, law, batch, drafts))):
        n = t.n
        par = t.parents.long().clamp(min=0).cpu()
        reach = torch.ones_like(step)
        for i in range(1, n):  # parents precede children
            reach[:, i] = reach.gather(1, par[:, i:i + 1])[:, 0] * step[:, i]
        real = torch.arange(1, n)[None, :] < t.num_nodes[:, None].cpu()
        out[:, j] = 1.0 + torch.where(real, reach[:, 1:], torch.zeros_like(reach[:, 1:])).sum(1)
    return out


@torch.inference_mode()
def node_steps(engine, rounds: Rounds, trees: list[TreeBatch], law: dict, batch: int = 32,
               drafts=None) -> list[torch.Tensor]:
    """Per tree, float64 [N, n]: the probability that node i is taken from its parent given the parent is reached
    (1 at the root; pads are left to the caller). One target forward per batch of rounds scores every tree: each
    node attends to the context and to its own ancestors. drafts: None, or per tree None (its nodes verified by the
    target's own draw: a node is taken with its token's probability) or (ids, q) [N, L, K], the law its children
    were drawn from (rejection.draw_children): a node is then taken with the probability the verify's rule gives
    its token (rejection.outcome_law), exactly for the tree's draws (a drawn tree is one draw: average several for
    its expectation)."""
    N = rounds.tokens.shape[0]
    dev = engine.device
    ns = [t.n for t in trees]
    out = [torch.ones(N, n, dtype=torch.float64) for n in ns]
    for s in range(0, N, batch):
        rows = slice(s, min(s + batch, N))
        lens = rounds.lens[rows].to(dev)
        B, S = lens.shape[0], int(lens.max())
        ids = [rounds.tokens[rows, :S].to(dev)] + [t.tokens[rows, 1:].to(dev) for t in trees]  # nodes but the root
        pos = [torch.arange(S, device=dev).expand(B, S)] + [t.positions[rows, 1:].to(dev) for t in trees]
        ids, pos = torch.cat(ids, 1), torch.cat(pos, 1)
        ar = torch.arange(ids.shape[1], device=dev)
        seen = ar[None, None, :] < lens[:, None, None]  # the context, root included
        mask = seen & ((ar[None, None, :] <= ar[None, :, None]) | (ar[None, :, None] >= S))
        off = S
        for t, n in zip(trees, ns):  # and a node its own tree's ancestors (tree_mask without the root)
            mask[:, off:off + n - 1, off:off + n - 1] = t.tree_mask[rows, 1:, 1:].to(dev)
            off += n - 1
        logits, _ = engine.target(ids, pos, mask)
        root = logits.gather(1, (lens - 1)[:, None, None].expand(B, 1, logits.shape[-1]))
        off = S
        for j, (t, n) in enumerate(zip(trees, ns)):
            q = node_laws(torch.cat([root, logits[:, off:off + n - 1]], 1), **law).double().cpu()  # [B, n, V]
            off += n - 1
            par = t.parents[rows].long().clamp(min=0).cpu()
            drawn = None if drafts is None else drafts[j]
            if drawn is None:
                at_parent = q.gather(1, par[:, :, None].expand(-1, -1, q.shape[-1]))
                step = at_parent.gather(2, t.tokens[rows, :, None].cpu())[:, :, 0]  # q(token | its parent's path)
            else:
                step = _drawn_steps(t, rows, q, drawn)
            step[:, 0] = 1.0
            out[j][rows] = step
    return out


def _drawn_steps(tree: TreeBatch, rows: slice, law: torch.Tensor, drawn) -> torch.Tensor:
    """float64 [B, n]: the probability that a drawn tree's node is taken from its parent (its parent's token law
    under the verify's rule, rejection.outcome_law), law [B, n, V] the target's at every node."""
    from .. import rejection

    ids, q = (x[rows].cpu() for x in drawn)
    t = tree.to("cpu")
    t = dataclasses.replace(t, **{k: v[rows] for k, v in t.tensors().items()})
    n = t.n
    nc, kids, pos = rejection.node_children(t, n, ids)
    pc = law.gather(-1, nc)
    rest = (1.0 - pc.sum(-1)).clamp(min=0.0)
    prob = rejection.outcome_law(pc, rest, rejection.at_depth(q.double(), t.depths), kids, pos)  # [B, n, W]
    width = kids.shape[-1]
    par, sib = rejection.sibling_index(t, n)
    step = prob.reshape(prob.shape[0], -1).gather(1, par.clamp(min=0) * width + sib.clamp(max=width - 1))
    return torch.where(par >= 0, step, torch.ones_like(step))
