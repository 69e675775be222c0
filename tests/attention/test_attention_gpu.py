"""GPU tests: every verify-attention path against the dense reference (float32 on the GPU) on build_tree trees.

bf16 paths (our kernel fused, tree tail alone, FlashMLA/FlashInfer cascades) must land within 1e-2 relative
error of the reference; the fp32 torch path within 1e-5. Outputs are allocated over NaN-poisoned memory so an
unwritten element fails the test.
"""
import math
import random

import pytest
import torch

import attn_cases as A
from sglang_ddtree.attention import (BACKENDS, LN2, Shape, make_problem, merge_states, native, prefixes,
                                     reference_tree_attention, tree_verify_attention)
from sglang_ddtree.attention import fallback
from sglang_ddtree.bench.common import capture

pytestmark = pytest.mark.gpu

BF16_TOL, FP32_TOL = 1e-2, 1e-5

# layout, B, budget, prefix lengths (list or (max, seed) for random), page size, heads, kv heads
CASES = [
    ("mla", 1, 8, [0], 1, 64, 1),
    ("mla", 2, 64, [1000, 37], 1, 16, 1),
    ("mla", 4, 256, (2048, 1), 64, 16, 1),
    ("mla", 1, 16, [32768], 64, 64, 1),
    ("mla", 64, 8, (4096, 2), 64, 16, 1),
    ("mla", 3, 32, [0, 4000, 8191], 1, 128, 1),
    ("mla", 8, 100, (1500, 3), 64, 64, 1),
    ("gqa", 1, 8, [0], 1, 32, 8),
    ("gqa", 8, 64, (8192, 4), 64, 32, 8),
    ("gqa", 64, 16, (2048, 5), 1, 32, 8),
    ("gqa", 2, 256, [32768, 5], 64, 32, 8),
    ("gqa", 2, 100, [300, 64], 1, 8, 8),
    ("gqa", 5, 40, (700, 6), 1, 64, 4),
]


def _lens(spec, B):
    if isinstance(spec, tuple):
        rng = random.Random(spec[1])
        return [rng.randint(0, spec[0]) for _ in range(B)]
    return spec


def _poison():
    """Fill a slab of the caching allocator with NaN so outputs allocated next start as garbage."""
    junk = torch.empty(256 << 20, dtype=torch.uint8, device="cuda").view(torch.float32).fill_(math.nan)
    del junk


def _case(layout, B, budget, spec, ps, heads, kv_heads, dtype=torch.bfloat16, seed=0):
    return A.make_case(layout, B, budget, _lens(spec, B), page_size=ps, dtype=dtype, device="cuda",
                       heads=heads, kv_heads=kv_heads, seed=seed, depth=16)


def _paths(args):
    prob = make_problem(*args)
    out = ["tree"]
    out += [lib for lib in ("flashmla", "flashinfer", "fa3") if prefixes.refusal(lib, Shape.of(prob)) is None]
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-B{c[1]}-b{c[2]}-ps{c[4]}-H{c[5]}")
def test_bf16_paths_match_reference(case):
    args, _ = _case(*case, seed=case[1] + case[2])
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
    for backend in _paths(args):
        _poison()
        o, lse = tree_verify_attention(*args, backend=backend, plan={})
        torch.cuda.synchronize()
        err_o, err_l = A.rel_err(o, ref_o), A.rel_err(lse, ref_l)
        assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
        assert err_o <= BF16_TOL and err_l <= BF16_TOL, f"{backend}: O err {err_o:.2e}, LSE err {err_l:.2e}"


@pytest.mark.parametrize("case", CASES[:4] + CASES[7:10], ids=lambda c: f"{c[0]}-B{c[1]}-b{c[2]}")
def test_fp32_torch_path_matches_reference(case):
    args, _ = _case(*case, dtype=torch.float32, seed=7)
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float64, device="cuda")
    o, lse = tree_verify_attention(*args, backend="auto")  # fp32 is not a kernel dtype: the torch path
    assert A.rel_err(o, ref_o) <= FP32_TOL and A.rel_err(lse, ref_l) <= FP32_TOL


@pytest.mark.parametrize("layout", ["mla", "gqa"])
@pytest.mark.parametrize("splits", [1, 2, 5, 64])
def test_native_split_counts_agree(layout, splits):
    heads, kvh = (64, 1) if layout == "mla" else (32, 8)
    args, _ = _case(layout, 3, 24, [0, 900, 3000], 1, heads, kvh, seed=splits)
    prob = make_problem(*args)
    ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
    _poison()
    o, lse = native.attend(prob, num_splits=splits)
    assert A.rel_err(o, ref_o) <= BF16_TOL and A.rel_err(lse, ref_l) <= BF16_TOL


@pytest.mark.parametrize("layout", ["mla", "gqa"])
@pytest.mark.parametrize("budget", [8, 31, 64, 256])
def test_native_tree_tail_alone(layout, budget):
    heads, kvh = (64, 1) if layout == "mla" else (32, 8)
    args, _ = _case(layout, 2, budget, [500, 0], 64, heads, kvh, seed=budget)
    prob = make_problem(*args)
    ref_o, ref_l = fallback.attend(prob, with_prefix=False)
    _poison()
    o, lse = native.attend(prob, with_prefix=False)
    assert A.rel_err(o, ref_o) <= BF16_TOL and A.rel_err(lse, ref_l) <= BF16_TOL


@pytest.mark.parametrize("lib", ["flashmla", "flashinfer", "fa3"])
@pytest.mark.parametrize("layout", ["mla", "gqa"])
def test_library_lse_base_is_what_we_assume(lib, layout):
    """Each library's prefix LSE, converted by its declared base, equals our natural-log prefix LSE."""
    heads, kvh = (64, 1) if layout == "mla" else (32, 8)
    args, _ = _case(layout, 2, 16, [777, 64], 64, heads, kvh, seed=3)
    prob = make_problem(*args)
    why = prefixes.refusal(lib, Shape.of(prob))
    if why is not None:
        pytest.skip(f"{lib} not usable for {layout} here: {why}")
    o_p, lse_p, base = prefixes.run(lib, prob, {})
    ref_o, ref_l = fallback.attend(prob, with_tree=False)
    natural = lse_p.float() * (LN2 if base == "2" else 1.0)
    assert A.rel_err(natural, ref_l) <= 1e-3 and A.rel_err(o_p, ref_o) <= BF16_TOL
    wrong = lse_p.float() * (1.0 if base == "2" else LN2)
    assert A.rel_err(wrong, ref_l) > 1e-2  # the other convention would be caught


def test_merge_on_gpu_matches_cpu():
    g = torch.Generator().manual_seed(0)
    o_a, o_b = (torch.randn(50, 8, 512, generator=g) for _ in range(2))
    l_a, l_b = (torch.randn(50, 8, generator=g) * 5 for _ in range(2))
    cpu = merge_states(o_a, l_a, o_b, l_b, base_a="2")
    gpu = merge_states(o_a.cuda(), l_a.cuda(), o_b.cuda(), l_b.cuda(), base_a="2")
    assert torch.allclose(cpu[0], gpu[0].cpu(), atol=1e-5) and torch.allclose(cpu[1], gpu[1].cpu(), atol=1e-5)


@pytest.mark.parametrize("base_a", ["e", "2"])
@pytest.mark.parametrize("D", [512, 128])
def test_merge_kernel_matches_torch_merge(base_a, D):
    g = torch.Generator(device="cuda").manual_seed(D)
    o_a, o_b = (torch.randn(37, 16, D, device="cuda", generator=g).bfloat16() for _ in range(2))
    l_a, l_b = (torch.randn(37, 16, device="cuda", generator=g) * 4 for _ in range(2))
    l_a[0], l_b[1] = math.inf, -math.inf       # FlashMLA's and our empty-row marks
    l_a[2], l_b[2] = -math.inf, -math.inf
    o_a[0], o_b[1] = math.nan, math.nan        # never read: weight 0
    ref_o, ref_l = merge_states(o_a.float(), l_a, o_b.float(), l_b, base_a=base_a)
    o, lse = native.merge(o_a, l_a, base_a, o_b, l_b, "e", torch.bfloat16)
    assert A.rel_err(o, ref_o) <= 1e-2 and torch.equal(torch.isinf(lse), torch.isinf(ref_l))
    fin = torch.isfinite(ref_l)
    assert torch.allclose(lse[fin], ref_l[fin], atol=1e-4)


@pytest.mark.parametrize("layout", ["mla", "gqa"])
def test_native_path_replays_in_a_cuda_graph_with_new_lengths(layout):
    """Captured once with max_prefix_len, replayed after prefix_lens change in place: the serving pattern."""
    heads, kvh = (64, 1) if layout == "mla" else (32, 8)
    args, _ = _case(layout, 2, 16, [3000, 3000], 64, heads, kvh, seed=9)
    lens = args[3]
    graph, (o, lse) = capture(lambda: tree_verify_attention(*args, backend="tree", max_prefix_len=4096))
    for new in ([0, 1234], [3000, 65]):
        lens.copy_(torch.tensor(new, dtype=lens.dtype))
        graph.replay()
        torch.cuda.synchronize()
        ref_o, ref_l = reference_tree_attention(*args, dtype=torch.float32, device="cuda")
        assert A.rel_err(o, ref_o) <= BF16_TOL and A.rel_err(lse, ref_l) <= BF16_TOL


def test_backends_listed():
    assert BACKENDS == ("auto", "tree", "flashmla", "flashinfer", "fa3", "torch")
