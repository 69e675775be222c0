"""Which SGLang releases the plugin supports (one adapter module each), what each supports, and which one is
installed, all read without importing SGLang.

A release is supported by its adapter file alone: `vMAJOR_MINOR_PATCH.py` in this folder (MODULES is the folder's
list), whose `SUPPORTS` dict says what the release has, one entry per CAPABILITIES name, as SGLang's own `supports_*`
methods do. Callers ask `supports(name)`, never a version string; `capabilities(release)` reads the dict from the
file's text, so asking imports no SGLang (the adapter module itself resolves SGLang's worker symbols as it loads).
"""
from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
from pathlib import Path

# what a release may support: name -> what it means (each adapter's SUPPORTS answers every one)
CAPABILITIES = {
    "pipeline_resolution": "ServerArgs resolve in a pipeline (resolve_once): hooks get a stand-in whose writes become "
                           "declarations; else ServerArgs.__post_init__ resolves them on the record, with an overlay",
    "cpu_overlap": "the overlap scheduler runs on the CPU (it records no CUDA stream on the speculative inputs)",
    "selector": "its DFLASH loads DFlash2 drafters (a candidate selector on the DFlash backbone)",
    "dflash_logprobs": "its DFLASH serves batches with return_logprob (else the DDTree worker runs their prefill)",
    "kv_loc_plan": "KV slots go through a per-iteration KVLocPlan (model_runner.kv_index_translator.plan)",
    "deferred_verify_gather": "the target's LogitsProcessor may hand a verify back a vocab shard to gather",
}
_ADAPTER = re.compile(r"^v(\d+)_(\d+)_(\d+)\.py$")


def _adapter_modules() -> dict:
    """{release: adapter module name} of the adapter files in this folder, oldest release first."""
    found = {}
    for path in Path(__file__).parent.iterdir():
        m = _ADAPTER.match(path.name)
        if m:
            found[tuple(int(x) for x in m.groups())] = path.stem
    return {".".join(map(str, rel)): found[rel] for rel in sorted(found)}


# each supported release and its adapter module (the folder's vMAJOR_MINOR_PATCH.py files)
MODULES = _adapter_modules()
SUPPORTED_VERSIONS = tuple(MODULES)


class UnsupportedSGLangVersion(RuntimeError):
    pass


def installed_version() -> str | None:
    """The installed `sglang` distribution version, without importing sglang (None if absent)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def release(version: str) -> str:
    """'0.5.23.post1' / '0.5.23rc0' -> '0.5.23' (patch-level suffixes keep the same internals)."""
    m = re.match(r"^(\d+\.\d+\.\d+)", version or "")
    return m.group(1) if m else (version or "")


def check_version(version: str | None = None) -> str:
    """Return the supported release matching the installed sglang, or raise with what to do."""
    version = installed_version() if version is None else version
    if version is None:
        raise UnsupportedSGLangVersion("sglang is not installed; install one of sglang==" +
                                       " / sglang==".join(SUPPORTED_VERSIONS))
    rel = release(version)
    if rel not in SUPPORTED_VERSIONS:
        raise UnsupportedSGLangVersion(
            f"sglang-ddtree supports sglang {', '.join(SUPPORTED_VERSIONS)}; found sglang {version}. "
            f"The plugin reaches into SGLang's DFlash worker internals, which change between releases: "
            f"install a supported sglang (e.g. `pip install sglang=={SUPPORTED_VERSIONS[-1]}`) or an "
            f"sglang-ddtree release that lists {rel}.")
    return rel


@functools.cache
def capabilities(rel: str) -> dict:
    """{capability: bool} of a supported release: its adapter file's `SUPPORTS`, read from the file's text (a dict
    literal answering every CAPABILITIES name), so no SGLang is imported."""
    if rel not in MODULES:
        raise UnsupportedSGLangVersion(f"sglang-ddtree has no adapter for sglang {rel} (adapters: "
                                       f"{', '.join(MODULES)})")
    path = Path(__file__).parent / f"{MODULES[rel]}.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SUPPORTS"]:
            found = ast.literal_eval(node.value)
            break
    else:
        raise RuntimeError(f"{path.name} says nothing it supports (a module-level SUPPORTS dict)")
    if set(found) != set(CAPABILITIES) or not all(isinstance(v, bool) for v in found.values()):
        raise RuntimeError(f"{path.name}'s SUPPORTS must answer each of {sorted(CAPABILITIES)} with True or False, "
                           f"got {found!r}")
    return found


def supports(capability: str, rel: str | None = None) -> bool:
    """Whether the release (default: the installed one) has `capability` (a CAPABILITIES name)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown SGLang capability {capability!r}; known: {', '.join(CAPABILITIES)}")
    return capabilities(rel or check_version())[capability]


def supporting(capability: str) -> tuple:
    """The supported releases that have `capability`, oldest first (for a message naming where it is served)."""
    return tuple(rel for rel in MODULES if supports(capability, rel))
