"""The tree's keys under each request's law (sglang_ddtree/keys.py, docs/DESIGN.md §3.11) against the definition
(reference.law_keys_reference), and the definition against what it claims: the tempered draft's log-probabilities,
the filtered law's own mass where its kept set ends inside the candidates, greedy rows untouched."""
import math

import numpy as np
import pytest
import torch

from sglang_ddtree import reference
from sglang_ddtree.keys import Calibration, DraftKeys
from sglang_ddtree.sampling import NodeLaw
from sglang_ddtree.topk import topk_logprobs

LAWS = [(1.0, 0, 1.0, 0.0), (0.6, 0, 0.95, 0.0), (0.8, 5, 1.0, 0.0), (1.3, 0, 1.0, 0.05), (0.7, 12, 0.8, 0.02),
        (0.0, 0, 1.0, 0.0), (1.0, 1, 1.0, 0.0), (0.5, 0, 1e-6, 0.0), (2.0, 40, 0.999, 0.0)]


def node_law(rows):
    t, k, p, m = zip(*rows)
    return NodeLaw(torch.tensor(t, dtype=torch.float32), torch.tensor(k), torch.tensor(p, dtype=torch.float32),
                   torch.tensor(m, dtype=torch.float32))


def reference_keys(x, k, law_rows, cal: Calibration):
    """The definition, row by row: scale 1 / c_d (greedy) or 1 / (T c_d) (sampled), filters for sampled rows."""
    B, L, _ = x.shape
    lp, ids = np.zeros((B, L, k)), np.zeros((B, L, k), np.int64)
    for b, (t, top_k, top_p, min_p) in enumerate(law_rows):
        greedy = t <= 0 or top_k == 1
        for d in range(L):
            c = (cal.greedy or [1.0] * L)[d] if greedy else (cal.sampling or [1.0] * L)[d] * t
            scale = np.float32(1.0) / np.float32(c)  # keys.py's float32 inverse
            lp[b, d], ids[b, d] = reference.law_keys_reference(x[b, d].numpy(), k, scale,
                                                               None if greedy else (top_k, top_p, min_p))
    return lp, ids


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cal", [Calibration(), Calibration((0.5, 0.7, 0.9), (1.2, 0.9, 1.5))])
def test_keys_equal_the_definition_in_a_mixed_batch(seed, cal):
    rng = np.random.default_rng(seed)
    B, L, V, k = len(LAWS), 3, int(rng.integers(20, 300)), int(rng.integers(4, 19))
    x = torch.tensor(rng.standard_normal((B, L, V)) * rng.choice([1.0, 3.0]), dtype=torch.float32)
    lp, ids = DraftKeys(L, cal)(x, k, "cpu", node_law(LAWS))
    want_lp, want_ids = reference_keys(x, k, LAWS, cal)
    assert ids.tolist() == want_ids.tolist()
    assert torch.equal(torch.isneginf(lp), torch.from_numpy(np.isneginf(want_lp)))
    fin = np.isfinite(want_lp)
    np.testing.assert_allclose(lp.numpy()[fin], want_lp[fin], rtol=0, atol=2e-5)


def test_the_definition_is_the_tempered_filtered_law():
    """Sampled rows: the keys are log softmax(x / T) of the top-k (no filter), or the filtered law's own
    log-probabilities (computed here from reference.filtered_law, which the target's draws follow) where the
    kept set ends inside the candidates; where it reaches past them the keys are the tempered log-probs."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(60)
    top = np.argsort(-x, kind="stable")[:10]
    lp, ids = reference.law_keys_reference(x, 10, 1 / 0.7, (0, 1.0, 0.0))
    tempered = np.log(np.exp(x / 0.7) / np.exp(x / 0.7).sum())
    assert ids.tolist() == top.tolist()
    np.testing.assert_allclose(lp, tempered[top], atol=1e-5)
    for law in ((4, 1.0, 0.0), (0, 0.5, 0.0), (0, 1.0, 0.3)):
        lp, ids = reference.law_keys_reference(x, 10, 1 / 0.7, law)
        q = reference.filtered_law(x, 0.7, *law)
        assert 1 < (q > 0).sum() < 10  # the kept set ends inside the 10 candidates
        np.testing.assert_allclose(np.exp(lp), q[ids], atol=1e-6)
    lp, _ = reference.law_keys_reference(x, 10, 1 / 0.7, (0, 0.999, 0.0))  # reaches past rank 9: unfiltered
    np.testing.assert_allclose(lp, tempered[top], atol=1e-5)


def test_greedy_rows_keep_the_greedy_keys():
    """A greedy request (temperature 0, or top_k 1 as SGLang carries it) ranks by the draft over the greedy
    calibration, whatever the batch's other laws; a batch without a law is all greedy."""
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.standard_normal((3, 4, 50)), dtype=torch.float32)
    cal = Calibration((0.4, 0.5, 0.6, 0.7), (1.1, 1.1, 1.1, 1.1))
    keys = DraftKeys(4, cal)
    mixed_lp, mixed_ids = keys(x, 8, "cpu", node_law([(0.0, 0, 0.5, 0.0), (1.0, 1, 1.0, 0.2), (0.9, 3, 0.8, 0.1)]))
    alone_lp, alone_ids = topk_logprobs(x, 8, "cpu", torch.tensor([[1 / t for t in cal.greedy]] * 3))
    assert torch.equal(mixed_lp[:2], alone_lp[:2]) and torch.equal(mixed_ids[:2], alone_ids[:2])
    no_law = keys(x, 8, "cpu", None)
    assert torch.equal(no_law[0], alone_lp) and torch.equal(no_law[1], alone_ids)
    assert not torch.equal(mixed_lp[2], alone_lp[2])  # the sampled row has its own keys


def test_unscaled_stage_one_is_unchanged_and_a_scale_keeps_the_candidates():
    x = torch.randn(2, 3, 70)
    lp, ids = topk_logprobs(x, 9, "cpu")
    lp2, ids2 = topk_logprobs(x, 9, "cpu", torch.full((2, 3), 1 / 0.3))
    assert torch.equal(ids, ids2)
    want = torch.log_softmax(x / 0.3, -1).gather(-1, ids)
    torch.testing.assert_close(lp2, want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="scale"):
        topk_logprobs(x, 9, "cpu", torch.ones(2))


def test_nonfinite_rows_stay_flagged():
    """A NaN draft row keeps a NaN key under any law (the builder flags the request: §3.3)."""
    x = torch.randn(2, 2, 30)
    x[1, 0, 4] = float("nan")
    lp, _ = DraftKeys(2)(x, 5, "cpu", node_law([(0.7, 3, 0.9, 0.0), (0.7, 3, 0.9, 0.0)]))
    assert torch.isnan(lp[1, 0]).any() and not torch.isnan(lp[0]).any()


def test_calibration_of_the_wrong_depth_count_is_refused():
    with pytest.raises(ValueError, match="calibration.sampling"):
        DraftKeys(3, Calibration(sampling=(1.0, 1.0)))
    assert math.isclose(float(DraftKeys(2, Calibration(sampling=(2.0, 4.0))).sampling_scale[1]), 0.25)
