"""Whether a prefix library is installed, answered without importing it: the launch gate asks in the launcher's
process, where importing sgl_kernel or flashinfer would load CUDA libraries (and fail on a CPU-only host)."""
from __future__ import annotations

import glob
import importlib.util
import os


def has_module(name: str) -> bool:
    """A top-level package that `import name` would find."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def sgl_kernel_has(library: str) -> bool:
    """sgl_kernel with its compiled `library` (flash_ops: FA3; flashmla_ops: FlashMLA) next to its package."""
    try:
        spec = importlib.util.find_spec("sgl_kernel")
    except (ImportError, ValueError):
        return False
    return spec is not None and any(glob.glob(os.path.join(d, f"{library}*.so"))
                                    for d in (spec.submodule_search_locations or ()))
