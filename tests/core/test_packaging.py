"""The wheel carries what a pip install needs at run time: the native sources (JIT-built on first use), the
shipped tiny models, and SGLang's plugin entry point."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           str(ROOT), "-w", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("sglang_ddtree-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return {name: zf.read(name) if name.endswith("entry_points.txt") else None for name in zf.namelist()}


def test_wheel_ships_native_sources(wheel_names):
    shipped = {n.removeprefix("sglang_ddtree/kernels/") for n in wheel_names if n.startswith("sglang_ddtree/kernels/")}
    expected = {str(p.relative_to(ROOT / "kernels")) for p in (ROOT / "kernels").rglob("*")
                if p.suffix in (".cu", ".cuh", ".cpp", ".h")}
    assert expected and expected <= shipped


def test_wheel_ships_tiny_models_and_entry_point(wheel_names):
    for model in ("tiny-target", "tiny-dflash", "tiny-dflash2", "tiny-mla-target", "tiny-mla-dflash"):
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            assert f"sglang_ddtree/engine/models/{model}/{f}" in wheel_names
    (ep,) = [v for n, v in wheel_names.items() if n.endswith("entry_points.txt")]
    assert b"[sglang.srt.plugins]" in ep and b"sglang_ddtree.sglang.plugin:register" in ep


def test_wheel_ships_the_license(wheel_names):
    assert any(n.split("/")[0].endswith(".dist-info") and n.endswith("LICENSE") for n in wheel_names), \
        sorted(n for n in wheel_names if ".dist-info/" in n)
