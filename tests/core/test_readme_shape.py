"""The README is a front door: short, the two commands first, a small results table whose every row names its
baseline (and, for served speed, the backend), limits that say where DDTree loses, and no install instruction for a
package that is not published."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_is_a_front_door():
    """At most 1,500 words (code blocks included), the sections a new user looks for, and the two commands first."""
    words = len(README.split())
    assert words <= 1500, f"README has {words} words"
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    for needed in ("Try it", "Serve it", "Requests", "Results", "Limits", "Documentation"):
        assert needed in headings, headings
    assert headings.index("Try it") == 0


def _results_rows():
    section = README.split("## Results", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows[2:]]  # past the header and its rule


def test_results_table_is_short_and_every_row_names_its_baseline_and_file():
    rows = _results_rows()
    assert 1 <= len(rows) <= 8, len(rows)
    for row in rows:
        assert len(row) == 4, row
        assert all(len(cell) <= 200 for cell in row), [len(c) for c in row]
        what, against, result, files = row
        assert against and result and "docs/benchmarks/" in files, row
        if "Served speed" in what:  # every served speed claim names the DFLASH backend it was measured against
            assert re.search(r"DFLASH on (triton|flashinfer|fa3)", against), row


def test_limits_say_where_ddtree_loses():
    limits = README.split("## Limits", 1)[1].split("\n## ", 1)[0]
    assert "At long context DDTree's default loses to DFLASH on flashinfer" in limits
    assert "at c=16 it lost" in limits
    assert "Where DDTree loses" in limits


def test_examples_install_from_the_checkout():
    """sglang-ddtree is not on PyPI: no instruction may tell a user to pip install it by name."""
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*")]:
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not re.search(r"pip install[^\n]*\bsglang-ddtree\b", text), path
