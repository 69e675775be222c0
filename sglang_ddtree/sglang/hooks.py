"""Run-time fixes to SGLang internals, applied only in a DDTREE scheduler process (from the worker factory).

SGLang captures DFlash-family TARGET_VERIFY CUDA graphs *without* a custom mask on flashinfer, fa3 and
triton (`dflash_utils.resolve_dflash_verify_mask_policy`: DFLASH's chain is causal). Graphs captured that
way ignore a tree mask at replay, so DDTree's verify would silently attend to sibling branches. The patch
makes the policy answer "build the custom mask" for the target runner (the caller already leaves the draft
runner mask-free). patches/0002 is the same change as an upstream diff.
"""
from __future__ import annotations

import logging

logger = logging.getLogger("sglang_ddtree")


def _always_mask(original):
    def resolve_dflash_verify_mask_policy(attn_backend):
        backend_name, _ = original(attn_backend)
        return backend_name, True

    resolve_dflash_verify_mask_policy.ddtree_original = original
    return resolve_dflash_verify_mask_policy


def install_verify_mask_policy() -> None:
    """Idempotent. Safe only where the server's algorithm is DDTREE (the factory is the only caller)."""
    from sglang.srt.speculative import dflash_utils

    current = dflash_utils.resolve_dflash_verify_mask_policy
    if getattr(current, "ddtree_original", None) is not None:
        return
    dflash_utils.resolve_dflash_verify_mask_policy = _always_mask(current)
    logger.info("sglang-ddtree: DFlash-family verify graphs will be captured with the tree mask")
