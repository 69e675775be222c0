"""Run-time fixes to SGLang internals, applied only in a DDTREE scheduler process (by the worker, through
the release's adapter, which hands over the SGLang objects patched: this module imports no SGLang). An adapter
module: the patched functions read SGLang's objects.

1. Verify mask policy (only for the FULL_MASK fallback; the default verify path is tree_attention.py, which
   reads no mask). SGLang captures DFlash-family TARGET_VERIFY CUDA graphs *without* a custom mask on
   flashinfer, fa3 and triton (`dflash_utils.resolve_dflash_verify_mask_policy`: DFLASH's chain is causal).
   Graphs captured that way ignore a tree mask at replay, so a FULL_MASK verify would silently attend to
   sibling branches. The patch makes the policy answer "build the custom mask" for the target runner (the
   caller already leaves the draft runner mask-free). patches/*/0002 is the same change as an upstream diff.
2. Eager input embeddings in the model's dtype. `ModelRunner._extend_forward_kwargs` casts
   `forward_batch.input_embeds` to bfloat16 whatever the model's dtype, so a float16 drafter run eagerly
   (graphs off, or a batch above the largest graph) fails in its first projection ("expected mat1 and mat2
   to have the same dtype"); DFLASH hits it too. The fix casts to the runner's dtype instead (no upstream diff
   in patches/ yet).
3. A seeded request's first token. SGLang's prefill sampler draws it from torch's generator, seeded per request
   only under --enable-deterministic-inference; the target's Sampler instance is wrapped so that a request with a
   `sampling_seed` draws it from its own Philox stream under its own law (seeded_prefill.py says how).
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


def install_verify_mask_policy(dflash_utils) -> None:
    """Idempotent. Safe only where the server's algorithm is DDTREE (the worker is the only caller);
    `dflash_utils` is SGLang's module, handed over by the release's adapter."""
    current = dflash_utils.resolve_dflash_verify_mask_policy
    if getattr(current, "ddtree_original", None) is not None:
        return
    dflash_utils.resolve_dflash_verify_mask_policy = _always_mask(current)
    logger.info("sglang-ddtree: DFlash-family verify graphs will be captured with the tree mask")


def _embeds_in_runner_dtype(original):
    def _extend_forward_kwargs(self, forward_batch, pp_proxy_tensors):
        kwargs = original(self, forward_batch, pp_proxy_tensors)
        embeds = kwargs.get("input_embeds")
        if embeds is not None and forward_batch.input_embeds is not None and embeds.dtype != self.dtype:
            kwargs["input_embeds"] = forward_batch.input_embeds.to(self.dtype)
        return kwargs

    _extend_forward_kwargs.ddtree_original = original
    return _extend_forward_kwargs


def install_eager_embeds_dtype_fix(model_runner_cls) -> None:
    """Idempotent (see the module docstring, item 2); `model_runner_cls` is SGLang's ModelRunner."""
    current = model_runner_cls._extend_forward_kwargs
    if getattr(current, "ddtree_original", None) is not None:
        return
    model_runner_cls._extend_forward_kwargs = _embeds_in_runner_dtype(current)


def install_seeded_prefill(sampler, round_ops, law_of):
    """Idempotent (see the module docstring, item 3): the seeded_prefill.SeededSampler wrapping `sampler`, SGLang's
    Sampler instance of the target's model runner, handed over by the release's adapter with `law_of(sampling_info)`
    (its requests' NodeLaw)."""
    from ..seeded_prefill import SeededSampler

    existing = getattr(sampler, "ddtree_seeded", None)
    return existing if existing is not None else SeededSampler(sampler, round_ops, law_of)
