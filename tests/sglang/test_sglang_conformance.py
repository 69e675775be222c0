"""Every SGLang symbol the plugin touches exists on the installed release, as the plugin uses it.

The worker's list is the release adapter's own: an adapter reaches SGLang only through `need(...)`
(adapters/need.py; checked here on the source), which resolves and signature-checks each symbol as the
adapter loads, and every DFlash worker member or attribute an adapter or the worker reads is in the
adapter's HOST_MEMBERS / HOST_ATTRS (checked here on the source, then against the installed DFlashWorkerV2).
Registration's symbols are adapters/registration.py's SYMBOLS.
"""
import ast
import importlib
import inspect
from pathlib import Path

import pytest

from sglang_ddtree.sglang import adapters
from sglang_ddtree.sglang.adapters import registration, releases

SGL = Path(adapters.__file__).resolve().parents[1]
ADAPTER_FILES = sorted((SGL / "adapters").glob("*.py"))


def _resolve(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split(".") if qualname else ():
        obj = getattr(obj, part)
    return obj


def test_registration_symbols_import(sglang_release):
    missing = []
    for module, name in registration.symbols(sglang_release):
        try:
            _resolve(module, name)
        except (ImportError, AttributeError) as e:
            missing.append(f"{module}.{name}: {e}")
    assert missing == []


def test_adapters_reach_sglang_only_through_need():
    """No adapter imports SGLang itself, and only need.py imports by name (adapters/__init__.py imports its
    own release modules): the `need` list is complete."""
    assert {p.name for p in ADAPTER_FILES} >= {"v0_5_17.py", "v0_5_23.py", "dflash_v2.py", "need.py"}
    bad = []
    for path in ADAPTER_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            bad += [f"{path.name}: import {n}" for n in names if n.split(".")[0] == "sglang"
                    or (n == "importlib" and path.name not in ("need.py", "__init__.py"))]
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" \
                    and path.name == "__init__.py":
                arg = node.args[0]
                own = isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.FormattedValue) \
                    and getattr(arg.values[0].value, "id", None) == "__name__"
                bad += [] if own else [f"__init__.py: import_module({ast.unparse(arg)})"]
    assert bad == []


def test_the_adapter_lists_every_symbol_it_resolved(sglang_release):
    mod = adapters.for_release(sglang_release)
    assert mod.Adapter.RELEASE == sglang_release and mod.need.release == sglang_release
    assert len(mod.need.symbols) > 15
    for module, qualname, params in mod.need.symbols:
        obj = _resolve(module, qualname)
        if params:
            assert set(params) <= set(inspect.signature(obj).parameters), (module, qualname)
    # every SGLang object the adapter class holds came through need
    resolved = {id(_resolve(m, q)) for m, q, _ in mod.need.symbols}
    held = {k: getattr(v, "__func__", v) for k, v in vars(mod.Adapter).items()
            if k.isupper() and not k.startswith("HOST_") and k not in ("RELEASE", "SUPPORTS", "DRAFT_KV_LENS")}
    assert len(held) > 10 and [k for k, v in held.items() if id(v) not in resolved] == []


def test_a_missing_symbol_is_a_loud_specific_error():
    from sglang_ddtree.sglang.adapters.need import MissingSGLangSymbol, Needs

    need = Needs("9.9.9")
    with pytest.raises(MissingSGLangSymbol, match=r"sglang.srt.speculative.dflash_worker_v2.NoSuchWorker"):
        need("sglang.srt.speculative.dflash_worker_v2", "NoSuchWorker")
    with pytest.raises(MissingSGLangSymbol, match=r"\['no_such_param'\].*DFlashVerifyInput.prepare_for_verify"):
        need("sglang.srt.speculative.dflash_info", "DFlashVerifyInput.prepare_for_verify", ("batch", "no_such_param"))
    with pytest.raises(MissingSGLangSymbol, match="sglang.srt.no_such_module"):
        need.module("sglang.srt.no_such_module")
    assert need.symbols == []


def _host_names(path: Path) -> set[str]:
    """Attribute names read or written on the DFlash worker: `host.x`, `self.host.x`, `h.x` (h = self.host)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if (isinstance(v, ast.Name) and v.id in ("host", "h")) or \
                (isinstance(v, ast.Attribute) and v.attr == "host" and isinstance(v.value, ast.Name)):
            out.add(node.attr)
    return out


def _worker_self_names(path: Path) -> tuple[set[str], set[str]]:
    """(self.x read in worker.py, names worker.py defines on self or in its class)."""
    tree = ast.parse(path.read_text())
    used, defined = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            (defined if isinstance(node.ctx, ast.Store) else used).add(node.attr)
        elif isinstance(node, ast.FunctionDef):
            defined.add(node.name)
    return used, defined


def test_every_dflash_member_used_is_listed_and_exists(sglang_release):
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    mod = adapters.for_release(sglang_release)
    listed = set(mod.Adapter.HOST_MEMBERS) | set(mod.Adapter.HOST_ATTRS)
    files = [SGL / "adapters" / "dflash_v2.py", SGL / "adapters" / f"{mod.__name__.rsplit('.', 1)[1]}.py"]
    used = set().union(*(_host_names(p) for p in files))
    assert used, "the scan found no host access"
    assert used - listed == set()
    worker_used, worker_defined = _worker_self_names(SGL / "worker.py")
    base_own = set(vars(mod.WorkerBase))
    assert worker_used - worker_defined - base_own - listed == set()
    assert [m for m in mod.Adapter.HOST_MEMBERS if not hasattr(DFlashWorkerV2, m)] == []
    source = inspect.getsource(DFlashWorkerV2.__init__)
    assert [a for a in mod.Adapter.HOST_ATTRS if f"self.{a} =" not in source and f"self.{a}:" not in source] == []
    # the worker's overrides are DFlashWorkerV2 members (a renamed hook would silently stop being called)
    from sglang_ddtree.sglang.worker import DDTreeWorkerV2

    overrides = {k for k in vars(DDTreeWorkerV2) if k == "__init__" or not k.startswith(("__", "_abc"))}
    assert overrides and overrides <= set(mod.Adapter.HOST_MEMBERS)


def test_draft_input_has_the_kv_length_fields_the_adapter_reads(sglang_release):
    """The adapter's DRAFT_KV_LENS pair is declared by this release's DFlashDraftInputV2, and the verb returns
    it from a real instance."""
    import dataclasses

    import torch
    from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

    mod = adapters.for_release(sglang_release)
    names = {f.name for f in dataclasses.fields(DFlashDraftInputV2)}
    assert set(mod.Adapter.DRAFT_KV_LENS) <= names
    inst = DFlashDraftInputV2.create_idle_input(device=torch.device("cpu"))
    setattr(inst, mod.Adapter.DRAFT_KV_LENS[0], torch.tensor([3, 4]))
    setattr(inst, mod.Adapter.DRAFT_KV_LENS[1], 7)
    cpu, total = mod.Adapter(host=None).draft_kv_lens(inst)
    assert cpu.tolist() == [3, 4] and total == 7


def test_worker_module_builds_on_this_release(sglang_release):
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.sglang import worker

    assert worker.ADAPTER is adapters.for_release(sglang_release)
    assert issubclass(worker.DDTreeWorkerV2, DFlashWorkerV2)
    assert issubclass(worker.DDTreeWorkerV2, worker.ADAPTER.WorkerBase)
    sig = inspect.signature(worker.DDTreeWorkerV2.forward_batch_generation)
    assert {"batch", "on_publish", "grammar_barrier", "pp_proxy_tensors"} <= set(sig.parameters)


def test_unknown_release_has_no_adapter():
    with pytest.raises(releases.UnsupportedSGLangVersion, match="no worker adapter for sglang 0.5.20"):
        adapters.for_release("0.5.20")
    assert set(adapters.MODULES) == set(releases.SUPPORTED_VERSIONS)
    with pytest.raises(releases.UnsupportedSGLangVersion, match="no adapter for sglang 0.5.20"):
        releases.capabilities("0.5.20")


def test_a_release_is_its_adapter_file_and_says_what_it_supports(sglang_release):
    """The supported releases are the adapter files (vMAJOR_MINOR_PATCH.py), each answering every capability in
    its SUPPORTS, read from its text (no SGLang import) the same as the module holds it; the installed release's
    Adapter answers them; an unknown capability is refused by name."""
    files = sorted(p.stem for p in ADAPTER_FILES if p.stem.startswith("v"))
    assert sorted(releases.MODULES.values()) == files and list(releases.MODULES) == sorted(
        releases.MODULES, key=lambda r: tuple(map(int, r.split("."))))
    for rel in releases.MODULES:
        assert set(releases.capabilities(rel)) == set(releases.CAPABILITIES)
    mod = adapters.for_release(sglang_release)
    assert mod.SUPPORTS == mod.Adapter.SUPPORTS == releases.capabilities(sglang_release)
    assert all(mod.Adapter.supports(c) == releases.supports(c) for c in releases.CAPABILITIES)
    with pytest.raises(ValueError, match="unknown SGLang capability 'teleport'"):
        releases.supports("teleport")


def release_decisions(source: str) -> list[int]:
    """Lines that decide by a release number: a comparison with one ("0.5.17", or a collection holding one:
    `rel in ("0.5.23",)`), or a collection of them bound to a name (a list of releases that can do something)."""
    import re

    def numbers(node) -> bool:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and re.fullmatch(r"\d+\.\d+\.\d+\w*", n.value) for n in items)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(numbers(n) for n in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)) and \
                numbers(node.value):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_decision_reads_a_release_name():
    """The package decides by capability (releases.supports, an Adapter's supports), never by a release number."""
    bad = [f"{p.name}:{line}" for p in Path(adapters.__file__).resolve().parents[2].rglob("*.py")
           for line in release_decisions(p.read_text())]
    assert not bad, bad
    assert release_decisions('if rel != "0.5.17":\n    pass\nX = ("0.5.23",)\nok = rel in ("0.5.23",)\n') == \
        [1, 3, 4]  # the check sees a decision by name
    assert release_decisions('"""0.5.23 docs"""\nneed = Needs("0.5.23")\nRELEASE = "0.5.23"\n') == []


def test_backend_names_and_classes_are_sglangs(sglang_release):
    """backends.BY_POOL's --attention-backend names are registered in SGLang's attention registry and each
    creator makes the class tree_attention checks the live backend against (read from the registry's source:
    importing the backends loads their CUDA libraries)."""
    from sglang_ddtree.sglang import backends

    registry = Path(importlib.util.find_spec("sglang.srt.layers.attention.attention_registry").origin)
    creators = {}
    for node in ast.parse(registry.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "register_attention_backend":
                    creators[deco.args[0].value] = ast.get_source_segment(registry.read_text(), node)
    for pool, by_name in backends.BY_POOL.items():
        for name, cls in by_name.items():
            assert name in creators, f"{name} is not an --attention-backend of SGLang {sglang_release}"
            assert cls in creators[name], f"SGLang {sglang_release}'s {name} creator makes no {cls} ({pool})"


def test_every_runner_member_the_tree_verify_reads_exists(sglang_release):
    """adapters/target_runner.py's lists name every member of SGLang's object model the tree verify touches (checked
    on the adapter's source), and each exists on this release: the model runner's attributes (set in its source),
    both KV pools' methods, the forward batch's fields, ForwardMode.is_target_verify, the model config's members
    and the backend attributes read (set in the backends' sources, which are read, not imported: importing them
    loads CUDA libraries)."""
    import dataclasses

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    from sglang_ddtree.sglang.adapters import target_runner as TR

    seen = {"runner": set(), "pool": set()}  # members read on self.runner / self.pool, directly or by getattr
    for n in ast.walk(ast.parse((SGL / "adapters" / "target_runner.py").read_text())):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr in seen \
                and isinstance(n.value.value, ast.Name) and n.value.value.id == "self":
            seen[n.value.attr].add(n.attr)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "getattr" and isinstance(n.args[0], ast.Attribute) \
                and n.args[0].attr in seen and isinstance(n.args[1], ast.Constant):
            seen[n.args[0].attr].add(n.args[1].value)
    assert seen["runner"] - set(TR.RUNNER_ATTRS) == set() and len(seen["runner"]) >= 6
    assert seen["pool"] - set(TR.POOL_MEMBERS) - set(TR.POOL_ATTRS) == {"use_hnd"}  # a layout flag some pools have
    runner_src = inspect.getsource(ModelRunner)
    assert [a for a in TR.RUNNER_ATTRS if f"self.{a} =" not in runner_src and f"self.{a}:" not in runner_src] == []
    for pool in (MHATokenToKVPool, MLATokenToKVPool):
        assert [m for m in TR.POOL_MEMBERS if not callable(getattr(pool, m, None))] == [], pool
        src = inspect.getsource(pool.__mro__[1]) + inspect.getsource(pool)
        assert [a for a in TR.POOL_ATTRS if f"self.{a} =" not in src] == [], pool
    assert set(TR.BATCH_FIELDS) <= {f.name for f in dataclasses.fields(ForwardBatch)}
    assert callable(ForwardMode.is_target_verify)
    assert [m for m in TR.MODEL_CONFIG_MEMBERS if m != "attention_arch" and not hasattr(ModelConfig, m)] == []
    assert "self.attention_arch =" in inspect.getsource(ModelConfig)
    for cls, attrs in TR.BACKEND_ATTRS.items():
        module = {"FlashInferAttnBackend": "flashinfer_backend", "FlashMLABackend": "flashmla_backend"}[cls]
        src = Path(importlib.util.find_spec(f"sglang.srt.layers.attention.{module}").origin).read_text()
        assert f"class {cls}(" in src and all(f"self.{a} =" in src for a in attrs), cls
