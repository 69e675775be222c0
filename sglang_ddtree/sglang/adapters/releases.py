"""Which SGLang releases the plugin supports (one adapter module each), and which one is installed, read without
importing SGLang: 0.5.17 (torch 2.11; the release served end to end) and 0.5.23 (latest).
"""
from __future__ import annotations

import importlib.metadata
import re

# each supported release and its adapter module
MODULES = {"0.5.17": "v0_5_17", "0.5.23": "v0_5_23"}
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


def is_pipeline_resolution(rel: str | None = None) -> bool:
    """True where ServerArgs resolve in the 0.5.23-style pipeline (stand-in records, declarations)."""
    return (rel or check_version()) != "0.5.17"
