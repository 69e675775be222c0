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
