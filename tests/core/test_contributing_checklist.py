"""docs/CONTRIBUTING.md's checklists (CHECKLISTS' headings: a new attention library, a new SGLang release, a new
benchmark) name files that exist: every path a checklist quotes (`dir/file.ext`, a folder `dir/`, `Makefile`; a
placeholder such as NAME aside) is in the repository, every `path::name` names a function, class or assignment of
that file, and the files that such a change touches today are all on its list, so a file moved or renamed fails here
until the checklist follows."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# heading -> what that change touches today: each must stay on its checklist
CHECKLISTS = {
    "## A new attention (prefix) library": (
        "sglang_ddtree/attention/prefix_attention.py", "sglang_ddtree/attention/prefixes.py",
        "sglang_ddtree/attention/choose.py", "sglang_ddtree/sglang/backends.py", "docs/DESIGN.md",
        "docs/SERVING.md", "tests/sglang/test_sglang_tree_attention.py", "tests/attention/test_attention_gpu.py",
        "tests/attention/test_prefix_libraries.py"),
    "## A new SGLang release": (
        "sglang_ddtree/sglang/adapters/v0_5_23.py", "sglang_ddtree/sglang/adapters/releases.py",
        "sglang_ddtree/sglang/adapters/dflash_v2.py", "sglang_ddtree/sglang/adapters/registration.py",
        "patches/0.5.23/", "Makefile", "tests/sglang/test_sglang_patches.py", "docs/TESTING.md", "README.md"),
    "## A new benchmark": (
        "sglang_ddtree/bench/__main__.py", "sglang_ddtree/bench/common.py", "sglang_ddtree/_cli.py",
        "tests/core/test_cli.py", "docs/TESTING.md", "scripts/README.md", "docs/benchmarks/README.md",
        "scripts/check_readme_numbers.py", "tests/sglang/bench_round_host.py"),
}
PATH = re.compile(r"`((?:[A-Za-z0-9_.-]+/)+(?:[A-Za-z0-9_.-]+\.[a-z]+)?|Makefile|README\.md)(?:::([A-Za-z0-9_]+))?`")


def checklist(heading: str) -> str:
    text = (ROOT / "docs" / "CONTRIBUTING.md").read_text()
    assert heading in text, f"docs/CONTRIBUTING.md has no section {heading!r}"
    section = text.split(heading, 1)[1]
    return section.split("\n## ", 1)[0]


def quoted(heading: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in PATH.finditer(checklist(heading))]


MIN_ITEMS = {"## A new attention (prefix) library": 6}  # heading -> the fewest items its checklist has (else 5)


@pytest.mark.parametrize("heading", CHECKLISTS)
def test_the_checklist_is_a_list_of_items(heading):
    items = [line for line in checklist(heading).splitlines() if line.startswith("- [ ] ")]
    assert len(items) >= MIN_ITEMS.get(heading, 5), items


@pytest.mark.parametrize("heading", CHECKLISTS)
def test_every_file_on_the_checklist_exists(heading):
    missing = [path for path, _ in quoted(heading) if "NAME" not in path and not (
        (ROOT / path).is_dir() if path.endswith("/") else (ROOT / path).is_file())]
    assert not missing, f"docs/CONTRIBUTING.md's {heading[3:]!r} names files that do not exist: {missing}"


@pytest.mark.parametrize("heading", CHECKLISTS)
def test_every_function_on_the_checklist_is_defined_there(heading):
    missing = [f"{path}::{name}" for path, name in quoted(heading) if name and not re.search(
        rf"^\s*(def {name}\(|class {name}\b|{name}\s*=)", (ROOT / path).read_text(), flags=re.M)]
    assert not missing, f"docs/CONTRIBUTING.md's {heading[3:]!r} names what its files do not define: {missing}"


@pytest.mark.parametrize("heading", CHECKLISTS)
def test_the_checklist_names_what_the_change_touches_today(heading):
    named = {path for path, _ in quoted(heading)}
    assert set(CHECKLISTS[heading]) <= named, sorted(set(CHECKLISTS[heading]) - named)
    assert any("NAME" in path for path in named)  # the new module, folder or file itself


def test_the_path_check_reads_files_folders_and_the_makefile():
    text = "`a/b.py`, `a/b.py::f`, `patches/0.5.23/`, `Makefile`, `x y/z.py`, `$(DEPS)/sgl-NAME sglang==NAME`"
    assert [(m.group(1), m.group(2)) for m in PATH.finditer(text)] == [
        ("a/b.py", None), ("a/b.py", "f"), ("patches/0.5.23/", None), ("Makefile", None)]
