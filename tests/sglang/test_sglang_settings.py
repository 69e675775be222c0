"""The settings table (sglang_ddtree/sglang/settings.py) is the one home of the SGLANG_DDTREE_* variables: the
docs' tables are its own, each variable parses in one place, and a bad value names the variable."""
import re
from pathlib import Path

import pytest

from sglang_ddtree.sglang.settings import TABLE, Settings, markdown_tables

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
    assert len(declared) == 15


def test_defaults_and_types():
    s = Settings.from_env({})
    assert s == Settings() and s.stage_times is None
    assert Settings.from_env({"SGLANG_DDTREE_STAGE_TIMES": "200"}).stage_times == 200
    with pytest.raises(ValueError, match="SGLANG_DDTREE_STAGE_TIMES must be >= 1"):
        Settings.from_env({"SGLANG_DDTREE_STAGE_TIMES": "0"})
    env = {"SGLANG_DDTREE_BUDGET": "48", "SGLANG_DDTREE_TOPK": "8", "SGLANG_DDTREE_DRAFT_GRAPH_HEAD": "0",
           "SGLANG_DDTREE_ANCHOR": "None", "SGLANG_DDTREE_AUTO_BUDGETS": "15, 31", "SGLANG_DDTREE_MLA_PREFIX": "tree",
           "SGLANG_DDTREE_CALIBRATION": "/x/Cal.json"}
    s = Settings.from_env(env)
    assert (s.budget, s.topk, s.draft_graph_head, s.anchor, s.auto_budgets, s.prefix, s.calibration) == \
        (48, 8, False, None, (15, 31), "tree", "/x/Cal.json")
    s = Settings.from_env({"SGLANG_DDTREE_BUDGET": "auto-default"})
    assert s.auto and s.auto_default and s.budget is None


@pytest.mark.parametrize("var", TABLE, ids=lambda v: v.name)
def test_every_bad_value_is_one_line_naming_the_variable(var):
    if var.kind == "text":
        pytest.skip("free text (a path)")
    with pytest.raises(ValueError) as info:
        Settings.from_env({var.name: "x,y"})
    assert var.name in str(info.value) and "\n" not in str(info.value)
