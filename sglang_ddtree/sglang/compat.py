"""Everything that differs between the supported SGLang releases, in one place.

0.5.17 (torch 2.11; the release we serve end to end) resolves arguments in `ServerArgs.__post_init__` and
hands hooks the real record; 0.5.23 (latest) resolves them in a pipeline (`resolve_once`) and hands hooks a
stand-in whose writes become declarations. The worker-facing differences live in the release adapters
(adapters/v0_5_17.py, adapters/v0_5_23.py). Nothing here imports SGLang at module import time.
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


def serving_view():
    """The running server's resolved arguments (None before SGLang publishes them in this process)."""
    from sglang.srt.runtime_context import get_server_args

    try:
        return resolved(get_server_args())
    except ValueError:  # "Global server args is not set yet!"
        return None


def install_request_hooks(is_ddtree, refusal, row_headroom) -> None:
    """Through SGLang's plugin hook registry, in a DDTREE server only (is_ddtree(view)): the scheduler's
    DFlash-family request check answers `refusal(req)` (requests.py), and the req_to_token row headroom
    becomes `row_headroom(SGLang's, verify width, page size)`. 0.5.17 hands the headroom function the server
    arguments; 0.5.23 reads them from its runtime context."""
    import importlib
    import logging

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:  # a process that cannot import the scheduler (a tool without SGLang's GPU dependencies) admits no request
        for module in (REQUEST_CHECK[0], ROW_HEADROOM[0]):
            importlib.import_module(module)
    except ImportError as e:
        logging.getLogger("sglang_ddtree").warning("sglang-ddtree: request hooks not installed in this process (%s)", e)
        return

    def check(original, req, *args, **kwargs):
        view = serving_view()
        return refusal(req) if view is not None and is_ddtree(view) else original(req, *args, **kwargs)

    def headroom(extra, *args, **kwargs):
        view = resolved(args[0]) if args else serving_view()
        if view is None or not is_ddtree(view):
            return None  # SGLang's own
        return row_headroom(extra, int(view.speculative_num_draft_tokens), int(getattr(view, "page_size", 1) or 1))

    HookRegistry.register(f"{REQUEST_CHECK[0]}.{REQUEST_CHECK[1]}", check, HookType.AROUND)
    HookRegistry.register(f"{ROW_HEADROOM[0]}.{ROW_HEADROOM[1]}", headroom, HookType.AFTER)
    HookRegistry.apply_hooks()


# where the scheduler looks up its DFlash-family request check, and the KV configurator its row headroom
REQUEST_CHECK = ("sglang.srt.managers.scheduler", "validate_dflash_request")
ROW_HEADROOM = ("sglang.srt.mem_cache.kv_cache_configurator", "get_req_to_token_extra_context_len")


def max_batch_size(server_args) -> int:
    """The largest decode batch the worker can see: --max-running-requests or the largest decode CUDA-graph
    batch, whichever is larger (None fields: graphs off, or the default not filled in)."""
    view = resolved(server_args)
    sizes = [int(getattr(view, "max_running_requests", None) or 1)]
    graphs = getattr(view, "cuda_graph_config", None)
    decode = getattr(graphs, "decode", None) if graphs is not None else None
    sizes += [int(b) for b in (getattr(decode, "bs", None) or [])]
    return max(sizes)


# SGLang symbols registration and argument resolution use (plugin.py, spec_algo.py, args.py, this module),
# by release: (module, attribute); the conformance test imports each. The worker's are the adapters' own
# (adapters/need.py), checked as each adapter loads.
REGISTRATION_SYMBOLS = {
    "common": [
        ("sglang.srt.speculative.dflash_utils", "parse_dflash_draft_config"),
        ("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm"),
        ("sglang.srt.speculative.spec_registry", "CustomSpecAlgo"),
        ("sglang.srt.speculative.spec_registry", "get_spec"),
        ("sglang.srt.runtime_context", "get_spec"),
        ("sglang.srt.managers.overlap_utils", "FutureMap"),
        ("sglang.srt.plugins", "load_plugins"),
        ("sglang.srt.plugins.hook_registry", "HookRegistry"),
        ("sglang.srt.utils.hf_transformers_utils", "get_config"),
        ("sglang.srt.runtime_context", "get_server_args"),
        REQUEST_CHECK,
        ROW_HEADROOM,
    ],
    "0.5.17": [
        ("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend"),
        ("sglang.srt.server_args", "ServerArgs"),
        ("sglang.srt.arg_groups.overrides", "resolved_view"),
    ],
    "0.5.23": [
        ("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend"),
        ("sglang.srt.arg_groups.resolution_hooks", "register_resolution_hook"),
        ("sglang.srt.arg_groups.overrides", "declare_resolution"),
        ("sglang.srt.arg_groups.overrides", "resolving_view"),
    ],
}
