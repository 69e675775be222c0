"""Code and docs cite only files inside the repository: every `DESIGN.md §N` names a section that exists in
docs/DESIGN.md, nothing points at design notes kept elsewhere, and the promised LICENSE is there."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (".py", ".md", ".cu", ".cuh", ".cpp", ".h", ".sh", ".toml")
OUTSIDE = ("kernels.md", "../shared", "shared/DESIGN", "/work/", "research/")


def files():
    roots = [ROOT / d for d in ("sglang_ddtree", "kernels", "docs", "scripts", "tests", "examples", "patches")]
    out = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for r in roots:
        out += [p for p in r.rglob("*") if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts]
    return [p for p in out if p.resolve() != Path(__file__).resolve()]


def sections():
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    return set(re.findall(r"^#{2,3} ([0-9]+(?:\.[0-9]+)?)[. ]", text, flags=re.M))


def test_design_sections_cited_exist():
    have = sections()
    assert {"3", "3.5", "4", "5", "6.1", "6.2"} <= have
    bad = []
    for p in files():
        for m in re.finditer(r"DESIGN\.md §([0-9]+(?:\.[0-9]+)?)", p.read_text(errors="replace")):
            if m.group(1) not in have:
                bad.append(f"{p.relative_to(ROOT)}: §{m.group(1)}")
    assert not bad, bad


def test_design_is_cited_by_its_path():
    bad = []
    for p in files():
        rel = str(p.relative_to(ROOT))
        if rel.startswith("docs/"):  # docs/ links to DESIGN.md relatively
            continue
        for m in re.finditer(r"(\S*)DESIGN\.md", p.read_text(errors="replace")):
            if not m.group(1).endswith("docs/"):
                bad.append(f"{rel}: {m.group(0)}")
    assert not bad, bad


def test_nothing_cites_files_outside_the_repository():
    bad = [f"{p.relative_to(ROOT)}: {needle}" for p in files() for needle in OUTSIDE
           if needle in p.read_text(errors="replace")]
    assert not bad, bad


def test_license_is_the_promised_apache_2():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_resolves():
    bad = []
    for page in markdown_pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                bad.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not bad, bad


BENCH = ROOT / "docs" / "benchmarks"


def test_benchmarks_index_lists_every_current_file_and_only_those():
    index = (BENCH / "README.md").read_text()
    linked = {t for t in LINK.findall(index) if "/" not in t.rstrip("/")}
    files = {p.name for p in BENCH.iterdir() if p.is_file() and p.name != "README.md"}
    assert files - linked == set(), f"current results the index does not list: {sorted(files - linked)}"
    assert linked - files == set(), f"the index lists missing files: {sorted(linked - files)}"


def test_archive_is_indexed_and_cited_by_nothing_current():
    archive = BENCH / "archive"
    listed = set(LINK.findall((archive / "README.md").read_text())) - {"../README.md"}
    files = {p.name for p in archive.iterdir() if p.is_file() and p.name != "README.md"}
    assert listed == files, (sorted(files - listed), sorted(listed - files))
    cited = [f"{p.relative_to(ROOT)} cites {name}" for p in files_outside_archive() for name in files
             if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", p.read_text(errors="replace"))]
    assert not cited, cited


def files_outside_archive():
    return [p for p in files() if "archive" not in p.relative_to(ROOT).parts]


# environment variables the code reads that belong to other software (torch's build, CUDA, SGLang, FlashInfer)
FOREIGN_KNOBS = {"CC", "CXX", "PYTORCH_NVCC", "CUDA_HOME", "TORCH_EXTENSIONS_DIR", "SGLANG_PLUGINS",
                 "SGLANG_USE_CPU_ENGINE", "FLASHINFER_WORKSPACE_BASE"}
KNOB_DOCS = ("docs/TESTING.md", "docs/SERVING.md", "scripts/README.md")


def environ_keys(source: str) -> set[str]:
    """The environment variables a Python file reads or sets by a literal name: os.environ.get / [..] / pop,
    os.getenv, monkeypatch.setenv / delenv."""
    import ast

    out = set()
    for n in ast.walk(ast.parse(source)):
        key = None
        if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) and \
                isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "getenv", "setenv", "delenv", "pop") \
                and (getattr(n.func.value, "attr", None) == "environ" or
                     getattr(n.func.value, "id", None) in ("os", "environ", "monkeypatch", "mp")):
            key = n.args[0].value
        elif isinstance(n, ast.Subscript) and getattr(n.value, "attr", None) == "environ" and \
                isinstance(n.slice, ast.Constant):
            key = n.slice.value
        if isinstance(key, str) and key.isupper():
            out.add(key)
    return out


def test_every_environment_knob_the_code_reads_is_documented():
    """A variable the package, the tests or the scripts read (SGLANG_DDTREE_BUILD_VERBOSE, the test-only
    SGLANG_DDTREE_REQUIRE_NVCC, SGLANG_DDTREE_GPU_TREE_CASES, ...) is named in a knob table (TESTING.md's Knobs,
    SERVING.md's settings, scripts/README.md's GPU steps), other software's apart."""
    docs = " ".join((ROOT / f).read_text() for f in KNOB_DOCS)
    read = {}
    for d in ("sglang_ddtree", "tests", "scripts"):
        for path in (ROOT / d).rglob("*.py"):
            for key in environ_keys(path.read_text()) - FOREIGN_KNOBS:
                read.setdefault(key, path.relative_to(ROOT).as_posix())
    assert {"SGLANG_DDTREE_BUILD_VERBOSE", "SGLANG_DDTREE_REQUIRE_NVCC", "SGLANG_DDTREE_GPU_TREE_CASES",
            "SGLANG_DDTREE_GPU_LATTICE_CASES"} <= set(read)  # the scan sees them
    missing = {k: where for k, where in read.items() if f"`{k}`" not in docs and f"`{k}=" not in docs}
    assert not missing, f"environment variables read but named in no knob table ({', '.join(KNOB_DOCS)}): {missing}"
    assert environ_keys('import os\nos.environ.get("A_B", "0")\nos.environ["C"]\nx.get("D")\n') == {"A_B", "C"}
