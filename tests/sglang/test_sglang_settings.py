"""The settings table (sglang_ddtree/sglang/settings.py) is the one home of the SGLANG_DDTREE_* variables: the
docs' tables are its own, each variable parses in one place, and a bad value names the variable."""
import dataclasses
import re
from pathlib import Path

import pytest

from sglang_ddtree.sglang.settings import ROUND_FIELDS, TABLE, Settings, markdown_tables, round_knobs

SERVING = Path(__file__).resolve().parents[2] / "docs" / "SERVING.md"


def test_serving_docs_tables_are_the_settings_table():
    text = SERVING.read_text()
    for table in markdown_tables():
        assert table in text, f"docs/SERVING.md is out of date; paste settings.markdown_tables():\n{table}"
    documented = set(re.findall(r"`(SGLANG_DDTREE_[A-Z_]+)`", text))
    declared = {v.name for v in TABLE} | {v.alias for v in TABLE if v.alias}
    assert documented == declared


def test_the_package_reads_no_variable_outside_the_table():
    pkg = Path(__file__).resolve().parents[2] / "sglang_ddtree" / "sglang"
    declared = {v.name for v in TABLE} | {v.alias for v in TABLE if v.alias}
    for path in pkg.rglob("*.py"):
        if path.name != "settings.py":
            assert not set(re.findall(r"os\.environ(?:\.get)?\(?\[?\"(SGLANG_DDTREE_\w+)", path.read_text())), path
    assert len(declared) == 16


def test_defaults_and_types():
    s = Settings.from_env({})
    assert s == Settings() and s.stage_times is None
    assert Settings.from_env({"SGLANG_DDTREE_STAGE_TIMES": "200"}).stage_times == 200
    with pytest.raises(ValueError, match="SGLANG_DDTREE_STAGE_TIMES must be >= 1"):
        Settings.from_env({"SGLANG_DDTREE_STAGE_TIMES": "0"})
    env = {"SGLANG_DDTREE_BUDGET": "48", "SGLANG_DDTREE_TOPK": "8", "SGLANG_DDTREE_DRAFT_GRAPH_HEAD": "0",
           "SGLANG_DDTREE_ANCHOR": "None", "SGLANG_DDTREE_AUTO_BUDGETS": "15, 31", "SGLANG_DDTREE_MLA_PREFIX": "tree",
           "SGLANG_DDTREE_CALIBRATION": "/x/Cal.json", "SGLANG_DDTREE_CHILDREN": "TOP",
           "SGLANG_DDTREE_SELECTOR": "Marginals"}
    s, k = Settings.from_env(env), round_knobs(env)
    assert (s.draft_graph_head, s.prefix) == (False, "tree")
    assert k == {"budget": 48, "topk": 8, "anchor": None, "auto_budgets": (15, 31), "calibration": "/x/Cal.json",
                 "children": "top", "selector": "marginals"}
    assert round_knobs({}) == {"budget": None, "topk": None, "anchor": "chain", "auto_budgets": (),
                               "calibration": "auto", "children": "drawn", "selector": "auto"}
    with pytest.raises(ValueError, match="SGLANG_DDTREE_SELECTOR must be one of auto, lattice, marginals"):
        round_knobs({"SGLANG_DDTREE_SELECTOR": "walk"})
    assert round_knobs({"SGLANG_DDTREE_BUDGET": "Auto"})["budget"] == "auto"
    with pytest.raises(ValueError, match="SGLANG_DDTREE_BUDGET must be an integer or auto"):
        round_knobs({"SGLANG_DDTREE_BUDGET": "auto-default"})  # no longer written by the hook, so not read


def test_settings_leave_the_round_to_round_knobs():
    """The round's variables (budget, candidates, topk, anchor, children, selector, calibration) are RoundConfig's: Settings
    neither holds nor parses them, so a scheduler process reading Settings parses no budget."""
    assert not set(ROUND_FIELDS) & {f.name for f in dataclasses.fields(Settings)}
    assert Settings.from_env({"SGLANG_DDTREE_BUDGET": "not a budget"}) == Settings()
    assert set(ROUND_FIELDS) <= {v.field for v in TABLE}


@pytest.mark.parametrize("var", TABLE, ids=lambda v: v.name)
def test_every_bad_value_is_one_line_naming_the_variable(var):
    if var.kind == "text":
        pytest.skip("free text (a path)")
    with pytest.raises(ValueError) as info:
        (round_knobs if var.field in ROUND_FIELDS else Settings.from_env)({var.name: "x,y"})
    assert var.name in str(info.value) and "\n" not in str(info.value)
