"""Sampling, in one module: the Philox generator and its Gumbel noise (the CUDA kernels' own, kernels/philox.h),
the rule for a node with no token (a NaN or all −inf logits), and per-node target tokens under a request's own
sampling parameters (SGLang-free).

Every tree node is sampled from the law the plain server samples the next token from
(`reference.filtered_law`: temperature, top-k, top-p, min-p), independently per node, and the usual walk
runs; the emitted tokens are then exact ancestral samples of the filtered target (docs/DESIGN.md §3.5), as
with temperature alone. A node's draw is Gumbel-max over its logits with the filtered-out tokens at −inf,
from a Philox stream keyed by (seed, step, node) (gumbel_noise): a request's seed is its own (so two
requests in one round, or the n samples of one prompt, draw independently), the step moves every round.
The law of every node is three numbers a row (`law_rows`: the argmax, the kept set's boundary and its normaliser,
kernels/law_rule.h), found without sorting the vocabulary; nothing of size [nodes, vocabulary] is written.
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

def sample_rows_torch(logits: torch.Tensor, temperature, seed, step, node, boundary=None) -> torch.Tensor:
    """Row-wise Gumbel-max sample of softmax(logits / T) (argmax where T is 0) with plain torch ops (the definition
    of the sample_rows ops, and their path for float64 logits). temperature: a real, or float32 [R] per row (a row
    at T <= 0 takes its argmax); boundary: int64 [R] (law_rows'), a sampled row draws only among the tokens its law
    keeps. float64 logits are scored in float64 (a float32 copy would turn 1e300 and 2e300 into the same inf)."""
    x = logits if logits.dtype == torch.float64 else logits.float()
    V = logits.shape[-1]
    if not torch.is_tensor(temperature):
        if temperature == 0.0:
            return torch.argmax(x, dim=-1)
        score = x / temperature + gumbel_noise(seed, step, node, V).to(x.dtype)
        sampled = None
    else:
        t = temperature.to(device=x.device, dtype=x.dtype).unsqueeze(1)
        score = x / t + gumbel_noise(seed, step, node, V).to(x.dtype)
        sampled = t > 0
    if boundary is not None:
        score = torch.where(law_keys(logits.float()) >= boundary.to(x.device).unsqueeze(1), score,
                            torch.full_like(score, float("-inf")))
    return torch.argmax(score if sampled is None else torch.where(sampled, score, x), dim=-1)


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
    filtered: bool = True       # False: no row filters (temperature only): law_rows is skipped

    def greedy(self) -> torch.Tensor:
        """bool [B]: rows whose law is the argmax (temperature 0 is carried as top_k 1 by SGLang)."""
        return (self.top_ks == 1) | ~(self.temperatures > 0)


def kept_ranks(ps: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor) -> torch.Tensor:
    """bool [R, m]: the ranks the law keeps, for probabilities ps [R, m] sorted descending per row (ties by lower
    token id) and per-row top_ks / top_ps / min_ps [R] (reference.kept_ranks is the definition: a prefix of the
    ranks). The tree's k candidates use it (keys.py); a target row's kept set is law_rows'."""
    rank = torch.arange(ps.shape[-1], device=ps.device).unsqueeze(0)
    k = top_ks.to(torch.int64).unsqueeze(1)
    keep = ((rank < k) | (k <= 0)) & (ps > 0)
    keep &= (torch.cumsum(ps, dim=-1) - ps) <= top_ps.to(ps.dtype).unsqueeze(1)
    keep &= ps >= ps[:, :1] * min_ps.to(ps.dtype).unsqueeze(1)
    keep[:, 0] = True  # the most likely token always stays (rounding cannot empty a row)
    return keep


# --- every node's law as three numbers a row (kernels/law_rule.h is the rule; law_rows_torch its definition) -----

MIN_TEMPERATURE = 1e-6       # a sampled row's temperature floor: its scores stay finite (law_rule.h kMinTemperature)
KEEP_ALL = -(2 ** 63)        # the boundary of a row that keeps every token
KEEP_NONE = 2 ** 63 - 1      # the boundary of a degenerate row (a NaN, or scores that overflow): its token is the argmax


@dataclasses.dataclass
class LawRows:
    """Each node's law (B requests × n nodes): the argmax, and for a sampled request softmax(logits / T) over the kept
    tokens (law_keys(x) >= boundary), lse its log-normaliser."""

    greedy: torch.Tensor    # int64 [B, n]
    lse: torch.Tensor       # float32 [B, n]
    boundary: torch.Tensor  # int64 [B, n]


def mass_bits(vocab: int) -> int:
    """F: a row's fixed-point mass Σ floor(e · 2^F) fits an int64 (vocab · 2^F < 2^63)."""
    return 63 - int(vocab).bit_length()


def law_keys(x: torch.Tensor) -> torch.Tensor:
    """int64 [..., V] rank keys of float32 logits: larger is earlier (x descending, ties by the lower id; −0 ranks
    with +0), law_rule.h's law_key."""
    x = torch.where(x == 0, torch.zeros_like(x), x.float())
    u = x.view(torch.int32).to(torch.int64)
    hi = torch.where(u >= 0, u, u ^ 0x7FFFFFFF)
    return hi * (2 ** 32) + (0xFFFFFFFF - torch.arange(x.shape[-1], device=x.device, dtype=torch.int64))


def law_rows_torch(logits: torch.Tensor, law: NodeLaw) -> LawRows:
    """The definition of every node's law (kernels/law_rule.h states it; the ops law_rows compute it without a sort),
    logits [B, n, V] read as float32 (the argmax from the logits as given). Mass is fixed point, so the kept set is
    the same in any summation order and on any backend."""
    B, n, V = logits.shape
    dev = logits.device
    greedy = torch.argmax(logits, dim=-1)
    x = logits.float()
    per_row = lambda t, dt: t.to(device=dev, dtype=dt).view(B, 1).expand(B, n)  # noqa: E731
    t = per_row(law.temperatures, torch.float32).clamp(min=MIN_TEMPERATURE)
    s = x / t.unsqueeze(-1)
    s_max = s.max(dim=-1).values
    F = mass_bits(V)
    e = torch.exp(s.double() - s_max.double().unsqueeze(-1))
    E = (e * 2.0 ** F).floor().to(torch.int64)
    top_k, top_p, min_p = (per_row(law.top_ks, torch.int64), per_row(law.top_ps, torch.float32),
                           per_row(law.min_ps, torch.float32))
    keys = law_keys(x)
    sorted_keys, order = torch.sort(keys, dim=-1, descending=True)  # the definition may sort; the ops do not
    Es = E.gather(-1, order)
    Z = E.sum(-1)
    limit = torch.where((top_k > 0) & (top_k < V), top_k, torch.full_like(top_k, V))
    limit = torch.minimum(limit, (e > 0).sum(-1))
    limit = torch.minimum(limit, torch.where(min_p > 0, (e >= min_p.double().unsqueeze(-1)).sum(-1),
                                             torch.full_like(limit, V))).clamp(min=1)
    mass_limit = torch.where(top_p < 1, (top_p.double() * Z.double()).clamp(min=0.0),
                             torch.full_like(Z, float("inf"), dtype=torch.float64))
    rank = torch.arange(V, device=dev)
    keep = (rank < limit.unsqueeze(-1)) & ((torch.cumsum(Es, -1) - Es).double() <= mass_limit.unsqueeze(-1))
    count = keep.sum(-1).clamp(min=1)  # a prefix of the ranks: both conditions are monotone along the order
    boundary = sorted_keys.gather(-1, (count - 1).unsqueeze(-1)).squeeze(-1)
    kept_mass = torch.where(keep, Es, torch.zeros_like(Es)).sum(-1)
    filtered = ((top_k > 0) & (top_k < V)) | (top_p < 1) | (min_p > 0)
    boundary = torch.where(filtered, boundary, torch.full_like(boundary, KEEP_ALL))
    mass = torch.where(filtered, kept_mass, Z)
    lse = (s_max.double() + torch.log(mass.double() * 2.0 ** -F)).float()
    degenerate = torch.isnan(x).any(-1) | ~torch.isfinite(s_max)
    boundary = torch.where(degenerate, torch.full_like(boundary, KEEP_NONE), boundary)
    lse = torch.where(degenerate, torch.full_like(lse, float("nan")), lse)
    plain = law.greedy().to(dev).view(B, 1).expand(B, n)
    return LawRows(greedy, torch.where(plain, torch.zeros_like(lse), lse),
                   torch.where(plain, torch.full_like(boundary, KEEP_ALL), boundary))


def _native(round_ops, logits: torch.Tensor) -> bool:
    """Whether the round's native ops take these logits (16/32-bit, on the ops' own device)."""
    return not round_ops.fallback and logits.dtype != torch.float64


def law_rows(round_ops, logits: torch.Tensor, law: NodeLaw) -> LawRows:
    """Every node's law of logits [B, n, V] under the requests' law (one op on the native backends, no sort)."""
    if not _native(round_ops, logits):
        return law_rows_torch(logits, law)
    B, n, V = logits.shape
    greedy, lse, boundary = ops.op("law_rows")(logits.reshape(B * n, V).contiguous(), n,
                                               law.temperatures.float().contiguous(), law.top_ks.long().contiguous(),
                                               law.top_ps.float().contiguous(), law.min_ps.float().contiguous())
    return LawRows(greedy.view(B, n), lse.view(B, n), boundary.view(B, n))


def kept(logits: torch.Tensor, boundary: torch.Tensor) -> torch.Tensor:
    """bool [..., V]: the tokens each row's law keeps (boundary [...], law_rows')."""
    return law_keys(logits.float()) >= boundary.unsqueeze(-1)


def law_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
              min_p: float = 0.0) -> torch.Tensor:
    """float32 probabilities [R, V] of one law at every row of logits [R, V] (its kept set renormalised)."""
    R, V = logits.shape
    full = lambda v, dt: torch.full((R,), v, dtype=dt, device=logits.device)  # noqa: E731
    law = NodeLaw(full(temperature, torch.float32), full(int(top_k), torch.int64), full(float(top_p), torch.float32),
                  full(float(min_p), torch.float32))
    rows = law_rows_torch(logits.view(R, 1, V), law)
    scaled = logits.float() / max(float(temperature), MIN_TEMPERATURE)
    keep = kept(logits, rows.boundary.view(R))
    return torch.softmax(torch.where(keep, scaled, torch.full_like(scaled, float("-inf"))), -1)


def node_tokens(round_ops, logits: torch.Tensor, law: NodeLaw | None, seed: torch.Tensor,
                step: torch.Tensor, *, no_token: bool = False) -> torch.Tensor:
    """int64 [B, n] target tokens for every node of logits [B, n, V]: argmax for greedy rows (or when law is
    None), else a Gumbel-max draw from the node's law (seed / step int64 [B]): one law_rows op where a request
    filters, then one sampler op. A draw that finds no token (a degenerate row) takes the argmax; with no_token, a
    node whose logits have no token at all (a NaN, or all −inf) gets −1 instead (the walk stops there and flags the
    request: flags.NONFINITE_TARGET)."""
    if law is None:
        greedy = round_ops.greedy_tokens(logits)
        return _mark_no_token(logits, greedy) if no_token else greedy
    B, n, V = logits.shape
    temperatures = law.temperatures.float().clamp(min=MIN_TEMPERATURE)
    if law.filtered:
        rows = law_rows(round_ops, logits, law)
        greedy, boundary = rows.greedy, rows.boundary
    else:  # temperature only: every token kept, the sampler divides (no [B, n, V] copy)
        greedy, boundary = round_ops.greedy_tokens(logits), None
    sampled = round_ops.sample_tokens(logits, seed, step, temperatures=temperatures, boundary=boundary)
    bad = (sampled < 0) | (sampled >= V)
    if boundary is not None:
        bad |= boundary == KEEP_NONE
    out = torch.where(law.greedy().view(B, 1) | bad, greedy, sampled)
    return _mark_no_token(logits, out) if no_token else out


def _mark_no_token(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """−1 where the node has no token (no_token), no sync."""
    return torch.where(no_token(logits, tokens), torch.full_like(tokens, -1), tokens)


def request_seeds(server_seed: int, rows: torch.Tensor) -> torch.Tensor:
    """int64 [B] per-request Philox keys when requests bring no seed: the server's seed in the low word, the
    request's pool row in the high word, so concurrent requests never share a stream (the step, the round
    counter, separates a row's successive owners)."""
    return (rows.to(torch.int64) << 32) | (int(server_seed) & 0xFFFFFFFF)
