"""The served tests: real SGLang servers on the CPU (fleet.py), reached over HTTP as a user reaches them.

They skip where the CPU servers cannot start (no SGLang test install: `make test` provides it), unless
SGLANG_DDTREE_REQUIRE_SERVED=1 (CI), which turns that into a failure: CI must run them.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import fleet as F  # noqa: E402


@pytest.fixture(scope="session")
def fleet():
    why = F.missing()
    if why is not None:
        if os.environ.get("SGLANG_DDTREE_REQUIRE_SERVED") == "1":
            pytest.fail(f"served tests required (SGLANG_DDTREE_REQUIRE_SERVED=1) but {why}")
        pytest.skip(f"CPU servers unavailable: {why}")
    f = F.Fleet()
    yield f
    f.stop_all()
    _REPORT.append(f.report())


_REPORT = []


@pytest.fixture(scope="session")
def report():
    """Lines a test wants in the session's output whatever pytest's verbosity (its counts), printed at the end."""
    return _REPORT


def pytest_terminal_summary(terminalreporter):
    for line in _REPORT:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def prompts():
    from sglang_ddtree.engine.data import heldout_prompts

    return heldout_prompts()
