"""Verifying a drafted tree by recursive rejection sampling, as target tokens for the round's walk.

Where the round knows the law every node was drawn from, the tree is verified node by node as speculative
sampling verifies a draft (docs/DESIGN.md §3.12). At node v (target law p_v) the children x_1 .. x_m (index
order) were drawn without replacement from q, v's children's draft law over K candidates (`draft`'s row at v's
depth). With p_1 = p_v and q_1 = q: child i is accepted iff u_i · q_i(x_i) < p_i(x_i); after a rejection
p_{i+1} = (p_i − q_i)⁺ and q_{i+1} = q_i without x_i, each renormalised; a child drawn after q ran out of mass is
skipped; with none accepted, the token is drawn from p_{m+1}. The token is then an exact draw from p_v whatever
q is (`reference.node_rejection_reference` defines one node), and node v's target token is that token: the
round's walk descends into the child that holds it, and every node below was drawn from its own stream, apart
from the randomness that led there, so the emitted tokens are exact ancestral samples of the target.

Two drafters draw trees: DDTree's drawn trees (`draw_children`: a sampled request's children at each node drawn
from its keys' law, so a tree node needs the target's agreement only in law, not in token; min(1, p/q) per
child instead of p(x)) and a DFlash2 selector's walk (one child per node, drawn from the slot's q after its own
pick: the rule is then Leviathan et al.'s, as SGLang's DFLASH verifies the walk).
Random numbers, every stream keyed by (seed, step): the uniform of node v's i-th child is entry i of stream
ACCEPT_STREAM + v, the residual's Gumbel noise at node v the stream BONUS_STREAM + v, node v's draws the stream
DRAW_STREAM + v; apart from the independent node draws (streams < 4096) and the selector's
(engine/dflash2.WALK_STREAM).
"""
from __future__ import annotations

import dataclasses

import torch

from . import ops
from ._build import header_constants
from .sampling import (KEEP_NONE, MIN_TEMPERATURE, LawRows, NodeLaw, _mark_no_token, _native, gumbel_noise, kept,
                       law_rows, node_tokens, sample_rows_torch, uniform_noise)

_STREAMS = header_constants("law_rule.h")  # written once, in kernels/law_rule.h
ACCEPT_STREAM, BONUS_STREAM, DRAW_STREAM = (_STREAMS[k] for k in ("kAcceptStream", "kBonusStream", "kDrawStream"))
# a drawn tree's children come from its keys' law sharpened by this power (q ∝ softmax(keys)^s): a child then
# agrees with the target more often than under the drafter's own law; chosen on the calibration's fit prompts, not
# the held-out ones it is reported on (docs/benchmarks/sampled-drawn-cpu-2026-12-05.md)
DRAW_SHARPNESS = 1.25


def sibling_index(tree, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(parent int64 [B, n] with −1 for the root and pads, sibling int64 [B, n]: how many of a node's siblings
    precede it in index order, the walk's order)."""
    B = tree.tokens.shape[0]
    ar = torch.arange(n, device=tree.tokens.device)
    par = tree.parents[:, :n].to(torch.int64)
    real = (ar.view(1, n) < tree.num_nodes.view(B, 1).to(torch.int64)) & (par >= 0)
    par = torch.where(real, par, torch.full_like(par, -1))
    earlier = (par.unsqueeze(2) == par.unsqueeze(1)) & real.unsqueeze(1) & (ar.view(1, 1, n) < ar.view(1, n, 1))
    return par, earlier.sum(-1)


def children_tokens(tree, n: int, width: int) -> torch.Tensor:
    """int64 [B, n, width]: node v's children's tokens in index order, −1 past its last child."""
    B = tree.tokens.shape[0]
    par, sib = sibling_index(tree, n)
    out = torch.full((B, n * (width + 1)), -1, dtype=torch.int64, device=tree.tokens.device)
    ok = (par >= 0) & (sib < width)
    at = torch.where(ok, par * (width + 1) + sib, torch.full_like(par, width))  # misfits to node 0's spare column
    out.scatter_(1, at, torch.where(ok, tree.tokens[:, :n].to(torch.int64), torch.full_like(par, -1)))
    return out.view(B, n, width + 1)[:, :, :width]


def at_depth(rows: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
    """rows [B, L, K] (one row per depth of a child: index d − 1) -> [B, n, K], node v's children's row (v's depth,
    clamped: a node at depth L has no children)."""
    B, L, K = rows.shape
    d = depths.to(torch.int64).clamp(0, L - 1)
    return rows.gather(1, d.unsqueeze(-1).expand(B, d.shape[1], K))


def draw_order(keys: torch.Tensor, seed: torch.Tensor, step: torch.Tensor, stream: int) -> torch.Tensor:
    """int64 [B, n, K]: each node's Gumbel top-k order of keys float32 [B, n, K] (descending, ties by the lower
    index), node v's noise the stream `stream` + v: a draw without replacement from softmax(keys)."""
    B, n, K = keys.shape
    dev = keys.device
    seeds, steps = seed.to(dev).repeat_interleave(n), step.to(dev).repeat_interleave(n)
    nodes = (int(stream) + torch.arange(n, device=dev, dtype=torch.int64)).repeat(B)
    scores = keys.reshape(B * n, K) + gumbel_noise(seeds, steps, nodes, K)
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices.view(B, n, K)


def draw_children(round_ops, tree, lp: torch.Tensor, ids: torch.Tensor, law: NodeLaw, seed: torch.Tensor,
                  step: torch.Tensor, sharpness: float = DRAW_SHARPNESS):
    """A sampled request's tree with its tokens drawn (module docstring): node v's children, in index order, are
    the first draws without replacement from q = softmax(sharpness · lp) over ids at v's children's depth (Gumbel
    top-k, stream DRAW_STREAM + v); the shape (which nodes exist) is the tree's, a function of the keys only.
    Greedy rows keep their tokens. lp / ids [B, L, K]: the keys the tree was built from. Returns (the tree, (ids,
    q [B, L, K]) the draft law `rejection_targets` reads). The CUDA backend runs it as one op (`draw_tree`)."""
    B, n = tree.tokens.shape
    K = lp.shape[-1]
    ids = ids.to(torch.int64)
    if round_ops.backend == "cuda":  # the op scales the keys itself (the same float32 product)
        tokens = ops.op("draw_tree")(tree.tokens.contiguous(), tree.parents.contiguous(), tree.num_nodes.contiguous(),
                                     tree.depths.contiguous(), lp.float().contiguous(), ids.contiguous(),
                                     (~law.greedy()).contiguous(), float(sharpness), seed.contiguous(),
                                     step.contiguous())
        return dataclasses.replace(tree, tokens=tokens), (ids, torch.softmax(lp.float() * float(sharpness), -1))
    lp = lp.float() * float(sharpness)
    order = draw_order(at_depth(lp, tree.depths), seed, step, DRAW_STREAM)
    draws = at_depth(ids, tree.depths).gather(-1, order)  # [B, n, K] in draw order
    par, sib = sibling_index(tree, n)
    mine = draws.view(B, n * K).gather(1, (par.clamp(min=0) * K + sib.clamp(max=K - 1)))
    drawn = (par >= 0) & (~law.greedy()).view(B, 1)
    tokens = torch.where(drawn, mine, tree.tokens)
    return dataclasses.replace(tree, tokens=tokens), (ids, torch.softmax(lp, -1))


def without(q: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """q [..., K] with the drawn candidate `at` [..., 1] removed: the next draw's law, before renormalising."""
    return q.scatter(-1, at, 0.0)


def residual_logits(scaled: torch.Tensor, lse: torch.Tensor, nc: torch.Tensor, pc: torch.Tensor,
                    rest: torch.Tensor) -> torch.Tensor:
    """[B, n, V] logits of each node's last residual p_{m+1}, written into `scaled` (the round's own copy: no
    [B, n, V] allocation): the candidates' entries become log pc + lse (pc is unnormalised on p's scale: p off the
    candidates is unchanged); p itself where the residual has no mass (p = q up to rounding: the rejection there
    had probability ~0)."""
    empty = ((pc.sum(-1) + rest) <= 0).unsqueeze(-1)
    values = torch.where(empty, scaled.gather(-1, nc), (pc.log() + lse.double()).to(scaled.dtype))
    return scaled.scatter_(-1, nc, values)


def accept_children(pc: torch.Tensor, rest: torch.Tensor, q: torch.Tensor, kids: torch.Tensor, pos: torch.Tensor,
                    seed: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every node's children tested in order (module docstring), float64, the definition: pc [B, n, K] p at the node's candidates, rest [B, n] p off them, q [B, n, K] the children's draft law, kids / pos int64 [B, n, W] the children's tokens
    (−1: none) and candidate indices, seed / step int64 [B] -> (the accepted child's token or −1 int64 [B, n], the
    residual on the candidates [B, n, K], unnormalised: p off them is unchanged). The native ops run the same rule
    node by node along the walk (kernels/law_rule.h: test_children)."""
    B, n, W = kids.shape
    dev = pc.device
    nodes = (ACCEPT_STREAM + torch.arange(n, device=dev, dtype=torch.int64)).repeat(B)
    u = uniform_noise(seed.to(dev).repeat_interleave(n), step.to(dev).repeat_interleave(n), nodes, W)
    u = u.view(B, n, W).double()
    out = torch.full((B, n), -1, dtype=torch.int64, device=dev)
    for i in range(W):
        tok, at = kids[..., i], pos[..., i:i + 1]
        mass = q.sum(-1)
        live = (tok >= 0) & (out < 0) & (mass > 0)
        qi = q / torch.where(mass > 0, mass, torch.ones_like(mass)).unsqueeze(-1)
        z = pc.sum(-1) + rest
        ok = live & (u[..., i] * qi.gather(-1, at).squeeze(-1) * z < pc.gather(-1, at).squeeze(-1))
        out = torch.where(ok, tok, out)
        rejected = (live & ~ok).unsqueeze(-1)
        pc = torch.where(rejected, (pc - z.unsqueeze(-1) * qi).clamp(min=0.0), pc)
        q = torch.where(rejected, without(q, at), q)
    return out, pc


def outcome_law(pc: torch.Tensor, rest: torch.Tensor, q: torch.Tensor, kids: torch.Tensor,
                pos: torch.Tensor) -> torch.Tensor:
    """float64 [B, n, W]: the probability that a node's token is its child i's token, over the uniforms and the
    residual's draw, given the children (accept_children's arguments): accepted at its test, or drawn by the last
    residual. Exact, no random numbers: the bench scores a drawn tree by it (engine/round_contexts.py)."""
    reach = torch.ones(pc.shape[:-1], dtype=torch.float64, device=pc.device)
    prob = torch.zeros(kids.shape, dtype=torch.float64, device=pc.device)
    p0, qq = pc.double(), q.double()
    p = p0
    for i in range(kids.shape[-1]):
        tok, at = kids[..., i], pos[..., i:i + 1]
        mass, z = qq.sum(-1), p.sum(-1) + rest
        live = (tok >= 0) & (mass > 0) & (z > 0)
        qi = qq / torch.where(mass > 0, mass, torch.ones_like(mass)).unsqueeze(-1)
        ratio = p.gather(-1, at).squeeze(-1) / torch.where(z > 0, z, torch.ones_like(z))
        a = torch.clamp(ratio / qi.gather(-1, at).squeeze(-1).clamp(min=1e-300), max=1.0)
        prob[..., i] = torch.where(live, reach * a, torch.zeros_like(a))
        reach = torch.where(live, reach * (1.0 - a), reach)
        p = torch.where(live.unsqueeze(-1), (p - z.unsqueeze(-1) * qi).clamp(min=0.0), p)
        qq = torch.where(live.unsqueeze(-1), without(qq, at), qq)
    z = p.sum(-1, keepdim=True) + rest.unsqueeze(-1)
    last = torch.where(z > 0, p / torch.where(z > 0, z, torch.ones_like(z)), p0 / (p0.sum(-1, keepdim=True)
                                                                                     + rest.unsqueeze(-1)))
    return prob + torch.where(kids >= 0, reach.unsqueeze(-1) * last.gather(-1, pos), torch.zeros_like(prob))


def node_children(tree, n: int, cand: torch.Tensor):
    """(nc [B, n, K] node v's children's candidates, kids [B, n, W] its children's tokens in index order (−1: none,
    or a token q never drew: no test), pos [B, n, W] the candidate each holds) of a drawn tree's first n nodes;
    cand [B, L, K] the candidates of each child depth."""
    nc = at_depth(cand.to(torch.int64), tree.depths[:, :n])
    kids = children_tokens(tree, n, min(nc.shape[-1], n - 1))
    hit = nc.unsqueeze(2) == kids.unsqueeze(-1)                                # [B, n, W, K]
    kids = torch.where(hit.any(-1), kids, torch.full_like(kids, -1))
    return nc, kids, hit.to(torch.int64).argmax(-1)


def drawn_targets_torch(logits: torch.Tensor, law: NodeLaw, rows: LawRows, tree, draft, seed: torch.Tensor,
                        step: torch.Tensor) -> torch.Tensor:
    """The definition of the drawn tree's target tokens (the ops `drawn_targets` compute them along the walk only):
    every node's children tested (accept_children) under the node's law (rows: sampling.law_rows), and every node's
    bonus drawn from its last residual (stream BONUS_STREAM + v); a node's target is its accepted child or its
    bonus, a degenerate row's its argmax, a greedy request's the argmax. int64 [B, n]."""
    B, n, V = logits.shape
    cand, qk = draft
    t = law.temperatures.to(logits.device).float().clamp(min=MIN_TEMPERATURE).view(B, 1, 1)
    x = logits.float()
    scaled = torch.where(kept(x, rows.boundary), x / t, torch.full_like(x, float("-inf")))
    lse = rows.lse.unsqueeze(-1)
    point = rows.boundary == KEEP_NONE
    nc, kids, pos = node_children(tree, n, cand)
    q = at_depth(qk.double(), tree.depths[:, :n])
    pc = (scaled.gather(-1, nc) - lse).double().exp()                          # p_i on the candidates (unnormalised)
    pc = torch.where(point.unsqueeze(-1), (nc == rows.greedy.unsqueeze(-1)).double(), pc)
    rest = (1.0 - pc.sum(-1)).clamp(min=0.0)                                   # p off them: q never reaches it
    out, pc = accept_children(pc, rest, q, kids, pos, seed, step)
    residual = residual_logits(scaled, lse, nc, pc, rest)
    nodes = (BONUS_STREAM + torch.arange(n, device=x.device, dtype=torch.int64)).repeat(B)
    bonus = sample_rows_torch(residual.view(B * n, V), 1.0, seed.to(x.device).repeat_interleave(n),
                              step.to(x.device).repeat_interleave(n), nodes).view(B, n)
    bonus = torch.where(point, rows.greedy, bonus)
    res = torch.where(out >= 0, out, bonus)
    return torch.where(law.greedy().to(x.device).view(B, 1), rows.greedy, res)


def rejection_targets(round_ops, logits: torch.Tensor, law: NodeLaw | None, tree, draft, seed: torch.Tensor,
                      step: torch.Tensor, *, no_token: bool = False) -> torch.Tensor:
    """int64 [B, n] target tokens of a drafted tree from its logits [B, n, V] (module docstring), for the walk: the
    nodes of the round's walk hold their targets (the commit walk reads no other; the rest hold their argmax).
    draft: (candidate ids [B, L, K], q [B, L, K]): row d − 1 the law the depth-d children were drawn from. Greedy
    rows (law None or greedy) take the argmax, as node_tokens gives it; no_token as node_tokens'. Two ops on the
    native backends (law_rows, drawn_targets: no sort, nothing of size [B, n, V] written, the bonus drawn once a
    request, where its walk stops)."""
    if law is None:
        return node_tokens(round_ops, logits, None, seed, step, no_token=no_token)
    B, n, V = logits.shape
    rows = law_rows(round_ops, logits, law)
    cand, qk = draft
    if _native(round_ops, logits):
        c = lambda t: t.contiguous()  # noqa: E731
        res = ops.op("drawn_targets")(
            logits.reshape(B * n, V).contiguous(), c(law.temperatures.float()), rows.greedy.reshape(-1),
            rows.lse.reshape(-1), rows.boundary.reshape(-1), c(tree.tokens[:, :n]), c(tree.parents[:, :n]),
            c(tree.num_nodes), c(tree.depths[:, :n]), c(tree.retrive_next_token[:, :n]),
            c(tree.retrive_next_sibling[:, :n]), c(cand.to(torch.int64)), c(qk.float()), c(~law.greedy()), c(seed),
            c(step))
    else:
        res = drawn_targets_torch(logits, law, rows, tree, draft, seed, step)
    return _mark_no_token(logits, res) if no_token else res
