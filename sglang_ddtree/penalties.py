"""Per-node penalties: each tree node's logits penalised as the plain server penalises the token after it.

The plain server penalises the logits of the next token by the tokens generated so far
(`reference.penalized_logits`: frequency, presence, min_new_tokens, then repetition scaling). A tree node's
next token follows the committed output *and* the node's own path (its ancestors below the root, then
itself), so its penalty counts both: the committed part is one [B, V] count row per request, the path part
at most depth-limit tokens per node. The dense step applies the committed counts to every node; the few
(node, token) entries its path touches are then recomputed from the unpenalised logits with the full count.
SGLang-free: `PenaltyCounts` is the state a host keeps per request row across rounds.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch


class PenaltyRequest(NamedTuple):
    """What a host knows of one request of a penalised batch (host values)."""

    key: object           # the request itself: a pool row whose key changes holds a new request
    row: int              # its pool row (PenaltyCounts' row)
    frequency: float
    presence: float
    repetition: float
    min_new: int
    stop: tuple           # the tokens min_new_tokens holds back
    output: list          # its output so far, as the host has it (it may lag the device)
    prompt_len: int


@dataclasses.dataclass
class PenaltyParams:
    """Per request of the round: [B] tensors, and the tokens min_new_tokens holds back as a bool [B, V]."""

    frequency: torch.Tensor
    presence: torch.Tensor
    repetition: torch.Tensor
    min_new: torch.Tensor
    stop: torch.Tensor


def _to_device(host: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device's queue (pinned, non-blocking on CUDA)."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def params_of(reqs: list, vocab: int, device) -> PenaltyParams:
    """The round's PenaltyParams from its requests (one host→device copy per field, none waiting on the device)."""
    f32 = lambda name: _to_device(torch.tensor([getattr(r, name) for r in reqs], dtype=torch.float32), device)
    stop = torch.zeros(len(reqs), vocab, dtype=torch.bool)
    for b, r in enumerate(reqs):
        ids = [t for t in r.stop if 0 <= t < vocab]
        if ids and r.min_new > 0:
            stop[b, ids] = True
    return PenaltyParams(f32("frequency"), f32("presence"), f32("repetition"),
                         _to_device(torch.tensor([r.min_new for r in reqs], dtype=torch.int64), device),
                         _to_device(stop, device))


def path_tokens(tokens: torch.Tensor, parents: torch.Tensor, depths: torch.Tensor, depth_limit: int) -> torch.Tensor:
    """int64 [B, n, L]: the tokens on node i's path below the root, node i first then its ancestors up to
    depth 1; −1 pads (the root and tree pads have none)."""
    B, n = tokens.shape
    L = max(int(depth_limit), 1)
    out = torch.full((B, n, L), -1, dtype=torch.int64, device=tokens.device)
    cur = torch.arange(n, device=tokens.device).expand(B, n).clone()
    for k in range(L):
        ok = cur >= 0
        safe = cur.clamp(min=0)
        real = ok & (torch.gather(depths, 1, safe) >= 1)
        out[:, :, k] = torch.where(real, torch.gather(tokens, 1, safe), -1)
        cur = torch.where(real, torch.gather(parents.to(torch.int64), 1, safe), -1)
    return out


def _scale(x: torch.Tensor, rep: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, x * rep, x / rep)


def apply(logits: torch.Tensor, counts: torch.Tensor, out_len: torch.Tensor, path: torch.Tensor,
          depths: torch.Tensor, p: PenaltyParams) -> None:
    """Penalise logits [B, n, V] (float, in place) for every node. counts float [B, V]: occurrences of each
    token in the committed output, the root included; out_len [B]: that output's length; path [B, n, L]
    (path_tokens); depths [B, n]."""
    B, n, V = logits.shape
    dt = logits.dtype
    f, pr, rep = (t.to(dt).view(B, 1, 1) for t in (p.frequency, p.presence, p.repetition))
    # the path entries, recomputed below from the unpenalised logits
    valid = path >= 0
    tok = path.clamp(min=0)
    row = torch.gather(logits, 2, tok)                                      # [B, n, L]
    path_count = ((tok.unsqueeze(-1) == tok.unsqueeze(-2)) & valid.unsqueeze(-2)).sum(-1).to(dt)
    base = torch.gather(counts.to(dt).unsqueeze(1).expand(B, n, V), 2, tok)  # committed count of each path token
    held = (out_len.view(B, 1) + depths.to(out_len.dtype)) < p.min_new.view(B, 1)  # [B, n]: stop tokens held
    stop_at = torch.gather(p.stop.unsqueeze(1).expand(B, n, V), 2, tok) & held.unsqueeze(-1)
    total = base + path_count
    fixed = row - f.view(B, 1, 1) * total - pr.view(B, 1, 1) * (total > 0).to(dt)
    fixed = torch.where(stop_at, torch.full_like(fixed, float("-inf")), fixed)
    fixed = _scale(fixed, rep.view(B, 1, 1))
    # the committed output's penalties on every node
    c = counts.to(dt).unsqueeze(1)
    logits.sub_(f * c + pr * (c > 0).to(dt))
    logits.masked_fill_(p.stop.unsqueeze(1) & held.unsqueeze(-1), float("-inf"))
    seen = (c > 0).expand(B, n, V)
    logits.copy_(torch.where(seen, _scale(logits, rep), logits))
    # a token repeated on a path writes the same value at each of its entries; the pads repeat entry 0 (the
    # node's own token, valid whenever any entry is) or, on a node with no path, rewrite its token 0 as it is
    first = torch.where(valid[..., :1], fixed[..., :1], torch.gather(logits, 2, tok[..., :1]))
    logits.scatter_(2, torch.where(valid, tok, tok[..., :1]), torch.where(valid, fixed, first))


class PenaltyCounts:
    """Occurrences of every token in each request row's committed output, kept across rounds on the device
    (rows: the host's request slots). `begin` makes a row a new request takes (or a retracted one comes back
    to) from the output the host has, then counts the round's root; `add` the accepted tokens after it."""

    def __init__(self, rows: int, vocab: int, device):
        self.counts = torch.zeros(int(rows), int(vocab), dtype=torch.float32, device=device)
        self.lengths = torch.zeros(int(rows), dtype=torch.int64, device=device)
        self.owner = {}  # row -> the request whose output it holds

    def begin(self, reqs: list, prefix: torch.Tensor, roots: torch.Tensor) -> torch.Tensor:
        """int64 [B] the rows of reqs (PenaltyRequest), ready for the round: a row whose request changed holds
        the first prefix[b] − prompt_len tokens of its output (the committed output below the root: the host's
        list may run ahead of it, never behind once the request has been seen), then every row gains its root."""
        dev = self.counts.device
        for b, r in enumerate(reqs):
            if self.owner.get(r.row) is not r.key:
                self.owner[r.row] = r.key
                history = _to_device(torch.tensor(r.output or [0], dtype=torch.int64), dev)
                self.reset(r.row, history, (prefix[b] - r.prompt_len).clamp(min=0, max=len(r.output)))
        rows = _to_device(torch.tensor([r.row for r in reqs], dtype=torch.int64), dev)
        self.add(rows, roots.view(-1, 1), torch.ones_like(rows))
        return rows

    def reset(self, row: int, history: torch.Tensor, upto: torch.Tensor) -> None:
        """Row `row` holds the first `upto` (int64 0-d, may live on the device) tokens of `history`."""
        self.counts[row].zero_()
        keep = torch.arange(history.numel(), device=self.counts.device) < upto
        self.counts[row].index_put_((history.to(self.counts.device),), keep.to(self.counts.dtype), accumulate=True)
        self.lengths[row] = upto

    def add(self, rows: torch.Tensor, tokens: torch.Tensor, lens: torch.Tensor) -> None:
        """Add tokens [B, W]'s first lens[b] entries to row rows[b]."""
        B, W = tokens.shape
        take = (torch.arange(W, device=tokens.device).unsqueeze(0) < lens.view(B, 1)).to(self.counts.dtype)
        flat = rows.to(torch.int64).view(B, 1) * self.counts.shape[1] + tokens.clamp(min=0).to(torch.int64)
        self.counts.view(-1).index_put_((flat.reshape(-1),), take.reshape(-1), accumulate=True)
        self.lengths.index_add_(0, rows.to(torch.int64), lens.to(torch.int64))
