"""The README's headline numbers match the committed files they come from (scripts/check_readme_numbers.py),
and the check really fails when a number drifts, a claim disappears or a source loses its value."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_readme_numbers", ROOT / "scripts" / "check_readme_numbers.py")
crn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crn)
README = (ROOT / "README.md").read_text()


def test_readme_numbers_match_their_sources():
    assert crn.check() == []


def test_readme_has_no_unchecked_number():
    assert crn.unchecked() == []


def test_an_unchecked_number_anywhere_is_reported():
    """Outside the results table too (the Limits and the demo's timing are measured numbers), not in code blocks."""
    extra = crn._flat(README) + " A new limit: it took 4.2 ms more. ```bash\nsleep 3 s\n``` Also 12% slower."
    assert crn.unchecked(extra) == ["4.2 ms", "12%"]


def test_script_exits_0():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_readme_numbers.py")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _drift(printed: str) -> str:
    """A different number printed the same way (last digit moved by 3 units, so no rounding can absorb it)."""
    digits = printed.replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return f"{float(digits) + 3 * 10 ** -decimals + (1 if float(digits) > 50 else 0):.{decimals}f}"


CASES = [(i, j) for i, claim in enumerate(crn.CLAIMS) for j in range(claim[0].count("{}"))]


@pytest.mark.parametrize("claim,number", CASES, ids=[f"claim{i}-n{j}" for i, j in CASES])
def test_every_number_drifting_is_caught(claim, number):
    fragment = crn._flat(crn.CLAIMS[claim][0])
    flat = crn._flat(README)
    m = re.search(crn.NUMBER.join(re.escape(p) for p in fragment.split("{}")), flat)
    a, b = m.span(number + 1)
    drifted = flat[:a] + _drift(m.group(number + 1)) + flat[b:]
    failures = crn.check(drifted, claims=[crn.CLAIMS[claim]])
    assert failures and "README says" in failures[0]


def test_a_vanished_claim_is_reported():
    fragment, *_ = crn.CLAIMS[0]
    flat = crn._flat(README).replace(crn._flat(fragment).split("{}")[0], "")
    assert any("README no longer says" in f for f in crn.check(flat, claims=crn.CLAIMS[:1]))


def test_a_source_without_the_value_is_reported():
    broken = [("**{} µs** vs {} ms", crn.GPU_TREE, crn.at("stage.no_such_field"), None)]
    (failure,) = crn.check(claims=broken)
    assert "cannot read the value" in failure and "no_such_field" in failure


def test_tolerance_is_the_printed_precision():
    assert crn._close("348", 347.99, None) and crn._close("0.35", 0.3496, None)
    assert not crn._close("348", 348.6, None) and not crn._close("0.35", 0.356, None)
    assert crn._close("10,000", 10000, None) and crn._close("5", 5.1, None)
    assert crn._close("100", 101, 0.01) and not crn._close("100", 102, 0.01)


def test_every_ranking_against_ar_is_a_checked_claim():
    """A README sentence that ranks a method against AR (faster, slower, beat) is a claim read from its file: "On a
    CPU every speculative method is slower than AR in tokens/s" stood while the committed demo run had the greedy
    chain faster than AR."""
    flat = crn._flat(re.sub(r"```.*?```", " ", README, flags=re.S))
    claims = [crn.NUMBER.join(re.escape(p) for p in crn._flat(fragment).split("{}")) for fragment, *_ in crn.CLAIMS]
    ranking = [s for s in re.split(r"(?<=[.;])\s+", flat)
               if re.search(r"\bAR\b", s) and re.search(r"\b(faster|slower|beat|beats|beaten)\b", s)]
    assert ranking, "no sentence ranks a method against AR: this test has nothing to hold"
    assert [s for s in ranking if not any(re.search(c, s) for c in claims)] == []


@pytest.mark.parametrize("change", ["chain as slow as ar", "sampled chain as fast as ar"])
def test_the_demo_speed_claims_fail_when_a_run_contradicts_their_words(change):
    """The demo's tok/s claims check the words too: one run where the chain did not beat AR greedy, or a
    speculative method was not slower than AR sampled, is refused, whatever the numbers."""
    import copy
    import json

    docs = [json.loads((ROOT / path).read_text()) for path in crn.DEMO_RUNS]
    assert crn._demo_greedy_vs_ar(*docs) and crn._demo_sampled_below_ar(*docs) == ()  # the committed runs hold
    bad = copy.deepcopy(docs[-1])
    rows = {(r["method"], r["temperature"]): r for r in bad["rows"]}
    if change == "chain as slow as ar":
        rows["chain", 0.0]["tokens_per_s"] = rows["ar", 0.0]["tokens_per_s"]
        reader = crn._demo_greedy_vs_ar
    else:
        rows["chain", 1.0]["tokens_per_s"] = rows["ar", 1.0]["tokens_per_s"]
        reader = crn._demo_sampled_below_ar
    with pytest.raises(LookupError):
        reader(*docs[:-1], bad)
