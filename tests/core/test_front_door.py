"""The README's two commands work in one environment, in its order: `make demo` and `make test` share one install
whose pins cannot drift apart, and CI runs exactly those two commands, in that order, in a fresh environment.

(An unpinned `transformers` in the test extra let `make demo` install a release that pulls in `kernels`; `make test`
then pinned an older transformers but left `kernels`, and SGLang 0.5.17's own transformers failed to import.)"""
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()


def _extra(name: str) -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]


def test_transformers_is_pinned_once_in_the_test_extra():
    (pin,) = [r for r in _extra("test") if re.match(r"transformers\b", r)]
    assert re.fullmatch(r"transformers==[0-9][0-9.]*", pin), pin
    # the Makefile holds whatever the install put in place, instead of naming a release of its own
    assert not re.search(r"transformers==[0-9]", MAKEFILE.split("$(DEPS)/sglang.stamp:")[0])
    assert "m.version('transformers')" in MAKEFILE


def _dry_run(target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # under `make test`
    r = subprocess.run(["make", "-n", "-B", "--no-print-directory", target], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]


def test_demo_and_test_install_the_same_way_before_anything_else():
    demo, test = _dry_run("demo"), _dry_run("test")
    install = [ln for ln in demo if "pip install" in ln and "-e '.[test,bench]'" in ln]
    assert len(install) == 1 and install[0] in test
    light = next(i for i, ln in enumerate(test) if "pip install" in ln and "apache-tvm-ffi" in ln)
    assert test.index(install[0]) < light  # SGLang's light dependencies install after the pinned package
    assert "m.version('transformers')" in test[light] and "torch.__version__" in test[light]
    assert demo[-1].endswith("-m sglang_ddtree demo")


def test_ci_runs_the_readme_commands_in_order_in_a_fresh_environment():
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[-2:] == ["make demo", "make test"]
    assert any(ln.startswith("python3 -m venv") for ln in lines) and any("rm -rf" in ln for ln in lines)
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]


def test_stale_kernels_package_is_named_before_the_suite(tmp_path):
    """An environment an older install left with `kernels` gets one line saying what to remove."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    fake = tmp_path / "kernels-0.19.1.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.19.1\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}

    r = subprocess.run(["make", "-s", "no-hub-kernels", f"PY={sys.executable}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode != 0 and "pip uninstall -y kernels" in r.stderr, r.stderr
    r = subprocess.run(["make", "-s", "no-hub-kernels", f"PY={sys.executable}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr



def test_try_it_makes_a_virtual_environment_first():
    """`make demo` installs torch and the package into whatever `python3` is, which a distribution's own Python
    refuses ("externally-managed-environment"): Try it says to make and enter a virtual environment before the two
    commands, one git ignores, and the Makefile installs into the `python3` it puts first on PATH."""
    readme = (ROOT / "README.md").read_text()
    before_commands = readme.split("## Try it", 1)[1].split("```bash", 1)[0]
    m = re.search(r"`python3 -m venv (\S+) && \. (\S+)/bin/activate`", " ".join(before_commands.split()))
    assert m and m.group(1) == m.group(2), before_commands
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{m.group(1)}/bin/python3"], cwd=ROOT)
    assert ignored.returncode == 0, f"{m.group(1)} is not ignored by git"
    assert re.search(r"^PY \?= python3$", MAKEFILE, flags=re.M)
