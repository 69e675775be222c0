"""Status flags and tree sizes are written once, in kernels/tree_constants.h: Python reads them from there, and no
other C++/CUDA source defines them again (a second definition could drift)."""
import re

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
