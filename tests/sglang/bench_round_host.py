"""The decode round's host side on the CPU: what the server's round costs the host outside the model, through
the installed release's real adapter (the harness of test_sglang_decode_round.py: only the drafter's and target's
forwards, the drafter's KV writer and the KV pool are stand-ins, and they are timed out). Not collected by CI (a
benchmark, not a test): `pytest -q -s tests/sglang/bench_round_host.py` prints one JSON line — the median host
time of a round (µs, CPU tensors: a dispatch costs less than a CUDA launch) and the ops the round dispatches
outside the stand-ins, per stage. The served auto round at verify width 24 of a 32-node tree, 4 requests."""
import collections
import contextlib
import json
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import sglang_ddtree.sglang.decode_round as D

from test_sglang_decode_round import V, make_round, release  # noqa: F401  (release: the fixture)

STAND_INS = (("drafter", "forward"), ("sgl", "run_verify"), ("sgl", "prepare_verify"), ("sgl", "move_kv"),
             ("host", "_append_target_hidden_to_draft_kv_by_loc"), ("head", "build"))


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.stage, self.paused, self.ops = "before draft", 0, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused and func.overloadpacket.__name__ not in ("view", "slice", "select", "unsqueeze",
                                                                     "_local_scalar_dense"):
            self.ops[self.stage] += 1  # views and host reads of CPU scalars launch nothing on a GPU
        return func(*args, **(kwargs or {}))


def _one_round(release, stages=None):
    if stages is not None:
        stages.paused += 1  # not the set-up
    seq_lens = torch.tensor([20, 21, 22, 23])
    g = torch.Generator().manual_seed(3)
    prefix = [torch.randint(0, V - 1, (int(n),), generator=g).tolist() for n in seq_lens]
    rnd, world, host, _, batch = make_round(release, 0, 16, seq_lens, prefix, [0] * 15, True, auto_budgets=(15, 23, 31))
    rnd.verify_runners, rnd.auto.choose = {}, lambda bs, context=1: 24
    rnd.sgl.verify_with = contextlib.contextmanager(lambda runner: (yield))
    spent = [0.0]
    objs = {"drafter": host.draft_model_runner, "sgl": rnd.sgl, "host": host, "head": rnd.head}
    for owner, name in STAND_INS:
        fn = getattr(objs[owner], name)

        def timed(*a, _fn=fn, **k):
            t = time.perf_counter()
            if stages is not None:
                stages.paused += 1
            try:
                return _fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t
                if stages is not None:
                    stages.paused -= 1
        setattr(objs[owner], name, timed)
    mark = D._ServerRound.mark
    if stages is not None:  # count from the round's start, each op under the stage the round marked last
        D._ServerRound.mark = lambda self, stage: setattr(stages, "stage", stage)
        stages.paused -= 1
    t = time.perf_counter()
    try:
        res = rnd.decode(batch, None)
    finally:
        D._ServerRound.mark = mark
    elapsed = time.perf_counter() - t - spent[0]
    assert int(res.accept_lens.min()) >= 1  # the round ran to its result
    return elapsed


def test_round_host(release):
    times = [_one_round(release) for _ in range(80)][20:]
    with _Ops() as ops:
        _one_round(release, ops)
    print(json.dumps({"release": release.Adapter.RELEASE, "host_us_median": round(statistics.median(times) * 1e6, 1),
                      "host_us_p10_p90": [round(statistics.quantiles(times, n=10)[i] * 1e6, 1) for i in (0, 8)],
                      "ops_outside_the_model": sum(ops.ops.values()), "ops_by_stage": dict(ops.ops)}))
