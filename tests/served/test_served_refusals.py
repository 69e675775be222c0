"""Starting DDTree on the CPU where SGLang cannot serve there: one line naming what is missing and the fix, before
any model loads, never a traceback (`python -m sglang_ddtree.launch_server`, the documented entry point)."""
import os
import shutil
import subprocess
import sys

import pytest

import fleet as F


def launch(tmp_path, site_files, environ):
    site = tmp_path / "site"
    site.mkdir()
    for name in site_files:
        src = os.path.join(F.SITE, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, site / name)
    env = {k: v for k, v in F.environment(F.SGLANG).items() if k != "SGLANG_USE_CPU_ENGINE"}
    env.update(PYTHONPATH=os.pathsep.join([str(site), F.SGLANG, F.ROOT]), **environ)
    argv = [sys.executable, "-m", "sglang_ddtree.launch_server", *F.COMMON, *F.DDTREE, "--port", "1"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=F.ROOT, timeout=300)


@pytest.mark.parametrize("site_files,environ,named", [
    (["torchvision_stub.py", "sitecustomize.py"], {"SGLANG_USE_CPU_ENGINE": "1"}, ["sgl_kernel"]),
    (["torchvision_stub.py", "sitecustomize.py", "sgl_kernel"], {}, ["SGLANG_USE_CPU_ENGINE=1"]),
], ids=["no-sgl_kernel", "no-cpu-engine"])
def test_a_cpu_install_lacking_what_serving_needs_is_refused_in_one_line(fleet, tmp_path, site_files, environ, named):
    out = launch(tmp_path, site_files, environ)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert "DDTREE" in last and "--device cpu" in last and "Fix:" in last and "make serve-cpu" in last, last
    for word in named:
        assert word in last, last
    assert "Load weight" not in out.stderr + out.stdout  # refused before any model loads
