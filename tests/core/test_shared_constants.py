"""Status flags and tree sizes are written once, in kernels/tree_constants.h: Python reads them from there, and no
other C++/CUDA source defines them again (a second definition could drift)."""
import re
from pathlib import Path

from sglang_ddtree import _build, flags, sizes

H = _build.header_constants()


def test_python_reads_the_header():
    assert (flags.NONFINITE_INPUT, flags.HEAP_EXHAUSTED, flags.MALFORMED_TREE, flags.NONFINITE_TARGET,
            flags.UNSORTED_INPUT) == (H["kFlagNonfiniteInput"], H["kFlagHeapExhausted"], H["kFlagMalformedTree"],
                                      H["kFlagNonfiniteTarget"], H["kFlagUnsortedInput"])
    assert len(set(flags.NAMES)) == 5 and all(bit & (bit - 1) == 0 for bit in flags.NAMES)  # distinct bits
    assert sizes.MAX_CUDA_BUDGET == H["kMaxTreeSlots"] - 1 and sizes.MAX_BUDGET == H["kMaxBudget"]
    assert sizes.verify_width(sizes.budget_of(17)) == 17


def test_no_other_source_defines_a_shared_constant():
    kdir = _build.kernels_dir()
    names = "|".join(H)
    for path in [*kdir.rglob("*.cu"), *kdir.rglob("*.cuh"), *kdir.rglob("*.h"), *kdir.rglob("*.cpp")]:
        if path.name == "tree_constants.h":
            continue
        text = path.read_text()
        assert not re.search(rf"constexpr\s+\w+\s+({names})\s*=", text), path
        flag = r"constexpr\s+int32_t\s+k\w*(Flag|Nonfinite|Exhausted|Malformed|Unsorted)\w*\s*="
        assert not re.search(flag, text), path
        assert not re.search(r"\b4096\b", text) or path.suffix == ".cu", path  # the node limit is kMaxNodes


def test_the_drawn_trees_streams_and_the_temperature_floor_are_the_kernels():
    """rejection.py reads its Philox streams from kernels/law_rule.h; sampling.MIN_TEMPERATURE is its kMinTemperature
    (a float the header reader does not parse: compared here, so the two cannot drift)."""
    from sglang_ddtree import rejection, sampling

    L = _build.header_constants("law_rule.h")
    assert (rejection.ACCEPT_STREAM, rejection.BONUS_STREAM, rejection.DRAW_STREAM) == (2 << 24, 3 << 24, 4 << 24)
    assert rejection.ACCEPT_STREAM == L["kAcceptStream"] and rejection.DRAW_STREAM == L["kDrawStream"]
    text = (_build.kernels_dir() / "law_rule.h").read_text()
    floor = float(re.search(r"kMinTemperature\s*=\s*([0-9.e+-]+)f", text).group(1))
    assert floor == sampling.MIN_TEMPERATURE


def test_one_range_check_of_a_budget():
    """sizes.budget_error is the budget's one range check: the builders, the truncation, the engine's arguments and
    the server's flags all ask it (each raising it under its own argument's name)."""
    import pytest

    assert sizes.budget_error(0) is None and sizes.budget_error(sizes.MAX_BUDGET) is None
    assert sizes.budget_error(sizes.MAX_BUDGET + 1) == f"must be <= {sizes.MAX_BUDGET}, got {sizes.MAX_BUDGET + 1}"
    assert sizes.budget_error(0, minimum=1) == "must be >= 1, got 0" and sizes.budget_error(10**9, None) is None
    assert sizes.budget_error(2.5).startswith("must be an int") and sizes.budget_error(True).startswith("must be")
    assert sizes.check_budget(31) == 31
    with pytest.raises(ValueError, match="auto_budgets must be <= 4, got 5"):
        sizes.check_budget(5, maximum=4, name="auto_budgets")
    with pytest.raises(TypeError, match="budget must be an int"):
        sizes.check_budget("8")
    pkg = Path(sizes.__file__).parent
    for path in pkg.rglob("*.py"):  # no module compares a budget against a limit of its own
        text = path.read_text()
        assert not re.search(r"budget\s*[<>]=?\s*(MAX_BUDGET|MAX_CUDA_BUDGET)\b", text), path
        assert "minimum=0, maximum=MAX_BUDGET" not in text, path
