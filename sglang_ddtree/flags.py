"""Status bits shared by every backend; their values are kernels/tree_constants.h's, so CPU, CUDA and the oracle
cannot drift.

A flag never stops a batch: the request gets a well-defined fallback (root-only tree, or the walk
stopped where the input went bad) and the caller decides what to do with it.
"""
from ._build import header_constants

_H = header_constants()
OK = 0
# a NaN/+inf draft log-prob was seen; the tree is root-only (−inf is a masked token: never emitted)
NONFINITE_INPUT = _H["kFlagNonfiniteInput"]
HEAP_EXHAUSTED = _H["kFlagHeapExhausted"]  # fewer than `budget` nodes exist (k^1 + … + k^L < budget)
# accept walk met an out-of-range / non-increasing link or exceeded the depth limit
MALFORMED_TREE = _H["kFlagMalformedTree"]
# accept walk reached a node whose target logits had no token (NaN / all −inf): bonus −1
NONFINITE_TARGET = _H["kFlagNonfiniteTarget"]
UNSORTED_INPUT = _H["kFlagUnsortedInput"]  # a draft top-k row was not sorted descending; the tree is root-only

NAMES = {NONFINITE_INPUT: "nonfinite_input", HEAP_EXHAUSTED: "heap_exhausted", MALFORMED_TREE: "malformed_tree",
         NONFINITE_TARGET: "nonfinite_target", UNSORTED_INPUT: "unsorted_input"}


def describe(value: int) -> str:
    """Human-readable form of a flags word, e.g. 'heap_exhausted|malformed_tree'."""
    names = [name for bit, name in NAMES.items() if value & bit]
    return "|".join(names) if names else "ok"
