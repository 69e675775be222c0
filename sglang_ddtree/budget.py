"""Choosing the tree budget from the tree itself and a measured cost table.

Two facts make this cheap. (1) The builders pop in one fixed order, whatever the budget: the tree of budget b
is exactly the first b pops of any larger tree built from the same (lp, ids) (for the paper's tree and the
chain-anchored one; tests/core/test_budget.py checks it on every backend), so one build at the largest
candidate budget answers for every smaller one. (2) Node i's path weight exp(logw_i) is the drafter's
probability that the target's walk reaches it — greedy, or sampled under the request's own law, since a sampled
request's keys are the draft under that law (keys.py) — so the expected tokens a round commits with budget b
is 1 + Σ_{i ≤ b} exp(logw_i) (the bonus token plus every node reached) — exact if the drafter is calibrated
(sglang_ddtree/calibration.py), which is why the calibrated keys are the ones to rank and predict by.
The budget that maximises predicted tokens per unit time is argmax_b E_b / cost(batch, b + 1): `AutoWidth`,
the one chooser of the server and the engine (round.Round runs it).
"""
from __future__ import annotations

import collections
import statistics

import torch

from . import flags as F
from .ops import mask_words
from .rejection import rejection_targets
from .sampling import NodeLaw, node_tokens
from .sizes import budget_of, check_budget, verify_width
from .tree import TreeBatch


def expected_commit(tree: TreeBatch) -> torch.Tensor:
    """float64 [B, n]: column b is the predicted tokens a round commits with budget b (b = 0: the bonus only).
    Pads (logw −inf) add nothing, so an exhausted tree's prediction stops growing where its nodes end."""
    w = torch.exp(tree.logw[:, 1:])
    return torch.cat([torch.ones_like(tree.logw[:, :1]), 1.0 + torch.cumsum(w, dim=1)], dim=1)


def truncate(tree: TreeBatch, budget: int) -> TreeBatch:
    """The tree of a smaller budget from a larger one (fact (1)), on the device with no host read: equal
    field for field to building it afresh with that budget (tests/core/test_budget.py)."""
    n = verify_width(check_budget(budget, maximum=tree.budget))
    if n == tree.n:
        return tree
    B = tree.batch_size
    cut = lambda t: t[:, :n]
    link = lambda t: torch.where(t[:, :n] >= n, torch.full_like(t[:, :n], -1), t[:, :n])
    num = torch.clamp(tree.num_nodes, max=n)
    flags = torch.where(num < n, tree.flags | F.HEAP_EXHAUSTED, tree.flags & ~F.HEAP_EXHAUSTED)
    flags = torch.where((tree.flags & (F.NONFINITE_INPUT | F.UNSORTED_INPUT)) != 0, tree.flags, flags)
    words = mask_words(n)
    bits = tree.mask_bits[:, :n, :words].clone()
    if n % 32:  # clear the bits of dropped nodes in the last word (none are set: ancestors precede a node)
        bits[:, :, -1] &= (1 << (n % 32)) - 1
    return TreeBatch(num_nodes=num, tokens=cut(tree.tokens), parents=cut(tree.parents), depths=cut(tree.depths),
                     ranks=cut(tree.ranks), logw=cut(tree.logw), positions=cut(tree.positions),
                     retrive_index=(torch.arange(B, device=tree.tokens.device)[:, None] * n
                                    + torch.arange(n, device=tree.tokens.device)[None, :]).to(tree.retrive_index.dtype),
                     retrive_next_token=link(tree.retrive_next_token),
                     retrive_next_sibling=link(tree.retrive_next_sibling),
                     tree_mask=tree.tree_mask[:, :n, :n].contiguous(), mask_bits=bits, flags=flags.to(tree.flags.dtype),
                     budget=budget, depth_limit=tree.depth_limit, topk=min(tree.topk, max(budget, 1)))


class LaggedValue:
    """A device tensor an earlier round made, on the host without a sync.

    A server launches round r before it has read round r−1's results (overlap scheduling), so a value made
    from round r−1's tree cannot steer round r without a sync. `publish` starts a non-blocking copy of the
    device tensor into pinned memory and records an event; `current` returns the newest publication whose
    copy has landed (event queried, never waited on), else the last value it returned — one or two rounds
    stale, never a stall. On the CPU the copy is synchronous and the newest value is always current."""

    def __init__(self, initial: torch.Tensor, device):
        self.device = torch.device(device)
        self.value, self._seen = initial.clone(), 0
        cuda = self.device.type == "cuda"
        self._bufs = [torch.zeros(initial.shape, dtype=initial.dtype, pin_memory=cuda) for _ in range(2)]
        self._pending = [None, None]  # (sequence number, event or None) per buffer
        self._seq = 0

    def publish(self, value: torch.Tensor) -> None:
        self._seq += 1
        i = self._seq % 2
        if self.device.type == "cuda":
            self._bufs[i].copy_(value, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            self._bufs[i].copy_(value)
            event = None
        self._pending[i] = (self._seq, event)

    def wait(self) -> None:
        """Block until every publication has landed (a host that reads the device each round anyway)."""
        for pending in self._pending:
            if pending is not None and pending[1] is not None:
                pending[1].synchronize()

    def landed(self) -> bool:
        """Whether any publication has landed yet (the initial value is not one)."""
        self.current()
        return self._seen > 0

    def current(self) -> torch.Tensor:
        best = None
        for i, pending in enumerate(self._pending):
            if pending is not None:
                seq, event = pending
                if seq > self._seen and (event is None or event.query()) and (best is None or seq > best[0]):
                    best = (seq, i)
        if best is not None:
            self._seen, self.value = best[0], self._bufs[best[1]].clone()
        return self.value


class AutoWidth:
    """The served `budget="auto"`: each round's verify width, chosen on the host with no sync.

    The candidates are verify widths with captured graphs, ascending; the first is the DFlash chain's (the
    drafter's block), used until a prediction has landed, so a round never verifies less than the chain.
    For round r the host takes argmax_w E_w / cost(bucket, w):
    - E_w: the predicted tokens a round commits at width w (`expected_commit` at budget w − 1, mean over the
      batch), published by an earlier round's tree through `LaggedValue` (one or two rounds stale: under
      overlap scheduling round r is launched before round r−1's tree can be read without a sync);
    - cost(bucket, w, c, law) = G(bucket, w) + A(bucket, w, c) + S(bucket, w, law) + H(bucket, law). G is the replay time of the round's CUDA
      graphs at width w in this graph batch bucket (draft graph + verify graph), measured at start-up: what
      differs between widths is GPU work, and the graphs hold nearly all of it. The graphs are replayed at
      prefix length 1, so A adds what the verify's attention costs over a prefix of c tokens (the batch's mean)
      beyond that, from start-up timings of the verify attention at a few prefix lengths, interpolated
      linearly in c: a wide tree's attention grows with the context, so at long context the chain's width
      can be the best even where the tree is accepted. S is the sampled tail's GPU time at width w (law_rows and
      the drawn tree's walk: they read every node's logits, so they grow with the width), from start-up timings,
      in a round with a sampled request; 0 in an all-greedy one. H is what a round costs beyond its graphs — host
      work, eager kernels, scheduling — which is about the same at every width: the median, over the last
      `window` clean periods between round launches of the bucket and the law (all greedy, or sampled: a sampled
      round launches more), of the period minus its round's G + A + S, whatever width ran.
      One H per bucket, not a cost per width: learning each width's period on its own (an earlier design) let
      host noise and drift, sampled at different times for different widths, pick the width — on a host-bound
      model every width costs the same, and the choice wandered below the best fixed budget
      (docs/benchmarks/sglang-h200-2026-12-04-auto.md). The median also shrugs off a stalled round (the whole
      server paused).
    Rounds separated by another forward (a prefill, `interrupt`) or by a change of bucket give no period.
    first: what the first round verifies before any prediction has landed: 'chain' (the narrowest width: the
    server, which never waits on the device) or 'own' (`choose` answers None; the round then `wait`s for its
    own tree's prediction and chooses again: the engine, which reads the device every round anyway)."""

    def __init__(self, widths, buckets=(), prior=None, device="cpu", *, attention=None, window: int = 64, clock=None,
                 first: str = "chain"):
        import time

        ws = sorted({int(w) for w in widths})
        if not ws or ws[0] < 1:
            raise ValueError(f"widths must be positive verify widths, got {widths!r}")
        if int(window) < 1:
            raise ValueError(f"window must be >= 1 periods, got {window!r}")
        if first not in ("chain", "own"):
            raise ValueError(f"first must be 'chain' or 'own', got {first!r}")
        self.widths, self.first = ws, first
        self.set_costs(buckets, prior, attention)
        self.window = int(window)
        self.clock = clock or time.perf_counter
        self._expected = LaggedValue(torch.zeros(len(ws), dtype=torch.float32), device)
        self._cols = torch.tensor([budget_of(w) for w in ws], dtype=torch.int64, device=device)
        self._beyond = {}     # (bucket, sampled) -> deque of the last `window` (period − G − A − S) samples, seconds
        self._last = None     # (time, bucket, width, context, sampled) of the previous round's launch
        self.round = 0
        self.rounds = {}      # (bucket, width) -> rounds run (what a user sees in the log)

    def set_costs(self, buckets, prior, attention=None, tail=None) -> None:
        """The graph batch buckets, the start-up graph table G {(bucket, width): seconds} (once graphs exist), the
        verify attention's table A {(bucket, width): [(prefix tokens, seconds a round beyond prefix 1)]} and the
        sampled tail's S {(bucket, width): seconds}."""
        prior = {(int(b), int(w)): float(t) for (b, w), t in (prior or {}).items()}
        tail = {(int(b), int(w)): float(t) for (b, w), t in (tail or {}).items()}
        if any(t < 0 for t in (*prior.values(), *tail.values())):
            raise ValueError("prior and tail costs must be >= 0 seconds")
        self.tail = tail
        attention = {(int(b), int(w)): sorted((int(c), float(t)) for c, t in pts)
                     for (b, w), pts in (attention or {}).items() if pts}
        if any(c < 1 for pts in attention.values() for c, _ in pts):
            raise ValueError("attention costs are keyed by prefix lengths >= 1")
        self.buckets, self.prior, self.attention = sorted({int(b) for b in buckets}), prior, attention

    def bucket(self, bs: int) -> int:
        """The graph batch bucket a batch of bs requests replays in (bs itself where none is captured)."""
        for b in self.buckets:
            if b >= bs:
                return b
        return int(bs) if not self.buckets else self.buckets[-1]

    def graph_cost(self, bucket: int, width: int) -> float:
        """G: the start-up graph time; a width the table lacks counts as the dearest width timed in its bucket
        (never cheaper than a measured one), 0 where none was timed."""
        g = self.prior.get((bucket, width))
        if g is None:
            g = max((t for (b, _), t in self.prior.items() if b == bucket), default=0.0)
        return g

    def attention_cost(self, bucket: int, width: int, context: float) -> float:
        """A: the verify attention over a mean prefix of `context` tokens beyond its cost at prefix 1, linear in
        the context between the timed lengths (and past the last, along its last segment; 0 at prefix 1)."""
        pts = self.attention.get((bucket, width))
        if not pts or context <= 1:
            return 0.0
        pts = [(1, 0.0)] + [p for p in pts if p[0] > 1]
        for (c0, t0), (c1, t1) in zip(pts, pts[1:]):
            if context <= c1:
                return max(t0 + (t1 - t0) * (context - c0) / (c1 - c0), 0.0)
        (c0, t0), (c1, t1) = pts[-2], pts[-1]
        return max(t1 + (t1 - t0) * (context - c1) / (c1 - c0), 0.0)

    def tail_cost(self, bucket: int, width: int, sampled: bool) -> float:
        """S: the sampled tail's start-up time at this width (0 in an all-greedy round, or where none was timed)."""
        return self.tail.get((bucket, width), 0.0) if sampled else 0.0

    def beyond_graphs(self, bucket: int, sampled: bool = False) -> float:
        """H: the median time a round of this bucket and law spent beyond its graphs (the other law's until this
        one's is measured; 0 until either is)."""
        d = self._beyond.get((bucket, sampled)) or self._beyond.get((bucket, not sampled))
        return statistics.median(d) if d else 0.0

    def gpu_cost(self, bucket: int, width: int, context: float = 1, sampled: bool = False) -> float:
        """G + A + S: what the start-up tables price at this width."""
        return (self.graph_cost(bucket, width) + self.attention_cost(bucket, width, context)
                + self.tail_cost(bucket, width, sampled))

    def cost(self, bucket: int, width: int, context: float = 1, sampled: bool = False) -> float:
        return self.gpu_cost(bucket, width, context, sampled) + self.beyond_graphs(bucket, sampled)

    def choose(self, bs: int, context: float = 1, sampled: bool = False) -> int:
        """The width of the round being launched now (call once per decode round, at its launch); context: the
        batch's mean prefix length, as the host knows it; sampled: whether a request of the batch samples. None:
        nothing has landed and `first` is 'own'."""
        if self.first == "own" and not self._expected.landed():
            return None
        now, bucket = self.clock(), self.bucket(bs)
        self.round += 1
        if self._last is not None:
            t, b, w, c, s = self._last
            if b == bucket:  # the previous round's launch-to-launch period, in this bucket (priced at its own law)
                self._measure(b, w, c, s, now - t)
        if not self._expected.landed():
            width = self.widths[0]
        else:
            e = self._expected.current().tolist()
            h = self.beyond_graphs(bucket, sampled)
            score = lambda i: e[i] / max(self.gpu_cost(bucket, self.widths[i], context, sampled) + h, 1e-9)  # noqa: E731
            width = self.widths[max(range(len(self.widths)), key=score)]  # ties: the narrower width
        self._last = (now, bucket, width, context, sampled)
        self.rounds[(bucket, width)] = self.rounds.get((bucket, width), 0) + 1
        return width

    def _measure(self, bucket: int, width: int, context: float, sampled: bool, period: float) -> None:
        d = self._beyond.get((bucket, sampled))
        if d is None:
            d = self._beyond[(bucket, sampled)] = collections.deque(maxlen=self.window)
        d.append(max(period - self.gpu_cost(bucket, width, context, sampled), 0.0))

    def wait(self) -> None:
        """Block until the published predictions have landed (`first='own'`: the first round's own)."""
        self._expected.wait()

    def interrupt(self) -> None:
        """Another forward ran since the last decode round: the next interval is not a round's period."""
        self._last = None

    def predict(self, tree: TreeBatch) -> torch.Tensor:
        """float32 [B, K]: each request's predicted tokens at every candidate width, from the round's largest
        tree (device ops only: the draft CUDA graph runs it)."""
        return expected_commit(tree).index_select(1, self._cols.to(tree.logw.device)).float()

    def publish(self, predicted: torch.Tensor) -> None:
        """predicted [B, K] (`predict` of this round's tree, real requests only): the batch mean goes to the
        host without a sync, for a later round's choice."""
        if predicted.dim() != 2 or predicted.shape[1] != len(self.widths):
            raise ValueError(f"predicted must be [B, {len(self.widths)}], got {tuple(predicted.shape)}")
        self._expected.publish(predicted.mean(0))

    def summary(self) -> dict:
        """Rounds run and the cost in use (ms; greedy, and sampled where a sampled round was measured) per bucket
        and width, for the server log."""
        out = {}
        for (b, w), n in sorted(self.rounds.items()):
            row = out.setdefault(b, {})[w] = {"rounds": n, "cost_ms": round(self.cost(b, w) * 1e3, 3)}
            if (b, True) in self._beyond:
                row["sampled_cost_ms"] = round(self.cost(b, w, sampled=True) * 1e3, 3)
        return out


def time_sampled_tail(round_ops, bs: int, width: int, vocab: int, depth: int, k: int, *, drawn: bool = True,
                      max_rows: int = 256, reps: int = 5) -> float:
    """Median seconds (CUDA events, after two warm runs) of a sampled round's sample step for bs requests at verify
    width `width` under a filtered law (T 0.6, top-p 0.95: the kept set's descent runs): the drawn tree's
    (rejection_targets: law_rows and the walk) or the independent draws' (node_tokens), on random float32 logits of
    `vocab` tokens and a tree built from random keys of `depth` × `k`. Past max_rows rows the time is priced in
    proportion to the requests (each row and each request is one block's work), so start-up never holds a
    [bs, width, vocab] buffer of the largest bucket."""
    dev = round_ops.device
    b = max(1, min(int(bs), int(max_rows) // int(width)))
    g = torch.Generator(device=dev).manual_seed(0)
    lp = torch.log_softmax(torch.randn(b, depth, k, device=dev, generator=g), -1).sort(-1, descending=True).values
    ids = torch.randint(vocab, (b, depth, k), device=dev, generator=g)
    zeros = torch.zeros(b, dtype=torch.int64, device=dev)
    tree = round_ops.build(lp, ids, budget_of(width), zeros, zeros)
    logits = torch.randn(b, tree.n, vocab, device=dev, generator=g)
    full = lambda v, dt: torch.full((b,), v, dtype=dt, device=dev)  # noqa: E731
    law = NodeLaw(full(0.6, torch.float32), full(0, torch.int64), full(0.95, torch.float32), full(0.0, torch.float32))
    seed = torch.arange(b, dtype=torch.int64, device=dev)
    run = (lambda: rejection_targets(round_ops, logits, law, tree, (ids, torch.softmax(lp, -1)), seed, zeros)) \
        if drawn else (lambda: node_tokens(round_ops, logits, law, seed, zeros))
    times = []
    for i in range(reps + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times) * int(bs) / b
