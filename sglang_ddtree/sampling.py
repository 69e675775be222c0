"""Sampling, in one module: the Philox generator and its Gumbel noise (the CUDA kernels' own, kernels/philox.cuh),
the rule for a node with no token (a NaN or all −inf logits), and per-node target tokens under a request's own
sampling parameters (SGLang-free).

Every tree node is sampled from the law the plain server samples the next token from
(`reference.filtered_law`: temperature, top-k, top-p, min-p), independently per node, and the usual walk
runs; the emitted tokens are then exact ancestral samples of the filtered target (docs/DESIGN.md §3.5), as
with temperature alone. A node's draw is Gumbel-max over its logits with the filtered-out tokens at −inf,
from a Philox stream keyed by (seed, step, node) (gumbel_noise): a request's seed is its own (so two
requests in one round, or the n samples of one prompt, draw independently), the step moves every round.
"""
from __future__ import annotations

import dataclasses

import torch

from . import _checks as C
from . import ops


# --- the generator ------------------------------------------------------------------------------------

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


# --- a row's draw and the no-token rule -----------------------------------------------------------------

def sample_rows_torch(logits: torch.Tensor, temperature, seed, step, node) -> torch.Tensor:
    """Row-wise Gumbel-max sample of softmax(logits / T) (argmax where T is 0) with plain torch ops (the CPU
    backend, and the sample_rows kernel's mirror). temperature: a real, or float32 [R] per row (a row at T <= 0
    takes its argmax). float64 logits are scored in float64 (a float32 copy would turn 1e300 and 2e300 into the
    same inf)."""
    x = logits if logits.dtype == torch.float64 else logits.float()
    if not torch.is_tensor(temperature):
        if temperature == 0.0:
            return torch.argmax(x, dim=-1)
        score = x / temperature + gumbel_noise(seed, step, node, logits.shape[-1]).to(x.dtype)
        return torch.argmax(score, dim=-1)
    t = temperature.to(device=x.device, dtype=x.dtype).unsqueeze(1)
    score = x / t + gumbel_noise(seed, step, node, logits.shape[-1]).to(x.dtype)
    return torch.argmax(torch.where(t > 0, score, x), dim=-1)


def no_token(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """bool [...]: the NaN rule, every sampler's. A row whose picked logit (tokens int64 [...] into logits [..., V])
    is NaN (every sampler, argmax or Gumbel-max, picks a NaN: it ranks highest) or −inf (a row of −inf only) has no
    distribution, so no token: the node gets −1, and the walk stops there (flags.NONFINITE_TARGET)."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return torch.isnan(picked) | (picked == float("-inf"))


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
    none = no_token(rows, picked)
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


# --- a request's law at every node -------------------------------------------------------------------------

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
    temperatures = law.temperatures.float().clamp(min=1e-6)
    if law.filtered:  # the filters read the scaled law's probabilities: the scaled copy is needed anyway
        scaled = logits.float() / temperatures.view(B, 1, 1)
        rep = lambda t: t.repeat_interleave(n)
        filter_logits(scaled.view(B * n, V), rep(law.top_ks), rep(law.top_ps), rep(law.min_ps))
        sampled = round_ops.sample_tokens(scaled, seed, step)
    else:  # the sampler divides (the same float32 division): no [B, n, V] copy
        sampled = round_ops.sample_tokens(logits, seed, step, temperatures=temperatures)
    sampled = torch.where((sampled < 0) | (sampled >= V), greedy, sampled)
    out = torch.where(law.greedy().view(B, 1), greedy, sampled)
    return _mark_no_token(logits, out) if no_token else out


def _mark_no_token(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """−1 where the node has no token (no_token), no sync."""
    return torch.where(no_token(logits, tokens), torch.full_like(tokens, -1), tokens)


def request_seeds(server_seed: int, rows: torch.Tensor) -> torch.Tensor:
    """int64 [B] per-request Philox keys when requests bring no seed: the server's seed in the low word, the
    request's pool row in the high word, so concurrent requests never share a stream (the step, the round
    counter, separates a row's successive owners)."""
    return (rows.to(torch.int64) << 32) | (int(server_seed) & 0xFFFFFFFF)
