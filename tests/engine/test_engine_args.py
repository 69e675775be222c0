"""Engine.generate checks every argument before any work (issue 42, item 2): a bad one is a ValueError or TypeError
whose one-line message names it, raised before the first forward; good values at the edges still run.

(temperature=nan returned eight NUL bytes, temperature=-1 ran, budget=10**9 was a traceback from a 256 GB
allocation, an out-of-vocabulary prompt id an IndexError, stop_token_ids='x' "too many dimensions 'str'" and
draft_temperature='bogus' a message about from_pretrained.)"""
import numpy as np
import pytest
import torch

from sglang_ddtree.engine import Engine
from sglang_ddtree.keys import ShapeTable


@pytest.fixture
def no_work(engine, monkeypatch):
    """Fails the test if generate reaches the decode (the models' first forward)."""
    def decode(*args, **kwargs):
        raise AssertionError("generate started work before refusing its arguments")

    monkeypatch.setattr(engine, "_decode", decode)
    monkeypatch.setattr(engine.target, "forward", decode)


V = 259  # the shipped pair's vocabulary (config.json)
BAD = [
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(temperature=-1.0), ValueError, "temperature"),
    (dict(temperature=float("inf")), ValueError, "temperature"),
    (dict(temperature="hot"), TypeError, "temperature"),
    (dict(temperature=[1.0]), ValueError, "temperature"),
    (dict(temperature=[1.0, float("nan")]), ValueError, "temperature"),
    (dict(temperature=[1.0, "x"]), TypeError, "temperature"),
    (dict(temperature={1.0}), ValueError, "temperature"),
    (dict(top_k=2.5), ValueError, "top_k"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(min_p=1.5), ValueError, "min_p"),
    (dict(keys="target"), ValueError, "keys"),
    (dict(keys="law", method="chain"), ValueError, "keys"),
    (dict(children="sampled"), ValueError, "children"),
    (dict(children="drawn", method="chain"), ValueError, "children"),
    (dict(paper="yes"), TypeError, "paper"),
    (dict(drawn_shape="bogus"), ValueError, "drawn_shape"),
    (dict(drawn_shape=[[0.5]]), ValueError, "drawn_shape"),
    (dict(drawn_shape=ShapeTable(0.5, (1.0,), (((0.5,),) * 6,))), ValueError, "drawn_shape"),  # 6 depths of 7
    (dict(drawn_shape=ShapeTable(1.5, (1.0,), (((0.5,),) * 7,))), ValueError, "drawn_shape"),
    (dict(sampling_temperature="bogus"), ValueError, "sampling_temperature"),
    (dict(sampling_temperature=2.0), TypeError, "sampling_temperature"),
    (dict(sampling_temperature=[1.0] * 6 + [0.0]), ValueError, "sampling_temperature"),
    (dict(budget=10 ** 9), ValueError, "budget"),
    (dict(budget=4097), ValueError, "budget"),
    (dict(budget=0), ValueError, "budget"),
    (dict(budget=8.5), TypeError, "budget"),
    (dict(budget="many"), ValueError, "budget"),
    (dict(budget=True), TypeError, "budget"),
    (dict(prompts=[[1, 2, V]]), ValueError, "prompts"),
    (dict(prompts=[[1, -3]]), ValueError, "prompts"),
    (dict(prompts=[[1, 2.5]]), TypeError, "prompts"),
    (dict(prompts=[[]]), ValueError, "prompts"),
    (dict(prompts=[]), TypeError, "prompts"),
    (dict(prompts="def f():"), TypeError, "prompts"),
    (dict(prompts=[b"def f():"]), TypeError, "prompts"),
    (dict(prompts=[None]), TypeError, "prompts"),
    (dict(stop_token_ids="x"), TypeError, "stop_token_ids"),
    (dict(stop_token_ids=[V]), ValueError, "stop_token_ids"),
    (dict(stop_token_ids=[1.0]), TypeError, "stop_token_ids"),
    (dict(stop_token_ids=5), TypeError, "stop_token_ids"),
    (dict(draft_temperature="bogus"), ValueError, "draft_temperature"),
    (dict(draft_temperature=2.0), TypeError, "draft_temperature"),
    (dict(draft_temperature=["a"] * 7), TypeError, "draft_temperature"),
    (dict(draft_temperature=[1.0] * 6 + [float("nan")]), ValueError, "draft_temperature"),
    (dict(draft_temperature=[1.0] * 7, method="chain"), ValueError, "draft_temperature"),
    (dict(max_new_tokens=0), ValueError, "max_new_tokens"),
    (dict(max_new_tokens=10 ** 9), ValueError, "max_new_tokens"),
    (dict(max_new_tokens=4.0), TypeError, "max_new_tokens"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(batch_size="2"), TypeError, "batch_size"),
    (dict(seed="s"), TypeError, "seed"),
    (dict(seed=2 ** 70), ValueError, "seed"),
    (dict(seed=[1, 2, 3]), ValueError, "seed"),
    (dict(seed=[1, "2"]), TypeError, "seed"),
    (dict(on_round="print"), TypeError, "on_round"),
    (dict(method="beam"), ValueError, "method"),
    (dict(anchor="spine"), ValueError, "anchor"),
    (dict(budget="auto", auto_budgets=[8, 10 ** 9]), ValueError, "auto_budgets"),
    (dict(budget="auto", auto_budgets="8,16"), ValueError, "auto_budgets"),
    (dict(budget="auto", auto_budgets=[8, "x"]), TypeError, "auto_budgets"),
    (dict(budget="auto", auto_budgets=[8, 16], round_cost=[1.0, float("nan")]), ValueError, "round_cost"),
    (dict(budget="auto", auto_budgets=[8, 16], round_cost=["a", "b"]), TypeError, "round_cost"),
]


@pytest.mark.parametrize("kwargs,exc,name", BAD, ids=[repr(kwargs)[:48] for kwargs, _, _ in BAD])
def test_a_bad_argument_is_named_before_any_work(engine, no_work, kwargs, exc, name):
    kwargs = {"prompts": ["def f(x):", "import os"], **kwargs}
    with pytest.raises(exc) as info:
        engine.generate(kwargs.pop("prompts"), kwargs.pop("max_new_tokens", 4), **kwargs)
    message = str(info.value)
    assert message.startswith(name) or f" {name}" in message or f"{name} " in message, message
    assert "\n" not in message


def test_an_unknown_draft_temperature_name_is_refused_as_such(engine, no_work):
    """'bogus' was answered with the message for 'drafter' on an engine without a drafter directory."""
    with pytest.raises(ValueError) as info:
        engine.generate(["x"], 4, draft_temperature="bogus")
    assert "must be None, 'drafter' or" in str(info.value) and "from_pretrained" not in str(info.value)


def test_draft_temperature_drafter_without_a_drafter_directory_says_so(engine, no_work):
    bare = Engine(engine.target, engine.drafter)  # built directly: no drafter directory, so no calibration file
    with pytest.raises(ValueError, match="draft_temperature='drafter' needs an engine from from_pretrained"):
        bare.generate(["x"], 4, draft_temperature="drafter")


def test_good_values_at_the_edges_run(engine):
    """The checks refuse nothing a caller may pass: numpy integers, a tensor prompt, the largest id of the
    vocabulary, an empty stop list, seeds per prompt, the longest continuation the context holds."""
    prompt = torch.tensor([100, 101, V - 1])
    out = engine.generate([prompt, [np.int64(5), 6]], np.int64(3), budget=np.int32(8), seed=[0, np.int64(1)],
                          stop_token_ids=[], temperature=np.float32(0.0), batch_size=np.int64(1))
    assert [len(r.token_ids) for r in out] == [3, 3]
    out = engine.generate(["x"], 2, method="ddtree", budget="auto", auto_budgets=(np.int64(7), 15),
                          round_cost=np.array([1.0, 2.0]), draft_temperature="drafter", anchor="chain",
                          stop_token_ids=torch.tensor([V - 3]))
    assert len(out[0].token_ids) <= 2
    context = engine.target.config.max_position_embeddings
    with pytest.raises(ValueError, match=f"max_new_tokens must be <= {context - 3}"):
        engine.generate([[1, 2, 3]], context - 2, method="ar")


def test_a_sampled_request_at_nan_temperature_no_longer_returns_nul_bytes(engine):
    """The reported symptom itself, end to end."""
    with pytest.raises(ValueError, match="temperature"):
        engine.generate(["def f():"], 8, temperature=float("nan"))
    out = engine.generate(["def f():"], 8, temperature=1.0, method="ar", stop_token_ids=[])
    assert len(out[0].token_ids) == 8 and all(0 <= t < V for t in out[0].token_ids)


def test_the_defaults_are_the_served_tree_and_the_papers_is_one_argument_away(engine):
    """generate()'s tree arguments default to what the server serves (round_config.RoundConfig's: the chain anchor,
    keys under each request's law, drawn children, the drafter's calibration file); paper=True gives the paper's
    tree; an argument given explicitly applies either way; a method without those arguments takes none."""
    import inspect

    from sglang_ddtree.engine.engine import PAPER_TREE, SERVED
    from sglang_ddtree.round_config import RoundConfig

    names = ("anchor", "children", "keys", "draft_temperature", "sampling_temperature", "drawn_shape")
    params = inspect.signature(engine.generate).parameters
    assert all(params[n].default == SERVED for n in names) and params["paper"].default is False
    given = dict.fromkeys(names, SERVED)
    served = RoundConfig()
    assert engine._tree_defaults("ddtree", False, **given) == (served.anchor, served.children, served.keys,
                                                                "drafter", None, "drafter")
    assert (served.anchor, served.children, served.keys, served.calibration) == ("chain", "drawn", "law", "auto")
    assert engine._tree_defaults("ddtree", False, **{**given, "children": "top"})[3:] == ("drafter", "drafter", None)
    assert engine._tree_defaults("ddtree", True, **given) == tuple(PAPER_TREE[n] for n in names)
    assert engine._tree_defaults("ddtree", True, **{**given, "anchor": "chain"})[:2] == ("chain", "top")
    assert engine._tree_defaults("lattice", False, **given) == ("chain", "top", "draft", None, None, None)
    for method in ("chain", "ar"):
        assert engine._tree_defaults(method, False, **given) == tuple(PAPER_TREE[n] for n in names)
    bare = Engine(engine.target, engine.drafter)  # no drafter directory: no calibration file, the raw draft
    assert bare._tree_defaults("ddtree", False, **given)[3:] == (None, None, None)
    prompts, kw = ["def f(x):", "import os"], dict(max_new_tokens=6, temperature=1.0, seed=3, budget=15)
    assert [r.token_ids for r in engine.generate(prompts, **kw)] == [r.token_ids for r in engine.generate(
        prompts, **kw, anchor="chain", children="drawn", keys="law", draft_temperature="drafter",
        drawn_shape="drafter")]
    assert [r.accept_lengths for r in engine.generate(prompts, **kw, paper=True)] == [r.accept_lengths for r in
                                                                                     engine.generate(
        prompts, **kw, anchor=None, children="top", keys="draft", draft_temperature=None)]
