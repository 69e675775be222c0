"""SGLang internals are touched in one layer, and the round core is one.

- Outside sglang_ddtree/sglang/adapters/ no module imports SGLang, except registration and argument
  resolution (REGISTRATION: each module with exactly the SGLang modules it imports today, so a new reach
  into SGLang from anywhere else fails here). The adapters themselves import SGLang only through
  adapters/need.py (tests/sglang/test_sglang_conformance.py).
- The engine and the SGLang decode round both commit a round with round.RoundOps.commit, and no adapter
  carries round logic of its own (none imports the round core or the ops).
"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "sglang_ddtree"
ADAPTERS = ("sglang", "adapters")
REGISTRATION = {
    "sglang/plugin.py": {"sglang.srt.speculative.spec_info", "sglang.srt.speculative.spec_registry"},
    "sglang/spec_algo.py": {"sglang.srt.runtime_context", "sglang.srt.speculative.spec_registry",
                            "sglang.srt.managers.overlap_utils"},
    "sglang/args.py": {"sglang.srt.utils.hf_transformers_utils", "sglang.srt.speculative.dflash_utils",
                       "sglang.srt.arg_groups.speculative_hook"},
    "sglang/compat.py": {"sglang.srt.server_args", "sglang.srt.arg_groups.overrides", "sglang.srt.runtime_context",
                         "sglang.srt.plugins.hook_registry", "sglang.srt.arg_groups.resolution_hooks"},
    "sglang/check.py": {"sglang.srt.plugins", "sglang.srt.speculative.spec_info"},
}


def sglang_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "sglang" or a.name.startswith("sglang.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                (node.module == "sglang" or node.module.startswith("sglang.")):
            found.append(node.module)
    return found


def modules():
    return {p.relative_to(PKG).as_posix(): p for p in PKG.rglob("*.py")}


def test_only_the_adapters_and_registration_import_sglang():
    seen, bad = 0, {}
    for name, path in modules().items():
        if Path(name).parts[:2] == ADAPTERS:
            continue
        seen += 1
        extra = set(sglang_imports(path)) - REGISTRATION.get(name, set())
        if extra:
            bad[name] = sorted(extra)
    assert not bad, f"modules outside sglang_ddtree/sglang/adapters import SGLang: {bad}"
    assert seen > 20  # the walk really saw the package
    for name in ("sglang/worker.py", "sglang/decode_round.py", "sglang/hooks.py", "sglang/tree_attention.py"):
        assert name in modules() and name not in REGISTRATION


def test_the_check_itself_catches_an_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom sglang.srt.utils import x\nimport sglang.kernels.ops as k\n")
    assert sglang_imports(f) == ["sglang.srt.utils", "sglang.kernels.ops"]


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
