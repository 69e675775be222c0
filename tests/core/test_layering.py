"""SGLang internals are touched in one layer, and the round core is one.

- Outside sglang_ddtree/sglang/adapters/ no module imports `sglang.srt` or `sglang.kernels`: module-level and
  function-local imports, and import_module / __import__ of a literal name. Registration and argument
  resolution reach SGLang through adapters/registration.py too. The adapters themselves import SGLang only
  through adapters/need.py (tests/sglang/test_sglang_conformance.py).
- The decode round is round.py's, once: the engine and the SGLang worker are its hosts (each runs
  `Round.run`; neither commits, samples or chooses a width itself), and no adapter carries round logic of
  its own (none imports the round core or the ops).
- The package's import graph has no circle and no import from a lower layer to a higher one (LAYERS).
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


def _calls_named(path: Path, name: str) -> int:
    return sum(isinstance(n, ast.Call) and (getattr(n.func, "attr", None) == name or getattr(n.func, "id", None) == name)
               for n in ast.walk(ast.parse(path.read_text())))


def _round_run(path: Path) -> ast.FunctionDef:
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "Round")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "run")


def test_engine_and_sglang_round_share_the_round_core():
    mods = modules()
    engine, decode, core = mods["engine/engine.py"], mods["sglang/decode_round.py"], mods["round.py"]
    assert "..round" in _imports_from(engine) and "sglang_ddtree.round" in _imports_from(decode)
    for host in (engine, decode):  # each host hands its batch to Round.run, and does none of the round itself
        assert _calls_named(host, "run") == 1, host  # (the engine's prefill samples with node_tokens, as the round)
    for host in (engine, mods["engine/batch.py"], decode):  # batch.py: the engine's RoundHost
        for step in ("commit", "sample_node_tokens", "sample_tokens", "choose", "publish", "truncate"):
            assert _calls_named(host, step) == 0, (host, step)
    assert _calls_named(core, "commit") == 1 and _calls_named(core, "node_tokens") == 1
    assert _calls_named(core, "choose") == 1
    assert sum(isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "truncate"
               for n in ast.walk(_round_run(core))) == 1  # Round.run cuts the tree once, through its RoundOps
    for name, path in mods.items():
        if Path(name).parts[:2] == ADAPTERS:
            reached = {m.lstrip(".") for m in _imports_from(path)}
            assert not reached & {"round", "ops", "accept", "tree", "sglang_ddtree.round", "sglang_ddtree.ops"}, name
            assert _calls(path, "commit") == 0, name


# --- the import graph ---------------------------------------------------------------------------------------
# Layers, lowest first: a module imports only from its own layer or a lower one. The core is SGLang-free and
# knows no host; the engine and the SGLang plugin are the round's two hosts; benchmarks and entry points sit on
# top. Prefixes of module paths under sglang_ddtree/ (the longest match wins).
LAYERS = (
    ("core", ("",)),
    ("hosts", ("engine/", "sglang/")),
    ("tools", ("bench/", "tools/")),
    ("entry", ("__main__.py", "check.py", "launch_server.py")),
)


def layer_of(name: str) -> int:
    best, rank = -1, 0
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if name.startswith(p) and len(p) >= best:
                best, rank = len(p), i
    return rank


def _module_file(parts: list[str], files: dict) -> str | None:
    """The package file a dotted path names (a module, else a package's __init__.py), or None."""
    stem = "/".join(parts)
    for cand in (f"{stem}.py", f"{stem}/__init__.py" if stem else "__init__.py"):
        if cand in files:
            return cand
    return None


def import_graph(files: dict) -> dict[str, set[str]]:
    """{module: modules of the package it imports}, every import statement (function-level ones too), a
    `from X import name` naming a submodule counted as an import of that submodule."""
    graph = {}
    for name, path in files.items():
        here = name.split("/")[:-1]  # the package the module sits in
        out = set()
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(n, ast.Import):
                targets = [(a.name.split("."), []) for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                if n.level:
                    base = here[:len(here) - (n.level - 1)] if n.level > 1 else list(here)
                    mod = base + (n.module.split(".") if n.module else [])
                else:
                    mod = n.module.split(".")
                targets = [(mod, [a.name for a in n.names])]
            for mod, names in targets:
                if n.__class__ is ast.ImportFrom and n.level:
                    rel = mod
                elif mod[:1] == ["sglang_ddtree"]:
                    rel = mod[1:]
                else:
                    continue
                hit = False
                for item in names:
                    sub = _module_file(rel + [item], files)
                    if sub is not None:
                        out.add(sub)
                        hit = True
                if not hit or len(names) > sum(_module_file(rel + [i], files) is not None for i in names):
                    f = _module_file(rel, files)
                    if f is not None:
                        out.add(f)
        out.discard(name)
        graph[name] = out
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circle_and_no_upward_import():
    files = modules()
    graph = import_graph(files)
    loops = circles(graph)
    assert not loops, f"import circles: {loops}"
    upward = sorted((m, t) for m, ts in graph.items() for t in ts if layer_of(t) > layer_of(m))
    assert not upward, f"imports from a lower layer to a higher one ({[n for n, _ in LAYERS]}): {upward}"
    assert graph["engine/engine.py"] >= {"round.py", "engine/batch.py"} and graph["engine/batch.py"] >= {"budget.py"}
    assert "engine/engine.py" in graph["tools/calibrate.py"]


def test_the_graph_check_catches_a_circle_and_an_upward_import(tmp_path):
    pkg = tmp_path / "sglang_ddtree"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("from .engine import Engine\n")
    (pkg / "budget.py").write_text("def main():\n    from .engine import Engine\n")  # the circle issue 31 found
    (pkg / "engine" / "engine.py").write_text("from ..budget import main\n")
    files = {p.relative_to(pkg).as_posix(): p for p in pkg.rglob("*.py")}
    graph = import_graph(files)
    assert graph["budget.py"] == {"engine/__init__.py"} and graph["engine/engine.py"] == {"budget.py"}
    assert circles(graph) == [["budget.py", "engine/__init__.py", "engine/engine.py"]]
    assert layer_of("budget.py") < layer_of("engine/engine.py")


def test_the_verify_width_meets_sglang_in_the_adapters_only():
    """The package's unit for a tree's size is the budget B; SGLang's field for it, speculative_num_draft_tokens (the
    verify width B + 1), is read and written in adapters/ alone (registration.flag_budget, set_budget,
    served_budget, draft_tokens)."""
    bad = []
    for name, path in modules().items():
        if Path(name).parts[:2] == ADAPTERS:
            continue
        bad += [f"{name}:{n.lineno}" for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.Attribute) and n.attr == "speculative_num_draft_tokens"]
    assert not bad, f"SGLang's verify width read or written outside sglang/adapters/: {bad}"


# --- SGLang's objects are read in adapters/ only -------------------------------------------------------------------
# The names the plugin's code gives SGLang's objects (a ScheduleBatch, a ForwardBatch, server arguments, a model
# runner and what it holds, a worker's outputs, a request, its sampling info): an attribute read or write on one of
# them is a read of SGLang's object model, which DESIGN §2 keeps in sglang/adapters/ (the round asks verbs:
# adapters/dflash_v2.py, registration.py, target_runner.py).
SGLANG_OBJECTS = {"batch", "forward_batch", "server_args", "model_runner", "runner", "target_worker",
                  "draft_model_runner", "token_to_kv_pool", "req_to_token_pool", "attn_backend", "lm_head",
                  "logits_output", "target_out", "draft_out", "spec_info", "draft_input", "sampling_info", "req",
                  "reqs", "shard_indices"}


def sglang_object_reads(source: str) -> list[str]:
    """`line: name.attr` of every attribute of an SGLANG_OBJECTS name (x.attr, or self.x.attr / y.x.attr)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        owner = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None
        if owner in SGLANG_OBJECTS:
            out.append(f"{node.lineno}: {owner}.{node.attr}")
    return out


def test_only_the_adapters_read_sglangs_objects():
    seen, bad = 0, {}
    for name, path in modules().items():
        if Path(name).parts[0] != "sglang" or Path(name).parts[:2] == ADAPTERS:
            continue
        seen += 1
        reads = sglang_object_reads(path.read_text())
        if reads:
            bad[name] = reads
    assert not bad, f"SGLang objects read outside sglang/adapters/ (add an adapter verb): {bad}"
    served = ("decode_round", "worker", "draft_head", "args", "tree_attention", "draft_attention")
    assert seen >= 10 and all(f"sglang/{m}.py" in modules() for m in served)


def test_the_object_read_check_sees_a_read():
    src = ("def f(self, batch, dr):\n    n = len(self.view.seq_lens)\n    self.sgl.open_round(batch)\n"
           "    x = batch.seq_lens\n    y = dr.target_out.logits_output\n    self.batch.spec_info = None\n")
    assert sglang_object_reads(src) == ["4: batch.seq_lens", "5: target_out.logits_output", "6: batch.spec_info"]
