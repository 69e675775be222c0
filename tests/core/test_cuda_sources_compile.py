"""Every CUDA source compiles for sm_90a with the installed nvcc, every CUDA binding compiles against torch's
headers, and every op family's library (_build.CUDA_FAMILIES) links on its own — so a kernel that stops compiling,
or a family that calls another's launcher (its library would fail to load on the GPU), fails CI even on machines
without a GPU."""
import os
import re
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


def _object(path: Path) -> str:
    """A source's object file name: kernels/x.cu -> x.o, kernels/torch_cuda/x.cpp -> torch_cuda_x.o."""
    return "_".join(path.relative_to(KDIR).with_suffix(".o").parts)


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda_objects")


def test_cuda_kernels_compile_for_sm90a(objects):
    nvcc = _nvcc()
    cmds = [[nvcc, "-std=c++17", "-O2", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
             "-Xcompiler", "-fPIC", f"-I{KDIR}", "-c", str(f), "-o", str(objects / _object(f))] for f in CU]
    with ThreadPoolExecutor(2) as pool:
        _check(list(pool.map(_run, cmds)))


def test_cuda_bindings_compile_against_torch_headers(objects):
    nvcc = _nvcc()
    import torch
    from torch.utils import cpp_extension

    cuda_inc = _cuda_include(nvcc)
    incs = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{cuda_inc}", f"-I{KDIR}"]
    # the standard torch's own extension builds use (its headers require C++20 from torch 2.14 on)
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    std = "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"
    cmds = [["g++", std, "-O0", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=1", *incs, "-c", str(f), "-o",
             str(objects / _object(f))] for f in BINDINGS]
    with ThreadPoolExecutor(2) as pool:
        _check(list(pool.map(_run, cmds)))


# What a family's library may leave to the loader: torch's CUDA library (a CPU torch has none to link against)
TORCH_CUDA = re.compile(r"c10::cuda::|at::cuda::|aoti_torch_get_current_cuda_stream")


def unresolved(link_stderr: str) -> set[str]:
    """The symbols a `-z defs` link names as undefined."""
    return set(re.findall(r"undefined reference to [`']([^']+)'", link_stderr))


@pytest.mark.parametrize("family", sorted(_build.CUDA_FAMILIES))
def test_each_family_links_on_its_own(objects, family):
    """The family's objects alone, against torch's CPU libraries and the CUDA runtime, leave nothing undefined but
    torch's CUDA library's symbols: no launcher of another family, nothing a GPU's loader would miss."""
    nvcc = _nvcc()
    import torch

    objs = [objects / _object(KDIR / path) for path in _build.CUDA_FAMILIES[family]]
    if not all(o.exists() for o in objs):
        pytest.fail(f"objects of {family} missing: the compile tests above failed or did not run first")
    cuda_lib = _cuda_include(nvcc).parent / "lib64"
    torch_lib = Path(torch.__file__).parent / "lib"
    cmd = ["g++", "-shared", "-Wl,-z,defs", *map(str, objs), "-o", str(objects / f"{family}.so"),
           f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", f"-L{cuda_lib}", "-lcudart"]
    proc = subprocess.run(cmd, capture_output=True, text=True)  # all of stderr: the linker names every symbol
    if proc.returncode == 0:
        return
    missing = unresolved(proc.stderr)
    assert missing, f"{family} did not link, and not for an undefined symbol:\n{proc.stderr[-4000:]}"
    foreign = sorted(m for m in missing if not TORCH_CUDA.search(m))
    assert not foreign, f"the {family} library leaves symbols no torch library defines: {foreign}"


def test_the_link_check_names_a_foreign_symbol():
    err = ("x.o: in function `f': undefined reference to `c10::cuda::getCurrentCUDAStream(signed char)'\n"
           "y.o: undefined reference to `launch_law_rows(int)'\n")
    assert {m for m in unresolved(err) if not TORCH_CUDA.search(m)} == {"launch_law_rows(int)"}
