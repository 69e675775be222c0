"""Per-node sampling: exact law (chi-square), determinism, independence across nodes, argmax at T=0."""
import numpy as np
import pytest
import torch
from scipy import stats

from sglang_ddtree import sample_node_tokens
from sglang_ddtree.sampling import philox4x32


def test_philox_known_answers():
    # Philox4x32-10 known-answer vectors published with the Random123 library
    t = lambda *v: tuple(torch.tensor([x]) for x in v)
    out = philox4x32(t(0, 0, 0, 0), t(0, 0))
    assert [int(o) for o in out] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    out = philox4x32(t(0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), t(0xA4093822, 0x299F31D0))
    assert [int(o) for o in out] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_temperature_zero_is_first_index_argmax():
    x = torch.tensor([[[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0]]])
    assert sample_node_tokens(x, 0.0).tolist() == [[1, 0]]


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_samples_follow_softmax(temperature):
    V = 12
    logits = torch.tensor(np.random.default_rng(0).standard_normal(V) * 1.5, dtype=torch.float32)
    draws = 4000
    # many independent (seed) streams, the same node: each row is one draw
    x = logits.expand(draws, 1, V).contiguous()
    tok = sample_node_tokens(x, temperature, seed=torch.arange(draws), step=7).flatten()
    counts = np.bincount(tok.numpy(), minlength=V)
    p = torch.softmax(logits.double() / temperature, -1).numpy()
    _, pval = stats.chisquare(counts, p * draws)
    assert pval > 1e-4


def test_nodes_are_independent_and_reproducible():
    V = 6
    x = torch.zeros(1, 3000, V)   # uniform at every node
    a = sample_node_tokens(x, 1.0, seed=11, step=3)
    b = sample_node_tokens(x, 1.0, seed=11, step=3)
    c = sample_node_tokens(x, 1.0, seed=11, step=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # consecutive nodes: the joint of (node i, node i+1) is uniform over V*V cells
    pairs = (a[0, :-1] * V + a[0, 1:]).numpy()
    _, pval = stats.chisquare(np.bincount(pairs, minlength=V * V))
    assert pval > 1e-4


def test_per_request_seeds():
    x = torch.zeros(2, 50, 100)
    out = sample_node_tokens(x, 1.0, seed=torch.tensor([1, 1]), step=torch.tensor([0, 0]))
    assert torch.equal(out[0], out[1])
    out = sample_node_tokens(x, 1.0, seed=torch.tensor([1, 2]), step=0)
    assert not torch.equal(out[0], out[1])


# --- inputs at the edge of float range (the expected answers come from numpy, not from the sampler) ---

@pytest.mark.parametrize("temperature", [1e-30, 1e-39, 1e-45, 1e-300, 5e-324])
def test_tiny_temperature_overflow_gives_the_argmax(temperature):
    """logits / T overflows float32 here; the answer must be the T -> 0 limit (the argmax), not the first inf."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 7, 40)).astype(np.float32) * 4
    x[0, 0, :] = -np.abs(x[0, 0, :]) - 1  # all negative: every score -> -inf
    x[1, 1, 5] = 0.0                      # 0 / T is NaN once T rounds to 0 in float32
    got = sample_node_tokens(torch.from_numpy(x), temperature, seed=3, step=1)
    assert got.tolist() == x.argmax(-1).tolist()


def test_float64_logits_keep_their_precision():
    x = torch.tensor([[[1e300, 2e300, -1e300], [2e300, 1e300, 0.0]]], dtype=torch.float64)
    for t in (0.0, 1.0, 1e-10):  # 1e-10: 2e300 / T overflows float64 too
        assert sample_node_tokens(x, t, seed=5).tolist() == [[1, 0]], t


def test_numpy_temperatures_are_accepted():
    x = torch.randn(2, 4, 30)
    for t in (np.float32(0.7), np.float64(0.7), np.float16(0.7)):
        assert torch.equal(sample_node_tokens(x, t, seed=9), sample_node_tokens(x, float(t), seed=9))
    assert torch.equal(sample_node_tokens(x, np.float32(0.0)), x.argmax(-1))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_nan_or_all_masked_logits_give_no_token(temperature):
    x = torch.randn(2, 3, 20)
    x[0, 1, 7] = float("nan")
    x[1, 2, :] = float("-inf")
    x[1, 0, :5] = float("-inf")  # partly masked: still a distribution
    got = sample_node_tokens(x, temperature, seed=2)
    assert got[0, 1] == -1 and got[1, 2] == -1
    ok = torch.ones_like(got, dtype=torch.bool)
    ok[0, 1] = ok[1, 2] = False
    assert bool((got[ok] >= 0).all()) and int(got[1, 0]) >= 5


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_accept_flags_a_walk_that_reaches_a_node_without_token(backend):
    from sglang_ddtree import accept_tree, build_tree
    from sglang_ddtree import flags as F

    tree = build_tree(torch.randn(2, 4, 16) * 3, 6, backend="reference")
    logits = torch.randn(2, 7, 16)
    logits[0, 0, 3] = float("nan")          # request 0: the root itself has no token
    target = sample_node_tokens(logits, 0.0)
    res = accept_tree(tree, target, backend=backend)
    assert int(res.accept_len[0]) == 1 and int(res.bonus[0]) == -1
    assert int(res.flags[0]) & F.NONFINITE_TARGET
    assert not int(res.flags[1]) & F.NONFINITE_TARGET and int(res.bonus[1]) >= 0
