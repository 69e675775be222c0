"""The CUDA ops build per op family (sglang_ddtree/_build.py's CUDA_FAMILIES), each family its own library and cache
key: every CUDA source is in one family, every op is bound by one family, a family calls only its own kernels'
launchers (so its library links on its own), and a family's key follows its own sources and the headers they
include, so an edit rebuilds exactly the families it touches. Nothing is compiled: the keys are computed on a copy of
kernels/, and the loading test replaces cpp_extension.load by a recorder."""
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from sglang_ddtree import _build, ops

KERNELS = _build.kernels_dir()
FAMILIES = _build.CUDA_FAMILIES


def _text(family: str, suffix: str) -> str:
    return "\n".join((KERNELS / p).read_text() for p in FAMILIES[family] if p.endswith(suffix))


def test_every_cuda_source_is_in_exactly_one_family():
    listed = Counter(p for paths in FAMILIES.values() for p in paths)
    on_disk = {p.relative_to(KERNELS).as_posix() for p in [*KERNELS.glob("*.cu"), *KERNELS.glob("torch_cuda/*.cpp")]}
    assert {p: n for p, n in listed.items() if n > 1} == {}, "a source in several families"
    assert set(listed) == on_disk, f"in no family: {on_disk - set(listed)}; no such file: {set(listed) - on_disk}"


def test_every_op_is_bound_by_exactly_one_family():
    """Every op has a CUDA implementation today: each is registered (m.impl) in one family's binding files."""
    bound = Counter(name for family in FAMILIES for name in re.findall(r'm\.impl\("(\w+)"', _text(family, ".cpp")))
    assert dict(bound) == dict.fromkeys(ops.SCHEMAS, 1), {name: bound[name] for name in {*bound, *ops.SCHEMAS}
                                                          if bound[name] != 1 or name not in ops.SCHEMAS}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_calls_only_launchers_its_own_kernels_define(family):
    called = set(re.findall(r"ddtree::(launch_\w+)\(", _text(family, ".cpp")))
    defined = set(re.findall(r"^cudaError_t (launch_\w+)\(", _text(family, ".cu"), re.M))
    assert called and called <= defined, f"{family} binds launchers another family defines: {called - defined}"


@pytest.fixture
def keys(tmp_path, monkeypatch):
    """keys() -> every library's cache key over a copy of kernels/ that the test may edit (kernels_dir() answers it)."""
    kdir = tmp_path / "checkout" / "kernels"
    shutil.copytree(KERNELS, kdir)
    monkeypatch.setattr(_build, "kernels_dir", lambda: kdir)
    monkeypatch.setattr(_build, "cuda_arch_flags", lambda: ["-gencode=arch=compute_90a,code=sm_90a"])

    def keys():
        return {"cpu": _build.cache_key(_build.cpu_library()),
                **{f: _build.cache_key(_build.cuda_library(f)) for f in FAMILIES}}

    keys.kdir = kdir
    return keys


# an edited file -> the libraries it is compiled into or included by (read off the sources' #include lines)
EDITS = {
    "law_rows.cu": {"accept"},
    "topk_lse.cu": {"tree"},
    "mla_schedule.cu": {"attention"},
    "torch_cuda/accept.cpp": {"accept"},
    "torch_cuda/checks.h": {"tree", "accept", "attention"},
    "torch_cuda/check_logits.h": {"tree", "accept"},
    "tree_kernels.cuh": {"tree", "accept"},
    "tree_commit.cuh": {"accept"},
    "verify_attn.cuh": {"attention"},
    "law_rule.h": {"accept", "cpu"},
    "philox.h": {"accept", "cpu"},  # through law_rule.h only
    "mla_schedule.h": {"attention", "cpu"},
    "tree_truncate_io.h": {"tree", "cpu"},
    "tree_constants.h": {"tree", "accept", "attention", "cpu"},
    "cpu/sampled.cpp": {"cpu"},
    "unused.h": set(),  # a header no source includes
}


@pytest.mark.parametrize("path", EDITS)
def test_an_edit_changes_exactly_the_keys_of_the_libraries_that_compile_it(keys, path):
    before = keys()
    with open(keys.kdir / path, "a") as f:
        f.write("\n// edited\n")
    after = keys()
    assert {lib for lib in before if before[lib] != after[lib]} == EDITS[path]


def test_the_keys_hold_no_checkout_path(keys, tmp_path, monkeypatch):
    first = keys()
    other = tmp_path / "elsewhere" / "kernels"
    shutil.copytree(keys.kdir, other)
    monkeypatch.setattr(_build, "kernels_dir", lambda: other)
    assert keys() == first and len(set(first.values())) == len(first)


def test_load_cuda_loads_every_family_after_the_cpu_library_and_rebuilds_only_the_edited_one(keys, tmp_path,
                                                                                            monkeypatch, capsys):
    built, loaded = [], []

    def fake_load(name, sources, build_directory, **kwargs):
        (Path(build_directory) / f"{name}.so").write_bytes(b"")
        built.append(name.rsplit("_", 1)[0])
        loaded.append(name.rsplit("_", 1)[0])

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: loaded.append(Path(path).parent.name.rsplit("_", 1)[0]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_build, "load_cpu", lambda: _build.load(_build.cpu_library()))  # uncached: a new process
    libs = ["sglang_ddtree_cpu", *(f"sglang_ddtree_cuda_{f}" for f in FAMILIES)]

    _build.load_cuda.__wrapped__()  # the uncached body: one call is one process's first use
    assert loaded[0] == "sglang_ddtree_cpu" and sorted(loaded) == sorted(built) == sorted(libs)
    assert capsys.readouterr().err.count("sglang-ddtree: building") == len(libs)

    built.clear()
    loaded.clear()
    with open(keys.kdir / "law_rows.cu", "a") as f:
        f.write("\n// edited\n")
    _build.load_cuda.__wrapped__()
    assert built == ["sglang_ddtree_cuda_accept"] and sorted(loaded) == sorted(libs)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sglang-ddtree: building the CUDA accept ops"), err
