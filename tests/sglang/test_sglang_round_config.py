"""The server's round configuration has one owner: the budget variables are parsed once per server, in the process
that resolves SGLang's arguments (args.resolve_round through SGLang's real ServerArgs path), and the scheduler
processes read the published RoundConfig; the engine's defaults are the server's."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "sglang_ddtree"


@pytest.fixture
def budget_parses(monkeypatch):
    """Counts every parse of a round variable's text (settings.Var.parse on ROUND_FIELDS), by field."""
    from sglang_ddtree.sglang import settings

    counts = {}
    parse = settings.Var.parse

    def counted(self, text):
        if self.field in settings.ROUND_FIELDS:
            counts[self.field] = counts.get(self.field, 0) + 1
        return parse(self, text)

    monkeypatch.setattr(settings.Var, "parse", counted)
    return counts


@pytest.mark.parametrize("env", [{}, {"SGLANG_DDTREE_BUDGET": "auto"}, {"SGLANG_DDTREE_BUDGET": "20"}])
def test_the_budget_is_parsed_once_per_server(resolve, monkeypatch, budget_parses, env):
    """Through both of SGLang's argument hooks (validate_server_args, then handle_server_args) the budget, its
    candidates and the other round variables are parsed once; what a scheduler process builds its worker from
    (worker.DDTreeWorkerV2.__init__: Settings.from_env and RoundConfig.published, checked below) parses none."""
    from sglang_ddtree.round_config import RoundConfig
    from sglang_ddtree.sglang.settings import ROUND_FIELDS, Settings

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    sa = resolve()
    assert budget_parses == {f: 1 for f in ROUND_FIELDS}
    Settings.from_env()
    config = RoundConfig.published()
    assert budget_parses == {f: 1 for f in ROUND_FIELDS}  # the scheduler's reads parse no round variable
    assert sa.speculative_num_draft_tokens == config.verify_width


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


def test_only_resolve_round_reads_the_round_variables():
    """No module but settings.py parses a round variable (round_knobs, its one reader, or VARS[...].parse), only
    args.resolve_round calls round_knobs, only validate_server_args calls resolve_round, and the worker takes the
    published config."""
    readers = {}
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for name in ("round_knobs", "resolve_round", "published"):
                if _calls(fn, name):
                    readers.setdefault(name, set()).add((path.relative_to(PKG).as_posix(), fn.name))
        if path.name != "settings.py":
            assert not _calls(tree, "parse") or "VARS" not in path.read_text(), path
            assert "Settings.from_env" not in path.read_text() or path.parts[-2] == "sglang", path
    assert readers["round_knobs"] == {("sglang/args.py", "resolve_round")}
    assert readers["resolve_round"] == {("sglang/args.py", "validate_server_args")}
    assert ("sglang/worker.py", "__init__") in readers["published"]
    assert ("sglang/args.py", "apply_ddtree_defaults") in readers["published"]


def test_engine_defaults_are_the_servers(resolve, monkeypatch):
    """The engine given no budget decodes at the budget a server given none keeps where auto is not its default
    (--attention-backend flashinfer without the FlashInfer prefix), and its auto candidates are those a server
    with SGLANG_DDTREE_BUDGET=auto resolves for a drafter of the same block (the fixture's and the shipped pair's:
    8)."""
    from sglang_ddtree.attention import flashinfer
    from sglang_ddtree.engine import Engine
    from sglang_ddtree.round_config import RoundConfig

    monkeypatch.setattr(flashinfer, "installed", lambda: False)
    eng = Engine.from_pretrained(device="cpu")
    assert eng.block_size == 8

    def engine_config(**kw):
        return eng._checked_args(["x"], 4, "ddtree", kw.get("budget"), 0.0, 0, None, None, None, None, None,
                                 kw.get("auto_budgets"), None)[5]

    server = resolve("--attention-backend", "flashinfer")
    fixed = RoundConfig.published()
    assert not fixed.auto and engine_config().budget == fixed.budget == server.speculative_num_draft_tokens - 1
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "auto")
    resolve()
    auto = RoundConfig.published()
    assert engine_config(budget="auto").auto_budgets == auto.auto_budgets == (7, 15, 31, 63)
    from sglang_ddtree.engine.engine import SERVED  # and its tree: the server's anchor, children, keys

    tree = eng._tree_defaults("ddtree", False, anchor=SERVED, children=SERVED, keys=SERVED)
    assert tree == (fixed.anchor, fixed.children, fixed.keys) == (auto.anchor, auto.children, auto.keys)
    assert engine_config(budget="auto").budget == auto.budget
