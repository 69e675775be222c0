"""Everything that differs between the supported SGLang releases, in one place.

0.5.17 (torch 2.11; the release we serve end to end) resolves arguments in `ServerArgs.__post_init__` and
hands hooks the real record; 0.5.23 (latest) resolves them in a pipeline (`resolve_once`) and hands hooks a
stand-in whose writes become declarations. The worker-facing differences are the V2 worker's constructor
(0.5.17 takes `ps: ParallelState`) and `forward_batch_generation` (0.5.23 adds `pp_proxy_tensors`).
Nothing here imports SGLang at module import time.
"""
from __future__ import annotations

import importlib.metadata
import re

SUPPORTED_VERSIONS = ("0.5.17", "0.5.23")


class UnsupportedSGLangVersion(RuntimeError):
    pass


def installed_version() -> str | None:
    """The installed `sglang` distribution version, without importing sglang (None if absent)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def release(version: str) -> str:
    """'0.5.23.post1' / '0.5.23rc0' -> '0.5.23' (patch-level suffixes keep the same internals)."""
    m = re.match(r"^(\d+\.\d+\.\d+)", version or "")
    return m.group(1) if m else (version or "")


def check_version(version: str | None = None) -> str:
    """Return the supported release matching the installed sglang, or raise with what to do."""
    version = installed_version() if version is None else version
    if version is None:
        raise UnsupportedSGLangVersion("sglang is not installed; install one of sglang==" +
                                       " / sglang==".join(SUPPORTED_VERSIONS))
    rel = release(version)
    if rel not in SUPPORTED_VERSIONS:
        raise UnsupportedSGLangVersion(
            f"sglang-ddtree supports sglang {', '.join(SUPPORTED_VERSIONS)}; found sglang {version}. "
            f"The plugin reaches into SGLang's DFlash worker internals, which change between releases: "
            f"install a supported sglang (e.g. `pip install sglang=={SUPPORTED_VERSIONS[-1]}`) or an "
            f"sglang-ddtree release that lists {rel}.")
    return rel


def is_pipeline_resolution(rel: str | None = None) -> bool:
    """True where ServerArgs resolve in the 0.5.23-style pipeline (stand-in records, declarations)."""
    return (rel or check_version()) != "0.5.17"


def read_view(server_args):
    """What a hook should read: the resolving configuration with every declaration so far applied.

    0.5.17 hands hooks the record and keeps pass declarations in an overlay until the end of __post_init__;
    0.5.23 keeps resolved values off the record altogether and hands plugin callbacks a stand-in that
    already reads through them. Writes always go to the object SGLang handed over.
    """
    from sglang.srt.server_args import ServerArgs

    if not isinstance(server_args, ServerArgs):
        return server_args  # 0.5.23 stand-in, a view already, or a test double
    if is_pipeline_resolution():
        from sglang.srt.arg_groups.overrides import resolving_view

        return resolving_view(server_args)
    from sglang.srt.arg_groups.overrides import resolved_view

    return resolved_view(server_args)


def resolved(server_args):
    """Read view of a finished record (0.5.23 keeps resolved values off the record)."""
    return read_view(server_args)


def install_backend_default_hook(choose) -> None:
    """Run `choose(view) -> backend | None` right before SGLang fills the attention-backend default, and
    apply a non-None answer as the attention backend (only when the user gave none)."""
    if is_pipeline_resolution():
        from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view
        from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook

        @register_resolution_hook("handle_attention_backend_compatibility")
        def _ddtree_attention_default(server_args, previous):
            choice = choose(resolving_view(server_args))
            if choice is not None:
                declare_resolution(server_args, "ddtree.attention_backend_default", attention_backend=choice)
            previous(server_args)
        return

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def _before(self, *args, **kwargs):
        choice = choose(self)
        if choice is not None:
            self.attention_backend = choice
        return None

    HookRegistry.register("sglang.srt.server_args.ServerArgs._handle_attention_backend_compatibility",
                          _before, HookType.BEFORE)
    HookRegistry.apply_hooks()


def max_batch_size(server_args) -> int:
    """The largest decode batch the worker can see: --max-running-requests or the largest decode CUDA-graph
    batch, whichever is larger (None fields: graphs off, or the default not filled in)."""
    view = resolved(server_args)
    sizes = [int(getattr(view, "max_running_requests", None) or 1)]
    graphs = getattr(view, "cuda_graph_config", None)
    decode = getattr(graphs, "decode", None) if graphs is not None else None
    sizes += [int(b) for b in (getattr(decode, "bs", None) or [])]
    return max(sizes)


# DFlashDraftInputV2's host-side KV lengths of the next round: renamed between releases (0.5.17 reserved_*,
# 0.5.23 nxt_kv_lens_*); the conformance test checks the installed release has the pair this reads.
DRAFT_KV_LEN_FIELDS = (("reserved_seq_lens_cpu", "reserved_seq_lens_sum"), ("nxt_kv_lens_cpu", "nxt_kv_lens_sum"))


def draft_kv_lens(draft_input):
    """(int64 cpu [bs], int sum) of the draft input's next-round KV lengths, whichever release made it."""
    for cpu, total in DRAFT_KV_LEN_FIELDS:
        if hasattr(draft_input, cpu):
            return getattr(draft_input, cpu), getattr(draft_input, total)
    raise AttributeError(f"{type(draft_input).__name__} has none of {DRAFT_KV_LEN_FIELDS}: an SGLang release "
                         "this plugin does not know")


def worker_init_kwargs(ps=None) -> dict:
    """Extra constructor keywords of DFlashWorkerV2 on this release (0.5.17 takes the parallel state)."""
    return {"ps": ps} if not is_pipeline_resolution() else {}


# Private SGLang symbols the worker uses, by release: (module, attribute). The conformance test imports
# each one and checks the signatures in WORKER_SIGNATURES.
WORKER_SYMBOLS = {
    "common": [
        ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2"),
        ("sglang.srt.speculative.dflash_info", "DFlashVerifyInput"),
        ("sglang.srt.speculative.dflash_info_v2", "DFlashDraftInputV2"),
        ("sglang.srt.speculative.dflash_utils", "resolve_dflash_verify_mask_policy"),
        ("sglang.srt.speculative.dflash_utils", "parse_dflash_draft_config"),
        ("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm"),
        ("sglang.srt.speculative.spec_registry", "CustomSpecAlgo"),
        ("sglang.srt.model_executor.forward_batch_info", "ForwardBatch"),
        ("sglang.srt.model_executor.forward_batch_info", "ForwardMode"),
        ("sglang.srt.model_executor.forward_batch_info", "CaptureHiddenMode"),
        ("sglang.srt.managers.overlap_utils", "FutureMap"),
        ("sglang.srt.plugins", "load_plugins"),
        ("sglang.srt.plugins.hook_registry", "HookRegistry"),
        ("sglang.srt.layers.logits_processor", "LogitsProcessorOutput"),
    ],
    "0.5.17": [
        ("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend"),
        ("sglang.srt.server_args", "ServerArgs"),
    ],
    "0.5.23": [
        ("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend"),
        ("sglang.srt.arg_groups.resolution_hooks", "register_resolution_hook"),
        ("sglang.srt.arg_groups.overrides", "declare_resolution"),
        ("sglang.srt.arg_groups.overrides", "resolving_view"),
    ],
}

# (module, qualified name) -> parameter names the worker relies on, in order (a prefix of the signature).
WORKER_SIGNATURES = {
    "0.5.17": {
        ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2.__init__"):
            ["self", "server_args", "gpu_id", "ps", "nccl_port", "target_worker"],
        ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation"):
            ["self", "batch", "on_publish", "grammar_barrier"],
    },
    "0.5.23": {
        ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation"):
            ["self", "batch", "on_publish", "grammar_barrier", "pp_proxy_tensors"],
    },
    "common": {
        ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc"):
            ["self", "target_hidden", "cache_loc"],
        ("sglang.srt.speculative.dflash_utils", "resolve_dflash_verify_mask_policy"): ["attn_backend"],
        ("sglang.srt.speculative.dflash_info", "DFlashVerifyInput.prepare_for_verify"):
            ["self", "batch", "target_worker"],
    },
}


# Releases whose DFlashWorkerV2 internals the DDTree decode round is written against. 0.5.23 rewrote the
# draft/verify plumbing around KVLocPlan; serving there needs that port (registration and arguments work).
WORKER_RELEASES = ("0.5.17",)


def check_worker_release() -> str:
    rel = check_version()
    if rel not in WORKER_RELEASES:
        raise UnsupportedSGLangVersion(
            f"sglang-ddtree's DDTREE worker runs on sglang {', '.join(WORKER_RELEASES)}; sglang {rel} is supported "
            f"for registration and arguments only in this release (its DFlash worker moved to KVLocPlan). "
            f"Serve with sglang=={WORKER_RELEASES[-1]}.")
    return rel
