"""The CUDA library's build cache on a GPU machine (issue 42, item 1): the library lies in the folder its key names
under TORCH_EXTENSIONS_DIR, and a second checkout of the same sources at another path loads it in a new process,
with no build line, and runs an op from it (tests/core/test_build_cache.py checks the key and the CPU library
without a compiler run)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_a_second_checkout_loads_the_cuda_library_without_building(tmp_path):
    from sglang_ddtree import _build

    _build.load_cuda()  # built here (announced) or loaded from this TORCH_EXTENSIONS_DIR
    lib = _build.cuda_library()
    name = f"{lib.name}_{_build.cache_key(lib)}"
    assert (_build.build_root() / name / f"{name}.so").is_file()

    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "sglang_ddtree", clone / "sglang_ddtree",
                    ignore=shutil.ignore_patterns("__pycache__", "models"))
    shutil.copytree(ROOT / "kernels", clone / "kernels")
    code = ("import torch; from sglang_ddtree import build_tree; "
            "t = build_tree(torch.randn(2, 3, 50, device='cuda'), 8, backend='cuda'); "
            "print(t.tokens.device, int(t.num_nodes.min()))")
    r = subprocess.run([sys.executable, "-c", code], cwd=clone, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(clone)})
    assert r.returncode == 0, r.stderr
    assert "sglang-ddtree: building" not in r.stderr, r.stderr
    assert r.stdout.split() == ["cuda:0", "9"], r.stdout
