"""A drawn tree's shape keys (keys.DraftKeys.shape_keys, docs/DESIGN.md §3.12) against a float64 evaluation of their
definition, the tree they build against the reference builder's, the shape table's fit against a known table, and
the calibration file's shape entry (old files without one load as before)."""
import json
import math

import numpy as np
import pytest
import torch

from sglang_ddtree import flags as F
from sglang_ddtree import reference
from sglang_ddtree.calibration import fit_shape_table, load_calibration, shape_entry
from sglang_ddtree.keys import ALPHA_FLOOR, Calibration, DraftKeys, ShapeTable
from sglang_ddtree.sampling import NodeLaw
from sglang_ddtree.tree import build_tree_from_topk

INF = float("inf")


def laws(temps, top_ks=None):
    B = len(temps)
    return NodeLaw(torch.tensor(temps, dtype=torch.float32),
                   torch.tensor(top_ks or [0] * B, dtype=torch.int64), torch.ones(B), torch.zeros(B), filtered=True)


def random_table(rng, M, L, R):
    """Tables with zeros (floored), ties and rises (the definition makes each row non-increasing)."""
    a = rng.uniform(0, 1, (M, L, R)) ** 2
    a[a < 0.05] = 0.0
    a[:, :, 1::3] = a[:, :, 0::3][:, :, :a[:, :, 1::3].shape[2]]  # ties
    return a


def definition(lp, temps, greedy, shape: ShapeTable):
    """The shape keys in float64, row by row: α floored at ALPHA_FLOOR and made non-increasing in r (its running
    minimum), interpolated linearly in the request's temperature between the tables (clamped), slots past the table
    taking its last; s = w · lp + (1 − w) · log α; −inf where lp is; greedy rows lp."""
    lp = np.asarray(lp, np.float64)
    B, L, k = lp.shape
    a = np.maximum(np.asarray(shape.alpha, np.float64), ALPHA_FLOOR)
    la = np.minimum.accumulate(np.log(a), axis=-1)
    ts = np.asarray(shape.temperatures, np.float64)
    out = lp.copy()
    for b in range(B):
        if greedy[b]:
            continue
        t = temps[b]
        if len(ts) == 1 or t <= ts[0]:
            row = la[0]
        elif t >= ts[-1]:
            row = la[-1]
        else:
            j = int(np.searchsorted(ts, t))
            f = (t - ts[j - 1]) / (ts[j] - ts[j - 1])
            row = (1 - f) * la[j - 1] + f * la[j]
        row = row[:, np.minimum(np.arange(k), row.shape[1] - 1)]
        w = shape.weight
        with np.errstate(invalid="ignore"):  # 0 · −inf where w is 0: those entries are −inf by the definition
            out[b] = np.where(np.isneginf(lp[b]), -np.inf, w * lp[b] + (1 - w) * row)
    return out


def sorted_lp(rng, B, L, k, drop=True):
    """Non-increasing float32 keys per row with ties, and −inf tails (a filter's drops) in some rows."""
    lp = -np.sort(rng.exponential(2.0, (B, L, k)), -1).astype(np.float32)
    if k > 2:
        lp[:, :, 2] = lp[:, :, 1]  # a tie
    if drop:
        for b in range(B):
            cut = int(rng.integers(1, k + 1))
            lp[b, :, cut:] = -np.inf
    return lp


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("M", [1, 2, 3])
def test_shape_keys_equal_their_definition(seed, M):
    rng = np.random.default_rng(seed)
    L, R = 4, int(rng.integers(1, 9))
    k = int(rng.integers(1, 14))
    temps = [1.0, 0.0, 0.6, 0.3, 1.7, 0.8, 1.0, 0.45][:8]
    top_ks = [0, 0, 0, 1, 0, 20, 0, 0]
    greedy = [t <= 0 or tk == 1 for t, tk in zip(temps, top_ks)]
    fitted = tuple(sorted(rng.choice([0.4, 0.6, 0.8, 1.0, 1.2], M, replace=False).tolist()))
    shape = ShapeTable(float(rng.choice([0.0, 0.25, 0.5, 1.0])), fitted,
                       tuple(map(tuple, map(lambda x: tuple(map(tuple, x)), random_table(rng, M, L, R)))))
    lp = sorted_lp(rng, len(temps), L, k)
    got = DraftKeys(L, Calibration(shape=shape)).shape_keys(torch.from_numpy(lp), laws(temps, top_ks))
    want = definition(lp, temps, greedy, shape)
    assert got.dtype == torch.float32
    assert torch.equal(torch.isneginf(got), torch.from_numpy(np.isneginf(want)))
    assert not torch.isnan(got).any()
    fin = np.isfinite(want)
    np.testing.assert_allclose(got.numpy()[fin], want[fin], rtol=0, atol=1e-5)
    diffs = got[..., 1:] - got[..., :-1]
    assert not bool((diffs > 0).any()), "the shape keys must stay non-increasing in rank"


def test_shape_keys_leave_greedy_rows_and_tableless_keys_alone():
    rng = np.random.default_rng(3)
    lp = torch.from_numpy(sorted_lp(rng, 3, 2, 5))
    law = laws([0.0, 1.0, 0.7], [0, 1, 0])  # greedy by temperature, greedy by top_k 1, sampled
    shape = ShapeTable(0.5, (1.0,), (((0.5, 0.1), (0.4, 0.2)),))
    got = DraftKeys(2, Calibration(shape=shape)).shape_keys(lp, law)
    assert torch.equal(got[:2], lp[:2])
    assert not torch.equal(got[2], lp[2])
    assert DraftKeys(2).shape_keys(lp, law) is lp
    assert DraftKeys(2, Calibration(shape=shape)).shape_keys(lp, None) is lp


@pytest.mark.parametrize("seed", range(4))
def test_tree_from_shape_keys_equals_the_reference_builders(seed):
    """The shape keys go to the builders as any keys do: the tree equals reference.build_tree_reference's on the same
    keys, and no node holds a token whose law key is −inf."""
    rng = np.random.default_rng(10 + seed)
    B, L, k, budget = 6, 5, 9, int(rng.integers(4, 24))
    lp = sorted_lp(rng, B, L, k)
    ids = np.stack([np.stack([rng.permutation(50)[:k] for _ in range(L)]) for _ in range(B)]).astype(np.int64)
    shape = ShapeTable(0.5, (0.6, 1.0), tuple(map(lambda x: tuple(map(tuple, x)), random_table(rng, 2, L, 4))))
    law = laws([1.0, 0.6, 0.8, 0.0, 1.3, 0.5])
    s = DraftKeys(L, Calibration(shape=shape)).shape_keys(torch.from_numpy(lp), law)
    roots = torch.arange(B) + 100
    tree = build_tree_from_topk(s, torch.from_numpy(ids), budget, root_tokens=roots, seq_lens=torch.zeros(B, dtype=torch.int64))
    for b in range(B):
        ref = reference.build_tree_reference(s[b].numpy(), ids[b], budget, root_token=int(roots[b]),
                                             request_index=b)
        assert not int(ref["flags"]) & (F.UNSORTED_INPUT | F.NONFINITE_INPUT), "shape keys must be sorted, no NaN"
        n = int(tree.num_nodes[b])
        assert n == int(ref["num_nodes"]) and n > 1
        for name in ("flags", "tokens", "parents", "depths", "ranks", "retrive_next_token", "retrive_next_sibling"):
            assert getattr(tree, name)[b].tolist() == np.asarray(ref[name]).tolist(), (b, name)
        np.testing.assert_allclose(tree.logw[b, :n].numpy(), ref["logw"][:n], rtol=0, atol=1e-4)
        dropped = {int(ids[b, d, r]) for d in range(L) for r in range(k) if np.isneginf(lp[b, d, r])}
        kept = {int(ids[b, d, r]) for d in range(L) for r in range(k) if not np.isneginf(lp[b, d, r])}
        assert not ({int(t) for t in tree.tokens[b, 1:n]} & (dropped - kept)), b


def test_fit_recovers_a_known_table():
    """Synthetic outcome probabilities drawn around a known non-increasing table: the fit recovers it; a (depth,
    slot) seen fewer than min_count times takes the slot before it; a rise is flattened by the running minimum."""
    rng = np.random.default_rng(0)
    L, R = 3, 5
    alpha = np.array([[0.7, 0.2, 0.1, 0.05, 0.02], [0.5, 0.3, 0.3, 0.1, 0.05], [0.4, 0.1, 0.08, 0.06, 0.01]])
    counts = rng.integers(3000, 6000, (L, R))
    counts[2, 4] = 5  # too few: takes slot 3's value
    depth, slot, taken = [], [], []
    for d in range(L):
        for r in range(R):
            n = int(counts[d, r])
            depth += [d + 1] * n
            slot += [r] * n
            # per-node probabilities whose mean is alpha: a Beta around it
            c = 20.0
            taken.append(rng.beta(alpha[d, r] * c, (1 - alpha[d, r]) * c, n))
    depth, slot = torch.tensor(depth), torch.tensor(slot)
    taken = torch.from_numpy(np.concatenate(taken))
    got = np.array(fit_shape_table(taken, depth, slot, L, R, min_count=100))
    want = alpha.copy()
    want[2, 4] = want[2, 3]
    np.testing.assert_allclose(got, want, atol=0.01)
    # a rise: slot 2 above slot 1 at depth 1 in the data is flattened to slot 1's value
    rise = taken.clone()
    rise[(depth == 1) & (slot == 2)] = 0.5
    got = np.array(fit_shape_table(rise, depth, slot, L, R, min_count=100))
    assert got[0, 2] == pytest.approx(got[0, 1]) and all(np.diff(got[0]) <= 0)
    # out-of-range entries are ignored
    got2 = np.array(fit_shape_table(torch.cat([taken, torch.ones(10)]), torch.cat([depth, torch.full((10,), 9)]),
                                    torch.cat([slot, torch.zeros(10, dtype=torch.int64)]), L, R, min_count=100))
    np.testing.assert_allclose(got2, np.array(fit_shape_table(taken, depth, slot, L, R, min_count=100)))


def test_calibration_files_with_and_without_a_shape_entry(tmp_path):
    old = {"depth_temperature": [0.5, 0.6], "sampling_depth_temperature": [1.1, 1.2]}
    f = tmp_path / "old.json"
    f.write_text(json.dumps(old))
    cal = load_calibration(str(f), 2)
    assert cal.shape is None and cal.sampling == (1.1, 1.2) and cal.greedy == (0.5, 0.6)
    entry = shape_entry(0.5, [({"temperature": 1.0}, [[0.7, 0.1, 0.05], [0.4, 0.1, 0.0]]),
                              ({"temperature": 0.6, "top_p": 0.95}, [[0.8, 0.1, 0.05], [0.4, 0.2, 0.1]])])
    f2 = tmp_path / "new.json"
    f2.write_text(json.dumps({**old, "drawn_shape": entry}))
    cal = load_calibration(str(f2), 2)
    assert cal.shape.weight == 0.5 and cal.shape.temperatures == (0.6, 1.0)  # sorted by temperature
    assert cal.shape.alpha[1] == ((0.7, 0.1, 0.05), (0.4, 0.1, 0.0))
    for bad in ({"weight": 2.0, "tables": entry["tables"]}, {"weight": 0.5},
                {"weight": 0.5, "tables": [{"temperature": 1.0, "alpha": [[0.5]]}]},  # one depth of two
                {"weight": 0.5, "tables": [{"temperature": -1.0, "alpha": [[0.5], [0.4]]}]}):
        f3 = tmp_path / "bad.json"
        f3.write_text(json.dumps({**old, "drawn_shape": bad}))
        with pytest.raises(ValueError, match="drawn_shape"):
            load_calibration(str(f3), 2)


def test_the_shipped_calibration_loads():
    from sglang_ddtree.engine.data import MODELS_DIR
    import os

    cal = load_calibration(os.path.join(MODELS_DIR, "tiny-dflash"), 7)
    assert cal.greedy is not None
    if cal.shape is not None:
        assert 0.0 <= cal.shape.weight <= 1.0 and all(len(t) == 7 for t in cal.shape.alpha)
        assert all(math.isfinite(a) for t in cal.shape.alpha for row in t for a in row)
