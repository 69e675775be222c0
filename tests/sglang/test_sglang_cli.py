"""The SGLang-facing entry points against the real sglang package, run as a user runs them: in a fresh
process without the test suite's torchvision stand-in (sglang 0.5.17, next to a transformers that must see one,
needs torchvision at import)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def torchvision_importable() -> bool:
    return subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True).returncode == 0


def test_check_answers_without_a_traceback(hide_torchvision):
    r = run("sglang_ddtree.check")
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out
    if r.returncode == 0:
        assert "OK: SGLang resolves --speculative-algorithm ddtree" in r.stdout
    else:
        assert r.returncode == 1 and "Fix:" in r.stdout, out
    if not hide_torchvision and not torchvision_importable():
        assert r.returncode == 1 and "torchvision" in r.stdout and "pip install 'torchvision" in r.stdout


def test_launch_server_help_shows_the_ddtree_flags(sglang_release):
    r = run("sglang_ddtree.launch_server", "--help")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--speculative-ddtree-budget" in r.stdout and "--speculative-ddtree-topk" in r.stdout
    if "SGLang's own flags are listed once SGLang runs here" not in r.stdout:
        assert "--model-path" in r.stdout  # then SGLang's own help follows ours
