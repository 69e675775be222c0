"""The README's serving lines on the CPU, in its order: `make serve-cpu` (installed once: a start does not run pip),
then `python examples/client_chat.py "Write a haiku about trees"`. The shipped tiny target has no chat template, so
the client must say so and stream a plain completion instead, then print the acceptance length of DDTree's rounds."""
import os
import re
import subprocess
import sys

from fleet import ROOT


def test_make_serve_cpu_does_not_reinstall():
    dry = subprocess.run(["make", "-n", "--no-print-directory", "serve-cpu", f"PY={sys.executable}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "pip" not in dry.stdout and "launch_server" in dry.stdout, dry.stdout


def test_the_readme_client_against_make_serve_cpu(fleet):
    url = fleet.url("serve_cpu")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user's shell runs it
    r = subprocess.run([sys.executable, "examples/client_chat.py", "Write a haiku about trees", "--url", url,
                        "--max-tokens", "64"], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert "no chat template" in r.stderr and "/v1/completions" in r.stderr, r.stderr
    accept = re.search(r"acceptance length ([0-9.]+) \((\d+) verify rounds\)", r.stdout)
    assert accept is not None, r.stdout
    assert float(accept.group(1)) > 1.0, r.stdout  # DDTree's rounds committed more than a token each
