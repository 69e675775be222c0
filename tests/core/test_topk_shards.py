"""Stage 1 under tensor parallelism: each rank's shard of the vocabulary, merged (topk.merge_shards), is the
canonical stage 1 of the whole row: the same ids in the same order (ties by id included), the log-probs within a
few ulps (the normaliser is a log-sum-exp of the shards')."""
import pytest
import torch

from sglang_ddtree.topk import merge_shards, shard_stage1, topk_logprobs


@pytest.mark.parametrize("tp", [2, 3, 4])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_merged_shards_are_the_whole_rows_stage1(tp, k):
    g = torch.Generator().manual_seed(tp * 100 + k)
    V = 97 * tp + 3 * (tp > 2)  # shards of unequal size where tp > 2
    logits = torch.randn(6, 7, V, generator=g) * 2
    logits[0, :, 10:20] = 1.5  # ties, inside and across shards
    logits[1, :, :] = 0.0  # one tie group over the whole row
    want_lp, want_ids = topk_logprobs(logits, k, "cpu")
    bounds = [round(V * r / tp) for r in range(tp + 1)]
    parts = [shard_stage1(logits[..., a:b], k, a, "cpu") for a, b in zip(bounds, bounds[1:])]
    ks = min(p[0].shape[-1] for p in parts)
    vals = torch.stack([p[0][..., :ks] for p in parts])
    ids = torch.stack([p[1][..., :ks] for p in parts])
    lse = torch.stack([p[2] for p in parts])
    lp, got_ids = merge_shards(vals, ids, lse, k)
    assert torch.equal(got_ids, want_ids)
    assert torch.allclose(lp, want_lp, atol=1e-5, rtol=0)


def test_a_merge_that_drops_the_id_order_is_caught():
    """The tie order is the test's point: merging by value alone (no id order) picks another tied id."""
    logits = torch.zeros(1, 1, 8)
    want = topk_logprobs(logits, 2, "cpu")[1]
    parts = [shard_stage1(logits[..., 4:], 2, 4, "cpu"), shard_stage1(logits[..., :4], 2, 0, "cpu")]  # rank order swapped
    vals, ids = torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])
    _, got = merge_shards(vals, ids, torch.stack([p[2] for p in parts]), 2)
    assert torch.equal(got, want)  # the merge restores the id order whatever the ranks' order
    naive = torch.cat([ids[0], ids[1]], -1)[..., :2]
    assert not torch.equal(naive, want)
