"""patches/<release>/*.diff apply cleanly to the installed sglang, and fix what they claim to fix."""
import glob
import importlib.util
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _site_root():
    spec = importlib.util.find_spec("sglang")
    return os.path.dirname(os.path.dirname(spec.origin))  # the folder holding sglang/


def _patches(release):
    return sorted(glob.glob(os.path.join(ROOT, "patches", release, "*.diff")))


def test_patches_exist_for_every_supported_release():
    from sglang_ddtree.sglang.adapters.releases import SUPPORTED_VERSIONS

    for release in SUPPORTED_VERSIONS:
        assert len(_patches(release)) == 2, release


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the `patch` tool")
def test_patches_apply_to_installed_sglang(sglang_release, tmp_path):
    site = _site_root()
    for diff in _patches(sglang_release):
        touched = [line[len("+++ b/python/"):].strip() for line in open(diff) if line.startswith("+++ b/python/")]
        assert touched, diff
        for rel in touched:  # patch a copy: the installed package stays untouched
            os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
            shutil.copy(os.path.join(site, rel), tmp_path / rel)
        out = subprocess.run(["patch", "-p2", "-F0", "--no-backup-if-mismatch", "-d", str(tmp_path), "-i", diff],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "offset" not in out.stdout and "fuzz" not in out.stdout, out.stdout


def test_patched_custom_spec_algo_is_complete(sglang_release, tmp_path):
    """After 0001, a bare CustomSpecAlgo answers every method the scheduler calls."""
    site = _site_root()
    rel = "sglang/srt/speculative/spec_registry.py"
    os.makedirs(tmp_path / os.path.dirname(rel))
    shutil.copy(os.path.join(site, rel), tmp_path / rel)
    diff = [d for d in _patches(sglang_release) if "0001" in d][0]
    subprocess.run(["patch", "-p2", "-d", str(tmp_path), "-i", diff], check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("patched_spec_registry", tmp_path / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    algo = mod.CustomSpecAlgo("X", lambda sa: None)
    from sglang_ddtree.sglang.spec_algo import SPEC_METHOD_NAMES

    for name in SPEC_METHOD_NAMES:
        assert callable(getattr(algo, name)), name
    assert algo.carries_draft_hidden_states() is False and algo.need_topk() is False


def test_runtime_mask_policy_hook(plugins_loaded):
    """adapters/hooks.py (the run-time form of 0002), through the release's adapter, turns the captured-graph mask on,
    idempotently."""
    from sglang.srt.speculative import dflash_utils

    from sglang_ddtree.sglang import adapters

    sgl = adapters.current().Adapter(host=None)

    class TritonAttnBackend:
        pass

    original = dflash_utils.resolve_dflash_verify_mask_policy
    try:
        assert original(TritonAttnBackend()) == ("TritonAttnBackend", False)
        sgl.install_verify_mask_policy()
        sgl.install_verify_mask_policy()
        patched = dflash_utils.resolve_dflash_verify_mask_policy
        assert patched.ddtree_original is original
        assert patched(TritonAttnBackend()) == ("TritonAttnBackend", True)
    finally:
        dflash_utils.resolve_dflash_verify_mask_policy = original
