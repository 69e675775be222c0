"""Per-node target tokens under a request's own sampling parameters (SGLang-free).

Every tree node is sampled from the law the plain server samples the next token from
(`reference.filtered_law`: temperature, top-k, top-p, min-p), independently per node, and the usual walk
runs; the emitted tokens are then exact ancestral samples of the filtered target (docs/DESIGN.md §3.5), as
with temperature alone. A node's draw is Gumbel-max over its logits with the filtered-out tokens at −inf,
from a Philox stream keyed by (seed, step, node) (accept.gumbel_noise): a request's seed is its own (so two
requests in one round, or the n samples of one prompt, draw independently), the step moves every round.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class NodeLaw:
    """One request per row. top_ks <= 0 or >= the vocabulary keep every rank; greedy rows take the argmax."""

    temperatures: torch.Tensor  # float [B]
    top_ks: torch.Tensor        # int [B]
    top_ps: torch.Tensor        # float [B]
    min_ps: torch.Tensor        # float [B]
    filtered: bool = True       # False: no row filters (temperature only), the sort is skipped

    def greedy(self) -> torch.Tensor:
        """bool [B]: rows whose law is the argmax (temperature 0 is carried as top_k 1 by SGLang)."""
        return (self.top_ks == 1) | (self.temperatures <= 0)


def kept_ranks(ps: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor) -> torch.Tensor:
    """bool [R, m]: the ranks the law keeps, for probabilities ps [R, m] sorted descending per row (ties by lower
    token id) and per-row top_ks / top_ps / min_ps [R] (reference.kept_ranks is the definition: a prefix of the
    ranks). m may be the whole vocabulary (a target node's draw) or the tree's k candidates (keys.py): the rule
    only reads the ranks up to the one it judges."""
    rank = torch.arange(ps.shape[-1], device=ps.device).unsqueeze(0)
    k = top_ks.to(torch.int64).unsqueeze(1)
    keep = ((rank < k) | (k <= 0)) & (ps > 0)
    keep &= (torch.cumsum(ps, dim=-1) - ps) <= top_ps.to(ps.dtype).unsqueeze(1)
    keep &= ps >= ps[:, :1] * min_ps.to(ps.dtype).unsqueeze(1)
    keep[:, 0] = True  # the most likely token always stays (rounding cannot empty a row)
    return keep


def filter_logits(scaled: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor):
    """scaled float32 [R, V] (logits / T) with the tokens the law drops set to −inf, in place; per-row
    top_ks / top_ps / min_ps [R]. One stable descending sort per row (ties by lower token id), as the
    reference ranks them; the kept set is a function of the probabilities, so it is computed from them."""
    probs = torch.softmax(scaled, dim=-1)
    ps, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    drop = torch.empty_like(ps, dtype=torch.bool).scatter_(1, order, ~kept_ranks(ps, top_ks, top_ps, min_ps))
    return scaled.masked_fill_(drop, float("-inf"))


def node_tokens(round_ops, logits: torch.Tensor, law: NodeLaw | None, seed: torch.Tensor,
                step: torch.Tensor, *, no_token: bool = False) -> torch.Tensor:
    """int64 [B, n] target tokens for every node of logits [B, n, V]: argmax for greedy rows (or when law is
    None), else a Gumbel-max draw from the node's filtered law (seed / step int64 [B]). A draw that finds no
    token (a NaN row) falls back to the argmax; with no_token, a node whose logits have no token at all (a
    NaN, or all −inf) gets −1 instead (the walk stops there and flags the request: flags.NONFINITE_TARGET)."""
    greedy = round_ops.greedy_tokens(logits)
    if law is None:
        return _mark_no_token(logits, greedy) if no_token else greedy
    B, n, V = logits.shape
    scaled = logits.float() / law.temperatures.float().clamp(min=1e-6).view(B, 1, 1)
    if law.filtered:
        rep = lambda t: t.repeat_interleave(n)
        filter_logits(scaled.view(B * n, V), rep(law.top_ks), rep(law.top_ps), rep(law.min_ps))
    sampled = round_ops.sample_tokens(scaled, seed, step)
    sampled = torch.where((sampled < 0) | (sampled >= V), greedy, sampled)
    out = torch.where(law.greedy().view(B, 1), greedy, sampled)
    return _mark_no_token(logits, out) if no_token else out


def _mark_no_token(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """−1 where the picked logit is NaN (every sampler picks a NaN) or −inf (a row of −inf only), no sync."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return torch.where(torch.isnan(picked) | (picked == float("-inf")), torch.full_like(tokens, -1), tokens)


def request_seeds(server_seed: int, rows: torch.Tensor) -> torch.Tensor:
    """int64 [B] per-request Philox keys when requests bring no seed: the server's seed in the low word, the
    request's pool row in the high word, so concurrent requests never share a stream (the step, the round
    counter, separates a row's successive owners)."""
    return (rows.to(torch.int64) << 32) | (int(server_seed) & 0xFFFFFFFF)
