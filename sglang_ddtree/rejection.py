"""Verifying one drafted path by rejection sampling (speculative sampling), as target tokens for the round's walk.

A drafter that draws its path from a law it knows — a DFlash2 selector's walk draws slot e's token from
q_e = softmax(score row / T) after its own pick at slot e − 1 — is verified as SGLang's DFLASH verifies it:
drafted token x_e is accepted with probability min(1, p_e(x_e) / q_e(x_e)) (p_e the target's law at path node
e), up to the first rejection, where the bonus is drawn from (p_e − q_e)⁺; after L acceptances from p_L
(`reference.chain_rejection_reference` defines it). The emitted tokens are an exact draw from the target.

The round's walk then commits exactly that: node e's target token is x_e while e < a (the accepted count)
and the bonus from a on, and the bonus is never x_a (the residual puts no mass on a rejected token), so the
walk over the path accepts a tokens and commits the bonus. Random numbers: the acceptance uniforms are the
Philox stream (seed, step, ACCEPT_STREAM), the bonus's Gumbel noise the stream (seed, step, BONUS_STREAM + a),
apart from the node draws (nodes < 4096) and the drafter's (engine/dflash2.WALK_STREAM).
"""
from __future__ import annotations

import torch

from .accept import gumbel_noise, uniform_noise
from .sampling import NodeLaw, _mark_no_token, filter_logits, node_tokens

ACCEPT_STREAM = 2 << 24
BONUS_STREAM = 3 << 24


def accepted_count(p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """p [B, L+1, V] target law per path node, q [B, L, V] draft law per slot, drafted [B, L], u [B, L] ->
    int64 [B] the accepted drafted tokens: the leading run of u·q(x) < p(x)."""
    x = drafted.unsqueeze(-1)
    ok = u * q.gather(-1, x).squeeze(-1) < p[:, :-1].gather(-1, x).squeeze(-1)
    return ok.to(torch.int64).cumprod(-1).sum(-1)


def bonus_law(p: torch.Tensor, q: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """[B, V] the law of the bonus: (p_a − q_a)⁺ after a rejection at node a < L, p_L after L acceptances
    (p itself where the residual has no mass: p = q up to rounding, so a rejection there has probability ~0)."""
    B, L = q.shape[0], q.shape[1]
    rows = torch.arange(B, device=p.device)
    pa = p[rows, a]
    qa = torch.cat([q, torch.zeros_like(q[:, :1])], 1)[rows, a]  # q_L = 0: after L acceptances the law is p_L
    r = (pa - qa).clamp(min=0)
    return torch.where((r.sum(-1, keepdim=True) > 0) & (a < L).view(B, 1), r, pa)


def rejection_targets(round_ops, logits: torch.Tensor, law: NodeLaw | None, tokens: torch.Tensor, draft,
                      seed: torch.Tensor, step: torch.Tensor, *, no_token: bool = False) -> torch.Tensor:
    """int64 [B, n] target tokens of a one-path tree (node e + 1 holds drafted token e, n = L + 1) from its logits
    [B, n, V], so the walk commits speculative sampling's tokens (module docstring). draft: (candidate ids
    [B, L, K], q [B, L, K]) the law each drafted token was drawn from, over its slot's candidates. Greedy rows
    (law None or greedy) take the argmax, as node_tokens gives it; no_token as node_tokens'."""
    greedy = node_tokens(round_ops, logits, None, seed, step, no_token=no_token)
    if law is None:
        return greedy
    B, n, V = logits.shape
    cand, qk = draft
    L = cand.shape[1]
    x = logits if logits.dtype == torch.float64 else logits.float()  # float64 logits stay float64 (as node_tokens)
    scaled = x / law.temperatures.to(x.dtype).clamp(min=1e-6).view(B, 1, 1)
    if law.filtered:
        rep = lambda t: t.repeat_interleave(n)  # noqa: E731
        filter_logits(scaled.view(B * n, V), rep(law.top_ks), rep(law.top_ps), rep(law.min_ps))
    p = torch.softmax(scaled, -1)
    q = torch.zeros(B, L, V, dtype=p.dtype, device=p.device).scatter_(-1, cand, qk.to(p.dtype))
    drafted = tokens[:, 1:L + 1]
    u = uniform_noise(seed, step, torch.full_like(seed, ACCEPT_STREAM), L).to(p.device)
    a = accepted_count(p, q, drafted, u)
    noise = gumbel_noise(seed, step, BONUS_STREAM + a, V).to(p.device)
    bonus = torch.argmax(torch.log(bonus_law(p, q, a)) + noise, -1)
    col = torch.arange(n, device=p.device)
    drafted_n = torch.cat([drafted, drafted[:, :1]], 1)  # a column for node L (always the bonus)
    sampled = torch.where(col < a.view(B, 1), drafted_n, bonus.view(B, 1))
    out = torch.where(law.greedy().view(B, 1), greedy, sampled)
    return _mark_no_token(logits, out) if no_token else out
