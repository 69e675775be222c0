"""CPU tests against the real `sglang` package (installed without its GPU dependencies).

Skipped as a whole when sglang is not importable. The torchvision stand-in is installed before anything
imports sglang (see torchvision_stub.py for why).
"""
import importlib.metadata
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

try:
    SGLANG_VERSION = importlib.metadata.version("sglang")
except importlib.metadata.PackageNotFoundError:
    SGLANG_VERSION = None

def _transformers_sees_no_torchvision() -> bool:
    """Whether the installed transformers must see no torchvision (>= 5.19, next to sglang 0.5.23); an older one
    (5.12, next to sglang 0.5.17, which registers image processors at import) must see one (torchvision_stub)."""
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return True
    return tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) >= (5, 19)


HIDE_TORCHVISION = _transformers_sees_no_torchvision()

if SGLANG_VERSION is None:
    collect_ignore_glob = ["test_*.py"]
else:
    import torchvision_stub

    torchvision_stub.install(hide_from_transformers=HIDE_TORCHVISION)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.fixture(scope="session")
def sglang_release():
    from sglang_ddtree.sglang.adapters import releases

    return releases.check_version()


@pytest.fixture(scope="session")
def hide_torchvision():
    """How the torchvision stand-in is installed here (from the installed transformers, not a release name)."""
    return HIDE_TORCHVISION


@pytest.fixture(scope="session")
def plugins_loaded():
    """SGLang's own loader, as launch_server runs it."""
    from sglang.srt.plugins import load_plugins

    load_plugins()
    return True


@pytest.fixture
def resolve(plugins_loaded, monkeypatch):
    """Resolve CLI arguments through SGLang's real ServerArgs path; returns a read view of the result."""
    from sglang.srt.server_args import prepare_server_args

    from sglang_ddtree.sglang.adapters import registration

    for name in ("SGLANG_DDTREE_BUDGET", "SGLANG_DDTREE_TOPK"):
        monkeypatch.setenv(name, "")  # recorded, so the test's end restores it (the hook may write the budget)
        monkeypatch.delenv(name)

    def run(*extra, target="tiny_target", drafter="tiny_drafter", algorithm="ddtree"):
        argv = ["--model-path", os.path.join(FIXTURES, target), "--device", "cuda", "--skip-tokenizer-init",
                "--speculative-algorithm", algorithm]
        if drafter is not None:
            argv += ["--speculative-draft-model-path", os.path.join(FIXTURES, drafter)]
        sa = prepare_server_args(argv + list(extra))
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        return registration.read_view(sa)

    return run
