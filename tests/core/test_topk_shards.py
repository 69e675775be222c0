"""Stage 1 under tensor parallelism: each rank's shard of the vocabulary, merged (topk.merge_shards), is the
canonical stage 1 of the whole row: the same ids in the same order (ties by id included), the log-probs within a
few ulps (the normaliser is a log-sum-exp of the shards'); under each request's law (a per-row scale on every shard,
the filters on the merged keys) the keys are reference.law_keys_reference's, as unsharded."""
import numpy as np
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


def sharded(tp: int, V: int, scale_shards: bool = True):
    """A stage 1 with DraftKeys' signature (logits, k, backend, scale) that runs as tp ranks would: each shard's
    shard_stage1 under the rows' scale, stacked as the all-gather leaves them, merged (sglang/tp.py's
    TpAgreement.stage1 without the collective). scale_shards=False: the shards' normalisers left unscaled (a
    mutation the tests must catch)."""
    bounds = [round(V * r / tp) for r in range(tp + 1)]

    def stage1(logits, k, backend, scale):
        shard_scale = scale if scale_shards else None
        parts = [shard_stage1(logits[..., a:b], k, a, backend, shard_scale) for a, b in zip(bounds, bounds[1:])]
        ks = min(p[0].shape[-1] for p in parts)
        vals, ids = (torch.stack([p[j][..., :ks] for p in parts]) for j in (0, 1))
        return merge_shards(vals, ids, torch.stack([p[2] for p in parts]), k, scale)
    return stage1


@pytest.mark.parametrize("tp", [2, 3, 4])
@pytest.mark.parametrize("calibrated", [False, True])
def test_sharded_law_keys_equal_the_unsharded_law_keys(tp, calibrated):
    """Stage 1 under each request's law (keys.py, docs/DESIGN.md §3.11) with the vocabulary sharded: every rank's
    shard scaled by the rows' law scale before the merge, the filters on the merged keys. A mixed batch (greedy,
    tempered, top-k / top-p / min-p, a kept set ending inside and past the candidates): the candidates are the
    definition's (reference.law_keys_reference) exactly, ties across shards included, the dropped ones the same,
    the keys within the shards' log-sum-exp rounding; and equal to the unsharded DraftKeys'."""
    from sglang_ddtree.keys import Calibration, DraftKeys
    from test_law_keys import LAWS, node_law, reference_keys

    rng = np.random.default_rng(tp * 10 + calibrated)
    B, L, k = len(LAWS), 3, 12
    V = 61 * tp + 5
    cal = Calibration((0.5, 0.7, 0.9), (1.2, 0.9, 1.5)) if calibrated else Calibration()
    x = torch.tensor(rng.standard_normal((B, L, V)) * 2.5, dtype=torch.float32)
    x[0, :, V // tp - 3: V // tp + 3] = 1.75  # a tie group across the first shard boundary
    keys, law = DraftKeys(L, cal), node_law(LAWS)
    lp, ids = keys(x, k, "cpu", law, sharded(tp, V))
    want_lp, want_ids = reference_keys(x, k, LAWS, cal)
    assert ids.tolist() == want_ids.tolist()
    assert torch.equal(torch.isneginf(lp), torch.from_numpy(np.isneginf(want_lp)))
    fin = np.isfinite(want_lp)
    np.testing.assert_allclose(lp.numpy()[fin], want_lp[fin], rtol=0, atol=2e-5)
    one_lp, one_ids = keys(x, k, "cpu", law)
    assert torch.equal(ids, one_ids)
    assert torch.allclose(lp, one_lp, atol=1e-5, rtol=0)
    # the same merge with the shards' normalisers left unscaled is caught: the tempered rows' keys move
    bad_lp, bad_ids = keys(x, k, "cpu", law, sharded(tp, V, scale_shards=False))
    assert torch.equal(bad_ids, ids)
    sampled = ~law.greedy()
    assert not torch.allclose(bad_lp[sampled], lp[sampled], atol=1e-3, equal_nan=True)


def test_the_merge_ranks_by_the_raw_logit_where_the_scale_rounds_two_to_one():
    """A scale can round two adjacent float32 logits to one product (here 1.9 and the next float at T = 0.7); the
    candidates stay x's order (the definition), which a merge by the scaled values would lose: the larger logit
    sits at the larger id, in another shard."""
    from sglang_ddtree.reference import law_keys_reference

    x1 = np.float32(1.9)
    x2 = np.nextafter(x1, np.float32(2))
    scale = np.float32(1) / np.float32(0.7)
    assert scale * x1 == scale * x2  # the premise: the products tie
    V = 40
    row = torch.tensor(np.random.default_rng(3).standard_normal(V) * 0.3, dtype=torch.float32)
    row[3], row[V - 2] = float(x1), float(x2)
    logits, s = row.view(1, 1, V), torch.full((1, 1), float(scale))
    want_lp, want_ids = law_keys_reference(row.numpy(), 4, scale)
    lp, ids = sharded(2, V)(logits, 4, "cpu", s)
    assert ids[0, 0].tolist() == want_ids.tolist() and want_ids[:2].tolist() == [V - 2, 3]
    np.testing.assert_allclose(lp[0, 0].numpy(), want_lp, rtol=0, atol=2e-6)
    parts = [shard_stage1(logits[..., a:b], 4, a, "cpu", s) for a, b in ((0, V // 2), (V // 2, V))]
    by_scaled = merge_shards(torch.stack([p[0] for p in parts]) * s.unsqueeze(-1), torch.stack([p[1] for p in parts]),
                             torch.stack([p[2] for p in parts]), 4)[1]
    assert by_scaled[0, 0, :2].tolist() == [3, V - 2]  # what ranking by s ⊗ x would give
