"""Compiling and loading the native extension (JIT through torch.utils.cpp_extension, cached).

Two shared libraries register implementations of the ops that `ops.py` declares:
  * sglang_ddtree_cpu  — kernels/cpu/*.cpp, built on any machine with a C++ compiler;
  * sglang_ddtree_cuda — kernels/*.cu + kernels/torch_cuda/*.cpp, built only where torch has CUDA and
    nvcc exists.
They carry no Python module: they register into the torch dispatcher on load (TORCH_LIBRARY_IMPL), so
the ops stay visible to CUDA-graph capture and torch.compile. The cache lives in TORCH_EXTENSIONS_DIR
(torch rebuilds when a source changes). The C++ standard is torch's choice (C++17 up to torch 2.13, C++20
from 2.14, whose headers refuse anything older), so no -std flag is passed here.
"""
from __future__ import annotations

import functools
import glob
import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def kernels_dir() -> Path:
    """kernels/ next to the package (repository checkout / editable install) or inside it (wheel)."""
    for cand in (_PKG / "kernels", _PKG.parent / "kernels"):
        if (cand / "cpu").is_dir():
            return cand
    raise FileNotFoundError(f"kernels/ sources not found next to {_PKG}")


@functools.cache
def header_constants(header: str = "tree_constants.h") -> dict[str, int]:
    """The `constexpr <int type> kName = value;` lines of a kernels/ header, by name: how Python reads the
    numbers the kernels share with it (flags.py, sizes.py), so they are written down once."""
    import re

    text = (kernels_dir() / header).read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"constexpr\s+\w+\s+(k\w+)\s*=\s*(-?\d+)\s*;", text)}


def _verbose() -> bool:
    return os.environ.get("SGLANG_DDTREE_BUILD_VERBOSE", "0") == "1"


def _announce_first_build(name: str, what: str) -> None:
    """One line on stderr before a library is compiled for the first time (a silent 30 s looks like a hang).
    A rebuild after a source change is not announced (torch decides that inside load())."""
    import sys

    from torch.utils import cpp_extension

    try:
        built = (Path(cpp_extension._get_build_directory(name, False)) / f"{name}.so").exists()
    except Exception:  # a private torch helper: never let the notice break a build
        return
    if not built:
        sys.stderr.write(f"sglang-ddtree: building {what} (first use only; cached in TORCH_EXTENSIONS_DIR)...\n")
        sys.stderr.flush()


@functools.cache
def load_cpu() -> None:
    from torch.utils import cpp_extension

    kdir = kernels_dir()
    sources = sorted(glob.glob(str(kdir / "cpu" / "*.cpp")))
    _announce_first_build("sglang_ddtree_cpu", "the native CPU kernels, 30-60 s on 2 cores")
    cpp_extension.load(
        name="sglang_ddtree_cpu",
        sources=sources,
        extra_include_paths=[str(kdir)],
        # No fast-math and no FP contraction: the builder's float64 path weights must match the oracle.
        extra_cflags=["-O3", "-fno-fast-math", "-ffp-contract=off", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        is_python_module=False,
        verbose=_verbose(),
    )


def cuda_arch_flags() -> list[str]:
    """sm_90a on Hopper (wgmma/setmaxnreg available), the device's own arch elsewhere."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}" + ("a" if major == 9 else "")
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


@functools.cache
def load_cuda() -> None:
    import torch
    from torch.utils import cpp_extension

    if not torch.cuda.is_available():
        raise RuntimeError("the CUDA extension needs a CUDA build of torch and a visible GPU")
    load_cpu()
    kdir = kernels_dir()
    sources = sorted(glob.glob(str(kdir / "*.cu"))) + sorted(glob.glob(str(kdir / "torch_cuda" / "*.cpp")))
    _announce_first_build("sglang_ddtree_cuda", "the CUDA kernels, about a minute of nvcc")
    cpp_extension.load(
        name="sglang_ddtree_cuda",
        sources=sources,
        extra_include_paths=[str(kdir)],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr", "-lineinfo",
                           *cuda_arch_flags()],
        is_python_module=False,
        verbose=_verbose(),
    )
