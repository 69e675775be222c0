"""The path today's DDTree ports run, rebuilt here as the baseline every benchmark compares against.

Per request: torch top-k + logsumexp over the draft logits, a device→host copy, a Python `heapq`
best-first build that also fills a (1+n)² visibility matrix and per-node child dicts, then a Python dict
walk with the target's tokens. It follows the paper's reference procedure (docs/DESIGN.md §3); the same
(lp, ids) through it gives the oracle's tree, which `check_equivalence` asserts.
"""
from __future__ import annotations

import heapq
import time

import numpy as np
import torch


def ported_topk(draft_logits: torch.Tensor, budget: int):
    """[L, V] logits of one request → (lp, ids) on the logits' device, as the ports compute them."""
    x = draft_logits.float()
    k = min(budget, x.shape[-1])
    top, ids = torch.topk(x, k, dim=-1)
    return top - torch.logsumexp(x, dim=-1, keepdim=True), ids


def ported_build(lp: np.ndarray, ids: np.ndarray, budget: int):
    """Host part: heapq build + visibility matrix + child maps for one request (numpy inputs)."""
    L, k = lp.shape
    node_tokens, node_depths, parents = [], [], [-1]
    child_maps: list[dict] = [{}]
    visibility = np.zeros((budget + 1, budget + 1), dtype=bool)
    visibility[0, 0] = True
    heap = [(-float(lp[0, 0]), (0,), 0, 1, 0, float(lp[0, 0]))] if L > 0 and k > 0 and budget > 0 else []
    while heap and len(node_tokens) < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        token = int(ids[depth - 1, rank])
        i = len(node_tokens) + 1
        node_tokens.append(token)
        node_depths.append(depth)
        parents.append(parent)
        child_maps.append({})
        child_maps[parent][token] = i
        visibility[i, :i] = visibility[parent, :i]
        visibility[i, i] = True
        if rank + 1 < k:
            sib = logw - float(lp[depth - 1, rank]) + float(lp[depth - 1, rank + 1])
            heapq.heappush(heap, (-sib, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, sib))
        if depth < L:
            child = logw + float(lp[depth, 0])
            heapq.heappush(heap, (-child, ranks + (0,), i, depth + 1, 0, child))
    m = len(node_tokens) + 1
    return node_tokens, node_depths, parents, child_maps, visibility[:m, :m]


def ported_walk(child_maps: list[dict], posterior: list[int]):
    """Dict walk: descend while the target's token at the current node is one of its children."""
    accepted, cur = [0], 0
    token = posterior[0]
    while token in child_maps[cur]:
        cur = child_maps[cur][token]
        accepted.append(cur)
        token = posterior[cur]
    return accepted, token


def run_ported_round(draft_logits: torch.Tensor, budget: int, target_tokens: torch.Tensor) -> dict:
    """One decode round's tree stage for a batch, the ported way; returns per-stage seconds."""
    sync = torch.cuda.synchronize if draft_logits.is_cuda else (lambda: None)
    times = {"topk": 0.0, "copy": 0.0, "host_build": 0.0, "walk": 0.0}
    for b in range(draft_logits.shape[0]):
        t0 = time.perf_counter()
        lp, ids = ported_topk(draft_logits[b], budget)
        sync()
        t1 = time.perf_counter()
        lp_h, ids_h = lp.cpu().numpy(), ids.cpu().numpy()
        post = target_tokens[b].cpu().tolist()
        t2 = time.perf_counter()
        _, _, _, child_maps, _ = ported_build(lp_h, ids_h, budget)
        t3 = time.perf_counter()
        ported_walk(child_maps, post)
        t4 = time.perf_counter()
        times["topk"] += t1 - t0
        times["copy"] += t2 - t1
        times["host_build"] += t3 - t2
        times["walk"] += t4 - t3
    times["total"] = sum(times.values())
    return times
