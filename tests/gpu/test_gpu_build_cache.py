"""The CUDA libraries' build cache on a GPU machine (issue 42, item 1): each op family's library lies in the folder
its key names under TORCH_EXTENSIONS_DIR, the families together register a CUDA kernel for every op, and a second
checkout of the same sources at another path loads them in a new process, with no build line, and runs an op of each
family (tests/core/test_build_cache.py and test_build_families.py check the keys, the families and the loading
without a compiler run)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_every_family_is_built_in_its_keyed_folder_and_every_op_has_its_cuda_kernel():
    from sglang_ddtree import _build, ops

    _build.load_cuda()  # built here (announced) or loaded from this TORCH_EXTENSIONS_DIR
    for lib in _build.cuda_libraries():
        name = f"{lib.name}_{_build.cache_key(lib)}"
        assert (_build.build_root() / name / f"{name}.so").is_file(), name
    has_cuda_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    missing = [op for op in ops.SCHEMAS if not has_cuda_kernel(f"{ops.NS}::{op}", "CUDA")]
    assert not missing, f"no CUDA kernel registered for {missing}"


@pytest.mark.gpu
def test_a_second_checkout_loads_the_cuda_libraries_without_building(tmp_path):
    from sglang_ddtree import _build

    _build.load_cuda()
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "sglang_ddtree", clone / "sglang_ddtree",
                    ignore=shutil.ignore_patterns("__pycache__", "models"))
    shutil.copytree(ROOT / "kernels", clone / "kernels")
    code = """
import torch
from sglang_ddtree import accept_tree, build_tree, ops
t = build_tree(torch.randn(2, 3, 50, device="cuda"), 8, backend="cuda")  # the tree family
a = accept_tree(t, t.tokens, backend="cuda")  # accept
o = torch.zeros(2, 1, 8, device="cuda", dtype=torch.bfloat16)
merged, _ = ops.op("merge_attn_states")(o, torch.zeros(2, 1, device="cuda"), 1.0, o, torch.zeros(2, 1, device="cuda"),
                                        1.0)  # attention
print(t.tokens.device, int(t.num_nodes.min()), a.accept_len.device, merged.shape[-1])
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=clone, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(clone)})
    assert r.returncode == 0, r.stderr
    assert "sglang-ddtree: building" not in r.stderr, r.stderr
    assert r.stdout.split() == ["cuda:0", "9", "cuda:0", "8"], r.stdout
