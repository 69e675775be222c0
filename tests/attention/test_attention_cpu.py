"""CPU tests: the dense reference, the LSE merge (both bases) and the torch fallback path."""
import math

import pytest
import torch

import attn_cases as A
from sglang_ddtree.attention import (LN2, merge_states, reference_tree_attention, tree_verify_attention,
                                     lse_to_natural)
from sglang_ddtree.attention import fallback
from sglang_ddtree.attention.problem import make_problem


def _ancestors(parents, i):
    out = [i]
    while parents[out[-1]] >= 0:
        out.append(int(parents[out[-1]]))
    return out


@pytest.mark.parametrize("layout", ["mla", "gqa"])
def test_reference_matches_explicit_ancestor_attention(layout):
    """The oracle vs a per-row loop over the prefix plus the node's ancestors found from `parents`."""
    B, budget, ps = 2, 12, 4
    args, tree = A.make_case(layout, B, budget, [9, 0], page_size=ps, seed=3)
    out, lse = reference_tree_attention(*args)
    q, cache, table, lens, tree_kv, _, scale = args
    n = budget + 1
    for b in range(B):
        slots = [int(table[b, j // ps]) * ps + j % ps for j in range(int(lens[b]))]
        for i in range(n):
            keys = slots, [b * n + a for a in _ancestors(tree.parents[b].tolist(), i)]
            t = b * n + i
            if layout == "mla":
                flat = cache.reshape(-1, 576)
                K = torch.cat([flat[keys[0]], tree_kv[keys[1]]])
                qf = torch.cat([q[0][t], q[1][t]], -1)                    # [H, 576]
                logits = qf @ K.T * scale
                ref_o = torch.softmax(logits, -1) @ K[:, :512]
            else:
                kc, vc = (c.reshape(-1, *c.shape[2:]) for c in cache)
                K = torch.cat([kc[keys[0]], tree_kv[0][keys[1]]])         # [J, Hkv, D]
                V = torch.cat([vc[keys[0]], tree_kv[1][keys[1]]])
                G = q.shape[1] // K.shape[1]
                Kh, Vh = K.repeat_interleave(G, 1), V.repeat_interleave(G, 1)
                logits = torch.einsum("hd,jhd->hj", q[t], Kh) * scale
                ref_o = torch.einsum("hj,jhd->hd", torch.softmax(logits, -1), Vh)
            assert torch.allclose(out[t], ref_o, rtol=1e-10, atol=1e-12)
            assert torch.allclose(lse[t], torch.logsumexp(logits, -1), rtol=1e-12)


def _dense(q, K, V):
    logits = q @ K.T
    return torch.softmax(logits, -1) @ V, torch.logsumexp(logits, -1)


@pytest.mark.parametrize("seed", range(5))
def test_merge_of_two_key_sets_equals_full_softmax(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(7, 16, generator=g, dtype=torch.float64)
    K, V = (torch.randn(20, 16, generator=g, dtype=torch.float64) for _ in range(2))
    cut = 6 + seed  # both sides carry real weight
    o, lse = _dense(q, K, V)
    o_a, l_a = _dense(q, K[:cut], V[:cut])
    o_b, l_b = _dense(q, K[cut:], V[cut:])
    m, s = merge_states(o_a, l_a, o_b, l_b)
    assert torch.allclose(m, o, atol=1e-12) and torch.allclose(s, lse, atol=1e-12)
    # FlashInfer convention: side a in base 2, output requested in base 2
    m2, s2 = merge_states(o_a, l_a / LN2, o_b, l_b, base_a="2", out_base="2")
    assert torch.allclose(m2, o, atol=1e-12) and torch.allclose(s2 * LN2, lse, atol=1e-12)
    # feeding a base-2 LSE as if it were natural (sglang #40903) must give a wrong answer
    bad, _ = merge_states(o_a, l_a / LN2, o_b, l_b)
    assert not torch.allclose(bad, o, atol=1e-6)


def test_merge_empty_sides():
    o = torch.randn(3, 4, 8, dtype=torch.float64)
    lse = torch.randn(3, 4, dtype=torch.float64)
    nan = torch.full_like(o, math.nan)
    # FlashMLA marks key-less rows with LSE = +inf; FlashInfer / ours with −inf; O may be garbage there
    for empty in (math.inf, -math.inf):
        m, s = merge_states(nan, torch.full_like(lse, empty), o, lse)
        assert torch.equal(m, o) and torch.equal(s, lse)
    m, s = merge_states(nan, torch.full_like(lse, -math.inf), nan, torch.full_like(lse, math.inf))
    assert torch.equal(m, torch.zeros_like(o)) and torch.all(s == -math.inf)
    assert torch.all(lse_to_natural(torch.tensor([math.inf]), "2") == -math.inf)


def test_merge_rejects_bad_arguments():
    o, lse = torch.zeros(2, 3, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="base_a"):
        merge_states(o, lse, o, lse, base_a="10")
    with pytest.raises(ValueError, match="lse_b"):
        merge_states(o, lse, o, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="o_a"):
        merge_states(o, lse, torch.zeros(2, 3, 5), lse)


CASES = [  # layout, B, budget, prefix lens, page size, dtype, tolerance
    ("mla", 1, 8, [0], 1, torch.float64, 1e-12),
    ("mla", 2, 32, [5, 77], 1, torch.float64, 1e-12),
    ("mla", 3, 20, [0, 64, 130], 64, torch.float64, 1e-12),
    ("mla", 2, 16, [100, 3], 64, torch.float32, 1e-5),
    ("mla", 2, 16, [100, 3], 64, torch.bfloat16, 1e-2),
    ("gqa", 1, 8, [0], 1, torch.float64, 1e-12),
    ("gqa", 4, 24, [1, 50, 0, 129], 1, torch.float64, 1e-12),
    ("gqa", 2, 64, [200, 65], 64, torch.float64, 1e-12),
    ("gqa", 2, 16, [33, 90], 64, torch.float32, 1e-5),
    ("gqa", 2, 16, [33, 90], 1, torch.bfloat16, 1e-2),
]


@pytest.mark.parametrize("layout,B,budget,lens,ps,dtype,tol", CASES)
def test_torch_fallback_matches_reference(layout, B, budget, lens, ps, dtype, tol):
    args, _ = A.make_case(layout, B, budget, lens, page_size=ps, dtype=dtype, seed=B * budget + ps)
    ref_o, ref_l = reference_tree_attention(*args)
    o, lse = tree_verify_attention(*args, backend="torch")
    assert o.dtype == dtype and o.shape == ref_o.shape
    assert A.rel_err(o, ref_o) <= tol
    assert A.rel_err(lse, ref_l) <= max(tol, 1e-6)


def test_fallback_chunking_and_prefix_only_parts():
    """Small key chunks (many merges) agree; prefix-only + tree-only halves merge to the whole."""
    args, _ = A.make_case("gqa", 3, 16, [0, 70, 129], page_size=1, seed=11)
    prob = make_problem(*args)
    ref_o, ref_l = reference_tree_attention(*args)
    o, l = fallback.attend(prob, chunk=7)
    assert A.rel_err(o, ref_o) < 1e-12 and A.rel_err(l, ref_l) < 1e-12
    o_p, l_p = fallback.attend(prob, with_tree=False)
    o_t, l_t = fallback.attend(prob, with_prefix=False)
    assert torch.all(l_p[:17] == -math.inf)  # request 0 has no prefix
    m, s = merge_states(o_p, l_p / LN2, o_t, l_t, base_a="2")
    assert A.rel_err(m, ref_o) < 1e-12 and A.rel_err(s, ref_l) < 1e-12


def test_bool_mask_and_treebatch_are_accepted():
    args, tree = A.make_case("mla", 2, 10, [4, 9], page_size=1, seed=5)
    o_bits, _ = tree_verify_attention(*args, backend="torch")
    o_bool, _ = tree_verify_attention(*args[:5], tree.tree_mask, args[6], backend="torch")
    o_tree, _ = tree_verify_attention(*args[:5], tree, args[6], backend="torch")
    assert torch.equal(o_bits, o_bool) and torch.equal(o_bits, o_tree)


def test_rejects_bad_arguments():
    args, _ = A.make_case("mla", 2, 8, [4, 9], page_size=1)
    q, cache, table, lens, tree_kv, bits, scale = args
    with pytest.raises(ValueError, match="backend"):
        tree_verify_attention(*args, backend="cudnn")
    with pytest.raises(ValueError, match="prefix_lens"):
        tree_verify_attention(q, cache, table, lens[:1], tree_kv, bits, scale)
    with pytest.raises(ValueError, match="tree_kv"):
        tree_verify_attention(q, cache, table, lens, tree_kv[:, :512], bits, scale)
    with pytest.raises(ValueError, match="tree_mask"):
        tree_verify_attention(q, cache, table, lens, tree_kv, bits[:, :5], scale)
    with pytest.raises(TypeError, match="page_table"):
        tree_verify_attention(q, cache, table.float(), lens, tree_kv, bits, scale)
    with pytest.raises(ValueError, match="sm_scale"):
        tree_verify_attention(q, cache, table, lens, tree_kv, bits, -1.0)
    with pytest.raises(ValueError, match="kv_cache"):
        tree_verify_attention(q, cache[..., :512], table, lens, tree_kv, bits, scale)
    for kernel in ("tree", "native"):  # `native`: the earlier name of `tree`
        with pytest.raises(ValueError, match="backend='tree' needs CUDA"):
            tree_verify_attention(*args, backend=kernel)  # CPU float64 is not a kernel input
    for lib in ("flashmla", "flashinfer", "fa3"):  # the libraries are CUDA kernels: refused naming the argument
        with pytest.raises(ValueError, match=f"backend={lib} on the CPU"):
            tree_verify_attention(*args, backend=lib)
    gq, gcache, *_ = A.make_case("gqa", 2, 8, [4, 9], page_size=1)[0]
    with pytest.raises(TypeError, match="kv_cache"):
        tree_verify_attention(gq, gcache[0], table, lens, tree_kv, bits, scale)


def test_flashinfer_page_lists_from_page_table():
    """The CSR page lists handed to FlashInfer's plan, against a per-request loop."""
    from sglang_ddtree.attention import flashinfer
    for ps, lens in ((1, [0, 5, 3]), (64, [0, 64, 65, 200]), (16, [31, 0])):
        args, _ = A.make_case("gqa", len(lens), 8, lens, page_size=ps, seed=ps)
        prob = make_problem(*args)
        qo, indptr, indices, last = flashinfer.paged_indices(prob)
        assert qo.tolist() == [b * prob.n for b in range(len(lens) + 1)]
        want, ptr, want_last = [], [0], []
        for b, L in enumerate(lens):
            pages = -(-L // ps)
            want += prob.page_table[b, :pages].tolist()
            ptr.append(ptr[-1] + pages)
            want_last.append((L - 1) % ps + 1 if L else 0)
        assert indptr.tolist() == ptr and last.tolist() == want_last
        assert indices.tolist()[:len(want)] == want and (want or indices.numel() == 1)


def test_split_plan_covers_the_prefix():
    from sglang_ddtree.attention import native
    for layout, B, n_max in (("mla", 1, 8192), ("mla", 64, 32768), ("gqa", 1, 100), ("gqa", 8, 4096), ("mla", 2, 1)):
        args, _ = A.make_case(layout, B, 8, [0] * B, page_size=64)
        prob = make_problem(*args)
        splits, chunk = native.split_plan(prob, n_max, 132)
        tile = native.key_tile(prob)
        assert chunk % tile == 0 and splits >= 1 and (splits - 1) * chunk < n_max <= splits * chunk
    assert native.split_plan(prob, 0, 132)[0] == 0


@pytest.mark.parametrize("seed", range(8))
def test_torch_fallback_random_shapes(seed):
    """Random batch, budget, page size, head grouping and prefix lengths (zeros included), float64."""
    import random
    rng = random.Random(seed)
    layout = "mla" if seed % 2 else "gqa"
    B, budget, ps = rng.randint(1, 4), rng.choice([1, 8, 33, 64]), rng.choice([1, 4, 64])
    lens = [rng.choice([0, rng.randint(1, 300)]) for _ in range(B)]
    kvh = rng.choice([1, 2, 4])
    heads = kvh * rng.choice([1, 3, 8]) if layout == "gqa" else rng.choice([1, 4, 16])
    args, _ = A.make_case(layout, B, budget, lens, page_size=ps, heads=heads, kv_heads=kvh, head_dim=32,
                          seed=seed, depth=rng.randint(1, 8))
    ref_o, ref_l = reference_tree_attention(*args)
    o, lse = tree_verify_attention(*args, backend="auto")
    assert A.rel_err(o, ref_o) < 1e-12 and A.rel_err(lse, ref_l) < 1e-12


# --- bad contents: an error naming the argument, or a NaN output, never a finite wrong answer ---------

def _gqa_case():
    args, _ = A.make_case("gqa", 2, 4, [5, 7], page_size=2, seed=21)  # uses 3 and 4 of 4 table columns
    return list(args)


def _poison(args, where):
    q, (kc, vc), table, lens, (kt, vt), bits, scale = args
    kc, vc, q, kt = kc.clone(), vc.clone(), q.clone(), kt.clone()
    page = int(table[0, 0])
    {"k": lambda: kc.__setitem__((page, 0, 0, 0), math.nan), "v": lambda: vc.__setitem__((page, 1, 1, 3), math.nan),
     "q": lambda: q.__setitem__((2, 1, 0), math.nan), "k_tree": lambda: kt.__setitem__((0, 0, 5), math.nan)}[where]()
    return [q, (kc, vc), table, lens, (kt, vt), bits, scale]


@pytest.mark.parametrize("where", ["k", "v", "q", "k_tree"])
def test_nan_inputs_reach_the_output(where):
    """A NaN that a query attends makes that request's output NaN (it used to be dropped by the merge)."""
    o, lse = tree_verify_attention(*_poison(_gqa_case(), where), backend="torch")
    n = 5
    assert torch.isnan(o[:n]).any() or torch.isnan(lse[:n]).any()
    clean, _ = tree_verify_attention(*_gqa_case(), backend="torch")
    assert torch.equal(o[n:], clean[n:])  # request 1 never sees request 0's data


def test_garbage_outside_a_prefix_is_never_read():
    """NaN in cache slots past a request's prefix (unwritten memory) and -1 padding in unused table
    columns leave the output exactly as it is."""
    args = _gqa_case()
    clean, _ = tree_verify_attention(*args, backend="torch")
    q, (kc, vc), table, lens, tree_kv, bits, scale = args
    kc, vc, table = kc.clone(), vc.clone(), table.clone()
    last = int(table[0, 2])              # request 0's third page holds key 4 only (prefix length 5)
    kc[last, 1], vc[last, 1] = math.nan, math.nan
    table[0, 3] = -1                     # request 0 uses 3 columns
    o, _ = tree_verify_attention(q, (kc, vc), table, lens, tree_kv, bits, scale, backend="torch")
    assert torch.equal(o, clean)
    ref, _ = reference_tree_attention(q, (kc, vc), table, lens, tree_kv, bits, scale)
    assert A.rel_err(o, ref) < 1e-12


def test_merge_propagates_nan_lse():
    o, lse = torch.ones(2, 3, 4, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    bad = lse.clone()
    bad[0, 1] = math.nan
    m, s = merge_states(o, bad, o, lse)
    assert torch.isnan(m[0, 1]).all() and torch.isnan(s[0, 1])
    assert torch.isfinite(m[1]).all() and torch.isfinite(s[1]).all()


@pytest.mark.parametrize("change,exc,name", [
    (lambda a: a.__setitem__(6, math.inf), ValueError, "sm_scale"),
    (lambda a: a[3].__setitem__(0, 9), ValueError, "prefix_lens"),       # the table holds 4 pages x 2
    (lambda a: a[3].__setitem__(1, -1), ValueError, "prefix_lens"),
    (lambda a: a[2].__setitem__((0, 1), -1), ValueError, r"page_table\[0, 1\]"),
    (lambda a: a[2].__setitem__((1, 3), 10**6), ValueError, r"page_table\[1, 3\]"),
    (lambda a: a.__setitem__(1, (a[1][0][:, :0], a[1][1][:, :0])), ValueError, "k_cache"),
], ids=["sm_scale_inf", "prefix_past_table", "prefix_negative", "used_page_minus1", "used_page_oob", "page_size_0"])
@pytest.mark.parametrize("fn", ["fallback", "reference"])
def test_bad_contents_are_rejected_with_their_name(change, exc, name, fn):
    args = _gqa_case()
    args[2], args[3] = args[2].clone(), args[3].clone()
    change(args)
    call = reference_tree_attention if fn == "reference" else tree_verify_attention
    with pytest.raises(exc, match=name):
        call(*args)


def test_page_size_zero_and_short_max_prefix_len_are_rejected():
    args, _ = A.make_case("mla", 1, 4, [3], page_size=1)
    q, cache, table, lens, tree_kv, bits, scale = args
    with pytest.raises(ValueError, match="kv_cache"):
        tree_verify_attention(q, cache[:, :0], table, lens, tree_kv, bits, scale)
    with pytest.raises(ValueError, match="max_prefix_len"):
        tree_verify_attention(*args, max_prefix_len=2)
    with pytest.raises(ValueError, match="max_prefix_len"):
        tree_verify_attention(*args, max_prefix_len=-1)


def test_attend_ragged_refuses_head_dims_without_a_kernel_instance():
    """The CUDA kernel's head dims are checked in Python before the op is reached (no CUDA needed to refuse),
    naming the arguments; the CPU path (torch) takes any head dims."""
    from sglang_ddtree.attention import native

    q, k = torch.zeros(4, 8, 96), torch.zeros(10, 2, 96)
    with pytest.raises(ValueError, match=r"q / k_cache / v_cache head dims .* got 96 / 96 / 96"):
        native._check_ragged_dims(q, None, k, k)
    with pytest.raises(ValueError, match=r"got 128 / 128 / 64"):
        native._check_ragged_dims(torch.zeros(4, 8, 128), None, torch.zeros(10, 2, 128), torch.zeros(10, 2, 64))
    q, pe, kc = torch.zeros(4, 16, 512), torch.zeros(4, 16, 64), torch.zeros(10, 1, 576)
    with pytest.raises(ValueError, match=r"\(MLA\).* got 512 / 32 / 576 / 512"):
        native._check_ragged_dims(q, pe[..., :32], kc, kc[..., :512])


def _ragged_from_case(args, layout):
    """The problem of a tree_verify_attention case in SGLang's ragged addressing (page size 1): kv_indptr,
    kv_indices listing each request's prefix slots, caches [slots, Hkv, D]."""
    q, cache, table, lens, tree_kv, bits, scale = args
    lens64 = lens.to(torch.int64)
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens64, 0).to(torch.int32)
    indices = torch.cat([table[b, :int(L)] for b, L in enumerate(lens64.tolist())]).to(torch.int32)
    if layout == "mla":
        kc = cache.reshape(-1, 1, cache.shape[-1])
        return (q[0], q[1], kc, kc[..., :q[0].shape[-1]], indptr, indices, tree_kv.reshape(-1, 1, cache.shape[-1]),
                tree_kv.reshape(-1, 1, cache.shape[-1])[..., :q[0].shape[-1]], bits, scale)
    kc, vc = (c.reshape(-1, *c.shape[2:]) for c in cache)
    return (q, None, kc, vc, indptr, indices, tree_kv[0], tree_kv[1], bits, scale)


@pytest.mark.parametrize("layout", ["gqa", "mla"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("lens", [[0, 5, 37], [130]])
def test_ragged_cpu_path_matches_reference(layout, dtype, tol, lens):
    """native.attend_ragged on CPU tensors (the CPU server's tree verify) against the float64 oracle: every tree
    node over its request's prefix (empty ones too) and its ancestors, GQA and the MLA latent layout."""
    from sglang_ddtree.attention import native

    args, _ = A.make_case(layout, len(lens), 7, lens, page_size=1, dtype=dtype, head_dim=64, seed=len(lens))
    ref_o, ref_lse = reference_tree_attention(*args)
    o, lse = native.attend_ragged(*_ragged_from_case(args, layout), 1)
    assert o.dtype == dtype and lse.dtype == torch.float32
    assert A.rel_err(o, ref_o) < tol
    assert torch.allclose(lse.double(), ref_lse, atol=1e-4 if dtype == torch.float32 else 2e-2)
