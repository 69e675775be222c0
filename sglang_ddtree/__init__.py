"""sglang-ddtree: DDTree (Diffusion Draft Tree) speculative decoding for SGLang.

The public API is imported lazily so that `import sglang_ddtree` (e.g. by SGLang's plugin loader in every
process) stays cheap; `from sglang_ddtree import build_tree` loads torch and the op schemas.
"""
__version__ = "0.1.0"

_EXPORTS = {
    "TreeBatch": "tree", "build_tree": "tree", "build_tree_from_topk": "tree",
    "build_tree_from_lattice": "tree", "build_tree_from_lattice_rows": "tree",
    "AcceptResult": "accept", "accept_tree": "accept", "sample_node_tokens": "sampling",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'sglang_ddtree' has no attribute {name!r}")
