"""GPU tests of the kernel in SGLang's form (native.attend_ragged: ragged prefix slot lists, per-request
equal splits decided on the device): against the dense reference for bf16 and fp16, every GQA head dim,
int32 and int64 slot lists, many split counts, and under CUDA-graph replay with new lengths, slots and masks
written in place (what a served verify does every round). Outputs start over NaN-poisoned memory."""
import math
import os
import subprocess
import sys

import pytest
import torch

import attn_cases as A
from sglang_ddtree.attention import native, reference_tree_attention

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU by scripts/gpu_check.sh)")]

TOL = {torch.bfloat16: 1e-2, torch.float16: 4e-3}


def _ragged(args, index_dtype):
    """Page-table args of attn_cases -> (kv_indptr, kv_indices) over the same slots, flattened caches."""
    q, (kc, vc), table, lens, (kt, vt), mask, scale = args
    ps = kc.shape[1]
    slots = [table[b, torch.arange(int(L), device="cuda") // ps].to(torch.int64) * ps +
             torch.arange(int(L), device="cuda") % ps for b, L in enumerate(lens.tolist())]
    indptr = torch.zeros(len(slots) + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(lens.to(torch.int64), 0).to(torch.int32)
    indices = torch.cat(slots).to(index_dtype) if sum(map(len, slots)) else torch.zeros(1, dtype=index_dtype, device="cuda")
    flat = lambda c: c.reshape(-1, *c.shape[2:])
    return q, flat(kc), flat(vc), indptr, indices, kt, vt, mask, scale


CASES = [  # B, budget, prefix lengths, page size, Hq, Hkv, head dim
    (1, 15, [1000], 1, 32, 8, 128),
    (16, 15, [5, 2000, 0, 64, 65, 4096, 1, 300, 999, 17, 33, 128, 129, 7000, 63, 2], 1, 32, 8, 128),
    (4, 64, [3000, 0, 10, 8192], 16, 32, 8, 128),
    (3, 16, [100, 5000, 64], 64, 16, 4, 64),
    (2, 40, [777, 1], 1, 4, 2, 32),
    (2, 8, [2048, 33], 1, 16, 8, 256),
    (32, 15, [1024] * 32, 1, 32, 8, 128),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-b{c[1]}-ps{c[3]}-H{c[4]}/{c[5]}-D{c[6]}")
def test_ragged_matches_reference(case, dtype, index_dtype):
    B, budget, lens, ps, hq, hkv, d = case
    args, _ = A.make_case("gqa", B, budget, lens, page_size=ps, dtype=dtype, device="cuda", heads=hq,
                          kv_heads=hkv, head_dim=d, seed=B + budget + d, depth=16)
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
    r = _ragged(args, index_dtype)
    for splits in (1, 3, native.ragged_splits(B, budget + 1, hq // hkv, hkv, 132), 16):
        torch.empty(256 << 20, dtype=torch.uint8, device="cuda").view(torch.float32).fill_(math.nan)
        o, lse = native.attend_ragged(r[0], None, *r[1:], num_splits=splits)
        torch.cuda.synchronize()
        assert o.dtype == dtype
        err_o, err_l = A.rel_err(o, ref_o), A.rel_err(lse, ref_l)
        assert err_o <= TOL[dtype] and err_l <= TOL[dtype], f"splits {splits}: O {err_o:.2e} LSE {err_l:.2e}"


def test_graph_replay_with_new_lengths_slots_and_masks():
    """Capture once at B=8 with short prefixes; replay after rewriting indptr / indices / mask / q in place
    with much longer and different prefixes: the replay must equal the reference of the new problem."""
    B, budget, hq, hkv, d = 8, 15, 32, 8, 128
    first, _ = A.make_case("gqa", B, budget, [3] * B, dtype=torch.bfloat16, device="cuda", heads=hq, kv_heads=hkv,
                           seed=1, depth=16)
    lens2 = [0, 4000, 1, 64, 9000, 17, 2500, 300]
    second, _ = A.make_case("gqa", B, budget, lens2, dtype=torch.bfloat16, device="cuda", heads=hq, kv_heads=hkv,
                            seed=2, depth=16)
    r2 = _ragged(second, torch.int64)
    cap_indices = torch.zeros(B * 10000, dtype=torch.int64, device="cuda")
    r1 = _ragged(first, torch.int64)
    q, kc, vc = r1[0].clone(), r2[1], r2[2]  # one cache, large enough for both
    indptr, kt, vt, mask = r1[3].clone(), r1[5].clone(), r1[6].clone(), r1[7].clone()
    cap_indices[:r1[4].numel()] = r1[4] % kc.shape[0]
    splits = native.ragged_splits(B, budget + 1, hq // hkv, hkv, torch.cuda.get_device_properties(0).multi_processor_count)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        native.attend_ragged(q, None, kc, vc, indptr, cap_indices, kt, vt, mask, r1[8], splits)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o, lse = native.attend_ragged(q, None, kc, vc, indptr, cap_indices, kt, vt, mask, r1[8], splits)
    q.copy_(r2[0]), indptr.copy_(r2[3]), kt.copy_(r2[5]), vt.copy_(r2[6]), mask.copy_(r2[7])
    cap_indices[:r2[4].numel()] = r2[4]
    g.replay()
    torch.cuda.synchronize()
    ref_o, ref_l = reference_tree_attention(*second, dtype=torch.float32, device="cuda")
    assert A.rel_err(o, ref_o) <= 1e-2 and A.rel_err(lse, ref_l) <= 1e-2


def test_bad_ragged_arguments_raise():
    args, _ = A.make_case("gqa", 2, 7, [10, 20], dtype=torch.bfloat16, device="cuda", heads=8, kv_heads=2,
                          head_dim=128, seed=3, depth=8)
    r = list(_ragged(args, torch.int32))
    with pytest.raises(RuntimeError, match="kv_indptr"):
        native.attend_ragged(r[0], None, *r[1:3], r[3].to(torch.int64), *r[4:], num_splits=2)
    with pytest.raises(RuntimeError, match="num_splits"):
        native.attend_ragged(r[0], None, *r[1:], num_splits=0)
    with pytest.raises(ValueError, match="head dims must be equal and one of"):
        native.attend_ragged(r[0][..., :96].contiguous(), None, r[1][..., :96].contiguous(),
                             r[2][..., :96].contiguous(), *r[3:5], r[5][..., :96].contiguous(),
                             r[6][..., :96].contiguous(), r[7], r[8], num_splits=2)


def test_op_refuses_a_head_dim_it_has_no_instance_for_without_crashing():
    """The raw op, head dim 96, in a child process: on the H200 this call crashed the process with SIGSEGV
    (2026-12-04, twice: fresh, and after torch had formatted a number into an error of its own, so not a lazily
    initialised formatting state) while the op's one-literal checks raised; attend_ragged refuses it in Python.
    The check now formats its message with snprintf into one C string (ddtree::refuse, kernels/torch_cuda/checks.h,
    which every CUDA binding's argument checks use): this test passes when that form raises."""
    code = """
import sys, torch
sys.path.insert(0, "tests/attention")
import attn_cases as A
from sglang_ddtree import ops
ops.ensure_backend("cuda")
args, _ = A.make_case("gqa", 2, 7, [10, 20], dtype=torch.bfloat16, device="cuda", heads=8, kv_heads=2,
                      head_dim=128, seed=3, depth=8)
q, (kc, vc), table, lens, (kt, vt), mask, scale = args
c = lambda t: t.reshape(-1, *t.shape[-2:])[..., :96].contiguous()
indptr = torch.tensor([0, 10, 30], dtype=torch.int32, device="cuda")
try:
    ops.op("verify_attn_ragged")(c(q), None, c(kc), c(vc), indptr, torch.arange(30, dtype=torch.int32,
                                 device="cuda"), c(kt), c(vt), mask, scale, 2)
except RuntimeError as e:
    print("RAISED", "head dim" in str(e))
"""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "RAISED True" in r.stdout, f"rc {r.returncode}: {(r.stdout + r.stderr)[-800:]}"


MLA_CASES = [  # B, budget, prefix lengths, page size, heads: the MLA layout SGLang's MLA pool hands the served verify
    (1, 15, [1000], 1, 16),
    (4, 31, [3000, 0, 10, 8192], 64, 16),
    (8, 63, [5, 2000, 0, 64, 65, 4096, 1, 300], 1, 64),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", MLA_CASES, ids=lambda c: f"B{c[0]}-b{c[1]}-ps{c[3]}-H{c[4]}")
def test_ragged_mla_matches_reference(case, dtype):
    """The served MLA verify (tree_attention.TreeVerifyAttention on an MLA pool): latent queries + rope part,
    one latent KV head of 576 per slot with the values its first 512 (a view), the tree's keys likewise."""
    B, budget, lens, ps, h = case
    args, _ = A.make_case("mla", B, budget, lens, page_size=ps, dtype=dtype, device="cuda", heads=h,
                          seed=B + budget, depth=16)
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
    (q_a, q_b), cache, table, plens, tree_kv, mask, scale = args
    slots = [table[b, torch.arange(int(L), device="cuda") // ps].to(torch.int64) * ps +
             torch.arange(int(L), device="cuda") % ps for b, L in enumerate(plens.tolist())]
    indptr = torch.zeros(B + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(plens.to(torch.int64), 0).to(torch.int32)
    indices = torch.cat(slots).to(torch.int32) if sum(map(len, slots)) else torch.zeros(1, dtype=torch.int32, device="cuda")
    k_cache = cache.reshape(-1, 1, cache.shape[-1])
    k_tree = tree_kv.reshape(-1, 1, tree_kv.shape[-1])
    for splits in (1, native.ragged_splits(B, budget + 1, h, 1, 132), 16):
        o, lse = native.attend_ragged(q_a, q_b, k_cache, k_cache[..., :512], indptr, indices, k_tree,
                                      k_tree[..., :512], mask, scale, splits)
        torch.cuda.synchronize()
        err_o, err_l = A.rel_err(o, ref_o), A.rel_err(lse, ref_l)
        assert err_o <= TOL[dtype] and err_l <= TOL[dtype], f"splits {splits}: O {err_o:.2e} LSE {err_l:.2e}"
