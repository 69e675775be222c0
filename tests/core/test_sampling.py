"""Per-node sampling: exact law (chi-square), determinism, independence across nodes, argmax at T=0."""
import numpy as np
import pytest
import torch
from scipy import stats

from sglang_ddtree import sample_node_tokens
from sglang_ddtree.accept import philox4x32


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
