"""The GPU tests' shared helpers (tests/gpu/gpu_tree_util.py) on the CPU: the seeded cases draw what the loops they
replaced drew, and the comparison fails on a wrong field, naming the field, the request and the case. cuda_matches
runs here with the native CPU builder in the CUDA builder's place."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import gpu_tree_util as U  # noqa: E402

from sglang_ddtree import build_tree_from_topk  # noqa: E402

MODES = ["normal", "bf16", "ties", "peaked", "masked"]


def test_draw_takes_the_draws_of_the_inline_loops():
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(50):
        got = U.draw(a, (1, 33), (1, 17), [1, 7, 15, 31, 63, 127], [3, 64, 2000])
        want = [int(b.integers(1, 33)), int(b.integers(1, 17)), int(b.choice([1, 7, 15, 31, 63, 127])),
                int(b.choice([3, 64, 2000]))]
        assert got == want
    assert a.random() == b.random()  # the stream left where the inline draws leave it


def test_seeded_cases_share_one_stream_and_name_the_case():
    cases = list(U.seeded_cases(41, 3))
    assert [(i, name) for i, _, name in cases] == [(i, f"seed 41 case {i}") for i in range(3)]
    assert len({id(rng) for _, rng, _ in cases}) == 1


def cpu_op(*args, backend, **kwargs):
    """build_tree_from_topk with the native CPU builder standing in for the CUDA one."""
    return build_tree_from_topk(*args, backend="cpu" if backend == "cuda" else backend, **kwargs)


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(U, "DEVICE", "cpu")


def test_seeded_requests_count_requests_cycle_modes_and_count_exhausted_heaps(on_cpu):
    seen = []

    def case(rng, mode):
        B, L, budget, V = U.draw(rng, (1, 9), (1, 5), [1, 8, 31], [2, 3, 64])
        seen.append((B, mode))
        lp, ids = U.random_topk(rng, B, L, V, min(budget, V), mode=mode)
        return U.cuda_matches(cpu_op, lp, ids, budget, context=f"B={B}")

    exhausted = U.seeded_requests(20261202, 200, MODES, case)
    done = np.cumsum([0] + [B for B, _ in seen])
    assert done[-2] < 200 <= done[-1]
    assert [mode for _, mode in seen] == [MODES[(d // 7) % len(MODES)] for d in done[:-1]]
    assert exhausted > 0  # tiny vocabularies under budget 31


def test_seeded_requests_failure_names_the_seed_and_the_request(on_cpu):
    def case(rng, mode):
        lp, ids = U.random_topk(rng, 4, 3, 50, 8)
        if mode == "bf16":  # batches of 4: bf16 from request 7 on, so the third batch (at request 8) is wrong
            return U.cuda_matches(lambda *a, backend, **k: wrong(cpu_op(*a, backend=backend, **k), backend),
                                  lp, ids, 8, context="(B=4)")
        return U.cuda_matches(cpu_op, lp, ids, 8)

    def wrong(tree, backend):
        if backend == "cuda":
            tree.tokens[2, 1] += 1
        return tree

    with pytest.raises(AssertionError, match=r"seed 5, batch at request 8: field tokens differs for requests \[2\] "
                                             r"\(B=4\)"):
        U.seeded_requests(5, 100, MODES, case)


def tree(seed=0, B=3):
    lp, ids = U.random_topk(np.random.default_rng(seed), B, 4, 50, 8)
    return build_tree_from_topk(lp, ids, 12, backend="reference")


def test_assert_identical_passes_identical_results_and_fails_every_wrong_field():
    a = tree()
    U.assert_identical(a, tree())
    U.assert_identical(list(a.tensors().values()), list(tree().tensors().values()))
    for name in a.tensors():
        b = tree()
        field = getattr(b, name)
        if field.dtype == torch.bool:
            field[1].logical_not_()
        else:
            field[1].view(-1)[0] += 1
        with pytest.raises(AssertionError, match=rf"field {name} differs for requests \[1\] seed 0 case 3"):
            U.assert_identical(b, a, "seed 0 case 3")


def test_assert_identical_compares_float64_by_bits_and_checks_dtype_shape_and_names():
    a, b = tree(), tree()
    assert a.logw[0, 0] == 0 and not torch.signbit(a.logw[0, 0])
    b.logw[0, 0] = -0.0  # the root's weight: equal as a number, not as bits
    assert torch.equal(a.logw, b.logw)
    with pytest.raises(AssertionError, match="field logw differs for requests \\[0\\]"):
        U.assert_identical(b, a)
    with pytest.raises(AssertionError, match="output 1: torch.int64"):
        U.assert_identical([a.num_nodes, a.flags.long()], [a.num_nodes, a.flags], "x")
    with pytest.raises(AssertionError, match="fields"):
        U.assert_identical([a.num_nodes], [a.num_nodes, a.flags])
    with pytest.raises(AssertionError, match="num_nodes: torch.int32\\(2,\\) vs torch.int32\\(3,\\)"):
        U.assert_identical(tree(B=2), a)


def test_cuda_matches_runs_both_backends_on_the_moved_arguments(on_cpu):
    calls = []

    def op(lp, ids, budget, *, backend, root_tokens):
        calls.append(backend)
        return cpu_op(lp, ids, budget, backend=backend, root_tokens=root_tokens)

    lp, ids = U.random_topk(np.random.default_rng(1), 2, 3, 40, 6)
    got = U.cuda_matches(op, lp, ids, 9, root_tokens=torch.tensor([5, 7]))
    assert calls == ["reference", "cuda"]
    assert got.tokens[:, 0].tolist() == [5, 7]
    moved = U.on("cpu", {"a": (lp, 3), "b": [ids]})
    assert isinstance(moved["a"], tuple) and moved["a"][1] == 3 and moved["b"][0] is ids
