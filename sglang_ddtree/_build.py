"""Compiling and loading the native extension (JIT through torch.utils.cpp_extension, cached).

Shared libraries register implementations of the ops that `ops.py` declares:
  * sglang_ddtree_cpu — kernels/cpu/*.cpp, built on any machine with a C++ compiler;
  * sglang_ddtree_cuda_FAMILY — one per op family of CUDA_FAMILIES (its kernels/*.cu and the torch_cuda/*.cpp that
    binds them), built only where torch has CUDA and nvcc exists. Per family, as FlashInfer's JIT builds per module,
    so that an edit rebuilds only the families it touches, not every kernel.
They carry no Python module: they register into the torch dispatcher on load (TORCH_LIBRARY_IMPL; several libraries
may each register CUDA implementations, one op in one library only), so the ops stay visible to CUDA-graph capture
and torch.compile. The C++ standard is torch's choice (C++17 up to torch 2.13, C++20 from 2.14, whose headers refuse
anything older), so no -std flag is passed here.

The cache: each library is built into its own folder of TORCH_EXTENSIONS_DIR (torch's default folder when unset)
named by a key over everything that makes two builds differ — its sources' contents and those of the headers they
include, the flags, torch's and Python's versions, the compiler — and nothing else, so checkouts and environments on
one machine share a build when these are equal and never overwrite each other's (torch's own cache keyed one fixed
name by the checkout's paths: two checkouts rebuilt it in turn). A folder whose library exists is loaded without
asking torch (torch would rerun ninja, which rebuilds when the source paths differ); every build is announced on
stderr.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

_PKG = Path(__file__).resolve().parent
_KEY_SCHEME = "2"  # bump when the key's contents change meaning
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
# No fast-math and no FP contraction: the builder's float64 path weights must match the oracle.
CPU_FLAGS = {"extra_cflags": ["-O3", "-fno-fast-math", "-ffp-contract=off", "-fopenmp"],
             "extra_ldflags": ["-fopenmp"]}
# The CUDA op families: each one library of its kernels and the binding file that registers their ops (paths inside
# kernels/). A family binds only its own kernels' launchers, so each library links on its own.
CUDA_FAMILIES = {
    "tree": ("topk_lse.cu", "tree_build.cu", "tree_truncate.cu", "torch_cuda/tree.cpp"),
    "accept": ("tree_accept.cu", "tree_rejection.cu", "law_rows.cu", "torch_cuda/accept.cpp"),
    "attention": ("verify_attn.cu", "fa2_schedule.cu", "mla_schedule.cu", "torch_cuda/attention.cpp"),
}


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


@dataclasses.dataclass(frozen=True)
class Library:
    """One native library: its sources (under `kdir`, which is also the include path) and cpp_extension.load's
    flag arguments."""
    name: str
    what: str            # how the build announcement names it
    kdir: Path
    sources: tuple
    flags: dict
    cuda: bool = False


def cpu_library() -> Library:
    kdir = kernels_dir()
    return Library("sglang_ddtree_cpu", "the native CPU kernels, about a minute on 2 cores, once", kdir,
                   tuple(sorted((kdir / "cpu").glob("*.cpp"))), CPU_FLAGS)


def cuda_library(family: str) -> Library:
    kdir = kernels_dir()
    flags = {"extra_cflags": ["-O3"],
             "extra_cuda_cflags": ["-O3", "--expt-relaxed-constexpr", "-lineinfo", *cuda_arch_flags()]}
    return Library(f"sglang_ddtree_cuda_{family}", f"the CUDA {family} ops with nvcc, once", kdir,
                   tuple(kdir / path for path in CUDA_FAMILIES[family]), flags, cuda=True)


def cuda_libraries() -> list[Library]:
    return [cuda_library(family) for family in CUDA_FAMILIES]


def included(sources, kdir: Path) -> list[Path]:
    """The headers inside kernels/ that `sources` include, transitively: each `#include "..."` resolved as the
    compiler does (the including file's folder, then kernels/, the include path). What resolves to no file there (a
    system or toolkit header) is left out: it belongs to the compiler and torch, whose versions the key holds."""
    found, todo = set(), list(sources)
    while todo:
        src = todo.pop()
        for name in _INCLUDE.findall(src.read_text(errors="replace")):
            for base in (src.parent, kdir):
                path = Path(os.path.normpath(base / name))
                if path.is_file() and path.is_relative_to(kdir):
                    if path not in found:
                        found.add(path)
                        todo.append(path)
                    break
    return sorted(found)


def _tool_version(command: list[str]) -> str:
    """A compiler's `--version` text (what it is, wherever it lives), or why there is none."""
    try:
        return subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {type(e).__name__}"


def _compilers(cuda: bool) -> list[str]:
    """The compilers cpp_extension will run, by their version texts (their paths are not part of a build)."""
    from torch.utils import cpp_extension

    out = [_tool_version(cpp_extension.get_cxx_compiler().split())]  # CXX may be "ccache g++"
    if cuda:
        nvcc = os.environ.get("PYTORCH_NVCC") or os.path.join(cpp_extension.CUDA_HOME or "", "bin", "nvcc")
        out += [_tool_version(nvcc.split()), f"CC={os.environ.get('CC', '')}"]
    return out


def cache_key(lib: Library) -> str:
    """16 hex digits over what makes two builds of `lib` differ: its sources' and included headers' paths inside
    kernels/ and contents, the flags, torch (version, commit, CUDA), Python, the machine and the compilers' versions;
    never the checkout's own path, nor a file `lib` does not compile or include."""
    import platform

    import torch

    files = sorted({*lib.sources, *included(lib.sources, lib.kdir)})
    h = hashlib.sha256()

    def put(*parts) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else repr(part).encode()
            h.update(len(data).to_bytes(8, "little") + data)

    put(_KEY_SCHEME, lib.name, sorted((k, list(v)) for k, v in lib.flags.items()), lib.cuda)
    put(torch.__version__, torch.version.git_version, torch.version.cuda, sys.implementation.cache_tag,
        sys.abiflags, platform.machine(), *_compilers(lib.cuda))
    for path in files:
        put(path.relative_to(lib.kdir).as_posix(), path.read_bytes())
    return h.hexdigest()[:16]


def build_root() -> Path:
    """TORCH_EXTENSIONS_DIR, else torch's default extensions folder."""
    from torch.utils import cpp_extension

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root())


def load(lib: Library) -> Path:
    """Load `lib` from its keyed folder, building it there first (announced) when its library is absent; returns
    the library's path. A folder holding torch's build lock is left to torch, which waits for that build."""
    import torch
    from torch.utils import cpp_extension

    name = f"{lib.name}_{cache_key(lib)}"
    folder = build_root() / name
    library = folder / f"{name}{getattr(cpp_extension, 'LIB_EXT', '.so')}"
    if library.is_file() and not (folder / "lock").exists():
        torch.ops.load_library(str(library))
        return library
    if not library.is_file():
        sys.stderr.write(f"sglang-ddtree: building {lib.what} (cached in {folder})...\n")
        sys.stderr.flush()
    folder.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name=name, sources=[str(s) for s in lib.sources], extra_include_paths=[str(lib.kdir)],
                       build_directory=str(folder), is_python_module=False, verbose=_verbose(), **lib.flags)
    return library


@functools.cache
def load_cpu() -> None:
    load(cpu_library())


def cuda_arch_flags() -> list[str]:
    """sm_90a on Hopper (wgmma/setmaxnreg available), the device's own arch elsewhere."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}" + ("a" if major == 9 else "")
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


@functools.cache
def load_cuda() -> None:
    """The CPU library, then every CUDA family's, side by side: each family is its own ninja run, so a cold build
    takes as long as its slowest family rather than their sum."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("the CUDA extension needs a CUDA build of torch and a visible GPU")
    load_cpu()
    libs = cuda_libraries()
    with ThreadPoolExecutor(len(libs)) as pool:
        list(pool.map(load, libs))  # raises the first family's error
