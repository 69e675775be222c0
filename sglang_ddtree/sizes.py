"""Tree sizes: the budget B, the package's one unit for a tree's size, with its one range check (`check_budget`,
`budget_error`); the verify width n = B + 1 (the tree's slots per request: the root and B nodes), converted here
only and handed to SGLang by the adapters alone (its `speculative_num_draft_tokens`); and the largest trees the
backends build (kernels/tree_constants.h's)."""
from ._build import header_constants

_H = header_constants()
MAX_BUDGET = _H["kMaxBudget"]               # every builder's largest budget (it bounds the B·n² mask memory)
MAX_CUDA_BUDGET = _H["kMaxTreeSlots"] - 1   # the CUDA builder's largest budget (what a server can serve)


def budget_error(budget, maximum: int | None = MAX_BUDGET, minimum: int = 0) -> str | None:
    """The one range check of a tree budget: None where `budget` is an int in [minimum, maximum] (maximum None: no
    upper limit), else what is wrong ("must be <= 1023, got 2000"), for the caller to say under the name its user
    gave it (a parameter, a flag, a variable)."""
    if isinstance(budget, bool) or not isinstance(budget, int):
        return f"must be an int, got {type(budget).__name__}"
    if budget < minimum:
        return f"must be >= {minimum}, got {budget}"
    if maximum is not None and budget > maximum:
        return f"must be <= {maximum}, got {budget}"
    return None


def check_budget(budget, maximum: int | None = MAX_BUDGET, minimum: int = 0, name: str = "budget") -> int:
    """`budget`, or budget_error's answer raised naming `name` (TypeError for a non-int, else
    ValueError)."""
    why = budget_error(budget, maximum, minimum)
    if why is not None:
        raise (TypeError if why.startswith("must be an int") else ValueError)(f"{name} {why}")
    return budget


def verify_width(budget: int) -> int:
    """The tree's slots per request (what SGLang calls speculative_num_draft_tokens) for a budget of B nodes."""
    return int(budget) + 1


def budget_of(width: int) -> int:
    """The budget of a tree of `width` slots (verify_width's inverse)."""
    return int(width) - 1
