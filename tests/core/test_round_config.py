"""round_config.RoundConfig: the round's knobs in one frozen value, checked when built, and carried to the server's
scheduler processes as one serialized variable without loss."""
import pytest

from sglang_ddtree import round_config as R
from sglang_ddtree.round_config import RoundConfig, auto_candidates
from sglang_ddtree.sizes import MAX_BUDGET


def test_auto_candidates_always_hold_the_chain():
    """The ladder's budgets wider than the block, and the chain's budget block − 1 (values written out by hand)."""
    assert R.AUTO_LADDER == (15, 31, 63) and R.DEFAULT_BUDGET == 32
    assert auto_candidates(8) == (7, 15, 31, 63)
    assert auto_candidates(16) == (15, 31, 63)
    assert auto_candidates(32) == (31, 63)
    assert auto_candidates(4) == (3, 15, 31, 63)
    assert auto_candidates(8, (20, 10, 20)) == (7, 10, 20)
    with pytest.raises(ValueError, match=r"^KNOB: budgets \[3\] are below the drafter block size − 1 = 7"):
        auto_candidates(8, (3, 31), name="KNOB")
    with pytest.raises(ValueError, match=f"KNOB: budget {MAX_BUDGET + 1} is above"):
        auto_candidates(8, (15, MAX_BUDGET + 1), max_budget=MAX_BUDGET, name="KNOB")
    assert auto_candidates(8, (15, 2000), max_budget=None) == (7, 15, 2000)  # the caller checks the limit


def test_fields_widths_and_fixed():
    c = RoundConfig(budget=63, auto_budgets=(7, 15, 31, 63), auto_default=True, topk=4, anchor=None, children="top",
                    keys="law", calibration="off")
    assert c.auto and c.verify_width == 64 and c.widths == (8, 16, 32, 64)
    f = c.fixed()
    assert not f.auto and not f.auto_default and f.budget == 63 and f.widths == (64,) and f.topk == 4
    d = RoundConfig()
    assert (d.budget, d.auto, d.topk, d.anchor, d.children, d.keys, d.calibration) == \
        (32, False, None, "chain", "drawn", "law", "auto")
    with pytest.raises(dataclasses_error()):
        d.budget = 3  # frozen: resolved once, then only read


def dataclasses_error():
    import dataclasses

    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("kwargs,field", [
    (dict(budget=-1), "budget"), (dict(budget=3.0), "budget"), (dict(budget=True), "budget"),
    (dict(budget=31, auto_budgets=(15, 7, 31)), "auto_budgets"), (dict(budget=63, auto_budgets=(7, 31)), "auto_budgets"),
    (dict(budget=31, auto_budgets=(0, 31)), "auto_budgets"), (dict(auto_default=True), "auto_default"),
    (dict(topk=0), "topk"), (dict(anchor="none"), "anchor"), (dict(children="drawn_top"), "children"),
    (dict(keys="target"), "keys")])
def test_a_config_built_wrong_is_one_line_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^RoundConfig\.{field} ") as info:
        RoundConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_published_round_trips():
    env = {}
    with pytest.raises(RuntimeError, match=R.PUBLISHED):
        RoundConfig.published(env)
    for c in (RoundConfig(), RoundConfig(budget=63, auto_budgets=[7, 15, 31, 63], auto_default=True, topk=8,
                                         anchor=None, children="top", keys="law", calibration="/x/cal.json"),
              RoundConfig(budget=0, calibration=None)):
        c.publish(env)
        back = RoundConfig.published(env)
        assert back == c and isinstance(back.auto_budgets, tuple)
