"""Every CUDA source compiles for sm_90a with the installed nvcc, and every CUDA binding compiles against
torch's headers — so a kernel that stops compiling fails CI even on machines without a GPU."""
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sglang_ddtree import _build

KDIR = _build.kernels_dir()
CU = sorted(KDIR.glob("*.cu"))
BINDINGS = sorted((KDIR / "torch_cuda").glob("*.cpp"))


def _nvcc():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        if os.environ.get("SGLANG_DDTREE_REQUIRE_NVCC") == "1":
            pytest.fail("nvcc is required (SGLANG_DDTREE_REQUIRE_NVCC=1) but not found")
        pytest.skip("nvcc not installed")
    return nvcc


def _cuda_include(nvcc):
    """The toolkit's include folder (nvcc may be a wrapper script outside the toolkit)."""
    homes = [os.environ.get("CUDA_HOME"), str(Path(nvcc).resolve().parent.parent), "/usr/local/cuda"]
    for home in filter(None, homes):
        if (Path(home) / "include" / "cuda_runtime.h").exists():
            return Path(home) / "include"
    pytest.fail(f"cuda_runtime.h not found under {homes}")


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return cmd, proc.returncode, proc.stderr[-4000:]


def _check(results):
    failed = [f"{' '.join(map(str, cmd))}\n{err}" for cmd, rc, err in results if rc != 0]
    assert not failed, "\n\n".join(failed)


def test_kernel_sources_exist():
    assert CU, f"no .cu sources under {KDIR}"


def test_cuda_kernels_compile_for_sm90a(tmp_path):
    nvcc = _nvcc()
    cmds = [[nvcc, "-std=c++17", "-O2", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
             f"-I{KDIR}", "-c", str(f), "-o", str(tmp_path / (f.stem + ".o"))] for f in CU]
    with ThreadPoolExecutor(2) as pool:
        _check(list(pool.map(_run, cmds)))


def test_cuda_bindings_compile_against_torch_headers(tmp_path):
    nvcc = _nvcc()
    import torch
    from torch.utils import cpp_extension

    cuda_inc = _cuda_include(nvcc)
    incs = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{cuda_inc}", f"-I{KDIR}"]
    # the standard torch's own extension builds use (its headers require C++20 from torch 2.14 on)
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    std = "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"
    cmds = [["g++", std, "-fsyntax-only", *incs, str(f)] for f in BINDINGS]
    with ThreadPoolExecutor(2) as pool:
        _check(list(pool.map(_run, cmds)))
