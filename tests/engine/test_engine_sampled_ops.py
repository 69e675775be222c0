"""The sampled round's tail, op by op, on the CPU engine (issue: a sampled round as cheap as a greedy one).

Between the verify's logits and the commit (round.Round.run's 'sample' stage: adjust_logits, then the target
tokens), the served default's sampled round (the chain anchor, drawn children, T 0.6 with top-p 0.95: the law's
filter runs) may run no sort, argsort, top-k or cumsum over a row of the vocabulary, write nothing as wide as the
vocabulary (a scaled copy, a mask, a probability row), and at most OPS_PER_ROUND torch ops a round, views and
dtype no-ops included (every op is a launch on the GPU, and host time the round pays). Counted by a
TorchDispatchMode around Engine.generate. The code before the law rows failed all three: a stable sort of every
node's full row, [n, V] masks and copies, and 1,393 ops a round (the torch Philox of every node's bonus)."""
import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from sglang_ddtree.engine import engine as engine_mod

OPS_PER_ROUND = 40  # 35 today: two native ops (law_rows, drawn_targets), their argument views, the no-token marks
ROW_OPS = ("sort", "argsort", "topk", "cumsum", "softmax", "log_softmax", "logsumexp")


class SampleStageOps(TorchDispatchMode):
    """Every op dispatched while a round is in its 'sample' stage: (name, input shapes, output shapes, is_view)."""

    def __init__(self):
        super().__init__()
        self.stage, self.rounds, self.ops = None, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.stage == "sample":
            shapes = lambda x: [tuple(t.shape) for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]  # noqa: E731
            self.ops.append((str(func), shapes((args, kwargs)), shapes(out), bool(func.is_view)))
        return out


@pytest.fixture(scope="module")
def counted(engine):
    rec = SampleStageOps()
    mark = engine_mod._EngineBatch.mark

    def marking(self, stage):
        rec.rounds += stage == "sample"
        rec.stage = stage
        return mark(self, stage)

    with pytest.MonkeyPatch.context() as mp, torch.inference_mode():
        mp.setattr(engine_mod._EngineBatch, "mark", marking)
        with rec:
            engine.generate(["def fib(n):", "import os\n"], 24, anchor="chain", children="drawn", budget=15,
                            temperature=0.6, top_p=0.95, seed=[1, 2], paper=True)
    assert rec.rounds >= 2, "no sampled decode round ran"
    return rec, engine.target.config.vocab_size


def test_no_sort_or_scan_over_the_vocabulary(counted):
    rec, V = counted
    bad = [(name, ins) for name, ins, _, _ in rec.ops
           if any(r in name for r in ROW_OPS) and any(s and s[-1] == V for s in ins)]
    assert not bad, bad[:5]


def test_nothing_as_wide_as_the_vocabulary_is_written(counted):
    rec, V = counted
    wide = [(name, outs) for name, _, outs, view in rec.ops if not view and any(s and s[-1] == V for s in outs)]
    assert not wide, wide[:5]


def test_the_tail_stays_within_its_op_budget(counted):
    rec, _ = counted
    per_round = len(rec.ops) / rec.rounds
    top = collections.Counter(name for name, *_ in rec.ops).most_common(8)
    assert per_round <= OPS_PER_ROUND, (per_round, top)
    assert any("law_rows" in name for name, *_ in rec.ops) and any("drawn_targets" in name for name, *_ in rec.ops)
