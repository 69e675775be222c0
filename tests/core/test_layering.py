"""SGLang internals are touched in one layer, and the round core is one.

- Outside sglang_ddtree/sglang/adapters/ no module imports `sglang.srt` or `sglang.kernels`: module-level and
  function-local imports, and import_module / __import__ of a literal name. Registration and argument
  resolution reach SGLang through adapters/registration.py too. The adapters themselves import SGLang only
  through adapters/need.py (tests/sglang/test_sglang_conformance.py).
- The engine and the SGLang decode round both commit a round with round.RoundOps.commit, and no adapter
  carries round logic of its own (none imports the round core or the ops).
"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "sglang_ddtree"
ADAPTERS = ("sglang", "adapters")
INTERNALS = ("sglang.srt", "sglang.kernels")


def sglang_imports(path: Path) -> list[str]:
    """Every SGLang-internal module the file imports, wherever the import sits."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in \
                ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            found.append(str(node.args[0].value))
    return [m for m in found if any(m == top or m.startswith(top + ".") for top in INTERNALS)]


def modules():
    return {p.relative_to(PKG).as_posix(): p for p in PKG.rglob("*.py")}


def test_only_the_adapters_import_sglang():
    seen, bad = 0, {}
    for name, path in modules().items():
        if Path(name).parts[:2] == ADAPTERS:
            continue
        seen += 1
        if sglang_imports(path):
            bad[name] = sorted(sglang_imports(path))
    assert not bad, f"modules outside sglang_ddtree/sglang/adapters import SGLang: {bad}"
    assert seen > 20  # the walk really saw the package
    for name in ("sglang/worker.py", "sglang/decode_round.py", "sglang/plugin.py", "sglang/args.py"):
        assert name in modules()


def test_the_check_itself_catches_an_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom sglang.srt.utils import x\nimport sglang.kernels.ops as k\nimport sglang\n"
                 "def f():\n    from sglang.srt.a import b\n    importlib.import_module('sglang.srt.plugins')\n")
    assert sglang_imports(f) == ["sglang.srt.utils", "sglang.kernels.ops", "sglang.srt.a", "sglang.srt.plugins"]


def _calls(path: Path, attr: str) -> int:
    return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
               for n in ast.walk(ast.parse(path.read_text())))


def _imports_from(path: Path) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom):
            out.add("." * n.level + (n.module or ""))
    return out


def test_engine_and_sglang_round_share_the_round_core():
    mods = modules()
    engine, decode = mods["engine/engine.py"], mods["sglang/decode_round.py"]
    assert "..round" in _imports_from(engine) and "sglang_ddtree.round" in _imports_from(decode)
    assert _calls(engine, "commit") == 1 and _calls(decode, "commit") == 1
    for name, path in mods.items():
        if Path(name).parts[:2] == ADAPTERS:
            reached = {m.lstrip(".") for m in _imports_from(path)}
            assert not reached & {"round", "ops", "accept", "tree", "sglang_ddtree.round", "sglang_ddtree.ops"}, name
            assert _calls(path, "commit") == 0, name
