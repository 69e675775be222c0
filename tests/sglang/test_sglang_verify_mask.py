"""The sync-free FULL_MASK writer against the straightforward per-request layout (`reference_full_mask`)."""
import torch

from sglang_ddtree import build_tree
from sglang_ddtree.sglang.verify_input import full_tree_mask, host_mask_bound


def reference_full_mask(tree, prefix_lens) -> torch.Tensor:
    """SGLang's FULL_MASK layout: per request, n rows of (prefix_len + n) columns, prefix all visible,
    flattened and concatenated over requests (bool [Σ n·(prefix_len + n)])."""
    parts = []
    for b, plen in enumerate(int(x) for x in prefix_lens.tolist()):
        rows = torch.ones(tree.n, plen + tree.n, dtype=torch.bool)
        rows[:, plen:] = tree.tree_mask[b]
        parts.append(rows.reshape(-1))
    return torch.cat(parts)


def test_full_mask_matches_reference_layout():
    g = torch.Generator().manual_seed(0)
    for B, L, V, budget in [(1, 3, 11, 5), (3, 4, 17, 9), (5, 7, 32, 16)]:
        logits = torch.randn(B, L, V, generator=g)
        prefix = torch.randint(0, 40, (B,), generator=g)
        tree = build_tree(logits, budget, seq_lens=prefix, backend="cpu")
        ref = reference_full_mask(tree, prefix)
        hb = host_mask_bound(prefix.to(torch.int32), None, tree.n)  # host bound above the real lengths
        ours = full_tree_mask(tree.tree_mask, prefix, hb.total)
        assert hb.total >= ref.numel()
        assert torch.equal(ours[: ref.numel()], ref)
        assert bool(ours[ref.numel():].all())


def test_exact_bound_and_bad_shapes():
    tree = build_tree(torch.randn(2, 3, 9), 4, backend="cpu")
    prefix = torch.tensor([0, 5])
    exact = tree.n * int((prefix + tree.n).sum())
    assert torch.equal(full_tree_mask(tree.tree_mask, prefix, exact), reference_full_mask(tree, prefix))
    import pytest

    with pytest.raises(ValueError, match="tree_mask"):
        full_tree_mask(tree.tree_mask[0], prefix, exact)
    with pytest.raises(ValueError, match="prefix_lens"):
        full_tree_mask(tree.tree_mask, prefix[:1], exact)
