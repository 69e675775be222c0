"""`python -m sglang_ddtree.check`: does SGLang see the DDTREE algorithm, and if not, why.

Runs SGLang's own plugin loader (the same call launch_server makes), then asks SGLang's registry for
DDTREE. Exit status 0 when SGLang resolves the name, 1 otherwise, with the reason and the fix.
"""
from __future__ import annotations

import importlib.metadata
import os
import sys

from .. import _cli

PROG = _cli.prog("check")


def _entry_point():
    for ep in importlib.metadata.entry_points(group="sglang.srt.plugins"):
        if ep.name == "ddtree":
            return ep
    return None


def missing_module_fix(name: str) -> str:
    """How to install a module SGLang failed to import (torchvision needs the build paired with torch)."""
    if name.split(".")[0] == "torchvision":
        import torch

        major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
        pin = f"==0.{minor + 15}.*" if major == 2 else ""  # torch 2.N pairs with torchvision 0.(N+15)
        index = " --index-url https://download.pytorch.org/whl/cpu" if torch.version.cuda is None else ""
        return (f"SGLang imports torchvision at start-up (image decoding); install the release paired with your "
                f"torch {torch.__version__}: pip install 'torchvision{pin}'{index}")
    return f"install it: pip install {name.split('.')[0]}"


def _import_failure(version: str, e: ImportError) -> list[str]:
    missing = getattr(e, "name", None)
    why = f"FAIL: sglang {version} does not import here: {type(e).__name__}: {e}"
    return [why, f"Fix: {missing_module_fix(missing)}" if missing else
            "Fix: reinstall sglang with its dependencies (pip install sglang==" + version + ")"]


def diagnose() -> tuple[bool, list[str]]:
    from .adapters import registration as sgl
    from .adapters import releases

    lines = []
    version = releases.installed_version()
    lines.append(f"sglang: {version or 'not installed'}   supported: {', '.join(releases.SUPPORTED_VERSIONS)}")
    try:
        releases.check_version(version)
    except releases.UnsupportedSGLangVersion as e:
        return False, lines + [f"FAIL: {e}"]
    ep = _entry_point()
    if ep is None:
        return False, lines + ["FAIL: no 'ddtree' entry point in group sglang.srt.plugins: sglang-ddtree is not "
                               "installed in this environment (pip install sglang-ddtree, or pip install -e .)"]
    lines.append(f"entry point: {ep.name} = {ep.value}")
    allow = os.environ.get("SGLANG_PLUGINS", "").strip()
    if allow and "ddtree" not in [x.strip() for x in allow.split(",")]:
        lines.append(f"WARN: SGLANG_PLUGINS={allow!r} does not list 'ddtree': SGLang will skip the plugin "
                     "(add ddtree to the list or unset it)")
    try:
        sgl.probe("sglang.srt.speculative.spec_info")
    except ImportError as e:
        return False, lines + _import_failure(version, e)
    sgl.load_plugins()
    from . import plugin

    if plugin.last_error():
        return False, lines + ["FAIL: the plugin raised while registering:", plugin.last_error()]

    from .args import ALGORITHM, active_algorithm

    name = active_algorithm()
    if name != ALGORITHM:
        lines.append(f"NOTE: this SGLang already defines --speculative-algorithm {ALGORITHM.lower()} (not this "
                     f"plugin); the plugin is registered as --speculative-algorithm {name.lower()}")
    try:
        algo = sgl.resolve_algorithm(name)
    except ValueError as e:
        if not plugin._state["registered"]:
            try:
                plugin.register()
            except Exception:
                return False, lines + ["FAIL: registering raised:", plugin.last_error() or ""]
        return False, lines + [f"FAIL: {e} (SGLang's loader did not run the plugin; check SGLANG_PLUGINS and "
                               "SGLANG_PLATFORM)"]
    lines.append(f"OK: SGLang resolves --speculative-algorithm {name.lower()} to {algo!r} "
                 f"({type(algo).__name__}, overlap={'on' if algo.supports_overlap else 'off'})")
    return True, lines


def main(argv=None) -> int:
    _cli.Parser(prog=PROG, description=__doc__.split("\n\n")[1].replace("\n", " ")).parse_args(
        sys.argv[1:] if argv is None else argv)
    ok, lines = diagnose()
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
