"""Small runs of every tree-stage kernel, for compute-sanitizer (memcheck, racecheck, ...).

Covers the split top-k path (several CTAs per row + last-CTA merge), the tie fallback, unaligned rows,
the builder with exact ties, exhaustion and a non-finite request, the lattice builder (shared-memory and
global-memory tables, an order entry that names no candidate), the walk on malformed links and both sampler
modes. Run: compute-sanitizer --tool memcheck python scripts/gpu/sanitize_tree.py
"""
import torch

from sglang_ddtree import _build, ops as _ops  # noqa: F401  (ops declares the schemas)

_build.load_cuda()
ops = torch.ops.sglang_ddtree
dev = "cuda"
torch.manual_seed(0)

# top-k + LSE: split rows (bf16, V=151936), equal rows (fallback path), unaligned fp32, fp16
for x, k in [((torch.randn(2, 151936, device=dev) * 3).bfloat16(), 64),
             (torch.zeros(1, 40000, device=dev, dtype=torch.bfloat16), 100),
             (torch.randn(3, 1001, device=dev), 7),
             (torch.randn(4, 5000, device=dev).half(), 512)]:
    ops.topk_lse(x, k)

# build: ties, a non-finite request, exhaustion (k=2, L=2), large budget
row = torch.log_softmax(torch.tensor([2.0, 2.0, 1.0, 1.0, 0.0], device=dev), -1)
lp = row.expand(3, 6, 5).contiguous().clone()
lp[1, 2, 2] = float("nan")
ids = torch.arange(5, device=dev).expand(3, 6, 5).contiguous()
z = torch.zeros(3, dtype=torch.int64, device=dev)
outs = ops.build_tree_from_topk(lp, ids, z, z, 40)
ops.build_tree_from_topk(lp[:, :2, :2].contiguous(), ids[:, :2, :2].contiguous(), z, z, 40)
lp2, ids2 = ops.topk_lse((torch.randn(4 * 16, 3000, device=dev) * 3).bfloat16(), 512)
z4 = torch.zeros(4, dtype=torch.int64, device=dev)
ops.build_tree_from_topk(lp2.reshape(4, 16, 512), ids2.reshape(4, 16, 512), z4, z4, 512)

# the lattice builder: stage 1 on the device, a table in shared memory (K = 8) and one read from global memory
# (K = 64), anchored, a masked row, and an order entry that names no candidate (flagged, never used to index)
from sglang_ddtree.lattice import lattice_logprobs  # noqa: E402

for K, budget in ((8, 63), (64, 255)):
    scores = (torch.randn(3, 15, K, K, device=dev) * 3).bfloat16().float()
    scores[0, 4, 1] = float("-inf")
    lpl, order = lattice_logprobs(scores, torch.tensor([0.0, 1.0, 0.5], device=dev))
    order[2, 3, 1, 0] = K
    cand = torch.randint(0, 5000, (3, 15, K), device=dev)
    ops.build_tree_from_lattice(lpl, order, cand, z, z, budget, 15)
    ops.build_tree_from_lattice(lpl, order, cand, z, z, budget, 0)

# accept: a real tree and garbage links
n = 41
target = torch.randint(0, 5, (3, n), device=dev)
ops.accept_tree(outs[1], outs[8], outs[9], outs[0], target, 6)
bad = torch.randint(-3, n + 3, (3, n), device=dev)
ops.accept_tree(outs[1], bad, bad.flip(1).contiguous(), torch.tensor([0, n, 99], dtype=torch.int32, device=dev),
                target, 6)

# sampling
logits = torch.randn(8, 3001, device=dev).bfloat16()
s = torch.arange(8, device=dev)
ops.sample_rows(logits, 0.0, s, s, s)
ops.sample_rows(logits, 0.7, s, s, s)
torch.cuda.synchronize()
print("sanitize_tree: all kernels ran")
