"""The prefix libraries of the verify cascade, one module each (native.py as `tree`, flashmla.py, flashinfer.py,
fa3.py), registered in LIBRARIES by name; the one answer to "can library X serve this shape?" (`refusal`), which
the engine, the server's binding and the launch gate all ask (choose.py); and each library's object (`served` for
the server, `run` for the engine).

Each library module declares NAME, TITLE, LAYOUTS, HEAD_DIMS (MHA/GQA, keys = values), PAGE_SIZES (None: any),
BACKENDS (the SGLang attention backends whose metadata it reads in a server; None: any), MISSING / INSTALL (for
the user), `installed()` (checked without importing the library) and PREFIX, its one object
(prefix_attention.PrefixAttention): `plan` / `run` in the server's CUDA graphs, `plan_host` / `run_host` in the
engine's eager cascade (prefix_attention.py: why two). A new library: docs/CONTRIBUTING.md's checklist.
"""
from __future__ import annotations

import dataclasses

import torch

from . import fa3, flashinfer, flashmla, native
from .prefix_attention import PrefixAttention, Target, Unavailable
from .problem import Problem

LIBRARIES = {m.NAME: m for m in (native, flashmla, flashinfer, fa3)}
KERNEL_DTYPES = native.DTYPES


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the choice reads of a verify: plain values, known at launch (from the flags and the HF config) or at
    the call (from the tensors); None is unknown, and an unknown is not refused."""

    layout: str                      # "gqa" | "mla"
    head_dim: int | None = None      # keys (MLA: latent + rope, 576)
    v_dim: int | None = None         # values (MLA: the latent, 512)
    page_size: int = 1
    device: str = "cuda"
    dtype: torch.dtype | None = None
    rows: int | None = None          # query rows of one request in one KV head's tile: n · (Hq / Hkv)
    backend: str | None = None       # a server's --attention-backend serving TARGET_VERIFY; None off SGLang

    @classmethod
    def of(cls, prob: Problem, backend: str | None = None) -> "Shape":
        return cls(prob.layout, prob.Dqk, prob.Dv, prob.page_size, prob.q_a.device.type, prob.dtype,
                   prob.n * prob.G, backend)


def installed(name: str) -> bool:
    return LIBRARIES[name].installed()


def refusal(name: str, shape: Shape) -> str | None:
    """Why library `name` cannot take the prefix of `shape` (a phrase that follows the setting: "fa3 for an MLA
    target (...)"), or None. `tree` on the CPU is the torch path, which takes any shape."""
    lib, mla = LIBRARIES[name], shape.layout == "mla"
    if shape.device != "cuda":
        return None if name == "tree" else "on the CPU (the prefix libraries are CUDA kernels)"
    if shape.layout not in lib.LAYOUTS:
        wired = " and ".join("MLA" if x == "mla" else "MHA/GQA" for x in lib.LAYOUTS)
        return f"for {'an MLA' if mla else 'an MHA/GQA'} target (the {lib.TITLE} prefix is wired for {wired} targets)"
    d, dv = shape.head_dim, shape.v_dim
    if mla and d is not None and (d, dv) != (native.MLA_LATENT + native.MLA_ROPE, native.MLA_LATENT):
        return (f"for an MLA target of head dims {d}/{dv} ({lib.TITLE} takes latent {native.MLA_LATENT} + rope "
                f"{native.MLA_ROPE})")
    if not mla and d is not None and (d not in lib.HEAD_DIMS or (dv is not None and dv != d)):
        dims = ", ".join(map(str, lib.HEAD_DIMS))
        if dv is not None and dv != d:
            return f"for head dims {d}/{dv} ({lib.TITLE} takes equal key and value head dims in {dims})"
        return f"for a target of head dim {d} ({lib.TITLE} takes head dims {dims})"
    if lib.BACKENDS is not None and shape.backend is not None and shape.backend not in lib.BACKENDS:
        return (f"on --attention-backend {shape.backend} ({lib.TITLE} reads the prefix through the page tables of "
                f"--attention-backend {' / '.join(lib.BACKENDS)})")
    if lib.PAGE_SIZES is not None and shape.page_size not in lib.PAGE_SIZES:
        return f"at page size {shape.page_size} ({lib.TITLE} reads pages of {', '.join(map(str, lib.PAGE_SIZES))})"
    if shape.dtype is not None and shape.dtype not in KERNEL_DTYPES:
        return f"for {shape.dtype} (the CUDA kernels take bf16 / fp16)"
    if not installed(name):
        return f"without {lib.MISSING}"
    return None


def served(name: str, target: Target) -> PrefixAttention:
    """Library `name`'s object for a served verify of `target` (sglang/tree_attention.py), its buffers allocated
    (prefix_attention.Unavailable: it cannot plan there, and why)."""
    return LIBRARIES[name].PREFIX(target)


def run(name: str, prob: Problem, state: dict):
    """(O_p, LSE_p, base) of library `name` over the prefix (the engine's host-planned cascade)."""
    return LIBRARIES[name].PREFIX.run_host(prob, state)
