"""The command line: `--help` exits 0, a user error is one line on stderr and a non-zero exit, the demo's
default run completes with a verdict, and the entry points say what is missing instead of a traceback."""
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_ddtree import __main__ as top
from sglang_ddtree.bench import __main__ as bench
from sglang_ddtree.engine import served
from sglang_ddtree.tools import demo

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
    capsys.readouterr()
    assert top.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'bogus'" in err and len(err.strip().splitlines()) == 1


def test_top_level_help_lists_every_entry_point(capsys):
    """Every `python -m sglang_ddtree.X` with a main(argv) is a command of the top-level help."""
    import importlib

    assert top.main(["--help"]) == 0
    out = capsys.readouterr().out
    entry_points = {"demo", "check", "launch_server", "bench", "calibration", "train", "train_selector"}
    assert set(top.COMMANDS) == entry_points
    for name, (module, _) in top.COMMANDS.items():
        assert f"  {name} " in out
        assert callable(importlib.import_module(module).main), module


def test_version_is_the_package_version(capsys):
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert top.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"sglang-ddtree {declared}"


# every command the top-level help lists, each benchmark as `bench NAME` (launch_server: its own flags' parser)
COMMANDS = [[name] for name in top.COMMANDS if name not in ("bench", "launch_server")] + [
    ["bench", name] for name in bench.names()]


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit) as info:
        top.main([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def _options_without_help(text: str) -> list[str]:
    """The option lines of an argparse help text that carry no help after their flags."""
    entries = re.split(r"\n(?=  -)", text.split("\noptions:\n", 1)[1].split("\n\n")[0])
    bad = []
    for entry in entries:
        first, *rest = entry.strip("\n").split("\n")
        if len(re.split(r"\s{2,}", first.strip(), maxsplit=1)) < 2 and not any(line.strip() for line in rest):
            bad.append(first.strip())
    return bad


def test_option_help_check_catches_a_bare_option():
    text = "usage: x\n\noptions:\n  -h, --help  show this\n  --bare BARE\n  --long-one LONG_ONE\n" \
           "                        wrapped help\n  --flag      said\n"
    assert _options_without_help(text) == ["--bare BARE"]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_help_names_the_command_one_way_and_every_option_has_help(capsys, argv):
    """The usage line names the command as the top-level help lists it (`python -m sglang_ddtree NAME`, never the
    module's dotted path), the description is whole sentences (it was cut mid-sentence where a docstring's first
    line was taken), and every option says what it does."""
    out = _help(capsys, argv)
    assert out.startswith(f"usage: python -m sglang_ddtree {' '.join(argv)} "), out.splitlines()[0]
    assert "sglang_ddtree." not in out
    description = " ".join(out.split("\n\n")[1].split())
    assert description.endswith((".", ".`", ")")), description
    assert _options_without_help(out) == []


def test_launch_server_flags_name_the_command_one_way_and_have_help():
    from sglang_ddtree.sglang import launch_server

    text = launch_server.parser().format_help()
    assert text.startswith("usage: python -m sglang_ddtree launch_server ")
    assert _options_without_help(text) == []


def test_top_level_help_exits_0_as_a_module():
    r = subprocess.run([sys.executable, "-m", "sglang_ddtree", "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "bench" in r.stdout, r.stderr


def test_bench_lists_only_benchmarks(capsys):
    assert bench.names() == ["ab", "api_overhead", "attention", "budget_sweep", "dflash2", "engine", "law_gpu",
                             "sampled", "tree", "tree_gpu", "verify_splits"]
    assert bench.main(["__main__"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark '__main__'" in err and "Traceback" not in err
    assert bench.main(["--help"]) == 0
    assert top.main(["bench", "common"]) == 2


def test_bench_tree_rejects_bad_values(capsys):
    from sglang_ddtree.bench import tree

    one_line_error(capsys, lambda: tree.main(["--budgets", "8,x"]), "--budgets")
    one_line_error(capsys, lambda: tree.main(["--repeats", "0"]), "--repeats")


def _no_work(*args, **kwargs):
    raise AssertionError("the command started work before refusing its arguments")


@pytest.mark.parametrize("argv,needle", [
    (["--batches", "1,x"], "--batches"), (["--prompts", "0"], "--prompts"), (["--prompts", "100000"], "--prompts"),
    (["--device", "gpu"], "--device"), (["--max-new", "100000"], "--max-new"),
    (["--out", "/nonexistent/dir/b.json"], "--out"),
])
def test_budget_cli_rejects_bad_values_before_any_work(capsys, monkeypatch, argv, needle):
    from sglang_ddtree.bench import budget_sweep as budget

    monkeypatch.setattr(budget.Engine, "from_pretrained", _no_work)
    one_line_error(capsys, lambda: budget.main(argv), needle)


@pytest.mark.parametrize("argv,needle", [
    (["--budgets", "abc"], "--budgets"), (["--budgets", "8,0"], "--budgets"), (["--budgets", "5000"], "--budgets"),
    (["--max-new", "-5"], "--max-new"), (["--max-new", "0"], "--max-new"), (["--max-new", "100000"], "--max-new"),
    (["--fit-prompts", "100000"], "--fit-prompts"), (["--fit-prompts", "0"], "--fit-prompts"),
    (["--fit-prompts", "x"], "--fit-prompts"), (["--out", "/nonexistent/dir/c.json"], "--out"),
    (["--bogus"], "--bogus"),
])
def test_calibration_user_errors_are_one_line_before_any_work(capsys, monkeypatch, argv, needle):
    """`--budgets abc` used to fail with a traceback after the fit's minutes of work, `--max-new -5` was a
    traceback and `--fit-prompts 100000` left nothing to test on: each is one line, before the models load."""
    from sglang_ddtree.tools import calibrate

    monkeypatch.setattr(calibrate.Engine, "from_pretrained", _no_work)
    one_line_error(capsys, lambda: calibrate.main(argv), needle)


def test_calibration_accepts_the_edges():
    from sglang_ddtree.tools import calibrate
    from sglang_ddtree.engine.data import heldout_prompts

    last = len(heldout_prompts()) - 1  # every prompt but one fits, and that one tests
    a = calibrate.parse_args(["--fit-prompts", str(last), "--budgets", "8, 63", "--max-new", "1"])
    assert (a.fit_prompts, a.budgets, a.max_new) == (last, [8, 63], 1)
    assert calibrate.parse_args([]).budgets == [8, 16, 32, 64]


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
    (["--budgets", "5000"], "--budgets"), (["--budgets", "8,1024"], "--budgets"),
    (["--max-new-tokens", "100000"], "--max-new-tokens"),
    (["--json", "/nonexistent/dir/x.json"], "--json"), (["--json", "."], "--json"),
    (["--target-dir", "/nonexistent"], "--target-dir"),
])
def test_demo_user_errors_are_one_line(capsys, monkeypatch, argv, needle):
    """One line naming the argument, before any work: the models are never loaded."""
    monkeypatch.setattr(demo.Engine, "from_pretrained", _no_work)
    one_line_error(capsys, lambda: demo.main(argv), needle)


def test_demo_json_under_a_file_is_refused_before_work(capsys, monkeypatch, tmp_path):
    (tmp_path / "plain").write_text("")
    monkeypatch.setattr(demo.Engine, "from_pretrained", lambda *a, **k: pytest.fail("work started"))
    one_line_error(capsys, lambda: demo.main(["--json", str(tmp_path / "plain" / "x.json")]), "--json")


@pytest.mark.parametrize("bench_name", ["tree", "engine", "tree_gpu", "attention", "verify_splits"])
def test_bench_out_that_cannot_be_written_is_refused_before_work(capsys, tmp_path, bench_name):
    """`bench tree --out /proc/nope` used to run minutes of benchmark before failing to write. A path under a
    plain file can never be a folder, on any machine."""
    import importlib

    (tmp_path / "plain").write_text("")
    bad = str(tmp_path / "plain" / "out" / ("engine.json" if bench_name == "engine" else ""))
    module = importlib.import_module(f"sglang_ddtree.bench.{bench_name}")
    one_line_error(capsys, lambda: module.main(["--out", bad]), "--out")


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
    rc = demo.main(["--prompts", "3", "--budgets", "4,8", "--max-new-tokens", "12", "--device", "cpu",
                    "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and torch.get_num_threads() == threads  # the demo's 1 thread does not leak out
    lines = text.strip().splitlines()
    assert lines[-1].startswith("VERDICT: DDTree (served default) greedy output identical to AR on 3/3 prompts")
    assert "vs chain" in lines[-1] and "vs AR 1.00" in lines[-1] and "sampled T=1 " in lines[-1]
    assert "sampled T=0.6 top-p 0.95 " in lines[-1] and "greedy continuations are loops)" in lines[-1]
    assert "(paper's tree B=4 " in lines[-1] and ", B=8 " in lines[-1]
    assert "tau    = tokens committed per target forward" in text
    assert "DDTree = the SGLang plugin's default" in text and "the three texts are identical" in text
    data = json.loads(out.read_text())
    speed = {r["method"]: r["tokens_per_s"] for r in data["rows"] if r["temperature"] == 0}
    said = (f"DDTree {speed['served'] / speed['ar']:.2f}× and the chain {speed['chain'] / speed['ar']:.2f}× AR's "
            "speed")
    assert said in " ".join(text.split()) and "favours AR" not in text  # what this run measured, not a verdict
    assert data["prompts"] == 3 and data["verdict"] == lines[-1] and data["threads"] == 1
    assert [(r["method"], r["budget"], r["temperature"], r["top_p"]) for r in data["rows"]] == [
        (m, b, t, p) for t, p in ((0.0, 1.0), (1.0, 1.0), (0.6, 0.95))
        for m, b in (("ar", 0), ("chain", 7), ("served", "auto"), ("ddtree", 4), ("ddtree", 8))]
    assert all(r["identical_to_ar"] for r in data["rows"] if r["temperature"] == 0)
    assert all(r["identical_to_ar"] is None for r in data["rows"] if r["temperature"] > 0)
    d2 = data["dflash2"]  # the shipped DFlash2 drafter, greedy: its walk and the lattice tree, each against AR
    assert [(r["method"], r["budget"]) for r in d2["rows"]] == [("walk", 7), ("lattice", 31)]
    assert all(r["identical_to_ar"] and r["requests_identical"] == 3 for r in d2["rows"])
    assert d2["line"] in text and d2["line"].endswith("both identical to AR")
    served = [r for r in data["rows"] if r["method"] == "served"]
    for r in served:  # the served default: anchored, calibrated greedy, sampled trees drawn under their law, auto over the
        args = r["generate_args"]  # ladder, the H200's costs
        assert (args["anchor"], args["budget"], args["draft_temperature"]) == ("chain", "auto", "drafter")
        assert (args["keys"], args["children"], args.get("sampling_temperature")) == ("law", "drawn", None)
        assert tuple(args["auto_budgets"]) == (7, 15, 31, 63) and len(args["round_cost"]) == 4
        assert sum(r["budgets_chosen"].values()) == r["rounds"] and {int(b) for b in r["budgets_chosen"]} <= {7, 15, 31, 63}


def test_table_prints_a_tiny_temperature_as_given():
    """`--sampled-temperature 1e-9` was printed as T 0.0, which reads as greedy."""
    row = {"method": "ar", "budget": 0, "temperature": 1e-9, "tau": 1.0, "rounds": 3, "tokens_per_s": 10.0,
           "identical_to_ar": None, "requests_identical": 0}
    assert demo.table([row, {**row, "temperature": 0.0}]).splitlines()[-2].split()[1] == "1e-09"
    assert demo.table([row, {**row, "temperature": 0.0}]).splitlines()[-1].split()[1] == "0"


def test_legend_states_the_measured_speeds_not_a_verdict():
    """The legend said "On a CPU it favours AR" while the chain ran faster than AR: it now says what the rows hold."""
    rows = [{"method": m, "temperature": 0.0, "tokens_per_s": v} for m, v in (("ar", 3787.0), ("chain", 4362.0),
                                                                               ("served", 2919.0))]
    assert demo.speed_vs_ar(rows) == "DDTree 0.77× and the chain 1.15× AR's speed"


def test_demo_h200_costs_match_the_committed_log():
    """The costs the demo's auto budget weighs on a CPU are the H200 start-up table it cites, number for number."""
    import ast

    log = (ROOT / "docs" / "benchmarks" / "sglang-h200-2026-12-04-auto-log.txt").read_text().splitlines()
    (line,) = [ln for ln in log if ln.startswith("call3 ") and "start-up round cost (ms) " in ln]
    assert ast.literal_eval(line.split("start-up round cost (ms) ", 1)[1]) == served.H200_GRAPH_MS
    assert served.h200_costs(16, (7, 15, 31, 63)) == [0.318, 0.326, 0.346, 0.38]
    assert served.h200_costs(3, (7, 15, 31, 63)) == [0.288, 0.298, 0.296, 0.32]  # the bucket that holds 3: 4
    assert served.h200_costs(100, (7,)) == [0.335]  # past the largest bucket: the largest


def _rows(**greedy_tau):
    """Minimal demo rows: AR, chain, served and one paper's tree, greedy and sampled (T 1; T 0.6 top-p 0.95)."""
    rows = []
    for t, p in ((0.0, 1.0), (1.0, 1.0), (0.6, 0.95)):
        for m, b, tau in (("ar", 0, 1.0), ("chain", 7, greedy_tau.get("chain", 6.0)),
                          ("served", "auto", greedy_tau.get("served", 7.0)), ("ddtree", 63, 6.5)):
            rows.append({"method": m, "budget": b, "temperature": t, "top_p": p, "tau": tau,
                         "identical_to_ar": True if t == 0 else None, "requests_identical": 4,
                         "budgets_chosen": {63: 9, 31: 1} if m == "served" else None,
                         "per_prompt": [{"text": "the string " * 6}, {"text": "def f(x):\n    return x"}]})
    return rows


def test_verdict_puts_the_served_default_against_chain_and_ar():
    ok, line = demo.verdict(_rows(served=7.2, chain=6.76), 4)
    assert ok and line.startswith("VERDICT: DDTree (served default) greedy output identical to AR on 4/4 prompts")
    assert "greedy tau 7.20 vs chain 6.76 vs AR 1.00 (paper's tree B=63 6.50) (1 of 2 greedy continuations are " \
           "loops)" in line
    assert ("sampled T=1 tau 7.20 vs paper's tree 6.50 at B=63, the budget auto ran most (1.11x), vs chain 6.76; "
            "sampled T=0.6 top-p 0.95 tau 7.20") in line
    rows = _rows()
    rows[3]["identical_to_ar"], rows[3]["requests_identical"] = False, 3
    ok, line = demo.verdict(rows, 4)
    assert not ok and "DIFFERS from AR: paper's tree B=63 identical on 3/4 prompts" in line


def test_example_prompt_is_not_a_loop_and_shows_fewer_rounds():
    def row(method, per):
        return {"method": method, "temperature": 0.0, "per_prompt": [{"rounds": r, "text": t} for r, t in per]}

    loop = "the string " * 6
    code = "def __init__(self, context):\n    return self._context"
    rows = [row("served", [(5, loop), (9, code), (9, code + "x")]),
            row("chain", [(9, loop), (10, code), (12, code + "x")])]
    assert demo.example(rows) == 2  # the loop saves the most rounds but is a loop; of the others, 3 fewer rounds
    assert demo._loop_share(loop) > 0.5 > demo._loop_share(code)


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


@pytest.mark.parametrize("sections", ["5", "x", "", "1,,0"])
def test_bench_sampled_sections_are_checked_before_work(capsys, monkeypatch, sections):
    from sglang_ddtree.bench import sampled

    monkeypatch.setattr(sampled.Engine, "from_pretrained", _no_work)
    one_line_error(capsys, lambda: sampled.main(["--sections", sections]), "--sections")


def test_bench_sampled_tau_rows_are_checked_before_work(capsys, monkeypatch):
    from sglang_ddtree.bench import sampled

    monkeypatch.setattr(sampled.Engine, "from_pretrained", _no_work)
    one_line_error(capsys, lambda: sampled.main(["--tau-rows", "some"]), "--tau-rows")


def test_bench_sampled_seed_ratios_pair_each_seed():
    """The per-seed ratio pairs the same seed's runs: 4.2 / 4.0 = 1.05 and 3.9 / 4.0 = 0.975 (by hand), one of two
    seeds at least 1.05; the ratio of the means (1.0125) is not what it reports."""
    from sglang_ddtree.bench.sampled import seed_ratios

    rows = {"served default, B=15": {"per_seed": [4.2, 3.9]}, "paper's tree, B=15": {"per_seed": [4.0, 4.0]}}
    text = seed_ratios(rows)
    assert "B=15: mean 1.012, sd 0.053, [0.975, 1.050], 1 of 2 seeds ≥ 1.05" in text
    assert "B=31" not in text and seed_ratios({}) == ""


def test_bench_sampled_header_names_held_out_prompts_only_for_the_sections_that_use_them():
    """Section 4 scores the calibration's fit prompts: a run of it alone must not say it used held-out prompts."""
    from sglang_ddtree.bench.sampled import markdown

    result = {"meta": {"date": "2026-12-06"}, "prompts": 64, "max_new_tokens": 96, "seeds": [0], "tau": {},
              "exact": {}}
    assert "held-out prompts 100..163" not in markdown({**result, "sections": [4]})
    assert "held-out prompts 100..163" in markdown({**result, "sections": [1, 4]})


def test_an_earlier_command_name_still_runs(capsys):
    """`python -m sglang_ddtree budget` became `bench budget_sweep` (a benchmark, in bench/); the old name runs it."""
    assert "budget" in top.ALIASES and "budget" not in top.COMMANDS
    out = _help(capsys, ["budget"])
    assert out.startswith("usage: python -m sglang_ddtree bench budget_sweep "), out.splitlines()[0]
