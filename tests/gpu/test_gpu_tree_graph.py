"""The whole tree stage (draft logits -> top-k+LSE -> build -> per-node tokens -> accept) runs without a
host sync: captured once in a CUDA graph, replayed on new inputs, it gives the eager result."""
import pytest
import torch

from gpu_tree_util import assert_identical, assert_replay_equals_eager, load

from sglang_ddtree.bench.common import capture

pytestmark = pytest.mark.gpu
B, L, V, BUDGET = 16, 15, 32000, 64


def stage(ops, draft, target_logits, roots, lens, seed, step, temperature):
    lp, ids = ops.topk_lse(draft.reshape(-1, V), BUDGET)
    outs = ops.build_tree_from_topk(lp.reshape(B, L, BUDGET), ids.reshape(B, L, BUDGET), roots, lens, BUDGET)
    n = BUDGET + 1
    node = torch.arange(n, device=draft.device).repeat(B)
    tgt = ops.sample_rows(target_logits.reshape(B * n, V), temperature, seed.repeat_interleave(n),
                          step.repeat_interleave(n), node).reshape(B, n)
    acc = ops.accept_tree(outs[1], outs[8], outs[9], outs[0], tgt, L)
    return list(outs) + [tgt] + list(acc)


def fresh(gen):
    draft = (torch.randn(B, L, V, generator=gen, device="cuda") * 3).bfloat16()
    target = (torch.randn(B, BUDGET + 1, V, generator=gen, device="cuda") * 3).bfloat16()
    roots = torch.randint(0, V, (B,), generator=gen, device="cuda")
    lens = torch.randint(0, 4096, (B,), generator=gen, device="cuda")
    seed = torch.randint(0, 2**62, (B,), generator=gen, device="cuda")
    step = torch.randint(0, 2**20, (B,), generator=gen, device="cuda")
    return [draft, target, roots, lens, seed, step]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_tree_stage_graph_replay_equals_eager(temperature):
    ops = load()
    gen = torch.Generator(device="cuda").manual_seed(11)
    assert_replay_equals_eager(lambda *inputs: stage(ops, *inputs, temperature), lambda: fresh(gen))


def test_public_api_graph_capture():
    """The same through the public wrappers (tree.py / accept.py): they must not sync either."""
    load()
    from sglang_ddtree import accept_tree, build_tree
    from sglang_ddtree.sampling import sample_node_tokens
    gen = torch.Generator(device="cuda").manual_seed(12)
    draft, target, roots, lens, seed, step = fresh(gen)

    def run():
        tree = build_tree(draft, BUDGET, root_tokens=roots, seq_lens=lens, backend="cuda")
        t = sample_node_tokens(target, 0.7, seed=seed, step=step, backend="cuda")
        return tree, accept_tree(tree, t, backend="cuda")

    g, (tree_g, res_g) = capture(run)
    new = fresh(gen)
    for dst, src in zip((draft, target, roots, lens, seed, step), new):
        dst.copy_(src)
    g.replay()
    torch.cuda.synchronize()
    tree_e, res_e = run()
    assert_identical(tree_g, tree_e)
    assert torch.equal(res_g.accept_index, res_e.accept_index) and torch.equal(res_g.bonus, res_e.bonus)


def test_public_build_captured_first_with_default_lengths_does_not_poison_eager_calls():
    """build_tree_from_topk's default root/seq_lens vectors are cached per shape; one first made while a
    graph is being captured would hold a fill that never ran: the cache must skip capture."""
    from sglang_ddtree import build_tree_from_topk
    from sglang_ddtree._checks import _filled

    _filled.cache_clear()
    Bq, k = 3, 4  # a shape no other test uses, so capture makes the first default vectors
    lp, ids = torch.sort(torch.randn(Bq, L, k, device="cuda"), dim=-1, descending=True)[0], \
        torch.randint(0, V, (Bq, L, k), device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        build_tree_from_topk(lp, ids, 8)
    torch.cuda.current_stream().wait_stream(s)
    assert _filled.cache_info().currsize == 0  # nothing made during capture was cached
    eager = build_tree_from_topk(lp, ids, 8)
    want = build_tree_from_topk(lp, ids, 8, root_tokens=torch.zeros(Bq, dtype=torch.int64, device="cuda"),
                                seq_lens=torch.zeros(Bq, dtype=torch.int64, device="cuda"))
    assert torch.equal(eager.positions, want.positions) and torch.equal(eager.tokens, want.tokens)
