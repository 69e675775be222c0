"""sglang_ddtree/bench/ab.py's profile capture: a window of decode rounds only.

A capture whose window saw requests arrive mixed prefill GEMMs into the per-round kernel list (the
2026-12-03 8B-shaped profiles); the load must be one wave of long requests, captured after its prefill."""
import importlib
import json
import pathlib
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load():
    return importlib.import_module("sglang_ddtree.bench.ab")


def test_with_output_len_replaces_only_the_output_flags():
    ab = _load()
    sharegpt = ["--dataset-name", "sharegpt", "--dataset-path", "p.json", "--sharegpt-output-len", "64"]
    rand = ["--random-input-len", "1024", "--random-output-len", "64", "--random-range-ratio", "1.0"]
    assert ab.with_output_len(sharegpt, 512)[-1] == "512"
    assert ab.with_output_len(sharegpt, 512)[:-1] == sharegpt[:-1]
    assert ab.with_output_len(rand, 300) == ["--random-input-len", "1024", "--random-output-len", "300",
                                             "--random-range-ratio", "1.0"]
    assert sharegpt[-1] == "64"  # the caller's list is not modified


def test_profile_load_is_one_long_wave_captured_after_its_prefill(tmp_path, monkeypatch):
    ab = _load()
    seen, slept = {}, []

    def fake_bench(base, conc, a, dataset, out_dir, tag, warmup=2):
        seen.update(n=max(a.num_prompts, a.prompts_per_conc * conc), dataset=dataset, warmup=warmup)
        return {}

    def fake_post(url, payload=None, timeout=600):  # the server writes its trace when the capture ends
        if url.endswith("/start_profile"):
            ev = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0.0, "dur": 5.0},
                  {"ph": "X", "cat": "kernel", "name": "k", "ts": 10.0, "dur": 5.0}]
            (tmp_path / f"t{len(list(tmp_path.glob('t*.trace.json')))}.trace.json").write_text(
                json.dumps({"traceEvents": ev}))
        return b"{}"

    monkeypatch.setattr(ab, "bench_serving", fake_bench)
    monkeypatch.setattr(ab, "_post", fake_post)
    monkeypatch.setattr(ab.time, "sleep", slept.append)
    monkeypatch.setattr(ab, "running_and_waiting", lambda base: None)  # a server without /v1/loads
    a = types.SimpleNamespace(num_prompts=64, prompts_per_conc=8, profile_output_len=512, profile_delay=1.0,
                              profile_margin=0.2, profile_steps=2, profile_timeout=5, run_timeout=5)
    out = ab.profile("http://x", 16, a, ["--sharegpt-output-len", "64"], str(tmp_path), "s_c16",
                     str(tmp_path), ttft_s=0.8)
    assert seen == {"n": 16, "dataset": ["--sharegpt-output-len", "512"], "warmup": 0}
    assert slept == [2.1]  # 2 x P99 TTFT + 0.5 s, above --profile-delay
    assert out["kernels_per_round"][0]["count"] == 1.0 and "16 requests x 512 tokens" in out["load"]

    # a server that reports its load: the capture waits until the whole wave decodes, then the margin
    states = iter([(0, 16), (9, 7), (15, 0), (16, 0)])  # waiting, half prefilled, one in prefill, all decoding
    polls = []
    monkeypatch.setattr(ab, "running_and_waiting", lambda base: (polls.append(base), next(states))[1])
    slept.clear()
    out = ab.profile("http://x", 16, a, ["--sharegpt-output-len", "64"], str(tmp_path), "s_c16",
                     str(tmp_path), ttft_s=0.8)
    assert len(polls) == 4 and slept == [0.05, 0.05, 0.05, 0.2]
    assert "capture 0.2 s after all 16 were decoding" in out["load"]


def test_running_and_waiting_reads_sglangs_load_endpoint(monkeypatch):
    ab = _load()
    body = {"timestamp": "t", "loads": [{"dp_rank": 0, "num_running_reqs": 12, "num_waiting_reqs": 3},
                                        {"dp_rank": 1, "num_running_reqs": 4, "num_waiting_reqs": 0}]}
    urls = []

    class Reply:
        def read(self):
            return json.dumps(body).encode()

    monkeypatch.setattr(ab.urllib.request, "urlopen", lambda url, timeout: (urls.append(url), Reply())[1])
    assert ab.running_and_waiting("http://x") == (16, 3)
    assert urls == ["http://x/v1/loads?include=core"]

    def missing(url, timeout):
        raise ab.urllib.error.HTTPError(url, 404, "Not Found", {}, None)

    monkeypatch.setattr(ab.urllib.request, "urlopen", missing)
    assert ab.running_and_waiting("http://x") is None


def test_repeated_passes_report_each_fields_median_and_keep_the_spread():
    ab = _load()
    runs = [{"output_throughput": t, "median_tpot_ms": m, "accept_length": None} for t, m in
            ((900.0, 1.1), (700.0, 1.3), (1200.0, 0.9))]
    row = ab.median_row(runs)
    assert row["output_throughput"] == 900.0 and row["median_tpot_ms"] == 1.1
    assert row["accept_length"] is None  # no value in any pass stays None, not 0
    assert row["passes_output_throughput"] == [900.0, 700.0, 1200.0]
    assert ab.median_row(runs[:2])["output_throughput"] == 700.0  # even count: the lower middle


def test_plot_only_redraws_a_committed_run(tmp_path):
    import pytest
    pytest.importorskip("matplotlib")
    ab = _load()
    src = ROOT / "docs" / "benchmarks" / "sglang-h200-2026-12-03-run2-ab.json"
    assert ab.main(["--out", str(tmp_path), "--plot-only", str(src)]) == 0
    assert (tmp_path / "ab.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_draws_with_a_partial_ipython_importable(tmp_path, monkeypatch):
    """The GPU bundle's IPython has no get_ipython; pyplot's backend switch called it and the 2026-12-03
    run-3 A/B step exited 1 after its JSON (no plot). The plot must not go through pyplot's backend."""
    import sys
    import pytest
    pytest.importorskip("matplotlib")
    ab = _load()
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    monkeypatch.delitem(sys.modules, "matplotlib.pyplot", raising=False)
    rows = [{"server": s, "concurrency": c, "output_throughput": 100.0 * c, "accept_length": 5.0}
            for s in ("dflash", "ddtree") for c in (1, 4)]
    assert ab.plot(rows, str(tmp_path / "p.png")) == str(tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_interleaved_passes_take_turns_and_each_server_gets_its_median(tmp_path, monkeypatch):
    """--start-all --interleave: at each concurrency the servers are warmed, then pass r of every server (the
    order rotated by r) before pass r + 1 of any; a row is the median of that server's own passes; every
    launched server gets --sleep-on-idle (idle schedulers otherwise busy-poll a core)."""
    ab = _load()
    calls, launched = [], []

    class FakeServer:
        def __init__(self, name, args, common, port, log_dir, profile_dir):
            self.name, self.base, self.proc = name, f"http://{name}", None
            launched.append(common)

        def stop(self):
            pass

    speed = {"a": [100.0, 300.0, 200.0], "b": [10.0, 30.0, 20.0]}

    def fake_bench(base, conc, a, dataset, out_dir, tag, warmup=2):
        calls.append(tag)
        name = base.split("//")[1]
        r = int(tag.rsplit("_r", 1)[1]) if "_r" in tag else 0
        return {"output_throughput": speed[name][r] * conc, "median_tpot_ms": 1.0, "accept_length": None}

    monkeypatch.setattr(ab, "Server", FakeServer)
    monkeypatch.setattr(ab, "wait_ready", lambda base, proc, timeout: 0.0)
    monkeypatch.setattr(ab, "bench_serving", fake_bench)
    monkeypatch.setattr(ab, "plot", lambda rows, path: None)
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["x = 1"]))
    rc = ab.main(["--out", str(tmp_path / "o"), "--server", "a=", "--server", "b=", "--prompts-file", str(prompts),
                  "--concurrency", "1", "4", "--repeats", "3", "--start-all", "--interleave"])
    assert rc == 0 and all(c.endswith("--sleep-on-idle") for c in launched) and len(launched) == 2
    assert calls[:8] == ["a_warm0", "b_warm0", "a_r0", "b_r0", "b_r1", "a_r1", "a_r2", "b_r2"]
    report = json.loads((tmp_path / "o" / "ab.json").read_text())
    rows = {(r["server"], r["concurrency"]): r for r in report["rows"]}
    assert rows[("a", 4)]["output_throughput"] == 800.0 and rows[("b", 1)]["output_throughput"] == 20.0
    assert rows[("a", 1)]["passes_output_throughput"] == [100.0, 300.0, 200.0]
    assert "took turns" in report["one_server_at_a_time"]


def test_interleave_needs_start_all(tmp_path):
    import pytest
    ab = _load()
    with pytest.raises(SystemExit):
        ab.main(["--out", str(tmp_path), "--server", "a=", "--prompts-file", "p.json", "--interleave"])


def test_sigterm_during_a_client_run_ends_the_bench_instead_of_being_taken_for_the_clients_exit(tmp_path,
                                                                                                   monkeypatch):
    """`timeout` must end the bench: the client runs in process and run_client turns its SystemExit into a return
    code, so the SIGTERM handler must raise something run_client lets through."""
    ab = _load()
    monkeypatch.setattr(ab, "_client_main", lambda: ab.on_sigterm)  # the signal lands while the client runs
    a = types.SimpleNamespace(client="inproc", run_timeout=5)
    with pytest.raises(KeyboardInterrupt):
        ab.run_client(["--help"], str(tmp_path / "bs.log"), a)
    monkeypatch.setattr(ab, "_client_main", lambda: lambda: sys.exit(2))  # argparse's own exit stays a code
    assert ab.run_client(["--bad"], str(tmp_path / "bs.log"), a) == 2


def test_profiles_of_ddtree_and_dflash_at_one_concurrency_are_compared(tmp_path):
    """ab_profiles.md: each non-DFLASH server's profiled round against each DFLASH server's at the same
    concurrency, none across concurrencies or between two DFLASH servers, none from a failed capture."""
    ab = _load()
    prof = lambda us: {"round_us": us, "kernel_us_by_name": {"gemm": [us / 2, 1.0]}}  # noqa: E731
    report = {"rows": [], "profiles": {"dflash_c1": prof(100.0), "dflash_flashinfer_c1": prof(90.0),
                                       "ddtree_default_c1": prof(120.0), "ddtree_default_c16": prof(300.0),
                                       "ddtree_b15_c1": {"error": "no trace written"}}}
    ab.write_outputs(report, str(tmp_path))
    md = (tmp_path / "ab_profiles.md").read_text()
    titles = [line for line in md.splitlines() if line.startswith("### ")]
    assert titles == ["### ddtree_default (b) against dflash (a), c=1",
                      "### ddtree_default (b) against dflash_flashinfer (a), c=1"]
    assert "| round_us | 90.0 | 120.0 | 30.0 |" in md


def _fake_servers(tmp_path, monkeypatch):
    """ab.main against fake servers: the real bench_serving and profile code, the client's argv and the servers'
    starts and stops recorded, a two-kernel trace written for every capture."""
    ab = _load()
    seen = {"argv": [], "started": [], "stopped": []}

    class FakeServer:
        def __init__(self, name, args, common, port, log_dir, profile_dir):
            self.name, self.base, self.proc = name, f"http://{name}", None
            seen["started"].append(name)

        def stop(self):
            seen["stopped"].append(self.name)

    def fake_client(argv, log_path, a):
        seen["argv"].append(argv)
        res = {"output_throughput": 100.0, "median_tpot_ms": 1.0, "p99_ttft_ms": 10.0, "accept_length": 3.0}
        open(argv[argv.index("--output-file") + 1], "w").write(json.dumps(res) + "\n")
        return 0

    def fake_post(url, payload=None, timeout=600):
        if url.endswith("/start_profile"):
            ev = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0.0, "dur": 5.0}]
            path = pathlib.Path(payload["output_dir"]) / f"t{len(seen['argv'])}.trace.json"
            path.write_text(json.dumps({"traceEvents": ev}))
        return b"{}"

    monkeypatch.setattr(ab, "Server", FakeServer)
    monkeypatch.setattr(ab, "wait_ready", lambda base, proc, timeout: 0.0)
    monkeypatch.setattr(ab, "run_client", fake_client)
    monkeypatch.setattr(ab, "_post", fake_post)
    monkeypatch.setattr(ab, "running_and_waiting", lambda base: (64, 0))
    monkeypatch.setattr(ab.time, "sleep", lambda s: None)
    monkeypatch.setattr(ab, "plot", lambda rows, path: None)
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["x = 1"]))
    args = ["--server", "a=", "--server", "b=", "--prompts-file", str(prompts), "--concurrency", "1", "4",
            "--repeats", "2", "--profile-concurrency", "1", "--profile-steps", "1", "--bench-args=--common-flag"]
    return ab, seen, args


def test_traffics_measure_and_profile_each_server_under_every_traffic_in_one_start(tmp_path, monkeypatch):
    """--traffic: each server is started once and measured (warm pass, then --repeats passes) under every traffic at
    every concurrency, each pass with --bench-args then that traffic's flags, no file written twice; one profile
    per server, traffic and concurrency, its load under that traffic's flags."""
    ab, seen, args = _fake_servers(tmp_path, monkeypatch)
    sampled = "--temperature 0.6 --top-p 0.95"
    out = tmp_path / "o"
    assert ab.main(["--out", str(out), *args, "--traffic", "greedy=", "--traffic", f"t06={sampled}"]) == 0
    assert seen["started"] == ["a", "b"] and seen["stopped"] == ["a", "b"]
    files = [argv[argv.index("--output-file") + 1] for argv in seen["argv"]]
    assert len(files) == len(set(files)) == 2 * 2 * 2 * 3 + 4  # (warm + 2 passes) per row, one load per profile
    for argv, f in zip(seen["argv"], files):
        tail = " ".join(argv[argv.index("--common-flag"):])
        assert tail == ("--common-flag " + sampled if "@t06_" in f else "--common-flag"), f
    name = lambda f: pathlib.Path(f).name  # noqa: E731
    assert [name(f) for f in files][:4] == ["bs_a@greedy_warm0_c1.jsonl", "bs_a@greedy_r0_c1.jsonl",
                                            "bs_a@greedy_r1_c1.jsonl", "bs_a@greedy_warm0_c4.jsonl"]
    assert name(files[6]) == "bs_a@t06_warm0_c1.jsonl" and "bs_a@t06_c1_prof_c1.jsonl" in map(name, files)
    report = json.loads((out / "ab.json").read_text())
    assert report["traffics"] == {"greedy": "", "t06": sampled}
    assert sorted((r["server"], r["traffic"], r["concurrency"]) for r in report["rows"]) == sorted(
        (s, t, c) for s in "ab" for t in ("greedy", "t06") for c in (1, 4))
    assert {k: (p["server"], p["traffic"], p["concurrency"]) for k, p in report["profiles"].items()} == {
        f"{s}@{t}_c1": (s, t, 1) for s in "ab" for t in ("greedy", "t06")}
    assert "| a [t06] | prompts | 4 |" in (out / "ab.md").read_text()
    titles = [x for x in (out / "ab_profiles.md").read_text().splitlines() if x.startswith("### ")]
    assert titles == ["### a t06 (b) against a greedy (a), c=1", "### b t06 (b) against b greedy (a), c=1"]


def test_without_traffics_the_report_is_as_before(tmp_path, monkeypatch):
    ab, seen, args = _fake_servers(tmp_path, monkeypatch)
    out = tmp_path / "o"
    assert ab.main(["--out", str(out), *args]) == 0
    report = json.loads((out / "ab.json").read_text())
    assert "traffics" not in report and {r["traffic"] for r in report["rows"]} == {None}
    assert sorted(report["profiles"]) == ["a_c1", "b_c1"]
    assert all(argv[-1] == "--common-flag" for argv in seen["argv"])
    assert "| a | prompts | 4 |" in (out / "ab.md").read_text()


def test_interleaved_traffics_take_turns_within_each_traffic(tmp_path, monkeypatch):
    """--interleave with traffics: the traffic is the outer loop, the servers take turns inside it."""
    ab, seen, args = _fake_servers(tmp_path, monkeypatch)
    assert ab.main(["--out", str(tmp_path / "o"), *args, "--start-all", "--interleave", "--traffic", "g=",
                    "--traffic", "t1=--temperature 1.0"]) == 0
    tags = [pathlib.Path(argv[argv.index("--output-file") + 1]).name for argv in seen["argv"]]
    assert tags[:6] == ["bs_a@g_warm0_c1.jsonl", "bs_b@g_warm0_c1.jsonl", "bs_a@g_r0_c1.jsonl",
                        "bs_b@g_r0_c1.jsonl", "bs_b@g_r1_c1.jsonl", "bs_a@g_r1_c1.jsonl"]
    measured = [t for t in tags if "_prof_" not in t]
    assert max(i for i, t in enumerate(measured) if "@g_" in t) < min(i for i, t in enumerate(measured) if "@t1_" in t)
    report = json.loads((tmp_path / "o" / "ab.json").read_text())
    assert len(report["rows"]) == 8 and len(report["profiles"]) == 4


def test_traffic_names_are_plain_words_given_once(tmp_path):
    ab = _load()
    with pytest.raises(SystemExit):
        ab.main(["--out", str(tmp_path), "--server", "a=", "--prompts-file", "p.json", "--traffic", "t/1=--x"])
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["x = 1"]))
    with pytest.raises(SystemExit):
        ab.main(["--out", str(tmp_path), "--server", "a=", "--prompts-file", str(prompts), "--traffic", "g=",
                 "--traffic", "g=--temperature 1.0"])


def _prof(us):
    return {"round_us": us, "kernel_us_by_name": {"gemm": [us / 2, 1.0]}}


def test_profiles_pair_a_servers_sampled_round_with_its_greedy_one_and_a_server_with_its_before_twin(tmp_path):
    """Pairs only at one concurrency: under one traffic, each server against DFLASH and against its _before twin;
    across traffics, only a server's sampled round against its own greedy round ("greedy" by name, not order)."""
    ab = _load()
    profiles = {f"{s}@{t}_c{c}": {**_prof(100.0), "server": s, "traffic": t, "concurrency": c}
                for s in ("dflash", "ddtree_default", "ddtree_default_before") for t in ("t06", "greedy") for c in (1,)}
    profiles["ddtree_default@t06_c16"] = {**_prof(300.0), "server": "ddtree_default", "traffic": "t06",
                                          "concurrency": 16}
    # a merged report's key suffix: the stored fields, not the key, say which round it is
    profiles["dflash@t06_c1 (call2)"] = profiles.pop("dflash@t06_c1")
    ab.write_outputs({"rows": [], "profiles": profiles, "traffics": {"t06": "--temperature 0.6", "greedy": ""}},
                     str(tmp_path))
    titles = {x[4:] for x in (tmp_path / "ab_profiles.md").read_text().splitlines() if x.startswith("### ")}
    assert titles == {
        "ddtree_default greedy (b) against dflash greedy (a), c=1",
        "ddtree_default_before greedy (b) against dflash greedy (a), c=1",
        "ddtree_default t06 (b) against dflash t06 (a), c=1",
        "ddtree_default_before t06 (b) against dflash t06 (a), c=1",
        "dflash t06 (b) against dflash greedy (a), c=1",
        "ddtree_default t06 (b) against ddtree_default greedy (a), c=1",
        "ddtree_default_before t06 (b) against ddtree_default_before greedy (a), c=1",
        "ddtree_default greedy (b) against ddtree_default_before greedy (a), c=1",
        "ddtree_default t06 (b) against ddtree_default_before t06 (a), c=1"}
    # no traffic named greedy: the first given is the reference
    assert "b t1 (b) against b t06 (a)" in ab.profile_comparisons(
        {f"b@{t}_c1": {**_prof(1.0), "server": "b", "traffic": t, "concurrency": 1} for t in ("t1", "t06")},
        {"t06": "--temperature 0.6", "t1": "--temperature 1.0"})


def test_old_profile_keys_still_pair_with_the_before_twin():
    ab = _load()
    md = ab.profile_comparisons({"ddtree_b16_c1": _prof(100.0), "ddtree_b16_before_c1": _prof(90.0),
                                 "ddtree_b16_c1 (call2)": _prof(95.0)})
    titles = [x for x in md.splitlines() if x.startswith("### ")]
    assert titles == ["### ddtree_b16 (b) against ddtree_b16_before (a), c=1"] * 2
