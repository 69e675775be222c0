"""The verify-attention choice of every host, in one vocabulary: the verify `auto | tree | mask` (the tree's
ancestor bitsets through the project's tree attention, or the host's dense-mask attention) and the prefix
`auto | tree | flashmla | flashinfer | fa3` (who attends the committed prefix; our kernel always attends the
tree, merged by LSE). The engine (Engine(attention=, prefix=), tree_verify_attention's `backend`), the server's
binding (sglang/tree_attention.py, which reads SGLang through adapters/target_runner.py) and the launch gate
(sglang/args.py) all call `verify` and `choose`.
"""
from __future__ import annotations

import logging

from . import native, prefixes
from .prefixes import Shape

__all__ = ["Shape", "choose", "verify", "canonical", "auto_order", "VERIFY", "PREFIXES"]

logger = logging.getLogger("sglang_ddtree")

VERIFY = ("auto", "tree", "mask")
PREFIXES = ("auto", *prefixes.LIBRARIES)  # auto, tree, flashmla, flashinfer, fa3
HOSTS = ("engine", "server")
# the earlier spellings, still read (the only place they are mapped): the engine's attention='op' / 'sdpa',
# SGLANG_DDTREE_VERIFY_ATTENTION=full_mask, tree_verify_attention's backend='native'
VERIFY_ALIASES = {"op": "tree", "sdpa": "mask", "full_mask": "mask"}
PREFIX_ALIASES = {"native": "tree"}
# what `auto` runs an MHA/GQA server's prefix through (where it cannot serve: `tree`): the cascade, which a layer's
# timing on the H200 puts well ahead of the whole-prefix kernel at long prefixes and wide trees and a few µs behind
# at short prefixes (docs/benchmarks/h200-2026-12-04-requests-and-cascade.md §3)
AUTO_GQA_PREFIX = "flashinfer"


def canonical(value: str, choices: tuple, aliases: dict, setting: str) -> str:
    """`value` in the one vocabulary (an earlier spelling mapped), or a ValueError naming the setting."""
    value = aliases.get(value, value)
    if value not in choices:
        raise ValueError(f"{setting} must be one of {', '.join(choices)}, got {value!r}")
    return value


def verify(requested: str, why_not: str | None, setting: str) -> bool:
    """True where the round's verify reads the tree's ancestor bitsets through the project's tree attention,
    False where it reads the host's dense-mask attention. requested: 'auto' (the tree attention wherever it can
    serve), 'tree' (required) or 'mask' (earlier spellings: VERIFY_ALIASES); why_not: why the tree attention cannot
    serve this host (None: it can); setting: how the user asked, for the error."""
    requested = canonical(requested, VERIFY, VERIFY_ALIASES, "verify attention")
    if requested == "tree" and why_not is not None:
        raise ValueError(f"{setting}, but the tree attention cannot serve {why_not}")
    return requested != "mask" and why_not is None


def auto_order(shape: Shape, host: str) -> tuple:
    """The libraries `auto` tries, in order (`tree` last, implied). One table, two hosts:

    | shape                         | engine (host-planned, eager)       | server (in CUDA graphs)             |
    |-------------------------------|------------------------------------|-------------------------------------|
    | MHA/GQA, n·G ≤ 64 query rows  | tree                               | fa3 on --attention-backend fa3,     |
    | MHA/GQA, n·G > 64             | flashinfer                         |   then flashinfer (AUTO_GQA_PREFIX) |
    | MLA                           | flashmla, then flashinfer          | flashmla                            |

    Why they differ: the engine's rows come from the op's own timing (docs/benchmarks/attention-notes.md): while a
    request's n·G rows fit one 64-row tile our fused kernel reads the prefix once and beats a cascade; the server's
    from the served layer's timing inside its graphs (AUTO_GQA_PREFIX's note), where the long prefixes and wide
    trees decide. FlashInfer-MLA in the server plans differently (flashinfer_graphs.FlashInferMLAPrefix) and has not
    run on the GPU there: opt-in only. FA3 is tried first where SGLang's fa3 backend serves (its own library)."""
    if host not in HOSTS:
        raise ValueError(f"host must be one of {', '.join(HOSTS)}, got {host!r}")
    if shape.layout == "mla":
        return ("flashmla", "flashinfer") if host == "engine" else ("flashmla",)
    if host == "engine" and shape.rows is not None and shape.rows <= native.ROWS_PER_CTA:
        return ()
    gqa = () if AUTO_GQA_PREFIX == "tree" else (AUTO_GQA_PREFIX,)
    return ("fa3", *gqa) if shape.backend == "fa3" else gqa


def choose(shape: Shape, asked: str = "auto", *, host: str, setting: str = "prefix") -> str:
    """Who attends the prefix of `shape`: `asked` itself where it can serve (else a ValueError naming `setting` and
    why), or for `auto` the first library of `auto_order` that can, else `tree`. On the CPU only `tree` serves (the
    torch path): `auto` is `tree` there."""
    asked = canonical(asked, PREFIXES, PREFIX_ALIASES, setting)
    if asked != "auto":
        why = prefixes.refusal(asked, shape)
        if why is not None:
            raise ValueError(f"{setting}={asked} {why}")
        return asked
    if shape.device != "cuda" or prefixes.refusal("tree", shape) is not None:  # every cascade's tail is the kernel
        return "tree"
    for lib in auto_order(shape, host):
        why = prefixes.refusal(lib, shape)
        if why is None:
            return lib
        logger.info("sglang-ddtree: the prefix not through %s (%s)", lib, why)
    return "tree"
