"""SGLang internals are touched in one layer: no module of the package outside sglang_ddtree/sglang imports
`sglang` (the engine, the ops, the kernels' bindings and the tools stay SGLang-free)."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "sglang_ddtree"


def sglang_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "sglang" or a.name.startswith("sglang.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                (node.module == "sglang" or node.module.startswith("sglang.")):
            found.append(node.module)
    return found


def test_only_the_plugin_layer_imports_sglang():
    outside = {str(p.relative_to(PKG)): sglang_imports(p) for p in PKG.rglob("*.py")
               if "sglang" not in p.relative_to(PKG).parts[:1] and "kernels" not in p.relative_to(PKG).parts[:1]}
    bad = {k: v for k, v in outside.items() if v}
    assert not bad, f"modules outside sglang_ddtree/sglang import SGLang: {bad}"
    assert len(outside) > 20  # the walk really saw the package


def test_the_check_itself_catches_an_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom sglang.srt.utils import x\n")
    assert sglang_imports(f) == ["sglang.srt.utils"]
