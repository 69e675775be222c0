"""Per-call overhead of the public build API against the bare op: one request, budget 64, depth 15, k 64,
CPU, one thread; best of 7 x 20,000 calls. Prints one JSON line."""
import time, torch, json, sys
torch.set_num_threads(1)
from sglang_ddtree import build_tree_from_topk, ops
lp = torch.randn(1, 15, 64).log_softmax(-1).sort(-1, descending=True).values.float()
ids = torch.arange(64).expand(1, 15, 64).contiguous()
z = torch.zeros(1, dtype=torch.long)
op = ops.op("build_tree_from_topk")
def t(f, n=20000):
    for _ in range(500): f()
    best = 1e9
    for rep in range(7):
        t0=time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter()-t0)/n*1e6)
    return round(best, 2)
print(json.dumps({"api_us": t(lambda: build_tree_from_topk(lp, ids, 64, backend="cpu")), "op_us": t(lambda: op(lp, ids, z, z, 64))}))
