"""Budget choice (sglang_ddtree/budget.py): the prefix property it rests on, the prediction it makes, and
the choice."""
import dataclasses

import numpy as np
import pytest
import torch

from sglang_ddtree import accept_tree, build_tree, build_tree_from_topk
from sglang_ddtree import flags as F
from sglang_ddtree.budget import expected_commit, truncate
from sglang_ddtree.round import RoundOps

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


def scrambled(tree, rng):
    """The tree with every input fault the truncation must carry: NaN / unsorted flags set on some requests,
    links anywhere in [-1, n] (the walk judges them; the cut must only drop those leaving the kept nodes), node
    counts past n and below 1, and mask bits anywhere (a dropped node's bit in a kept row's last word is cleared)."""
    t = {k: v.clone() for k, v in tree.tensors().items()}
    B, n = t["tokens"].shape
    t["mask_bits"] = torch.from_numpy(rng.integers(-2**31, 2**31, size=tuple(t["mask_bits"].shape)).astype(np.int32))
    t["tree_mask"] = torch.from_numpy(rng.random(tuple(t["tree_mask"].shape)) < 0.5)
    for name in ("retrive_next_token", "retrive_next_sibling"):
        t[name] = torch.from_numpy(rng.integers(-1, n + 1, size=(B, n)))
    t["num_nodes"] = torch.from_numpy(rng.integers(0, n + 2, size=B).astype(np.int32))
    t["flags"] = torch.from_numpy(rng.choice([0, F.NONFINITE_INPUT, F.UNSORTED_INPUT, F.HEAP_EXHAUSTED,
                                              F.HEAP_EXHAUSTED | F.UNSORTED_INPUT], size=B).astype(np.int32))
    return dataclasses.replace(tree, **t)


def truncation_cases(rng, anchor, trials, max_batch, max_depth, vocabs, big_budgets):
    """(trial, tree, smaller budget): CPU-built trees and their scrambled twins, cut at every budget that crosses
    a 32-bit mask word (and 0, 1 and the whole tree)."""
    for trial in range(trials):
        B, L, V = int(rng.integers(1, max_batch + 1)), int(rng.integers(1, max_depth + 1)), int(rng.choice(vocabs))
        big_b = int(rng.choice(big_budgets))
        lp, ids = random_topk(rng, B, L, V, min(big_b, V), mode=MODES[trial % len(MODES)])
        big = build_tree_from_topk(lp, ids, big_b, backend="cpu", anchor=anchor)
        for tree in (big, scrambled(big, rng)):
            for b in sorted({0, 1, 7, 15, 30, 31, 32, 63, big_b - 1, big_b} & set(range(big_b + 1))):
                yield trial, tree, b


@pytest.mark.parametrize("anchor", [None, "chain"])
def test_the_native_truncation_is_the_definition(anchor):
    """RoundOps.truncate (the truncate_tree op, kernels/tree_truncate.h) equals budget.truncate field for field,
    at every smaller budget, on built trees and on trees with every fault the fields can carry."""
    ops = RoundOps("cpu")
    for trial, tree, b in truncation_cases(np.random.default_rng(11), anchor, 30, 4, 8, [3, 17, 300],
                                           [15, 31, 32, 63, 70]):
        want, got = truncate(tree, b), ops.truncate(tree, b)
        assert (got.budget, got.depth_limit, got.topk) == (want.budget, want.depth_limit, want.topk)
        for f, t in want.tensors().items():
            g = getattr(got, f)
            assert g.dtype == t.dtype and g.is_contiguous() and torch.equal(g, t), (trial, b, f)


def test_the_round_truncates_in_one_op():
    """One dispatched op, whatever the tree: the served round pays one launch for its cut (docs/DESIGN.md)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.name())
            return func(*args, **(kwargs or {}))

    lp, ids = random_topk(np.random.default_rng(1), 4, 15, 300, 32)
    tree, ops = build_tree_from_topk(lp, ids, 63, backend="cpu", anchor="chain"), RoundOps("cpu")
    with Ops() as seen:
        ops.truncate(tree, 23)
    assert seen.names == ["sglang_ddtree::truncate_tree"]


def test_truncate_refuses_a_larger_budget():
    lp, ids = random_topk(np.random.default_rng(0), 1, 3, 10, 4)
    with pytest.raises(ValueError, match="budget"):
        truncate(build_tree_from_topk(lp, ids, 4, backend="cpu"), 5)
    with pytest.raises(ValueError, match="budget"):
        RoundOps("cpu").truncate(build_tree_from_topk(lp, ids, 4, backend="cpu"), 5)


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


def test_under_a_requests_law_its_own_keys_predict_the_accept_length():
    """Sampled (T 0.6, top-p 0.9): a target that draws each depth's token from the drafter's distribution under
    that law is calibrated for the law-aware keys (keys.py) by construction, so their prediction matches the mean
    accept length; the raw draft's keys (what the tree ranked by before) predict it wrongly — the bias the auto
    budget would otherwise carry into its choice."""
    from sglang_ddtree.keys import DraftKeys
    from sglang_ddtree.reference import filtered_law
    from sglang_ddtree.sampling import NodeLaw

    g = torch.Generator().manual_seed(2)
    V, L, budget, draws, T, top_p = 8, 5, 24, 8000, 0.6, 0.9
    logits = torch.randn(1, L, V, generator=g) * 1.5
    law = NodeLaw(torch.full((draws,), T), torch.zeros(draws, dtype=torch.int64), torch.full((draws,), top_p),
                  torch.zeros(draws))
    probs = torch.tensor(np.stack([filtered_law(logits[0, d].numpy(), T, 0, top_p, 0.0) for d in range(L)]))

    def predicted_and_accepted(tree):
        depth = tree.depths.clamp(max=L - 1)  # the walk reads the target at node i (depth d) for depth d + 1
        target = torch.multinomial(probs[depth.reshape(-1)], 1, generator=g).view(draws, -1)
        accepted = accept_tree(tree, target, backend="cpu").accept_len.double().mean()
        return float(expected_commit(tree)[0, -1]), float(accepted)

    lp, ids = DraftKeys(L)(logits.expand(draws, L, V).contiguous(), V, "cpu", law)
    want, got = predicted_and_accepted(build_tree_from_topk(lp, ids, budget, backend="cpu"))
    assert abs(got - want) / want < 0.03, (got, want)
    want, got = predicted_and_accepted(build_tree(logits.expand(draws, L, V).contiguous(), budget, backend="cpu"))
    assert abs(got - want) / got > 0.1, (got, want)


def test_auto_width_maximises_tokens_per_time():
    """The engine's use of AutoWidth: whole-round costs, no clock, and the first round waits for its own tree's
    prediction (first='own')."""
    from sglang_ddtree.budget import AutoWidth

    e = torch.tensor([[1.0, 2.0, 2.5, 2.8, 3.0]])

    def pick(cands, cost):
        auto = AutoWidth([b + 1 for b in cands], [1], {(1, b + 1): c for b, c in zip(cands, cost)}, clock=lambda: 0.0,
                         first="own")
        assert auto.choose(1) is None  # nothing landed: the round waits for its own prediction
        auto.publish(e[:, [b for b in cands]])
        auto.wait()
        return auto.choose(1) - 1

    assert pick([1, 2, 4], [1.0, 1.0, 1.0]) == 4
    assert pick([1, 2, 4], [1.0, 1.5, 2.0]) == 1   # 2.0/1 > 2.5/1.5 > 3.0/2
    assert pick([1, 2, 4], [1.0, 1.2, 1.4]) == 4   # 2.0 < 2.08 < 2.14
    with pytest.raises(ValueError, match="first"):
        AutoWidth([2], first="mine")


def test_lagged_value_on_the_cpu_is_the_newest_publication():
    from sglang_ddtree.budget import LaggedValue

    lag = LaggedValue(torch.tensor(7), "cpu")
    assert int(lag.current()) == 7  # nothing published yet: the initial budget
    for b in (15, 31, 63):
        lag.publish(torch.tensor(b))
        assert int(lag.current()) == b


class _Event:
    def __init__(self):
        self.done = False

    def query(self):
        return self.done


def test_lagged_value_takes_the_newest_landed_copy_never_waits_never_goes_back():
    from sglang_ddtree.budget import LaggedValue

    lag = LaggedValue(torch.tensor(7), "cpu")
    events = []

    def publish(b):  # the CUDA path's state: the copy is in the buffer, its event not yet done
        lag.publish(torch.tensor(b))
        ev = _Event()
        lag._pending[lag._seq % 2] = (lag._seq, ev)
        events.append(ev)

    publish(15)
    publish(31)
    assert int(lag.current()) == 7  # neither copy has landed: the last value, no wait
    events[0].done = True
    assert int(lag.current()) == 15  # only the older one landed
    events[1].done = True
    assert int(lag.current()) == 31
    publish(63)  # overwrites the buffer of 15
    assert int(lag.current()) == 31  # 63 not landed; 15's old record is gone, 31 stays
    events[2].done = True
    assert int(lag.current()) == 63


def test_lagged_value_carries_a_vector():
    from sglang_ddtree.budget import LaggedValue

    lag = LaggedValue(torch.zeros(3), "cpu")
    assert not lag.landed() and lag.current().tolist() == [0, 0, 0]
    lag.publish(torch.tensor([1.0, 2.0, 3.0]))
    assert lag.landed() and lag.current().tolist() == [1, 2, 3]


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run(auto, clock, period, rounds, bs=1, predicted=(6.0, 7.0, 8.0)):
    """`rounds` decode rounds of batch bs; each lasts period[width] seconds (the host's period between launches)."""
    chosen = []
    for _ in range(rounds):
        w = auto.choose(bs)
        chosen.append(w)
        auto.publish(torch.tensor([predicted]))
        clock.t += period[w]
    return chosen


def test_auto_width_starts_at_the_chain_and_ranks_by_predicted_tokens_per_second():
    from sglang_ddtree.budget import AutoWidth

    clock = _Clock()
    flat = AutoWidth([64, 16, 32], [1, 4], {(1, 16): 1.0, (1, 32): 1.0, (1, 64): 1.0}, clock=clock)
    assert flat.widths == [16, 32, 64]
    assert flat.choose(1) == 16  # nothing predicted yet: the chain's width
    flat.publish(torch.tensor([[6.0, 7.0, 8.0], [6.0, 7.0, 8.0]]))
    assert flat.choose(1) == 64  # equal costs: the most predicted tokens
    steep = AutoWidth([16, 32, 64], [1], {(1, 16): 1.0, (1, 32): 2.0, (1, 64): 4.0}, clock=clock)
    steep.publish(torch.tensor([[6.0, 7.0, 8.0]]))
    assert steep.choose(1) == 16  # 6/1 > 7/2 > 8/4
    assert steep.bucket(1) == 1 and steep.bucket(3) == 1 and flat.bucket(3) == 4 and flat.bucket(9) == 4
    with pytest.raises(ValueError, match="predicted"):
        steep.publish(torch.tensor([6.0, 7.0, 8.0]))


def test_auto_width_adds_the_time_beyond_the_graphs_to_every_width_alike():
    """A round costs its graphs (G, timed at start-up per width) plus what the host and eager kernels add (H,
    learned from launch-to-launch periods, one per bucket). Host-bound (the period is the host's at every width):
    H absorbs it and the widest tree wins. GPU-bound (period = G + a constant): the choice follows G."""
    from sglang_ddtree.budget import AutoWidth

    clock = _Clock()
    graphs = {(1, 16): 0.30, (1, 32): 0.31, (1, 64): 0.33}
    host_bound = AutoWidth([16, 32, 64], [1], graphs, clock=clock)
    chosen = _run(host_bound, clock, {16: 4.5, 32: 4.5, 64: 4.5}, 40)
    assert chosen[-30:] == [64] * 30
    assert host_bound.beyond_graphs(1) == pytest.approx(4.5 - 0.33)
    assert host_bound.cost(1, 16) == pytest.approx(0.30 + 4.5 - 0.33)
    clock = _Clock()
    gpu_graphs = {(1, 16): 1.0, (1, 32): 1.1, (1, 64): 2.0}
    gpu_bound = AutoWidth([16, 32, 64], [1], gpu_graphs, clock=clock)
    chosen = _run(gpu_bound, clock, {w: gpu_graphs[(1, w)] + 0.5 for w in (16, 32, 64)}, 40)
    assert chosen[-30:] == [32] * 30  # 6 / 1.5 < 7 / 1.6 > 8 / 2.5
    assert gpu_bound.summary()[1][32]["rounds"] >= 30


def test_auto_width_choice_survives_drift_and_stalls():
    """The host slowing down (another process, a busy core) raises every width's cost alike, and one stalled
    round (the server paused) moves a median of the periods not at all: neither may change the width."""
    from sglang_ddtree.budget import AutoWidth

    clock = _Clock()
    auto = AutoWidth([16, 32, 64], [1], {(1, 16): 0.30, (1, 32): 0.31, (1, 64): 0.33}, clock=clock, window=16)
    before = _run(auto, clock, {16: 3.0, 32: 3.0, 64: 3.0}, 20)
    slower = _run(auto, clock, {16: 6.0, 32: 6.0, 64: 6.0}, 20)
    assert before[-10:] == slower[:10] and slower == [64] * 20
    assert auto.beyond_graphs(1) == pytest.approx(6.0 - 0.33)
    auto._measure(1, 64, 1, False, 600.0)
    assert auto.beyond_graphs(1) == pytest.approx(6.0 - 0.33)
    assert _run(auto, clock, {16: 6.0, 32: 6.0, 64: 6.0}, 3)[-1] == 64
    # what the tiny pair's server showed: passes (a prefill between them) at host speeds drifting 2x apart,
    # ±40% from round to round, and trees that predict only 5% more tokens at the widest width
    g = torch.Generator().manual_seed(0)
    rnd = lambda: float(torch.rand(1, generator=g))  # noqa: E731
    noisy = []
    for _ in range(12):
        speed = 3.0 + 3.0 * rnd()
        auto.interrupt()
        for _ in range(60):
            noisy.append(auto.choose(1))
            auto.publish(torch.tensor([[6.57, 6.80, 6.93]]))
            clock.t += speed * (0.6 + 0.8 * rnd())
    assert noisy == [64] * len(noisy)  # a cost per width learned from these periods wandered (13% elsewhere)


def test_auto_width_takes_no_period_across_a_prefill_or_a_bucket_change():
    from sglang_ddtree.budget import AutoWidth

    clock = _Clock()
    auto = AutoWidth([16, 64], [1, 4], {(1, 16): 1.0, (1, 64): 1.0, (4, 16): 1.0, (4, 64): 3.0}, clock=clock)
    auto.publish(torch.tensor([[6.0, 8.0]]))
    for _ in range(3):
        auto.choose(1)
        auto.interrupt()  # a prefill between every two rounds: no clean period
        clock.t += 100.0
    for bs in (1, 4, 1, 4):  # the batch crosses a bucket every round: no period either
        auto.choose(bs)
        clock.t += 100.0
    assert auto.beyond_graphs(1) == auto.beyond_graphs(4) == 0.0
    auto.interrupt()
    assert auto.cost(4, 64) == 3.0 and auto.choose(4) == 16  # 6 / 1 > 8 / 3 on the graphs alone


def test_auto_width_prices_a_width_without_a_graph_time_as_the_dearest_timed_one():
    from sglang_ddtree.budget import AutoWidth

    auto = AutoWidth([16, 32, 64], [1, 8], {(1, 16): 1.0, (1, 32): 2.0})
    assert auto.graph_cost(1, 64) == 2.0 and auto.graph_cost(8, 16) == 0.0
    auto.publish(torch.tensor([[6.0, 7.0, 7.5]]))
    assert auto.choose(1) == 16  # 6 / 1 > 7 / 2 > 7.5 / 2


def test_auto_width_refuses_bad_arguments():
    from sglang_ddtree.budget import AutoWidth

    with pytest.raises(ValueError, match="widths"):
        AutoWidth([], [1])
    with pytest.raises(ValueError, match="prior"):
        AutoWidth([16], [1], {(1, 16): -1.0})
    with pytest.raises(ValueError, match="window"):
        AutoWidth([16], [1], window=0)


def test_auto_width_prediction_is_expected_commit_at_each_width():
    from sglang_ddtree.budget import AutoWidth, expected_commit

    tree = build_tree(torch.randn(2, 5, 50, generator=torch.Generator().manual_seed(1)), 12, backend="cpu")
    auto = AutoWidth([5, 9, 13], [1])
    want = expected_commit(tree)[:, [4, 8, 12]].float()
    assert torch.equal(auto.predict(tree), want)


def test_auto_width_prices_the_verify_attention_at_the_batch_context():
    """The graphs are timed at prefix 1; a wider tree's verify attention grows with the context. With equal
    graph costs the widest tree wins at a short context, and the chain's width at a long one, where the
    attention table (prefix length -> time beyond prefix 1) makes the wide verify dear."""
    from sglang_ddtree.budget import AutoWidth

    clock = _Clock()
    graphs = {(1, 16): 1.0, (1, 64): 1.0}
    attn = {(1, 16): [(8193, 1.0)], (1, 64): [(8193, 4.0), (16385, 8.0)]}
    auto = AutoWidth([16, 64], [1], graphs, attention=attn, clock=clock)
    assert auto.attention_cost(1, 16, 1) == 0.0 and auto.attention_cost(1, 16, 4097) == pytest.approx(0.5)
    assert auto.attention_cost(1, 16, 16385) == pytest.approx(2.0)  # past the last point: along its segment
    assert auto.attention_cost(1, 64, 12289) == pytest.approx(6.0)
    auto.publish(torch.tensor([[6.0, 8.0]]))
    auto.choose(1)  # the chain until a prediction landed
    assert auto.choose(1, context=100) == 64     # 8 / 1.05 > 6 / 1.01
    assert auto.choose(1, context=8193) == 16    # 6 / 2 > 8 / 5
    # a round's period beyond its graphs and its attention is what the host adds (0.5 s here)
    auto.interrupt()
    for _ in range(5):
        auto.choose(1, context=8193)
        clock.t += 1.0 + 1.0 + 0.5
    assert auto.beyond_graphs(1) == pytest.approx(0.5)


def test_auto_width_prices_a_sampled_round_by_its_tail_and_its_own_host_time():
    """A round with a sampled request adds the sampled tail's start-up time S (bucket, width) to its graphs and
    learns its own time beyond them. Greedy rounds at a 1.5 s period and sampled ones at 3.5 s keep two medians (one
    median for both, as before, would price greedy rounds at the sampled host's cost); a tail that grows with the
    width moves the sampled choice to the narrower width while greedy rounds keep the widest."""
    from sglang_ddtree.budget import AutoWidth

    clock = _Clock()
    auto = AutoWidth([16, 64], [1], {(1, 16): 1.0, (1, 64): 1.0}, clock=clock)
    auto.set_costs([1], {(1, 16): 1.0, (1, 64): 1.0}, None, {(1, 16): 0.5, (1, 64): 2.0})
    auto.publish(torch.tensor([[6.0, 8.0]]))
    for sampled, period in ((False, 1.5), (True, 3.5)) * 20:
        w = auto.choose(1, sampled=sampled)
        clock.t += period + (auto.tail_cost(1, w, sampled) if sampled else 0.0)
    assert auto.beyond_graphs(1, sampled=False) == pytest.approx(0.5)
    assert auto.beyond_graphs(1, sampled=True) == pytest.approx(2.5)
    assert auto.cost(1, 64, sampled=True) == pytest.approx(1.0 + 2.0 + 2.5)
    assert auto.choose(1, sampled=False) == 64  # 8 / 1.5 > 6 / 1.5
    assert auto.choose(1, sampled=True) == 16   # 6 / 4.0 > 8 / 5.5
    assert auto.summary()[1][64]["sampled_cost_ms"] == pytest.approx(5500.0)
    with pytest.raises(ValueError, match="tail"):
        auto.set_costs([1], {}, None, {(1, 16): -1.0})
