"""The host time of writing the served verify's FlashInfer schedule once (flashinfer_graphs.Fa2Schedule.write: every
verify forward, and every draft forward with SGLANG_DDTREE_DRAFT_ATTENTION=ddtree), on the CPU, at Qwen3-8B heads
on an H200's 132 SMs. Not collected by CI (a benchmark): `pytest -q -s tests/attention/bench_fa2_schedule_host.py`
prints one JSON line, the median µs of a write and the ops it dispatches, per (batch, width)."""
import json
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from test_flashinfer_prefix_cpu import _schedule


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += func.overloadpacket.__name__ not in ("view", "slice", "select", "unsqueeze")
        return func(*args, **(kwargs or {}))


def test_schedule_write_host():
    out = {}
    for bs, n in ((1, 32), (16, 32)):
        _, sched = _schedule(bs, n, 32, 8, 128, 132, [300] * bs)
        lens = torch.full((bs,), 300)
        times = []
        for _ in range(300):
            t = time.perf_counter()
            sched.write(lens)
            times.append(time.perf_counter() - t)
        with _Count() as c:
            sched.write(lens)
        assert int(sched.chunk) >= 128  # the schedule was written
        out[f"bs{bs}_n{n}"] = {"host_us_median": round(statistics.median(times[50:]) * 1e6, 1), "ops": c.n}
    print(json.dumps(out))
