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
