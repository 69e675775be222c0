"""The oracle: DDTree exactly as the paper's reference code defines it, for one request, in numpy.

Every other backend (C++ CPU, CUDA) must reproduce these arrays bit for bit on the same (lp, ids).
Path weights are Python floats (binary64) combined in the reference's order, and the heap is Python's
`heapq` over (-logw, ranks tuple), which is what makes ties deterministic: equal weights fall back to the
ranks tuple compared lexicographically, a shorter tuple (a prefix) winning.
"""
from __future__ import annotations

import heapq

import numpy as np

from . import flags as F
from .sizes import verify_width


def _empty_tree(n: int, root_token: int, seq_len: int) -> dict:
    mask = np.eye(n, dtype=bool)
    return {
        "num_nodes": 1,
        "tokens": np.zeros(n, np.int64),
        "parents": np.full(n, -1, np.int32),
        "depths": np.zeros(n, np.int32),
        "ranks": np.full(n, -1, np.int32),
        "logw": np.concatenate([[0.0], np.full(n - 1, -np.inf)]),
        "positions": np.full(n, seq_len, np.int64),
        "retrive_index": np.arange(n, dtype=np.int64),
        "retrive_next_token": np.full(n, -1, np.int64),
        "retrive_next_sibling": np.full(n, -1, np.int64),
        "tree_mask": mask,
        "flags": F.OK,
        "_root_token": root_token,
    }


def build_tree_reference(lp, ids, budget: int, *, root_token: int = 0, seq_len: int = 0,
                         request_index: int = 0, chain_pops: int = 0) -> dict:
    """Best-first DDTree build for one request.

    lp: float32 [L, k] log-probs, each row sorted descending (ties by token id ascending);
    ids: int [L, k] token ids. Returns a dict with every TreeBatch field for this request (n = budget+1
    slots; `retrive_index` is offset by request_index * n like SGLang's).

    chain_pops (the chain-anchored tree): the first m = min(chain_pops, budget, L) pops are forced to be the
    drafter's greedy chain — the rank-0 node at depth 1, 2, … m, so chain nodes take indices 1…m — each
    pushing its sibling and first child exactly as any pop does; then pops continue best-first with the same
    keys and tie order. 0 is the paper's tree. The chain is always a path of the tree, so the tree accepts
    at least what the chain of depth m accepts.
    """
    lp = np.asarray(lp, dtype=np.float32)
    ids = np.asarray(ids, dtype=np.int64)
    if lp.ndim != 2 or ids.shape != lp.shape:
        raise ValueError(f"lp and ids must both be [L, k]; got {lp.shape} and {ids.shape}")
    # one row per depth: every node's children read the same row (the row index of every node is 0)
    return _best_first(lp[:, None, :], ids[:, None, :], None, budget, root_token, seq_len, request_index,
                       chain_pops)


def lattice_rows_reference(scores, temperature: float = 0.0):
    """Stage 1 of the lattice tree (docs/DESIGN.md §3.10) for one request: each row's law and its sort.

    scores: [L, K, K] (row (e, p): the selector's score of every candidate c of slot e after candidate p of
    slot e − 1, or after the anchor for e = 0), read as float32; temperature: the request's, as float32, 0 for a
    greedy request, whose keys take the drafter's own law (T = 1). Returns (lp float32 [L, K, K], order int32
    [L, K, K]): order[e, p] lists the candidate indices by score descending, ties by candidate index ascending
    (−0.0 ties +0.0), and lp[e, p, r] = float32(z − logsumexp(z)) at candidate order[e, p, r] with
    z = float64(score) / float64(T), the log-sum-exp taken as m + log Σ exp(z − m), m the row's max. A masked
    (−inf) score has lp −inf and a fully masked row is −inf throughout; a row holding a NaN or +inf score has
    no law: its lp is NaN (the builder flags the request) and its order the identity.
    """
    s = np.asarray(scores, dtype=np.float32)
    if s.ndim != 3 or s.shape[1] != s.shape[2]:
        raise ValueError(f"scores must be [L, K, K], got {s.shape}")
    t = np.float32(temperature)
    if not (np.isfinite(t) and t >= 0):
        raise ValueError(f"temperature must be a finite value >= 0, got {temperature}")
    t = np.float64(t) if t > 0 else 1.0
    L, K, _ = s.shape
    key = s.astype(np.float64) + 0.0                        # -0.0 + 0.0 = +0.0: signed zeros tie
    order = np.argsort(-key, axis=-1, kind="stable").astype(np.int32)
    z = key / t
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = z.max(axis=-1, keepdims=True)
        m = np.where(np.isneginf(m), 0.0, m)               # a fully masked row: every exp is 0, lse −inf
        lse = m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
        lp = np.where(np.isneginf(z), -np.inf, z - lse).astype(np.float32)
    bad = (np.isnan(s) | np.isposinf(s)).any(axis=-1)
    lp[bad] = np.nan
    order[bad] = np.arange(K, dtype=np.int32)
    return np.take_along_axis(lp, order, axis=-1), order


def build_lattice_tree_reference(lp, order, cand, budget: int, *, root_token: int = 0, seq_len: int = 0,
                                 request_index: int = 0, chain_pops: int = 0) -> dict:
    """Best-first tree over a selector's lattice (docs/DESIGN.md §3.10) for one request.

    lp float32 [L, K, K] and order int [L, K, K] as lattice_rows_reference gives them (row (e, p) sorted
    descending, order[e, p, r] the candidate index of rank r); cand int [L, K] the candidate token ids of each
    slot. A node is a path of candidate indices; the root's children read row 0 of slot 0 (the anchor is every
    row's predecessor there), a node of depth d with candidate index c reads row (d, c) for its children. Its
    token is cand[d − 1, c], its rank its position in its parent's row, its weight the float64 sum of the
    conditional log-probs along its path: §3.2's heap, keys and tie order (the ranks tuple), the sibling push
    reading the parent's own row, the chain anchor as chain_pops (the chain is the rank-0 walk, the selector's
    argmax path). A row whose order leaves [0, K) is not a sorted row: UNSORTED_INPUT, like a rising row.
    """
    lp = np.asarray(lp, dtype=np.float32)
    order = np.asarray(order, dtype=np.int64)
    cand = np.asarray(cand, dtype=np.int64)
    if lp.ndim != 3 or lp.shape[1] != lp.shape[2] or order.shape != lp.shape or cand.shape != lp.shape[:2]:
        raise ValueError(f"lp and order must be [L, K, K] and cand [L, K]; got {lp.shape}, {order.shape} "
                         f"and {cand.shape}")
    L, K = cand.shape
    in_range = ((order >= 0) & (order < K)).all()
    order = np.clip(order, 0, max(K - 1, 0))
    tokens = np.take_along_axis(np.broadcast_to(cand[:, None, :], lp.shape), order, axis=-1)
    return _best_first(lp, tokens, order, budget, root_token, seq_len, request_index, chain_pops,
                       F.OK if in_range else F.UNSORTED_INPUT)


def _best_first(lp, ids, child_rows, budget: int, root_token: int, seq_len: int, request_index: int,
                chain_pops: int, input_flags: int = F.OK) -> dict:
    """The best-first build over rows: lp float32 [L, R, k] (row (d − 1, q) holds the children of a depth-d − 1
    node whose row index is q, sorted descending), ids [L, R, k] their tokens, child_rows [L, R, k] the row
    index of each such child (None: every row index is 0, R = 1). The root's row index is 0. input_flags: what
    the caller found wrong with the input (the tree is then the root alone)."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if chain_pops < 0:
        raise ValueError(f"chain_pops must be >= 0, got {chain_pops}")
    L, _, k = lp.shape
    forced = min(chain_pops, budget, L)
    n = verify_width(budget)
    out = _empty_tree(n, root_token, seq_len)
    out.pop("_root_token")
    out["tokens"][0] = root_token
    out["retrive_index"] += request_index * n
    out["flags"] |= input_flags
    # NaN / +inf: no distribution, the request is flagged; -inf is a masked token (grammar, banned ids) that
    # is simply never emitted. A row that is not sorted descending breaks best-first: flagged too.
    if np.isnan(lp).any() or np.isposinf(lp).any():
        out["flags"] |= F.NONFINITE_INPUT
    if k > 1 and (lp[..., 1:] > lp[..., :-1]).any():
        out["flags"] |= F.UNSORTED_INPUT
    if out["flags"]:
        return out

    tokens, parents, depths = out["tokens"], out["parents"], out["depths"]
    ranks, logws = out["ranks"], out["logw"]
    rows = np.zeros(n, np.int64)  # each node's row index: where its children are read at the next depth
    heap: list = []
    if L > 0 and k > 0 and budget > 0:
        w0 = float(lp[0, 0, 0])
        heap.append((-w0, (0,), 0, 1, 0, w0))
    count = 0
    while heap and count < budget:
        if count < forced:  # the chain node of depth count + 1: the rank-0 child of chain node `count`
            j = next(j for j, e in enumerate(heap) if e[1] == (0,) * (count + 1))
            if heap[j][-1] == -np.inf:  # a fully masked depth ends the chain; best-first goes on
                forced = count
        if count < forced:
            _, rtuple, parent, depth, rank, logw = heap.pop(j)
            heapq.heapify(heap)
        else:
            if heap[0][-1] == -np.inf:  # only masked candidates are left
                break
            _, rtuple, parent, depth, rank, logw = heapq.heappop(heap)
        count += 1
        i = count
        row = lp[depth - 1, rows[parent]]
        tokens[i] = ids[depth - 1, rows[parent], rank]
        rows[i] = 0 if child_rows is None else child_rows[depth - 1, rows[parent], rank]
        parents[i] = parent
        depths[i] = depth
        ranks[i] = rank
        logws[i] = logw
        if rank + 1 < k:
            sib = logw - float(row[rank]) + float(row[rank + 1])
            heapq.heappush(heap, (-sib, rtuple[:-1] + (rank + 1,), parent, depth, rank + 1, sib))
        if depth < L:
            child = logw + float(lp[depth, rows[i], 0])
            heapq.heappush(heap, (-child, rtuple + (0,), i, depth + 1, 0, child))
    if count < budget:
        out["flags"] |= F.HEAP_EXHAUSTED
    out["num_nodes"] = count + 1
    out["positions"][:] = seq_len + depths

    # Visibility exactly as the reference builds it: a node's row is its parent's row plus itself.
    mask = out["tree_mask"]
    for i in range(1, count + 1):
        mask[i, :i] = mask[parents[i], :i]
        mask[i, i] = True

    # SGLang's linked-list form: first child (lowest index), then siblings in increasing index order.
    nxt, sib_link = out["retrive_next_token"], out["retrive_next_sibling"]
    last_child = np.full(n, -1, np.int64)
    for i in range(1, count + 1):
        p = parents[i]
        if nxt[p] == -1:
            nxt[p] = i
        else:
            sib_link[last_child[p]] = i
        last_child[p] = i
    return out


def walk_reference(tokens, next_token, next_sibling, num_nodes: int, target, depth_limit: int):
    """Greedy walk for one request over SGLang's child/sibling links.

    From the root, descend to the child whose token equals the target token at the current node (the
    first such child in index order), until none matches. Links must point strictly forward (a child
    after its parent, a sibling after the previous one) and inside [1, num_nodes); anything else — and a
    path longer than depth_limit — sets MALFORMED_TREE and stops the walk, so a cyclic or corrupt tree
    terminates after at most n link reads. A bonus of −1 (the target gave the last accepted node no token,
    sampling.node_tokens) sets NONFINITE_TARGET. Returns (accepted node indices incl. root, bonus, flags).
    """
    n = len(tokens)
    flags = F.OK
    if not 1 <= num_nodes <= n:
        flags |= F.MALFORMED_TREE
        num_nodes = min(max(int(num_nodes), 1), n)
    accepted = [0]
    cur = 0
    steps = 0
    while True:
        matched = -1
        prev = cur
        c = int(next_token[cur])
        while c != -1:
            steps += 1
            if not (prev < c < num_nodes) or steps > n:
                flags |= F.MALFORMED_TREE
                c = -2
                break
            if int(tokens[c]) == int(target[cur]):
                matched = c
                break
            prev = c
            c = int(next_sibling[c])
        if c == -2 or matched == -1:
            break
        if len(accepted) == depth_limit + 1:
            flags |= F.MALFORMED_TREE
            break
        accepted.append(matched)
        cur = matched
    if int(target[cur]) < 0:
        flags |= F.NONFINITE_TARGET
    return accepted, int(target[cur]), flags


def sample_reference(logits, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Per-node target tokens as the reference draws them: argmax (first index) when T ~ 0, else one
    independent multinomial draw per node from softmax(logits / T), in float64."""
    x = np.asarray(logits, dtype=np.float64)
    if temperature < 1e-5:
        return x.argmax(axis=-1)
    z = x / temperature
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    flat = p.reshape(-1, p.shape[-1])
    out = np.array([rng.choice(flat.shape[1], p=row) for row in flat], dtype=np.int64)
    return out.reshape(p.shape[:-1])


def chain_rejection_reference(p, q, drafted, u, noise) -> tuple[int, int]:
    """Speculative sampling of one drafted path, one request, float64 (Leviathan et al.'s rule; SGLang's chain
    verify at thresholds 1, which its DFLASH runs on a DFlash2 selector's walk).

    p [L+1, V]: the target's law at the path's nodes (node i: after the root and drafted[:i]); q [L, V]: the law
    drafted[i] was drawn from; u [L]: uniforms in (0, 1); noise [L+1, V]: Gumbel noise, row i for a draw at node
    i. drafted[i] is accepted iff u[i]·q[i, x] < p[i, x] (x = drafted[i]: probability min(1, p/q)), in order,
    up to the first rejection; at a rejection at node i the bonus is drawn from (p[i] − q[i])⁺, after L
    acceptances from p[L], as argmax(log r + noise[i]) (first index). Returns (accepted count a, bonus): the
    emitted tokens drafted[:a] + [bonus] are an exact draw from the target's law whatever q is."""
    p, q, u, noise = (np.asarray(a, dtype=np.float64) for a in (p, q, u, noise))
    L, a = len(drafted), 0
    while a < L and u[a] * q[a, int(drafted[a])] < p[a, int(drafted[a])]:
        a += 1
    r = np.maximum(p[a] - q[a], 0.0) if a < L else p[a]
    if not r.sum() > 0:  # p == q up to rounding: no residual mass (a rejection there has probability ~0)
        r = p[a]
    with np.errstate(divide="ignore"):
        return a, int(np.argmax(np.log(r) + noise[a]))


def node_rejection_reference(p, q, cand, children, u, noise) -> int:
    """Recursive rejection sampling at one node of a drawn tree, one request, float64 (docs/DESIGN.md §3.12).

    p [V]: the target's law at the node; q [K]: the law over the candidate tokens cand [K] that the node's
    children were drawn from, without replacement; children: their tokens in draw order (each in cand); u
    [len(children)]: uniforms in (0, 1); noise [V]: Gumbel noise. With p_1 = p, q_1 = q, child i (x = children[i])
    is skipped when q_i has no mass left, else accepted iff u[i]·q_i(x) < p_i(x); after a rejection
    p_{i+1} = (p_i − q_i)⁺ and q_{i+1} = q_i without x, each renormalised. A residual with no mass (p_i = q_i up to
    rounding: a rejection there has probability ~0) accepts no later child and the token is drawn from p. Returns
    the accepted child's token, or argmax(log p_{m+1} + noise) (first index): an exact draw from p whatever q is."""
    p0 = np.asarray(p, dtype=np.float64)
    pi = p0 / p0.sum()
    qv = np.zeros(len(p0))
    qv[np.asarray(cand, dtype=np.int64)] = np.asarray(q, dtype=np.float64)
    for i, x in enumerate(int(c) for c in children):
        mass = qv.sum()
        if not mass > 0 or pi is None:
            continue
        qi = qv / mass
        if u[i] * qi[x] < pi[x]:
            return x
        r = np.maximum(pi - qi, 0.0)
        pi = r / r.sum() if r.sum() > 0 else None
        qv[x] = 0.0
    with np.errstate(divide="ignore"):
        return int(np.argmax(np.log(p0 if pi is None else pi) + np.asarray(noise, dtype=np.float64)))


def kept_ranks(ps, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """bool per rank of probabilities ps sorted descending (ties by lower token id): the ranks the plain server's
    sampler keeps — rank r < top_k (top_k <= 0 keeps every rank), the mass ranked before r <= top_p, p_r >=
    min_p · p_0, and p_r > 0. Every condition holds on a prefix of the ranks, so the kept set is one too."""
    ps = np.asarray(ps, dtype=np.float64)
    rank = np.arange(len(ps))
    return ((ps > 0) & ((rank < top_k) if top_k > 0 else True) & (np.cumsum(ps) - ps <= top_p)
            & (ps >= ps[0] * min_p))


def filtered_law(logits, temperature: float, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """The distribution the plain server samples one next token from (SGLang's pytorch sampler), float64.

    p = softmax(logits / T); tokens ranked by p descending, ties by lower token id; the ranks `kept_ranks`
    keeps, their p renormalised. Every tree node is sampled from this law of its own (penalised) logits, so
    the walk stays exact ancestral sampling of the filtered target.
    """
    z = np.asarray(logits, dtype=np.float64) / float(temperature)
    z = z - z.max()
    p = np.exp(z)
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    ps = p[order]
    keep = kept_ranks(ps, top_k, top_p, min_p)
    out = np.zeros_like(p)
    out[order[keep]] = ps[keep]
    return out / out.sum()


def law_keys_reference(logits, k: int, scale: float, law=None) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1 of one request's draft row under the request's law (docs/DESIGN.md §3.11): (lp float64 [k], ids
    int64 [k]), the keys the tree ranks and predicts by.

    logits: the drafter's row [V] (upcast to float32). scale: the row's positive multiplier — 1 / (T · c_d) for a
    sampled request (its temperature T, the sampling calibration c_d of the row's depth), 1 / c_d for a greedy one
    (the greedy calibration; 1 uncalibrated). law: None (a greedy request: the scaled draft as it is) or
    (top_k, top_p, min_p), the request's filters.
    - Candidates: the k largest logits x in the canonical order (value desc, id asc, §3.1). A positive scale
      never reorders them; where it rounds two of them to one value, x's order stands.
    - z = scale ⊗ x (a float32 product per logit); lp_r = z_r − logsumexp(z), the normaliser over the whole row.
    - Under a law, p_r = exp(lp_r) over the candidates and kept = kept_ranks(p, top_k, top_p, min_p), rank 0
      always kept. If the kept set ends inside the candidates (rank k − 1 dropped), it is the whole kept set:
      N = Σ_kept p_r, the filtered law's exact mass, and the keys are lp_r − log N, −inf where dropped. Otherwise
      the kept set may reach past the k candidates, whose mass stage 1 does not read: N = 1, the keys are lp_r
      (the filtered law's mass is then in [Σ_{r<k} p_r, 1], and above top_p under top-p alone).
    """
    x = np.asarray(logits, dtype=np.float32)
    ids = np.lexsort((np.arange(len(x)), -x))[:k]
    z = (x * np.float32(scale)).astype(np.float64)
    m = z.max()
    lp = z[ids] - (m + np.log(np.exp(z - m).sum()))
    if law is None:
        return lp, ids.astype(np.int64)
    p = np.exp(lp)
    keep = kept_ranks(p, *law)
    keep[0] = True
    if keep[-1]:
        return lp, ids.astype(np.int64)
    return np.where(keep, lp - np.log(p[keep].sum()), -np.inf), ids.astype(np.int64)


def penalized_logits(logits, outputs, *, frequency: float = 0.0, presence: float = 0.0, repetition: float = 1.0,
                     min_new_tokens: int = 0, stop_tokens=()) -> np.ndarray:
    """The logits the plain server samples the token after `outputs` (the tokens generated so far) from,
    for one request, as SGLang's penalizers define them (float64): additive penalties first (frequency ×
    count, presence once per generated token, stop tokens −inf while fewer than min_new_tokens tokens are
    out), then repetition scaling of every generated token's logit (÷ the penalty where positive, × where
    negative). A tree node's logits are penalised with `outputs` = the committed output + its path."""
    x = np.asarray(logits, dtype=np.float64).copy()
    counts = np.bincount(np.asarray(list(outputs), dtype=np.int64), minlength=len(x))[: len(x)].astype(np.float64)
    x -= frequency * counts + presence * (counts > 0)
    if len(outputs) < min_new_tokens:
        x[list(stop_tokens)] = -np.inf
    seen = counts > 0
    x[seen] = np.where(x[seen] < 0, x[seen] * repetition, x[seen] / repetition)
    return x
