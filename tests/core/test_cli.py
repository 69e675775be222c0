"""The command line: `--help` exits 0, a user error is one line on stderr and a non-zero exit, the demo's
default run completes with a verdict, and the entry points say what is missing instead of a traceback."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_ddtree import __main__ as top
from sglang_ddtree.bench import __main__ as bench
from sglang_ddtree.engine import demo

ROOT = Path(__file__).resolve().parents[2]


def one_line_error(capsys, call, *needles):
    with pytest.raises(SystemExit) as info:
        call()
    assert info.value.code not in (0, None)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_top_level_help_and_errors(capsys):
    assert top.main(["--help"]) == 0 and "demo" in capsys.readouterr().out
    assert top.main([]) == 2
    assert top.main(["bogus"]) == 2 and "unknown command 'bogus'" in capsys.readouterr().err


def test_top_level_help_exits_0_as_a_module():
    r = subprocess.run([sys.executable, "-m", "sglang_ddtree", "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "bench" in r.stdout, r.stderr


def test_bench_lists_only_benchmarks(capsys):
    assert bench.names() == ["attention", "engine", "tree", "tree_gpu", "verify_splits"]
    assert bench.main(["__main__"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark '__main__'" in err and "Traceback" not in err
    assert bench.main(["--help"]) == 0
    assert top.main(["bench", "common"]) == 2


def test_bench_tree_rejects_bad_values(capsys):
    from sglang_ddtree.bench import tree

    one_line_error(capsys, lambda: tree.main(["--budgets", "8,x"]), "--budgets")
    one_line_error(capsys, lambda: tree.main(["--repeats", "0"]), "--repeats")


def test_budget_cli_rejects_bad_values(capsys):
    from sglang_ddtree import budget

    one_line_error(capsys, lambda: budget.main(["--batches", "1,x"]), "--batches")
    one_line_error(capsys, lambda: budget.main(["--prompts", "0"]), "--prompts")
    one_line_error(capsys, lambda: budget.main(["--device", "gpu"]), "--device")


def test_bench_verify_splits_rejects_bad_values_and_a_missing_gpu(capsys):
    from sglang_ddtree.bench import verify_splits

    one_line_error(capsys, lambda: verify_splits.main(["--splits", "16,0"]), "--splits")
    one_line_error(capsys, lambda: verify_splits.main(["--batch", "x"]), "--batch")
    if not torch.cuda.is_available():
        assert verify_splits.main([]) == 2
        assert "needs a CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["--budgets", "x"], "--budgets"), (["--budgets", "0"], "--budgets"), (["--budgets", ","], "--budgets"),
    (["--max-new-tokens", "0"], "--max-new-tokens"), (["--device", "gpu"], "--device"),
    (["--prompts", "0"], "--prompts"), (["--prompts", "-1"], "--prompts"), (["--prompts", "100000"], "--prompts"),
    (["--sampled-temperature", "-1"], "--sampled-temperature"),
    (["--sampled-temperature", "nan"], "--sampled-temperature"),
    (["--sampled-temperature", "inf"], "--sampled-temperature"),
    (["--batch-size", "0"], "--batch-size"), (["--threads", "-2"], "--threads"), (["--bogus"], "--bogus"),
])
def test_demo_user_errors_are_one_line(capsys, argv, needle):
    one_line_error(capsys, lambda: demo.main(argv), needle)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_demo_cuda_without_a_gpu_says_so(capsys):
    one_line_error(capsys, lambda: demo.main(["--device", "cuda"]), "--device", "not available")


def test_demo_help_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(["--help"])
    assert info.value.code == 0 and "--full" in capsys.readouterr().out


def test_demo_defaults_are_the_small_grid():
    a, full = demo.parse_args([]), demo.parse_args(["--full"])
    assert (a.prompts, a.budgets) == (demo.QUICK["prompts"], demo.QUICK["budgets"])
    assert (full.prompts, full.budgets) == (demo.FULL["prompts"], demo.FULL["budgets"])
    assert demo.parse_args(["--full", "--prompts", "3"]).prompts == 3


def test_demo_run_prints_legend_and_verdict_and_writes_json(tmp_path, capsys):
    out = tmp_path / "demo.json"
    threads = torch.get_num_threads()
    rc = demo.main(["--prompts", "2", "--budgets", "4,8", "--max-new-tokens", "6", "--device", "cpu",
                    "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and torch.get_num_threads() == threads  # the demo's 1 thread does not leak out
    lines = text.strip().splitlines()
    assert lines[-1].startswith("VERDICT: DDTree greedy output identical to AR on 2/2 prompts")
    assert "vs chain" in lines[-1] and "vs AR 1.00" in lines[-1] and "sampled T=1" in lines[-1]
    assert "tau    = tokens committed per target forward" in text and "favours AR" in text
    data = json.loads(out.read_text())
    assert data["prompts"] == 2 and data["verdict"] == lines[-1] and data["threads"] == 1
    assert [(r["method"], r["budget"], r["temperature"]) for r in data["rows"]] == [
        (m, b, t) for t in (0.0, 1.0) for m, b in (("ar", 0), ("chain", 7), ("ddtree", 4), ("ddtree", 8))]
    assert all(r["identical_to_ar"] for r in data["rows"] if r["temperature"] == 0)
    assert all(r["identical_to_ar"] is None for r in data["rows"] if r["temperature"] == 1.0)


def test_progress_reports_an_eta_and_ends_at_100():
    stream = io.StringIO()
    p = demo.Progress(jobs=2, rounds_per_job=10, stream=stream)
    for label in ("a", "b"):
        p.start(label)
        for _ in range(4):
            p.round()
        p.finish_job()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and all("ETA" in line for line in lines)
    assert "50%" in lines[0] and "100%" in lines[1]


def test_first_native_build_is_announced(tmp_path, monkeypatch, capsys):
    from sglang_ddtree import _build

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    _build._announce_first_build("h11_never_built", "a test library")
    assert "building a test library" in capsys.readouterr().err
    (tmp_path / "h11_built").mkdir()
    (tmp_path / "h11_built" / "h11_built.so").write_bytes(b"")
    _build._announce_first_build("h11_built", "a test library")
    assert capsys.readouterr().err == ""


def _without_sglang(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probe = subprocess.run([sys.executable, "-c", "import sglang"], env=env, capture_output=True, cwd=ROOT)
    if probe.returncode == 0:
        pytest.skip("sglang is importable without .deps on this machine")
    return subprocess.run([sys.executable, "-m", *args], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_check_without_sglang_says_so():
    r = _without_sglang("sglang_ddtree.check")
    assert r.returncode == 1 and "sglang is not installed" in r.stdout and "Traceback" not in r.stdout + r.stderr


def test_launch_server_without_sglang_is_one_line():
    r = _without_sglang("sglang_ddtree.launch_server", "--model-path", "m")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "sglang is not installed" in r.stderr


def test_launch_server_help_without_sglang_shows_our_flags():
    r = _without_sglang("sglang_ddtree.launch_server", "--help")
    assert r.returncode == 0 and "--speculative-ddtree-budget" in r.stdout and "Traceback" not in r.stderr


def test_check_rejects_unknown_options(capsys):
    from sglang_ddtree.sglang import check

    one_line_error(capsys, lambda: check.main(["--bogus"]), "--bogus")
    with pytest.raises(SystemExit) as info:
        top.main(["check", "--help"])
    assert info.value.code == 0


def test_missing_torchvision_fix_names_the_paired_release():
    from sglang_ddtree.sglang.check import missing_module_fix

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    fix = missing_module_fix("torchvision.io")
    assert "pip install 'torchvision" in fix and (major != 2 or f"==0.{minor + 15}.*" in fix)
    assert missing_module_fix("orjson") == "install it: pip install orjson"
