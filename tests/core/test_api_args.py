"""Every public function rejects bad arguments with a ValueError/TypeError that names the argument."""
import pytest
import torch

from sglang_ddtree import accept_tree, build_tree, build_tree_from_topk, flags, sample_node_tokens

LP = torch.log_softmax(torch.randn(2, 3, 4), -1).sort(-1, descending=True).values
IDS = torch.arange(4).expand(2, 3, 4).contiguous()
LOGITS = torch.randn(2, 3, 50)


def tree():
    return build_tree_from_topk(LP, IDS, 5, backend="cpu")


CASES = [
    # (callable, expected exception, name that must appear in the message)
    (lambda: build_tree(LOGITS[0], 4), ValueError, "draft_logits"),
    (lambda: build_tree(LOGITS.long(), 4), TypeError, "draft_logits"),
    (lambda: build_tree(LOGITS.numpy(), 4), TypeError, "draft_logits"),
    (lambda: build_tree(LOGITS, -1), ValueError, "budget"),
    (lambda: build_tree(LOGITS, 2.5), TypeError, "budget"),
    (lambda: build_tree(LOGITS, 4, topk=0), ValueError, "topk"),
    (lambda: build_tree(LOGITS, 4, backend="gpu"), ValueError, "backend"),
    (lambda: build_tree(LOGITS, 4, backend="cuda"), ValueError, "backend"),
    (lambda: build_tree(LOGITS[:, :, :0], 4), ValueError, "draft_logits"),
    (lambda: build_tree(LOGITS, 4, root_tokens=torch.zeros(3, dtype=torch.long)), ValueError, "root_tokens"),
    (lambda: build_tree(LOGITS, 4, seq_lens=torch.zeros(2)), TypeError, "seq_lens"),
    (lambda: build_tree(LOGITS, 4, seq_lens=torch.zeros(2, 1, dtype=torch.long)), ValueError, "seq_lens"),
    (lambda: build_tree_from_topk(LP.double(), IDS, 4), TypeError, "top_logprobs"),
    (lambda: build_tree_from_topk(LP[0], IDS[0], 4), ValueError, "top_logprobs"),
    (lambda: build_tree_from_topk(LP, IDS[:, :, :3], 4), ValueError, "top_ids"),
    (lambda: build_tree_from_topk(LP, IDS.float(), 4), TypeError, "top_ids"),
    (lambda: build_tree_from_topk(LP, IDS, -3), ValueError, "budget"),
    (lambda: build_tree_from_topk(LP, IDS, 10**9), ValueError, "budget"),
    (lambda: build_tree_from_topk(LP, IDS.to("meta"), 4), ValueError, "top_ids"),
    (lambda: accept_tree("tree", torch.zeros(2, 6, dtype=torch.long)), TypeError, "tree"),
    (lambda: accept_tree(tree(), torch.zeros(2, 5, dtype=torch.long)), ValueError, "target_tokens"),
    (lambda: accept_tree(tree(), torch.zeros(2, 6)), TypeError, "target_tokens"),
    (lambda: accept_tree(tree(), torch.zeros(12, dtype=torch.long)), ValueError, "target_tokens"),
    (lambda: accept_tree(tree(), torch.zeros(2, 6, dtype=torch.long), backend="x"), ValueError, "backend"),
    (lambda: sample_node_tokens(LOGITS[0], 1.0), ValueError, "target_logits"),
    (lambda: sample_node_tokens(LOGITS.long(), 1.0), TypeError, "target_logits"),
    (lambda: sample_node_tokens(LOGITS, -0.5), ValueError, "temperature"),
    (lambda: sample_node_tokens(LOGITS, float("nan")), ValueError, "temperature"),
    (lambda: sample_node_tokens(LOGITS, "hot"), TypeError, "temperature"),
    (lambda: sample_node_tokens(LOGITS, 1.0, seed=torch.zeros(5, dtype=torch.long)), ValueError, "seed"),
    (lambda: sample_node_tokens(LOGITS, 1.0, step=torch.zeros(2)), TypeError, "step"),
    (lambda: sample_node_tokens(LOGITS, 1.0, backend="reference"), ValueError, "backend"),
    # integers past int64 name their argument (not torch's "value cannot be converted")
    (lambda: build_tree(LOGITS, 4, root_tokens=2**70), ValueError, "root_tokens"),
    (lambda: build_tree(LOGITS, 4, seq_lens=-2**63 - 1), ValueError, "seq_lens"),
    (lambda: sample_node_tokens(LOGITS, 1.0, seed=2**63), ValueError, "seed"),
    (lambda: sample_node_tokens(LOGITS, 1.0, step=2**64), ValueError, "step"),
    # values a tree cannot have (issue 30): checked on CPU tensors and ints before any work
    (lambda: build_tree(LOGITS, 4, seq_lens=torch.tensor([-5, 3])), ValueError, "seq_lens"),
    (lambda: build_tree(LOGITS, 4, seq_lens=-1), ValueError, "seq_lens"),
    (lambda: build_tree_from_topk(LP, IDS, 4, seq_lens=torch.tensor([3, -1], dtype=torch.int32)), ValueError,
     "seq_lens"),
    (lambda: build_tree(LOGITS, 4, root_tokens=torch.tensor([999, 3])), ValueError, "root_tokens"),
    (lambda: build_tree(LOGITS, 4, root_tokens=50), ValueError, "root_tokens"),  # V = 50: ids 0..49
    (lambda: build_tree(LOGITS, 4, root_tokens=torch.tensor([-1, 3])), ValueError, "root_tokens"),
    (lambda: build_tree_from_topk(LP, IDS, 4, root_tokens=-7), ValueError, "root_tokens"),
    # issue 42: a negative top id became a node's token, and a target id past the vocabulary the bonus, flags 0
    (lambda: build_tree_from_topk(LP, IDS - 2, 4), ValueError, "top_ids"),
    (lambda: build_tree_from_topk(LP, IDS - 2, 4, backend="reference"), ValueError, "top_ids"),
    (lambda: accept_tree(tree(), torch.full((2, 6), 50), vocab_size=50), ValueError, "target_tokens"),
    (lambda: accept_tree(tree(), torch.full((2, 6), -2)), ValueError, "target_tokens"),
    (lambda: accept_tree(tree(), torch.zeros(2, 6, dtype=torch.long), vocab_size=0), ValueError, "vocab_size"),
    (lambda: accept_tree(tree(), torch.zeros(2, 6, dtype=torch.long), vocab_size=2.5), TypeError, "vocab_size"),
]


@pytest.mark.parametrize("call,exc,name", CASES, ids=[f"{i}-{c[2]}" for i, c in enumerate(CASES)])
def test_bad_argument_is_rejected_with_its_name(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_tree_with_wrong_link_dtype_is_rejected():
    t = tree()
    t.retrive_next_token = t.retrive_next_token.int()
    with pytest.raises(TypeError, match="tree.retrive_next_token"):
        accept_tree(t, torch.zeros(2, 6, dtype=torch.long))


def test_numpy_integers_are_accepted_like_ints():
    import numpy as np

    a = sample_node_tokens(LOGITS, 1.0, seed=np.int64(7), step=np.int32(2))
    assert torch.equal(a, sample_node_tokens(LOGITS, 1.0, seed=7, step=2))
    for edge in (2**63 - 1, -2**63):  # the int64 range itself is accepted
        assert sample_node_tokens(LOGITS, 1.0, seed=edge, step=edge).shape == (2, 3)


def _with(t, **fields):
    import dataclasses

    return dataclasses.replace(t, **fields)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("change,exc,name", [
    ({"num_nodes": torch.tensor([3], dtype=torch.int32)}, ValueError, "tree.num_nodes"),
    ({"num_nodes": torch.tensor([3, 3, 3], dtype=torch.int32)}, ValueError, "tree.num_nodes"),
    ({"depth_limit": -1}, ValueError, "tree.depth_limit"),
    ({"depth_limit": 2**40}, ValueError, "tree.depth_limit"),
    ({"depth_limit": 2.0}, TypeError, "tree.depth_limit"),
])
def test_accept_checks_the_tree_fields_every_backend_reads(backend, change, exc, name):
    """Every backend gets the same error (they used to read out of bounds or raise unrelated errors)."""
    with pytest.raises(exc, match=name):
        accept_tree(_with(tree(), **change), torch.zeros(2, 6, dtype=torch.long), backend=backend)


def test_default_per_request_vectors_are_shared_and_never_written():
    """None roots/lengths come from one cached zeros tensor per shape (a fifth of a small call's overhead);
    building must never write it, and a later call must see zeros again."""
    from sglang_ddtree import _checks as C
    from sglang_ddtree import build_tree_from_topk

    lp = torch.log_softmax(torch.randn(2, 3, 5), -1).sort(-1, descending=True).values
    ids = torch.arange(5).expand(2, 3, 5).contiguous()
    a = build_tree_from_topk(lp, ids, 6, backend="cpu")
    shared = C.per_request("seq_lens", None, 2, lp.device)
    assert shared is C.per_request("root_tokens", None, 2, lp.device) and torch.equal(shared, torch.zeros(2, dtype=torch.long))
    b = build_tree_from_topk(lp, ids, 6, backend="cpu", root_tokens=3, seq_lens=7)
    assert torch.equal(shared, torch.zeros(2, dtype=torch.long))
    assert (b.tokens[:, 0] == 3).all() and (a.tokens[:, 0] == 0).all() and torch.equal(b.positions, a.positions + 7)


def test_budget_0_is_the_root_alone_not_a_crash():
    """build_tree(logits, budget=0) used to fail inside the top-k with a shape mismatch; it is the root-only tree
    (one slot, no children), the same tree build_tree_from_topk gives for budget 0."""
    t = build_tree(LOGITS, 0, root_tokens=torch.tensor([7, 9]), seq_lens=torch.tensor([4, 0]))
    assert t.n == 1 and t.tokens.tolist() == [[7], [9]] and t.positions.tolist() == [[4], [0]]
    ref = build_tree_from_topk(LP, IDS, 0, root_tokens=torch.tensor([7, 9]), seq_lens=torch.tensor([4, 0]))
    assert torch.equal(t.tokens, ref.tokens) and torch.equal(t.retrive_next_token, ref.retrive_next_token)
    assert (t.retrive_next_token == -1).all()


def test_in_range_values_at_the_edges_are_accepted():
    t = build_tree(LOGITS, 4, root_tokens=torch.tensor([0, 49]), seq_lens=torch.tensor([0, 5]))
    assert t.tokens[:, 0].tolist() == [0, 49] and t.positions[:, 0].tolist() == [0, 5]
    # the last id of the vocabulary is a bonus; −1 (no token) ends the walk, flagged
    res = accept_tree(tree(), torch.tensor([[49] * 6, [-1] * 6]), vocab_size=50)
    assert res.bonus.tolist() == [49, -1] and res.flags.tolist() == [0, flags.NONFINITE_TARGET]


def test_topk_stage_names_a_bad_k():
    from sglang_ddtree.topk import topk_logprobs

    for k in (0, 51, 2.0):
        with pytest.raises(ValueError, match="k must be an int in \\[1, 50\\]"):
            topk_logprobs(LOGITS, k, "cpu")


def test_every_public_name_is_documented():
    """docs/API.md names every export of the package (build_tree_from_topk was exported but undocumented)."""
    from pathlib import Path

    import sglang_ddtree

    api = (Path(__file__).resolve().parents[2] / "docs" / "API.md").read_text()
    missing = [name for name in sglang_ddtree.__all__ if name != "__version__" and f"`{name}" not in api
               and f" {name}(" not in api]
    assert missing == []
