"""The native CPU kernels' build cache (issue 42, item 1): two checkouts with equal sources share one build and never
overwrite each other's; a change of source, flag, torch or compiler builds into a folder of its own; every build
start is one line on stderr, and loading a build that exists says nothing.

Nothing is compiled here: cpp_extension.load is replaced by a fake that writes the library where torch would and
records the call, and torch.ops.load_library records what was loaded, so the test takes a second."""
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from sglang_ddtree import _build

KERNELS = _build.kernels_dir()


def _checkout(root: Path, name: str) -> Path:
    """A copy of kernels/ at another path, as a second checkout of the repository holds it."""
    kdir = root / name / "kernels"
    shutil.copytree(KERNELS, kdir)
    return kdir


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """Builds and loads recorded; kernels_dir() answers the checkout the test points it at."""
    builds, loads, where = [], [], {}

    def fake_load(name, sources, build_directory=None, **kwargs):
        folder = Path(build_directory or cpp_extension._get_build_directory(name, False))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.so").write_bytes(b"built from " + str(sources).encode())
        builds.append({"name": name, "folder": folder, "sources": sources, **kwargs})
        loads.append(folder / f"{name}.so")

    ext = tmp_path / "extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: loads.append(Path(path)))
    monkeypatch.setattr(_build, "kernels_dir", lambda: where["kdir"])

    def load_from(kdir: Path):
        where["kdir"] = kdir
        _build.load_cpu.__wrapped__()  # the uncached body: one call is one process's first use
        return loads[-1]

    return builds, load_from, tmp_path


def test_two_checkouts_share_one_build_and_say_nothing_when_loading_it(rig, capsys):
    builds, load_from, root = rig
    a, b = _checkout(root, "a"), _checkout(root, "b")
    lib_a = load_from(a)
    assert len(builds) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sglang-ddtree: building the native CPU kernels"), err
    assert str(root / "a") not in builds[0]["folder"].name  # the cache's name holds no checkout path

    assert load_from(b) == lib_a  # the second checkout loads the first one's build: no rebuild, no line
    assert load_from(a) == lib_a  # and back: nothing was overwritten
    assert len(builds) == 1 and capsys.readouterr().err == ""


def test_a_changed_source_builds_apart_and_the_old_build_stays(rig, capsys):
    builds, load_from, root = rig
    a, b = _checkout(root, "a"), _checkout(root, "b")
    lib_a = load_from(a)
    with open(b / "tree_constants.h", "a") as f:  # a header: the sources' includes count too
        f.write("\n// changed\n")
    lib_b = load_from(b)
    assert len(builds) == 2 and lib_b != lib_a and lib_a.is_file() and lib_b.is_file()
    assert capsys.readouterr().err.count("sglang-ddtree: building") == 2
    assert load_from(a) == lib_a and load_from(b) == lib_b and len(builds) == 2  # both stay cached


def test_flags_torch_and_compiler_are_part_of_the_key(rig, monkeypatch, capsys):
    builds, load_from, root = rig
    a = _checkout(root, "a")
    seen = {load_from(a)}
    monkeypatch.setattr(_build, "CPU_FLAGS", {**_build.CPU_FLAGS, "extra_cflags": [*_build.CPU_FLAGS["extra_cflags"],
                                                                                    "-DEXTRA"]})
    seen.add(load_from(a))
    monkeypatch.setattr(torch, "__version__", torch.__version__ + ".other")
    seen.add(load_from(a))
    fake_cxx = root / "other-c++"
    fake_cxx.write_text("#!/bin/sh\necho 'another compiler 1.0'\n")
    fake_cxx.chmod(fake_cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(fake_cxx))
    seen.add(load_from(a))
    assert len(seen) == 4 and len(builds) == 4
    assert capsys.readouterr().err.count("sglang-ddtree: building") == 4


def test_torch_extensions_dir_is_honoured(rig):
    builds, load_from, root = rig
    lib = load_from(_checkout(root, "a"))
    assert lib.parent.parent == Path(os.environ["TORCH_EXTENSIONS_DIR"])


def test_a_build_in_progress_is_left_to_torch(rig, capsys):
    """A folder with torch's lock is another process's build: torch's load waits for it (no second announcement)."""
    builds, load_from, root = rig
    a = _checkout(root, "a")
    lib = load_from(a)
    capsys.readouterr()
    (lib.parent / "lock").write_text("")
    load_from(a)
    assert len(builds) == 2 and capsys.readouterr().err == ""
