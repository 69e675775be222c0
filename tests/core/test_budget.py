"""Budget choice (sglang_ddtree/budget.py): the prefix property it rests on, the prediction it makes, and
the choice."""
import numpy as np
import pytest
import torch

from sglang_ddtree import accept_tree, build_tree_from_topk
from sglang_ddtree.budget import budget_table, choose_budget, expected_commit, truncate

from test_tree_native import MODES
from treegen import random_topk

FIELDS = ("tokens", "parents", "depths", "ranks", "logw", "positions")  # retrive_index is b * n + i: n differs


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("anchor", [None, "chain"])
def test_a_smaller_budget_is_the_first_pops_of_a_larger_tree(backend, anchor):
    """One build at the largest budget answers for every smaller one: same nodes, same order."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        B, L, V = 3, int(rng.integers(1, 9)), int(rng.choice([3, 17, 300]))
        big_b = int(rng.choice([16, 33, 64]))
        lp, ids = random_topk(rng, B, L, V, min(big_b, V), mode=MODES[trial % len(MODES)])
        big = build_tree_from_topk(lp, ids, big_b, backend=backend, anchor=anchor)
        for b in (0, 1, 5, 8, big_b - 1):
            k = max(1, min(b, lp.shape[-1]))
            small = build_tree_from_topk(lp[..., :k].contiguous(), ids[..., :k].contiguous(), b, backend=backend,
                                         anchor=anchor)
            m = small.num_nodes
            assert torch.equal(m, torch.minimum(big.num_nodes, torch.tensor(b + 1, dtype=m.dtype)))
            for f in FIELDS:
                x, y = getattr(small, f), getattr(big, f)[:, : b + 1]
                real = torch.arange(b + 1)[None, :] < m[:, None]
                assert torch.equal(torch.where(real, x, 0), torch.where(real, y.to(x.dtype), 0)), (trial, b, f)
            cut = truncate(big, b)  # and the device-side cut equals the fresh build, every field
            for f, t in small.tensors().items():
                assert torch.equal(getattr(cut, f), t), (trial, b, f)


def test_truncate_refuses_a_larger_budget():
    lp, ids = random_topk(np.random.default_rng(0), 1, 3, 10, 4)
    with pytest.raises(ValueError, match="budget"):
        truncate(build_tree_from_topk(lp, ids, 4, backend="cpu"), 5)


def test_expected_commit_is_the_sum_of_path_probabilities():
    rng = np.random.default_rng(1)
    lp, ids = random_topk(rng, 4, 6, 40, 16)
    tree = build_tree_from_topk(lp, ids, 30, backend="cpu")
    e = expected_commit(tree)
    for b in range(4):
        prob = [1.0]
        for i in range(1, int(tree.num_nodes[b])):
            d, r = int(tree.depths[b, i]), int(tree.ranks[b, i])
            prob.append(prob[int(tree.parents[b, i])] * float(np.exp(float(lp[b, d - 1, r]))))
        want = np.cumsum([1.0] + prob[1:])
        np.testing.assert_allclose(e[b, : len(want)].numpy(), want, rtol=1e-9)


def test_expected_commit_predicts_the_accept_length_of_a_calibrated_drafter():
    """A target that draws each depth's token from the drafter's own distribution is calibrated by
    construction: the mean accept length over many draws must match the prediction."""
    g = torch.Generator().manual_seed(0)
    V, L, budget, draws = 6, 5, 24, 6000
    logits = torch.randn(1, L, V, generator=g) * 1.5
    probs = torch.softmax(logits, -1)[0]
    from sglang_ddtree import build_tree

    tree = build_tree(logits.expand(draws, L, V).contiguous(), budget, backend="cpu")
    # the walk reads the target at node i (depth d) to pick a child at depth d + 1
    depth = tree.depths.clamp(max=L - 1)
    target = torch.multinomial(probs[depth.reshape(-1)], 1, generator=g).view(draws, -1)
    got = accept_tree(tree, target, backend="cpu").accept_len.double().mean()
    want = expected_commit(tree)[0, -1]
    assert abs(float(got) - float(want)) / float(want) < 0.03, (float(got), float(want))


def test_choose_budget_maximises_tokens_per_time():
    e = torch.tensor([[1.0, 2.0, 2.5, 2.8, 3.0]], dtype=torch.float64)
    pick = lambda cands, cost: int(choose_budget(e, budget_table(cands, cost, e.shape[1], e.device)))
    assert pick([1, 2, 4], [1.0, 1.0, 1.0]) == 4
    assert pick([1, 2, 4], [1.0, 1.5, 2.0]) == 1   # 2.0/1 > 2.5/1.5 > 3.0/2
    assert pick([1, 2, 4], [1.0, 1.2, 1.4]) == 4   # 2.0 < 2.08 < 2.14
    with pytest.raises(ValueError, match="candidates"):
        pick([1, 2], [1.0])
    with pytest.raises(ValueError, match="candidates"):
        pick([1, 8], [1.0, 1.0])
    with pytest.raises(ValueError, match="cost"):
        pick([1], [0.0])


def test_lagged_choice_on_the_cpu_is_the_newest_publication():
    from sglang_ddtree.budget import LaggedChoice

    lag = LaggedChoice(7, "cpu")
    assert lag.current() == 7  # nothing published yet: the initial budget
    for b in (15, 31, 63):
        lag.publish(torch.tensor(b))
        assert lag.current() == b


class _Event:
    def __init__(self):
        self.done = False

    def query(self):
        return self.done


def test_lagged_choice_takes_the_newest_landed_copy_never_waits_never_goes_back():
    from sglang_ddtree.budget import LaggedChoice

    lag = LaggedChoice(7, "cpu")
    events = []

    def publish(b):  # the CUDA path's state: the copy is in the buffer, its event not yet done
        lag.publish(torch.tensor(b))
        ev = _Event()
        lag._pending[lag._seq % 2] = (lag._seq, ev)
        events.append(ev)

    publish(15)
    publish(31)
    assert lag.current() == 7  # neither copy has landed: the last value, no wait
    events[0].done = True
    assert lag.current() == 15  # only the older one landed
    events[1].done = True
    assert lag.current() == 31
    publish(63)  # overwrites the buffer of 15
    assert lag.current() == 31  # 63 not landed; 15's old record is gone, 31 stays
    events[2].done = True
    assert lag.current() == 63
