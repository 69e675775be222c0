"""`python -m sglang_ddtree bench ab --merge`: concurrencies measured in separate device calls joined into one report.

A device call is limited to ten minutes, so the A/B at concurrency {1, 4, 16, 32} can take two calls; the
joined report must hold exactly their rows, say which call each came from, and refuse runs that did not
measure alike or that measured one row twice."""
import copy
import json

import pytest

from test_ab_bench_profile import ROOT, _load

AB = ROOT / "docs" / "benchmarks" / "sglang-h200-2026-12-04-ab.json"


def _split():
    """The committed 2026-12-04 A/B as two runs: c = 1 and 4 in one, c = 16 in the other."""
    whole = json.loads(AB.read_text())
    a, b = copy.deepcopy(whole), copy.deepcopy(whole)
    a["rows"] = [r for r in whole["rows"] if r["concurrency"] in (1, 4)]
    b["rows"] = [r for r in whole["rows"] if r["concurrency"] == 16]
    b["profiles"] = {}
    return whole, a, b


def test_merge_keeps_every_row_once_with_its_run(tmp_path):
    ab = _load()
    whole, a, b = _split()
    out = ab.merge([("call1", a), ("call2", b)])
    key = lambda r: (r["server"], r["concurrency"])  # noqa: E731
    assert sorted(map(key, out["rows"])) == sorted(map(key, whole["rows"]))
    assert {r["run"] for r in out["rows"] if r["concurrency"] == 16} == {"call2"}
    assert {r["run"] for r in out["rows"] if r["concurrency"] < 16} == {"call1"}
    assert out["merged_from"] == ["call1", "call2"] and set(out["runs"]) == {"call1", "call2"}
    assert set(out["servers"]) == set(whole["servers"])
    assert out["profiles"].keys() == whole["profiles"].keys()
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(a if name == "a.json" else b))
    assert ab.main(["--out", str(tmp_path / "m"), "--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert len(json.loads((tmp_path / "m" / "ab.json").read_text())["rows"]) == len(whole["rows"])
    assert "| dflash | prompts | 16 |" in (tmp_path / "m" / "ab.md").read_text()


def test_merge_refuses_runs_that_did_not_measure_alike():
    ab = _load()
    _, a, b = _split()
    with pytest.raises(ValueError, match="row .* is in both"):
        ab.merge([("call1", a), ("again", a)])
    other = copy.deepcopy(b)
    other["repeats"] = 3
    with pytest.raises(ValueError, match="differ in 'repeats'"):
        ab.merge([("call1", a), ("call2", other)])
    other = copy.deepcopy(b)
    other["bench_args"] = "--temperature 1.0"  # greedy and sampled traffic never share a report
    with pytest.raises(ValueError, match="differ in 'bench_args'"):
        ab.merge([("call1", a), ("call2", other)])
    other = copy.deepcopy(b)
    other["servers"]["dflash"]["args"] += " --speculative-num-draft-tokens 8"
    with pytest.raises(ValueError, match="server 'dflash' ran with other flags"):
        ab.merge([("call1", a), ("call2", other)])
    with pytest.raises(ValueError, match="nothing to merge"):
        ab.merge([])


def test_merge_takes_only_the_named_concurrencies_of_a_run(tmp_path):
    """PATH@C,C: a concurrency measured again in a later call (e.g. with an A/A twin) replaces the earlier
    call's rows and profiles; without the filter the same two runs are refused as measuring a row twice."""
    ab = _load()
    whole = json.loads(AB.read_text())
    whole["profiles"] = {"dflash_c1": {"round_us": 1.0}, "dflash_c16": {"round_us": 2.0}}
    (tmp_path / "a.json").write_text(json.dumps(whole))
    later = copy.deepcopy(whole)
    later["rows"] = [r for r in whole["rows"] if r["concurrency"] == 16]
    later["profiles"] = {}
    (tmp_path / "b.json").write_text(json.dumps(later))
    name, run = ab.merge_input(f"{tmp_path / 'a.json'}@1,4")
    assert {r["concurrency"] for r in run["rows"]} == {1, 4}
    assert list(run["profiles"]) == ["dflash_c1"]
    out = ab.merge([(name, run), ab.merge_input(str(tmp_path / "b.json"))])
    assert {r["run"] for r in out["rows"] if r["concurrency"] == 16} == {str(tmp_path / "b.json")}
    assert len(out["rows"]) == len(whole["rows"])
    with pytest.raises(ValueError, match="is in both"):
        ab.merge([ab.merge_input(str(tmp_path / "a.json")), ab.merge_input(str(tmp_path / "b.json"))])
    with pytest.raises(ValueError, match="PATH@C"):
        ab.merge_input(f"{tmp_path / 'a.json'}@sixteen")


def _with_traffics(run, traffics):
    """A run as measured under named traffics: its header names them, every row is there once per traffic."""
    out = copy.deepcopy(run)
    out["traffics"] = traffics
    out["rows"] = [{**r, "traffic": t} for t in traffics for r in run["rows"]]
    return out


def test_merge_keeps_each_rows_traffic_and_refuses_runs_under_other_traffics(tmp_path):
    """Rows that differ only by traffic are not one row twice; runs under other traffics (or one with traffics and
    one without) never share a report."""
    ab = _load()
    _, a, b = _split()
    traffics = {"greedy": "", "t06": "--temperature 0.6 --top-p 0.95"}
    out = ab.merge([("call1", _with_traffics(a, traffics)), ("call2", _with_traffics(b, traffics))])
    assert out["traffics"] == traffics and len(out["rows"]) == 2 * (len(a["rows"]) + len(b["rows"]))
    assert {(r["traffic"], r["run"]) for r in out["rows"] if r["concurrency"] == 16} == {("greedy", "call2"),
                                                                                        ("t06", "call2")}
    ab.write_outputs(out, str(tmp_path))
    md = (tmp_path / "ab.md").read_text()
    assert "| dflash [greedy] | prompts | 16 |" in md and "| dflash [t06] | prompts | 16 |" in md
    with pytest.raises(ValueError, match="differ in 'traffics'"):
        ab.merge([("call1", _with_traffics(a, traffics)), ("call2", _with_traffics(b, {"greedy": "", "t1": "x"}))])
    with pytest.raises(ValueError, match="differ in 'traffics'"):
        ab.merge([("call1", a), ("call2", _with_traffics(b, {"greedy": ""}))])
    with pytest.raises(ValueError, match="row .* is in both"):
        ab.merge([("call1", _with_traffics(a, traffics)), ("again", _with_traffics(a, traffics))])


def test_an_old_report_merges_with_a_new_one_without_traffics_and_its_profiles_still_compare(tmp_path):
    """A report from before traffics (rows without the field, profile keys "<server>_c<conc>") joins a new
    traffic-less run (rows with traffic null, profiles with their fields); a row in both is still refused."""
    ab = _load()
    _, a, b = _split()
    assert all("traffic" not in r for r in a["rows"])
    prof = lambda us: {"round_us": us, "kernel_us_by_name": {"gemm": [us / 2, 1.0]}}  # noqa: E731
    a["profiles"] = {"dflash_c1": prof(100.0), "ddtree_b16_c1": prof(120.0), "ddtree_b16_c4": prof(130.0)}
    b["rows"] = [{**r, "traffic": None} for r in b["rows"]]
    b["profiles"] = {"dflash_c16": {**prof(200.0), "server": "dflash", "traffic": None, "concurrency": 16},
                     "ddtree_b16_c16": {**prof(250.0), "server": "ddtree_b16", "traffic": None, "concurrency": 16}}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert ab.main(["--out", str(tmp_path / "m"), "--merge", f"{tmp_path / 'a.json'}@1", str(tmp_path / "b.json")]) == 0
    merged = json.loads((tmp_path / "m" / "ab.json").read_text())
    assert sorted(merged["profiles"]) == ["ddtree_b16_c1", "ddtree_b16_c16", "dflash_c1", "dflash_c16"]
    titles = [x for x in (tmp_path / "m" / "ab_profiles.md").read_text().splitlines() if x.startswith("### ")]
    assert titles == ["### ddtree_b16 (b) against dflash (a), c=1", "### ddtree_b16 (b) against dflash (a), c=16"]
    assert "| dflash | prompts | 16 |" in (tmp_path / "m" / "ab.md").read_text()
    b["rows"] = [{**r, "concurrency": 1} for r in b["rows"]]
    with pytest.raises(ValueError, match="is in both"):
        ab.merge([("old", a), ("new", b)])
