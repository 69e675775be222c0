"""Small native verify-attention runs for compute-sanitizer (memcheck / racecheck / synccheck).

Run from the repository root: compute-sanitizer --tool memcheck python tests/attention/attn_sanitize.py
Covers MLA and GQA, page sizes 1 and 64, an empty prefix, split chunks + combine, and the tail alone;
exits non-zero if any result is off the float32 reference.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import attn_cases as A  # noqa: E402
from sglang_ddtree.attention import make_problem, native, reference_tree_attention  # noqa: E402

bad = 0
for layout, heads, kvh, ps, lens, budget, splits in [("mla", 64, 1, 1, [100, 0], 24, 2),
                                                     ("mla", 16, 1, 64, [130], 40, None),
                                                     ("gqa", 32, 8, 64, [70, 0, 200], 40, 3),
                                                     ("gqa", 8, 2, 1, [33], 8, None)]:
    args, _ = A.make_case(layout, len(lens), budget, lens, page_size=ps, dtype=torch.bfloat16, device="cuda",
                          heads=heads, kv_heads=kvh, seed=budget)
    prob = make_problem(*args)
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
    for kw in ({"num_splits": splits}, {"with_prefix": False}):
        o, lse = native.attend(prob, **kw)
        torch.cuda.synchronize()
        if "with_prefix" in kw:
            continue
        err = max(A.rel_err(o, ref_o), A.rel_err(lse, ref_l))
        print(f"{layout} ps={ps} lens={lens} splits={splits}: rel err {err:.2e}")
        bad += err > 1e-2
sys.exit(1 if bad else 0)
