"""DraftTreeHead (the draft-side tree stage of the worker) against the public build_tree on the same logits."""
import torch

from sglang_ddtree import build_tree


def test_head_build_matches_build_tree(plugins_loaded):
    from sglang_ddtree.sglang.worker import DraftTreeHead

    g = torch.Generator().manual_seed(3)
    V, H, block, budget, bs = 50, 16, 5, 9, 3
    weight = torch.randn(V, H, generator=g)
    head = DraftTreeHead(weight=weight, num_org=V, block_size=block, budget=budget, topk=None, max_bs=4,
                         ops_backend="cpu", tree_in_graph=True)
    assert head.static_tree is None and not head.tree_in_graph  # in-graph build needs the CUDA ops
    hidden = torch.randn(bs * block, H, generator=g)
    roots, prefix = torch.tensor([7, 8, 9]), torch.tensor([3, 0, 11])
    got = head.build(hidden, bs, roots, prefix)
    logits = (hidden.view(bs, block, H)[:, 1:] @ weight.T)
    ref = build_tree(logits, budget, root_tokens=roots, seq_lens=prefix, backend="cpu")
    for name, t in ref.tensors().items():
        assert torch.equal(getattr(got, name), t), name

    # the graph path: the capture hook leaves top-k in static buffers, the tree is built from them
    class Out:
        hidden_states = hidden

    head.capture_hook(None, Out(), None, bs * block)
    again = head.from_graph(bs, roots, prefix)
    for name, t in ref.tensors().items():
        assert torch.equal(getattr(again, name), t), name


def test_head_caps_k_at_vocab(plugins_loaded):
    from sglang_ddtree.sglang.worker import DraftTreeHead

    head = DraftTreeHead(weight=torch.randn(6, 4), num_org=6, block_size=3, budget=20, topk=None, max_bs=2,
                         ops_backend="cpu", tree_in_graph=False)
    assert head.k == 6
