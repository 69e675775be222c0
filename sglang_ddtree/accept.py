"""Accepting a verified tree: per-node target tokens (greedy or sampled) and the bounded greedy walk.

At T > 0 every node gets an independent sample of the target distribution at that node, then the same
walk runs: the emitted tokens are exact ancestral samples of the target (docs/DESIGN.md §3.5), so no
[B, n, V] probability tensors and no rejection sampling are needed.
"""
from __future__ import annotations

import dataclasses

import torch

from . import _checks as C
from . import ops
from .tree import TreeBatch


MAX_DEPTH_LIMIT = (1 << 20) - 1  # the CUDA walk's bound (kernels/torch_cuda/tree.cpp); accept_index is [B, L+1]


@dataclasses.dataclass
class AcceptResult:
    accept_index: torch.Tensor     # int32 [B, L+1] accepted node indices (root first), −1 pad
    accept_len: torch.Tensor       # int32 [B] accepted nodes incl. root = tokens committed incl. bonus
    bonus: torch.Tensor            # int64 [B] the target's token after the last accepted node
    accepted_tokens: torch.Tensor  # int64 [B, L+1] committed tokens: accepted nodes' tokens, then bonus; −1 pad
    flags: torch.Tensor            # int32 [B] flags.MALFORMED_TREE (the walk stopped on bad links),
                                   # flags.NONFINITE_TARGET (it reached a node sampled −1; bonus is −1)


def _committed_tokens(tree_tokens, accept_index, accept_len, bonus) -> torch.Tensor:
    """Tokens of accepted nodes 1..len−1 followed by the bonus, −1 padded (pure tensor ops, no sync)."""
    width = accept_index.shape[1]
    nxt = torch.cat([accept_index[:, 1:], accept_index.new_full((accept_index.shape[0], 1), -1)], dim=1)
    toks = torch.gather(tree_tokens, 1, nxt.clamp(min=0).to(torch.int64))
    col = torch.arange(width, device=tree_tokens.device).unsqueeze(0)
    last = (accept_len.to(torch.int64) - 1).unsqueeze(1)
    toks = torch.where(col == last, bonus.unsqueeze(1), toks)
    return torch.where(col <= last, toks, torch.full_like(toks, -1))


def _walk_reference(tree: TreeBatch, target: torch.Tensor):
    from .reference import walk_reference

    B, L = tree.batch_size, tree.depth_limit
    idx = torch.full((B, L + 1), -1, dtype=torch.int32)
    length = torch.zeros(B, dtype=torch.int32)
    bonus = torch.zeros(B, dtype=torch.int64)
    flg = torch.zeros(B, dtype=torch.int32)
    host = {k: v.cpu().numpy() for k, v in (("tokens", tree.tokens), ("nt", tree.retrive_next_token),
                                              ("ns", tree.retrive_next_sibling), ("nn", tree.num_nodes),
                                              ("t", target))}
    for b in range(B):
        acc, bon, f = walk_reference(host["tokens"][b], host["nt"][b], host["ns"][b], int(host["nn"][b]),
                                     host["t"][b], L)
        idx[b, :len(acc)] = torch.tensor(acc, dtype=torch.int32)
        length[b], bonus[b], flg[b] = len(acc), bon, f
    dev = tree.tokens.device
    return idx.to(dev), length.to(dev), bonus.to(dev), flg.to(dev)


def accept_tree(tree: TreeBatch, target_tokens: torch.Tensor, *, vocab_size: int | None = None,
                backend: str = "auto") -> AcceptResult:
    """Greedy walk of `tree` with the target's per-node tokens (int64 [B, n]); bounded by n link reads
    per request whatever the links say (malformed trees are flagged, never followed). A target of −1
    (sample_node_tokens: no token) ends the walk there and sets flags.NONFINITE_TARGET.
    vocab_size: the target's vocabulary, when known. A target below −1, or at or past vocab_size, is refused
    (for CPU tensors; CUDA tensors are not read on the host): the walk would commit it as the bonus token."""
    if not isinstance(tree, TreeBatch):
        raise TypeError(f"tree must be a TreeBatch, got {type(tree).__name__}")
    device = tree.tokens.device
    C.tensor("target_tokens", target_tokens, ndim=2, dtypes=C.INT_DTYPES, device=device)
    C.shape("target_tokens", target_tokens, (tree.batch_size, tree.n))
    for name in ("tokens", "retrive_next_token", "retrive_next_sibling"):
        C.tensor(f"tree.{name}", getattr(tree, name), ndim=2, dtypes=(torch.int64,), device=device)
        C.shape(f"tree.{name}", getattr(tree, name), (tree.batch_size, tree.n))
    C.tensor("tree.num_nodes", tree.num_nodes, ndim=1, dtypes=(torch.int32,), device=device)
    C.shape("tree.num_nodes", tree.num_nodes, (tree.batch_size,))
    C.integer("tree.depth_limit", tree.depth_limit, minimum=0, maximum=MAX_DEPTH_LIMIT)
    if vocab_size is not None:
        C.integer("vocab_size", vocab_size, minimum=1)
    C.in_range("target_tokens", target_tokens, -1, vocab_size)
    backend = ops.resolve_backend(backend, device)
    target = target_tokens.to(torch.int64).contiguous()
    if backend == "reference":
        idx, length, bonus, flg = _walk_reference(tree, target)
    else:
        idx, length, bonus, flg = ops.op("accept_tree")(
            tree.tokens.contiguous(), tree.retrive_next_token.contiguous(),
            tree.retrive_next_sibling.contiguous(), tree.num_nodes.contiguous(), target, tree.depth_limit)
    return AcceptResult(idx, length, bonus, _committed_tokens(tree.tokens, idx, length, bonus), flg)


# --- sampling ---------------------------------------------------------------------------------------

_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF


def philox4x32(counter: tuple, key: tuple, rounds: int = 10) -> tuple:
    """Philox4x32-10 on int64 tensors holding uint32 values (the CUDA kernel uses the same generator)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(rounds):
        hi0, lo0 = _mul32(_PHILOX_M0, c0)
        hi1, lo1 = _mul32(_PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + _PHILOX_W0) & _MASK32
        k1 = (k1 + _PHILOX_W1) & _MASK32
    return c0, c1, c2, c3


def _mul32(m: int, x):
    """(hi, lo) 32-bit words of m·x for uint32 m and x (int64 tensors or ints), exactly."""
    x_lo, x_hi = x & 0xFFFF, x >> 16
    lo_part = m * x_lo                    # < 2^48
    hi_part = m * x_hi                    # < 2^48
    total_lo = lo_part + ((hi_part & 0xFFFF) << 16)
    lo = total_lo & _MASK32
    hi = ((hi_part >> 16) + (total_lo >> 32)) & _MASK32
    return hi, lo


def gumbel_noise(seed: torch.Tensor, step: torch.Tensor, node: torch.Tensor, vocab: int) -> torch.Tensor:
    """float32 [R, V] Gumbel noise, one independent stream per (seed, step, node) row; the counter runs
    over the vocabulary index (kernels/tree_accept.cu documents the same generator): g = −log(−log u) in
    float32 of uniform_noise's u."""
    return -torch.log(-torch.log(uniform_noise(seed, step, node, vocab)))


def uniform_noise(seed: torch.Tensor, step: torch.Tensor, node: torch.Tensor, vocab: int) -> torch.Tensor:
    """float32 [R, V] uniforms in (0, 1) of the Philox stream (seed, step, node) of each row, entry v from output
    word v mod 4 of counter (v / 4, node, step low, step high): u = (x + 0.5)·2⁻³² rounded to float32 and clamped
    below 1 (the top words would round to 1.0)."""
    dev = seed.device
    R, blocks = seed.shape[0], (vocab + 3) // 4  # one Philox call gives the words of 4 vocabulary entries
    c0 = torch.arange(blocks, device=dev, dtype=torch.int64).unsqueeze(0).expand(R, -1)
    c1 = (node.unsqueeze(1) & _MASK32).expand(-1, blocks)
    c2 = (step.unsqueeze(1) & _MASK32).expand(-1, blocks)
    c3 = ((step.unsqueeze(1) >> 32) & _MASK32).expand(-1, blocks)
    k0 = (seed.unsqueeze(1) & _MASK32).expand(-1, blocks)
    k1 = ((seed.unsqueeze(1) >> 32) & _MASK32).expand(-1, blocks)
    # entry v: word v % 4 of call v // 4
    x = torch.stack(philox4x32((c0, c1, c2, c3), (k0, k1)), dim=-1).reshape(R, blocks * 4)[:, :vocab]
    u = (x.to(torch.float64) + 0.5) * (2.0 ** -32)
    return u.to(torch.float32).clamp(max=1.0 - 2.0 ** -24)


def sample_rows_torch(logits: torch.Tensor, temperature: float, seed, step, node) -> torch.Tensor:
    """Row-wise Gumbel-max sample (argmax at temperature 0) with plain torch ops (the CPU backend).
    float64 logits are scored in float64 (a float32 copy would turn 1e300 and 2e300 into the same inf)."""
    x = logits if logits.dtype == torch.float64 else logits.float()
    if temperature == 0.0:
        return torch.argmax(x, dim=-1)
    score = x / temperature + gumbel_noise(seed, step, node, logits.shape[-1]).to(x.dtype)
    return torch.argmax(score, dim=-1)


# logits / T overflows (float32 scores) only where |logit| > T * 3.4e38. Below this temperature that happens
# with ordinary logits, so the greedy answer is computed too and replaces the overflowed rows' (their exact
# law is the T -> 0 limit: the argmax). At or above it, overflow needs |logit| > 1.8e19: the CUDA path then
# returns -1 for the row (no token) rather than pay a second pass over the logits on every call.
OVERFLOW_TEMPERATURE = 2.0 ** -64


def _unsampleable_rows(rows: torch.Tensor, picked: torch.Tensor, temperature: float, exact_overflow: bool):
    """Mend a sampler's output with [R]-sized checks of the picked logit (no host sync): a row with a NaN
    (every backend picks it) or only -inf logits has no distribution and gets -1; a row whose winning
    score overflowed gets the argmax (exact_overflow) or -1."""
    sel = rows.gather(1, picked.unsqueeze(1)).squeeze(1)
    out = picked
    none = torch.isnan(sel) | (sel == float("-inf"))  # a NaN ranks highest; an all -inf row picks -inf
    if temperature > 0.0:
        score_dtype = torch.float64 if rows.dtype == torch.float64 else torch.float32
        # non-finite where the logit is finite: overflow (or 0 / T = NaN once T rounds to 0 in float32)
        overflow = ~torch.isfinite(sel.to(score_dtype) / temperature) & torch.isfinite(sel)
        fix = torch.argmax(rows, dim=-1) if exact_overflow else torch.full_like(picked, -1)
        out = torch.where(overflow, fix, out)
    return torch.where(none, torch.full_like(out, -1), out)


def sample_node_tokens(target_logits: torch.Tensor, temperature: float, *, seed=0, step=0,
                       backend: str = "auto") -> torch.Tensor:
    """Per-node target tokens int64 [B, n] from target logits [B, n, V].

    temperature 0 → argmax (first index on ties, like torch.argmax); > 0 → Gumbel-max, i.e. an exact draw
    from softmax(logits / T), independent across nodes, reproducible from (seed, step, node).
    seed / step: int or int64 [B] (per request; keep them tensors under CUDA graphs).
    temperature: a Python or numpy real. A temperature so small that logits / T overflows gives the argmax
    (the exact T → 0 limit; see OVERFLOW_TEMPERATURE for the one corner that gives −1 on CUDA instead).
    float64 logits are compared in float64 (on the torch path, also for CUDA tensors).
    −1 marks a node that has no token: its logits hold a NaN or are all −inf. accept_tree stops the walk at
    such a node and flags the request (flags.NONFINITE_TARGET); never feed −1 back as a token.
    """
    C.tensor("target_logits", target_logits, ndim=3, dtypes=C.FLOAT_DTYPES)
    temperature = C.finite_nonnegative("temperature", temperature)
    B, n, V = target_logits.shape
    device = target_logits.device
    if V < 1:
        raise ValueError(f"target_logits must have a non-empty vocabulary dimension, got {tuple(target_logits.shape)}")
    seeds = C.per_request("seed", seed, B, device).repeat_interleave(n)
    steps = C.per_request("step", step, B, device).repeat_interleave(n)
    nodes = torch.arange(n, device=device, dtype=torch.int64).repeat(B)
    backend = ops.resolve_backend(backend, device, allowed=ops.NATIVE_BACKENDS)
    rows = target_logits.reshape(B * n, V)
    if backend == "cuda" and rows.dtype != torch.float64:  # the kernel reads 16/32-bit logits
        out = ops.op("sample_rows")(rows.contiguous(), temperature, seeds, steps, nodes)
        exact = temperature < OVERFLOW_TEMPERATURE
    else:
        out = sample_rows_torch(rows, temperature, seeds, steps, nodes)
        exact = True  # the argmax pass is cheap next to the torch Philox
    return _unsampleable_rows(rows, out, temperature, exact).reshape(B, n)
