"""A test-only stand-in for `torchvision` so the real `sglang` package imports on a CPU box.

SGLang imports torchvision at module level (image decoding for multimodal models), but the PyPI wheel is a
CUDA build that fails to load next to a CPU torch. The stub answers only imports made outside
`transformers/`: HF's availability probe (`find_spec("torchvision")`) must keep saying "absent", or
transformers would take its torchvision code paths.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class _StubMeta(type):
    """Classes whose every missing class attribute is another stub class (enum members, nested names)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (), {})


class _Anything(types.ModuleType):
    """A module whose every missing attribute is a stub class: importable, subclassable, never functional."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, hide_from_transformers: bool):
        self.hide_from_transformers = hide_from_transformers

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision" and not fullname.startswith("torchvision."):
            return None
        frame = sys._getframe(1) if self.hide_from_transformers else None
        while frame is not None:
            if "/transformers/" in frame.f_code.co_filename.replace("\\", "/"):
                return None
            frame = frame.f_back
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _Anything(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stub"
        return module

    def exec_module(self, module):
        pass


def install(hide_from_transformers: bool = True) -> None:
    """Put the finder in front of `sys.meta_path`.

    hide_from_transformers: transformers >= 5.19 (sglang 0.5.23) must see no torchvision; transformers 5.12
    (sglang 0.5.17) must see one, because sglang 0.5.17 registers image processors at import time. When hiding,
    the probe is primed first: transformers caches it (`is_torchvision_available` is an lru_cache), and once
    the stub is in `sys.modules` `find_spec` no longer asks the finders.
    """
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    if not hide_from_transformers:
        sys.meta_path.insert(0, _Finder(False))
        return
    try:
        from transformers.utils import import_utils

        import_utils.is_torchvision_available()
    except ImportError:
        pass
    sys.meta_path.insert(0, _Finder(True))
