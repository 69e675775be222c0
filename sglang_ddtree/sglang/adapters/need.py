"""`Needs`: how an adapter reaches SGLang — every symbol by name, resolved and checked when the adapter loads.

An adapter imports nothing from SGLang directly (tests/sglang/test_sglang_conformance.py checks it); each
symbol comes from `need(module, qualname, params)`, which imports it, checks that the parameters the adapter
passes are in its signature, and records it. A release that moved or changed a symbol therefore fails at
start-up with the symbol's name, and the record is the complete list of what the adapter uses.
"""
from __future__ import annotations

import importlib
import inspect


class MissingSGLangSymbol(ImportError):
    pass


class Needs:
    def __init__(self, release: str):
        self.release = release
        self.symbols: list[tuple[str, str, tuple[str, ...]]] = []  # (module, qualname, parameters relied on)

    def __call__(self, module: str, qualname: str, params: tuple[str, ...] = ()):
        where = f"{module}.{qualname}"
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise MissingSGLangSymbol(
                f"sglang-ddtree's sglang {self.release} adapter needs {where}, which this sglang lacks "
                f"({type(e).__name__}: {e}); the installed sglang is not the {self.release} it was written "
                f"against") from e
        if params:
            have = list(inspect.signature(obj).parameters)
            lacking = [p for p in params if p not in have]
            if lacking:
                raise MissingSGLangSymbol(
                    f"sglang-ddtree's sglang {self.release} adapter passes {lacking} to {where}, whose "
                    f"parameters are {have}")
        self.symbols.append((module, qualname, tuple(params)))
        return obj

    def module(self, module: str):
        """A whole module, for a run-time fix that replaces one of its attributes (hooks.py)."""
        try:
            obj = importlib.import_module(module)
        except ImportError as e:
            raise MissingSGLangSymbol(f"sglang-ddtree's sglang {self.release} adapter needs module {module} "
                                      f"({type(e).__name__}: {e})") from e
        self.symbols.append((module, "", ()))
        return obj
