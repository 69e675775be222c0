"""DraftTreeHead (the draft-side tree stage of the worker) against the public build_tree on the same logits."""
import types

import pytest
import torch

from sglang_ddtree import build_tree, build_tree_from_topk
from sglang_ddtree.round import RoundOps


def rows_logits(hidden, weight, bs, block):
    """The depth rows' logits [bs, block - 1, V], summed as one 2-D GEMM (as the head does: a batched GEMM
    may differ in the last ulp, which moves log-weights)."""
    H = weight.shape[1]
    return (hidden.view(bs, block, H)[:, 1:].reshape(-1, H) @ weight.T).view(bs, block - 1, -1)


@pytest.mark.parametrize("anchor", [None, "chain"])
def test_head_build_matches_build_tree(plugins_loaded, anchor):
    from sglang_ddtree.sglang.draft_head import DraftTreeHead

    g = torch.Generator().manual_seed(3)
    V, H, block, budget, bs = 50, 16, 5, 9, 3
    weight = torch.randn(V, H, generator=g)
    head = DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=budget, topk=None, max_bs=4,
                         ops=RoundOps("cpu"), tree_in_graph=True, anchor=anchor)
    assert head.static_tree is None and not head.tree_in_graph  # in-graph build needs the CUDA ops
    hidden = torch.randn(bs * block, H, generator=g)
    roots, prefix = torch.tensor([7, 8, 9]), torch.tensor([3, 0, 11])
    got = head.build(hidden, bs, roots, prefix)
    logits = rows_logits(hidden, weight, bs, block)
    ref = build_tree(logits, budget, root_tokens=roots, seq_lens=prefix, backend="cpu", anchor=anchor)
    for name, t in ref.tensors().items():
        assert torch.equal(getattr(got, name), t), name


def test_head_ranks_by_the_calibrated_logits(plugins_loaded):
    from sglang_ddtree.keys import Calibration
    from sglang_ddtree.sglang.draft_head import DraftTreeHead
    from sglang_ddtree.topk import topk_logprobs

    g = torch.Generator().manual_seed(4)
    V, H, block, budget, bs = 40, 8, 4, 12, 2
    weight, temps = torch.randn(V, H, generator=g), [0.4, 0.6, 0.8]
    head = DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=budget, topk=None, max_bs=2,
                         ops=RoundOps("cpu"), tree_in_graph=False, anchor="chain", calibration=Calibration(temps))
    hidden = torch.randn(bs * block, H, generator=g)
    roots, prefix = torch.tensor([1, 2]), torch.tensor([5, 6])
    got = head.build(hidden, bs, roots, prefix)
    logits = rows_logits(hidden, weight, bs, block)
    lp, ids = topk_logprobs(logits, budget, "cpu", torch.tensor([[1 / t for t in temps]] * bs))
    ref = build_tree_from_topk(lp, ids, budget, root_tokens=roots, seq_lens=prefix, backend="cpu", anchor="chain")
    for name, t in ref.tensors().items():
        assert torch.equal(getattr(got, name), t), name
    raw = build_tree(logits, budget, root_tokens=roots, seq_lens=prefix, backend="cpu", anchor="chain")
    assert not torch.equal(raw.tokens, got.tokens)  # the calibration changes which nodes the budget buys


def mixed_law(bs):
    """Greedy (SGLang's top_k 1), T 1, T 0.6 with top-p / top-k / min-p, ... repeating over bs requests."""
    from sglang_ddtree.sampling import NodeLaw

    rows = [(1.0, 1, 1.0, 0.0), (1.0, -1, 1.0, 0.0), (0.6, 20, 0.9, 0.02), (0.8, -1, 0.95, 0.0)]
    t, k, p, m = zip(*[rows[i % len(rows)] for i in range(bs)])
    return NodeLaw(torch.tensor(t), torch.tensor(k, dtype=torch.int32), torch.tensor(p), torch.tensor(m))


def mixed_batch_head(seed: int, calibration):
    """(head, its vocab weight, hidden states of a batch, (V, block, budget, bs)): an anchored head over a random
    vocab of 60, block 5, budget 14, batch 8, with the given calibration."""
    from sglang_ddtree.sglang.draft_head import DraftTreeHead

    g = torch.Generator().manual_seed(seed)
    V, H, block, budget, bs = 60, 8, 5, 14, 8
    weight = torch.randn(V, H, generator=g)
    head = DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=budget, topk=None, max_bs=bs,
                         ops=RoundOps("cpu"), tree_in_graph=False, anchor="chain", calibration=calibration)
    return head, weight, torch.randn(bs * block, H, generator=g), (V, block, budget, bs)


def test_head_ranks_each_request_under_its_own_law(plugins_loaded):
    """A mixed batch: every request's tree is keys.DraftKeys' under its own law (greedy requests: the greedy
    calibration and the anchor; sampled ones: their temperature, filters and the sampling calibration, no
    anchor), equal to the same request built alone."""
    from sglang_ddtree.keys import Calibration, DraftKeys

    cal = Calibration((0.5, 0.6, 0.7, 0.8), (1.1, 1.2, 1.0, 0.9))
    head, weight, hidden, (V, block, budget, bs) = mixed_batch_head(6, cal)
    roots, prefix = torch.arange(bs), torch.arange(bs) * 3
    law = mixed_law(bs)
    got = head.build(hidden, bs, roots, prefix, law)
    logits = rows_logits(hidden, weight, bs, block)
    for b in range(bs):
        one = type(law)(*(t[b:b + 1] for t in (law.temperatures, law.top_ks, law.top_ps, law.min_ps)))
        lp, ids = DraftKeys(block - 1, cal)(logits[b:b + 1], budget, "cpu", one)
        greedy = bool(one.greedy()[0])
        ref = build_tree_from_topk(lp, ids, budget, root_tokens=roots[b:b + 1], seq_lens=prefix[b:b + 1],
                                   backend="reference", anchor="chain" if greedy else None)
        for name, t in ref.tensors().items():
            if name != "retrive_index":
                assert torch.equal(getattr(got, name)[b:b + 1], t), (b, name)
    assert not torch.equal(got.tokens, head.build(hidden, bs, roots, prefix).tokens)  # the laws change the trees


def test_head_shapes_drawn_trees_by_the_shape_keys(plugins_loaded):
    """A calibration with a shape table (docs/DESIGN.md §3.12): each sampled request's tree is built from its shape
    keys (keys.DraftKeys.shape_keys of its law keys) by the reference builder, greedy ones from their keys as before,
    and the keys the round draws children from (keys_of) stay the law keys."""
    from sglang_ddtree.keys import Calibration, DraftKeys, ShapeTable
    from sglang_ddtree.sglang.draft_head import DraftTreeHead

    shape = ShapeTable(0.5, (0.6, 1.0), (((0.8, 0.1, 0.05, 0.02),) * 2 + ((0.3, 0.2, 0.1, 0.01),) * 2,
                                         ((0.7, 0.1, 0.05, 0.02),) + ((0.4, 0.1, 0.09, 0.01),) * 3))
    cal = Calibration((0.5, 0.6, 0.7, 0.8), None, shape)
    head, weight, hidden, (V, block, budget, bs) = mixed_batch_head(9, cal)
    roots, prefix = torch.arange(bs), torch.arange(bs) * 3
    law = mixed_law(bs)
    got = head.build(hidden, bs, roots, prefix, law)
    logits = rows_logits(hidden, weight, bs, block)
    lp_all, _ = DraftKeys(block - 1, cal)(logits, budget, "cpu", law)
    assert torch.equal(head.keys_of(bs, False)[0], lp_all)  # the children's law: the law keys, not the shape's
    plain = DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=budget, topk=None, max_bs=bs,
                          ops=RoundOps("cpu"), tree_in_graph=False, anchor="chain",
                          calibration=Calibration(cal.greedy)).build(hidden, bs, roots, prefix, law)
    for b in range(bs):
        one = type(law)(*(t[b:b + 1] for t in (law.temperatures, law.top_ks, law.top_ps, law.min_ps)))
        keys = DraftKeys(block - 1, cal)
        lp, ids = keys(logits[b:b + 1], budget, "cpu", one)
        greedy = bool(one.greedy()[0])
        ref = build_tree_from_topk(keys.shape_keys(lp, one), ids, budget, root_tokens=roots[b:b + 1],
                                   seq_lens=prefix[b:b + 1], backend="reference", anchor="chain" if greedy else None)
        for name, t in ref.tensors().items():
            if name != "retrive_index":
                assert torch.equal(getattr(got, name)[b:b + 1], t), (b, name)
        if greedy:
            assert torch.equal(got.tokens[b], plain.tokens[b])
    sampled = ~law.greedy()
    assert not torch.equal(got.tokens[sampled], plain.tokens[sampled])  # the table reshapes sampled trees


class _Gather:
    """A TP group of `size` ranks run one after another in one process: the first pass records what each rank
    contributes to each all-gather (in call order), the second hands every rank the whole gathered tensor."""

    def __init__(self, size):
        self.size, self.sent, self.replay = size, {}, False

    def rank(self, r):
        box = self

        class Group:
            world_size, rank_in_group, calls = box.size, r, 0

            def all_gather_into_tensor(self, out, t):
                i, self.calls = self.calls, self.calls + 1
                box.sent.setdefault(i, {})[r] = t.clone()
                parts = [box.sent[i][q] if box.replay else t for q in range(box.size)]  # first pass: own copies
                out.copy_(torch.cat(parts))
        return Group()


@pytest.mark.parametrize("tp", [2, 3])
def test_tp_heads_merge_each_request_under_its_own_law(plugins_loaded, tp):
    """Tensor parallelism (sglang/tp.py) with a mixed greedy / sampled batch: each rank's head holds its
    vocabulary shard of the lm_head and ranks by the requests' laws (keys.py, docs/DESIGN.md §3.11); every rank
    builds the same tree, bit for bit, from the merged stage 1, whose candidates are the unsharded head's and whose
    keys are within the shards' log-sum-exp rounding, so the trees have the unsharded head's nodes."""
    from sglang_ddtree.keys import Calibration
    from sglang_ddtree.sglang.draft_head import DraftTreeHead
    from sglang_ddtree.sglang.tp import TpAgreement

    g = torch.Generator().manual_seed(8 + tp)
    V, H, block, budget, bs = 61 * tp + 2, 8, 5, 14, 8
    weight = torch.randn(V, H, generator=g)
    cal = Calibration((0.5, 0.6, 0.7, 0.8), (1.1, 1.2, 1.0, 0.9))
    kw = dict(block_size=block, budget=budget, topk=None, max_bs=bs, ops=RoundOps("cpu"), tree_in_graph=False,
              anchor="chain", calibration=cal)
    hidden = torch.randn(bs * block, H, generator=g)
    roots, prefix, law = torch.arange(bs), torch.arange(bs) * 3, mixed_law(bs)
    bounds = [round(V * r / tp) for r in range(tp + 1)]
    gather = _Gather(tp)
    heads = lambda: [DraftTreeHead(weight=weight[a:b], num_org=b - a, vocab=V, vocab_start=a,  # noqa: E731
                                   tp=TpAgreement(gather.rank(r)), **kw)
                     for r, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    for head in heads():  # records every rank's contribution
        head.build(hidden, bs, roots, prefix, law)
    gather.replay = True
    trees = [head.build(hidden, bs, roots, prefix, law) for head in heads()]
    whole = DraftTreeHead(weight=weight, num_org=V, **kw)
    want = whole.build(hidden, bs, roots, prefix, law)
    for tree in trees:
        for name, t in trees[0].tensors().items():
            assert torch.equal(getattr(tree, name), t), name
    for name in ("num_nodes", "tokens", "parents", "depths", "ranks"):
        assert torch.equal(getattr(trees[0], name), getattr(want, name)), name
    assert torch.allclose(trees[0].logw, want.logw, atol=1e-4, rtol=0)
    # the shards' merge under the laws, not the draft's: the greedy-key merge builds other trees
    plain = DraftTreeHead(weight=weight, num_org=V, **kw).build(hidden, bs, roots, prefix)
    assert not torch.equal(plain.tokens, trees[0].tokens)


def test_head_caps_k_at_vocab(plugins_loaded):
    from sglang_ddtree.sglang.draft_head import DraftTreeHead

    head = DraftTreeHead(weight=torch.randn(6, 4), num_org=6, block_size=3, budget=20, topk=None, max_bs=2,
                         ops=RoundOps("cpu"), tree_in_graph=False)
    assert head.k == 6


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU by scripts/gpu_check.sh)")
@pytest.mark.parametrize("anchor,temps,shaped", [(None, None, False), ("chain", None, False),
                                                 ("chain", [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], False),
                                                 ("chain", [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], True)])
def test_head_in_a_captured_graph_leaves_the_final_tree(plugins_loaded, anchor, temps, shaped):
    """The capture hook inside a real CUDA graph; replays with new hidden states, roots, prefixes (the draft
    graph's static inputs) and laws (load_law before the replay: all greedy, then mixed greedy / sampled) leave
    exactly the tree of the new inputs in the static buffers: the eager CUDA stage 1 under each request's law
    (keys.DraftKeys) fed to the oracle, anchored for the greedy requests; shaped: a drawn tree's shape table, the
    sampled requests' trees built from their shape keys inside the graph, the static keys the law keys."""
    from sglang_ddtree.keys import Calibration, DraftKeys, ShapeTable
    from sglang_ddtree.sglang.draft_head import DraftTreeHead

    g = torch.Generator(device="cuda").manual_seed(5)
    V, H, block, budget, bs = 3000, 64, 8, 31, 4
    weight = torch.randn(V, H, device="cuda", generator=g)
    head = DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=budget, topk=None, max_bs=8,
                         ops=RoundOps("cuda"), tree_in_graph=True, anchor=anchor,
                         calibration=None if temps is None else Calibration(
                             tuple(temps), tuple(temps[::-1]),
                             ShapeTable(0.5, (0.6, 1.0), (((0.8, 0.1, 0.05, 0.02),) * 7, ((0.6, 0.2, 0.1, 0.01),) * 7))
                             if shaped else None))
    hidden = torch.randn(bs * block, H, device="cuda", generator=g)
    fb = types.SimpleNamespace(input_ids=torch.zeros(bs * block, dtype=torch.int64, device="cuda"),
                               seq_lens=torch.zeros(bs, dtype=torch.int64, device="cuda"))
    out = types.SimpleNamespace(hidden_states=hidden)
    head.capture(out.hidden_states, fb.input_ids, fb.seq_lens, bs * block)  # warm-up (kernels, workspaces)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        head.capture(out.hidden_states, fb.input_ids, fb.seq_lens, bs * block)
    for trial in range(4):
        law = None if trial % 2 == 0 else mixed_law(bs)
        if law is not None:
            law = type(law)(*(t.cuda() for t in (law.temperatures, law.top_ks, law.top_ps, law.min_ps)))
        head.load_law(law, bs)
        hidden.copy_(torch.randn(bs * block, H, device="cuda", generator=g))
        fb.input_ids.copy_(torch.randint(0, V, (bs * block,), device="cuda", generator=g))
        fb.seq_lens.copy_(torch.randint(0, 10**6, (bs,), device="cuda", generator=g))
        graph.replay()
        got = head.from_graph(bs)
        # the oracle fed the CUDA stage 1's (lp, ids) of the same logits (stage-1 backends differ by ulps)
        logits = rows_logits(hidden, weight, bs, block)
        keys = DraftKeys(block - 1, head.keys.calibration, "cuda")
        lp, ids = keys(logits, head.k, "cuda", law)
        if shaped:  # the children's law stays the law keys
            torch.testing.assert_close(head.keys_of(bs, True)[0], lp, rtol=0, atol=1e-5)
        anchored = None if law is None or anchor is None else law.greedy().cpu()
        ref = build_tree_from_topk(keys.shape_keys(lp, law).cpu(), ids.cpu(), budget, root_tokens=fb.input_ids.view(bs, block)[:, 0].cpu(),
                                   seq_lens=fb.seq_lens.cpu(), backend="reference", anchor=anchor, anchored=anchored)
        for name, t in ref.tensors().items():
            assert torch.equal(getattr(got, name).cpu(), t), (trial, name)


def test_head_reads_the_lm_head_in_one_2d_gemm(plugins_loaded, monkeypatch):
    """A strided [bs, L, H] operand makes matmul a batched GEMM that reads the whole lm_head once per request
    (9 ms a round at 16 requests on a 163840-row head, H200): the head must hand matmul one contiguous 2-D
    operand, whatever the batch."""
    from sglang_ddtree.sglang import draft_head as mod

    seen, real = [], torch.matmul
    monkeypatch.setattr(mod.torch, "matmul", lambda a, b: (seen.append((a.dim(), a.is_contiguous())), real(a, b))[1])
    g = torch.Generator().manual_seed(5)
    V, H, block, bs = 40, 8, 5, 6
    weight = torch.randn(V, H, generator=g)
    head = mod.DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=6, topk=None, max_bs=8,
                             ops=RoundOps("cpu"), tree_in_graph=False)
    hidden = torch.randn(bs * block, H, generator=g)
    logits = head.logits(hidden, bs)
    assert seen == [(2, True)]
    assert logits.shape == (bs, block - 1, V)
    torch.testing.assert_close(logits, hidden.view(bs, block, H)[:, 1:] @ weight.T)
