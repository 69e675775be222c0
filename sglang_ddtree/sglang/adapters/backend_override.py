"""The tree kernel's hold on the target's attention backend: five methods of the live backend instance are routed
to the tree-verify path (tree_attention.TreeVerifyAttention), which hands every mode but TARGET_VERIFY back to
the originals.

Why a swap on the one instance, not a wrapper or SGLang's attention registry (both releases have
`register_attention_backend`): the registry builds a backend by its --attention-backend name when the model runner
starts, before the worker knows whether the tree kernel can serve this target (it falls back to SGLang's FULL_MASK
path when not), and would add a backend name users see; a wrapper in place of `model_runner.attn_backend` fails
SGLang's isinstance checks on the backend's class (e.g. models testing for TritonAttnBackend). The backend's class
and every other instance stay SGLang's.
"""
from __future__ import annotations

METHODS = ("init_forward_metadata", "init_forward_metadata_out_graph", "init_forward_metadata_in_graph",
           "init_cuda_graph_state", "forward_extend")
HYBRID = "HybridAttnBackend"


def verify_backend(attn_backend):
    """The backend instance that serves TARGET_VERIFY: the runner's own or, inside SGLang's HybridAttnBackend
    (--prefill-attention-backend / --decode-attention-backend), the one its `_select_backend` routes TARGET_VERIFY
    to: the decode backend under --speculative-attention-mode decode, else the prefill backend. The hybrid calls
    that instance's methods for every TARGET_VERIFY step, so routing them routes the hybrid's too."""
    if type(attn_backend).__name__ == HYBRID:
        return attn_backend.decode_backend if attn_backend.spec_attn_is_decode else attn_backend.prefill_backend
    return attn_backend


def route_target_verify(backend, impl) -> dict:
    """Route each of METHODS of `backend` to `impl._<name>`; returns the originals by name."""
    originals = {name: getattr(backend, name) for name in METHODS}
    for name in METHODS:
        setattr(backend, name, getattr(impl, "_" + name))
    backend.ddtree_tree_attention = impl
    return originals
