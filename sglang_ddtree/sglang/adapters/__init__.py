"""One adapter per SGLang release: the only modules that reach SGLang's worker internals.

`for_release(rel)` imports the release's module (v0_5_17, v0_5_23), which resolves every SGLang symbol it
uses through `need.Needs` (a missing one is a MissingSGLangSymbol naming it, at start-up) and provides
`Adapter` (the verbs decode_round.py calls, bound to one DFlash V2 worker) and `WorkerBase` (that
release's DFlashWorkerV2 with one constructor and forward entry for the DDTree worker). dflash_v2.py holds
the verbs the releases share, symbols.py the SGLang symbols both resolve alike, hooks.py the run-time fixes;
registration.py what registration and argument resolution use; releases.py which releases are supported, what
each supports and which is installed; backend_override.py the tree kernel's hold on the target's attention;
target_runner.py the tree verify's reads of a model runner, its KV pool, backend and forward batch, as verbs.
"""
from __future__ import annotations

import importlib

from .releases import MODULES, UnsupportedSGLangVersion, check_version


def for_release(rel: str):
    """The adapter module of a supported release (releases.check_version's answer)."""
    if rel not in MODULES:
        raise UnsupportedSGLangVersion(f"sglang-ddtree has no worker adapter for sglang {rel} "
                                       f"(adapters: {', '.join(MODULES)})")
    return importlib.import_module(f"{__name__}.{MODULES[rel]}")


def current():
    """The installed release's adapter module."""
    return for_release(check_version())
