"""Tree sizes: the budget B and the verify width n = B + 1 (the tree's slots per request: the root and B
nodes), converted here only, and the largest trees the backends build (kernels/tree_constants.h's)."""
from ._build import header_constants

_H = header_constants()
MAX_BUDGET = _H["kMaxBudget"]               # every builder's largest budget (it bounds the B·n² mask memory)
MAX_CUDA_BUDGET = _H["kMaxTreeSlots"] - 1   # the CUDA builder's largest budget (what a server can serve)


def verify_width(budget: int) -> int:
    """The tree's slots per request (what SGLang calls speculative_num_draft_tokens) for a budget of B nodes."""
    return int(budget) + 1


def budget_of(width: int) -> int:
    """The budget of a tree of `width` slots (verify_width's inverse)."""
    return int(width) - 1
