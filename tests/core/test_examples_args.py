"""The examples refuse bad input with one line naming the argument and a non-zero exit, before any work: the chat
client without a server (it printed a 54-line traceback) or with a negative --max-tokens, and the A/B bench
(`python -m sglang_ddtree bench ab`) with a missing --plot-only report or an unwritable --out."""
import importlib
import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one_line(err: str, *needles):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_client_without_a_server_is_one_line():
    url = f"http://127.0.0.1:{_closed_port()}"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "client_chat.py"), "hello", "--url", url],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and r.stdout == ""
    _one_line(r.stderr, "--url", url, "launch_ddtree.sh")


@pytest.mark.parametrize("argv,needle", [
    (["--max-tokens", "-5"], "--max-tokens"), (["--max-tokens", "0"], "--max-tokens"),
    (["--temperature", "-1"], "--temperature"), (["--temperature", "nan"], "--temperature"),
    (["--url", "localhost:30000"], "--url"),
])
def test_client_bad_values_are_refused_before_any_request(capsys, monkeypatch, argv, needle):
    chat = _load("client_chat")
    monkeypatch.setattr(chat, "reachable", lambda *a: pytest.fail("contacted the server"))
    with pytest.raises(SystemExit) as info:
        chat.main(argv)
    assert info.value.code == 2
    _one_line(capsys.readouterr().err, needle)


@pytest.mark.parametrize("argv,needle", [
    (["--plot-only", "/missing.json"], "--plot-only"),
    (["--merge", "/missing.json"], "--merge"),
    (["--url", "a=http://x", "--repeats", "0"], "--repeats"),
    (["--url", "a=http://x", "--concurrency", "4", "-1"], "--concurrency"),
    (["--url", "no-name-given"], "--url"),
    (["--url", "a=http://x", "--prompts-file", "/missing.json"], "--prompts-file"),
])
def test_ab_bench_bad_values_are_one_line(capsys, tmp_path, argv, needle):
    ab = importlib.import_module("sglang_ddtree.bench.ab")
    with pytest.raises(SystemExit) as info:
        ab.main([*argv, "--out", str(tmp_path / "out")])
    assert info.value.code == 2
    _one_line(capsys.readouterr().err, needle)


def test_ab_bench_plot_only_of_a_non_report_is_one_line(capsys, tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    ab = importlib.import_module("sglang_ddtree.bench.ab")
    with pytest.raises(SystemExit):
        ab.main(["--plot-only", str(tmp_path / "x.json"), "--out", str(tmp_path / "out")])
    _one_line(capsys.readouterr().err, "--plot-only", "not an ab.json report")


def test_ab_bench_unwritable_out_is_refused_before_any_server(capsys, tmp_path):
    (tmp_path / "plain").write_text("")
    ab = importlib.import_module("sglang_ddtree.bench.ab")
    with pytest.raises(SystemExit):
        ab.main(["--server", "a=--model-path m", "--out", str(tmp_path / "plain" / "out")])
    _one_line(capsys.readouterr().err, "--out", "cannot write")


def test_ab_bench_missing_plot_only_as_a_script():
    r = subprocess.run([sys.executable, "-m", "sglang_ddtree", "bench", "ab", "--plot-only", "/missing.json",
                        "--out", "/tmp"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2
    _one_line(r.stderr, "--plot-only", "/missing.json")
