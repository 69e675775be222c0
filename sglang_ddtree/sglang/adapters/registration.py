"""SGLang as registration and argument resolution see it: the algorithm registry, the plugin loader, the hook
registry, the server-argument views, the HF config reader. Every symbol comes through `need` (need.py), looked up
when a function first runs, so importing this module imports no SGLang (`--help` works without it).

A release without `pipeline_resolution` (releases.CAPABILITIES; 0.5.17) resolves arguments in `ServerArgs.__post_init__`
and hands hooks the real record; one with it (0.5.23) resolves them in a pipeline (`resolve_once`) and hands hooks a
stand-in whose writes become declarations.
"""
from __future__ import annotations

import dataclasses
import functools
import logging

from sglang_ddtree.sizes import budget_of, verify_width

from . import releases
from .need import MissingSGLangSymbol, Needs

# where the scheduler looks up its DFlash-family request check, the tokenizer its check of one request, and the KV
# configurator its row headroom
REQUEST_CHECK = ("sglang.srt.managers.scheduler", "validate_dflash_request")
TOKENIZER_CHECK = ("sglang.srt.managers.tokenizer_manager", "TokenizerManager._validate_one_request")
TOKENIZER_ENTRY = ("sglang.srt.managers.tokenizer_manager", "TokenizerManager.generate_request")
ROW_HEADROOM = ("sglang.srt.mem_cache.kv_cache_configurator", "get_req_to_token_extra_context_len")


@functools.cache
def _needs() -> Needs:
    return Needs(releases.check_version())


@functools.cache
def need(module: str, qualname: str, params: tuple = ()):
    """The symbol, resolved and checked once per process (hooks ask for theirs on every request)."""
    return _needs()(module, qualname, params)


def probe(*modules: str) -> None:
    """Import SGLang's server side (its plugin loader, and `modules`); raises the ImportError SGLang raised, which
    launch_server and check explain."""
    try:
        for module in ("sglang.srt.plugins", *modules):
            _needs().module(module)
    except MissingSGLangSymbol as e:
        raise e.__cause__ from None


# --- the algorithm registry ----------------------------------------------------------------------------------
def spec_base():
    """SGLang's CustomSpecAlgo, the base of the plugin's algorithm class; the runtime context its block size is read
    from is resolved with it, so a moved runtime_context fails at registration, not in the scheduler."""
    need("sglang.srt.runtime_context", "get_spec")
    return need("sglang.srt.speculative.spec_registry", "CustomSpecAlgo")


def name_is_reserved(name: str, spec_class, algorithms=None, get_spec=None) -> bool:
    """True if SGLang already has `name` as a builtin algorithm or another plugin's registration."""
    algorithms = algorithms or need("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm")
    get_spec = get_spec or need("sglang.srt.speculative.spec_registry", "get_spec")
    if name.upper() in getattr(algorithms, "__members__", {}):
        return True
    spec = get_spec(name)
    return spec is not None and not isinstance(spec, spec_class)


def is_registered(name: str, spec_class) -> bool:
    return isinstance(need("sglang.srt.speculative.spec_registry", "get_spec")(name), spec_class)


def register_algorithm(name: str, spec_class, validate_server_args, factory) -> None:
    algorithms = need("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm")
    algorithms.register(name, supports_overlap=True, validate_server_args=validate_server_args,
                        spec_class=spec_class)(factory)


def resolve_algorithm(name: str):
    """SGLang's answer for `--speculative-algorithm name` (ValueError if it does not know it)."""
    return need("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm").from_string(name)


def load_plugins() -> None:
    """SGLang's own plugin loader, the call launch_server makes."""
    need("sglang.srt.plugins", "load_plugins")()


def published_block_size():
    """The drafter block size the scheduler's runtime context holds (ValueError before it is published)."""
    return need("sglang.srt.runtime_context", "get_spec")().speculative_dflash_block_size


def future_map(*args):
    return need("sglang.srt.managers.overlap_utils", "FutureMap")(*args)


# --- server arguments ------------------------------------------------------------------------------------------
def read_view(server_args):
    """What a hook should read: the resolving configuration with every declaration so far applied.

    Without pipeline resolution (0.5.17) SGLang hands hooks the record and keeps pass declarations in an overlay
    until the end of __post_init__; with it (0.5.23) it keeps resolved values off the record altogether and hands
    plugin callbacks a stand-in that already reads through them. Writes always go to the object SGLang handed over.
    """
    if not isinstance(server_args, need("sglang.srt.server_args", "ServerArgs")):
        return server_args  # a pipeline's stand-in, a view already, or a test double
    if releases.supports("pipeline_resolution"):
        return need("sglang.srt.arg_groups.overrides", "resolving_view")(server_args)
    return need("sglang.srt.arg_groups.overrides", "resolved_view")(server_args)


# --- the tree budget as SGLang carries it ---------------------------------------------------------------------
# SGLang has no field for a tree budget: it reads the tree's verify width B + 1 from speculative_num_draft_tokens
# (every attention backend sizes TARGET_VERIFY by it). The package's unit is the budget B; these four are where it
# meets SGLang's field.
def flag_budget(view) -> int | None:
    """The budget --speculative-num-draft-tokens gives (its value − 1), None where it was not given."""
    width = getattr(view, "speculative_num_draft_tokens", None)
    return None if width is None else budget_of(width)


def draft_tokens(budget: int) -> int:
    """--speculative-num-draft-tokens' value for a budget (the verify width B + 1): what SGLang reads, what a
    message about the flag names."""
    return verify_width(budget)


def set_budget(server_args, budget: int) -> None:
    """The budget onto SGLang's field, as its verify width."""
    server_args.speculative_num_draft_tokens = draft_tokens(budget)


def write_args(server_args, **fields) -> None:
    """Server arguments onto the object SGLang handed the hook (read_view: writes always go there)."""
    for name, value in fields.items():
        setattr(server_args, name, value)


def served_budget(server_args) -> int:
    """The budget the resolved server arguments carry."""
    return budget_of(read_view(server_args).speculative_num_draft_tokens)


@dataclasses.dataclass(frozen=True)
class RoundArgs:
    """What the decode round reads of the resolved server arguments (round_args)."""

    budget: int             # the tree budget the server verifies (served_budget)
    block_size: int         # the drafter's block (speculative_dflash_block_size, which args.py published)
    seed: int               # --random-seed (0 where unset)
    draft_model_path: str   # the drafter's directory or hub name
    tp_size: int            # tensor-parallel ranks
    max_batch_size: int     # the largest decode batch the worker sees (max_batch_size)


def round_args(server_args) -> RoundArgs:
    view = read_view(server_args)
    return RoundArgs(budget=served_budget(view), block_size=int(view.speculative_dflash_block_size),
                     seed=int(getattr(view, "random_seed", 0) or 0), draft_model_path=view.speculative_draft_model_path,
                     tp_size=int(getattr(view, "tp_size", 1) or 1), max_batch_size=max_batch_size(view))


def serving_view():
    """The running server's resolved arguments (None before SGLang publishes them in this process)."""
    try:
        return read_view(need("sglang.srt.runtime_context", "get_server_args")())
    except ValueError:  # "Global server args is not set yet!"
        return None


def max_batch_size(server_args) -> int:
    """The largest decode batch the worker can see: --max-running-requests or the largest decode CUDA-graph
    batch, whichever is larger (None fields: graphs off, or the default not filled in)."""
    view = read_view(server_args)
    sizes = [int(getattr(view, "max_running_requests", None) or 1)]
    graphs = getattr(view, "cuda_graph_config", None)
    decode = getattr(graphs, "decode", None) if graphs is not None else None
    sizes += [int(b) for b in (getattr(decode, "bs", None) or [])]
    return max(sizes)


def hf_config(path, trust_remote_code: bool, revision=None):
    return need("sglang.srt.utils.hf_transformers_utils", "get_config")(
        path, trust_remote_code=trust_remote_code, revision=revision)


def dflash_block_size_reader():
    """`read(hf_config) -> block size | None`, as SGLang's DFlash reads a drafter's config."""
    parse = need("sglang.srt.speculative.dflash_utils", "parse_dflash_draft_config", ("draft_hf_config",))
    return lambda cfg: parse(draft_hf_config=cfg).resolve_block_size(default=None)


def resolve_draft_attention_backend(server_args) -> None:
    need("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend")(server_args)


# --- the CPU engine --------------------------------------------------------------------------------------------
# sgl_kernel's CPU ops SGLang's CPU path calls for a DFlash-family server (KV row copies, req_to_token writes and
# reads, draft cache locations, bonus tokens, accepted cache locations); no PyPI wheel carries them
CPU_KERNEL_OPS = ("copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu",
                  "assign_draft_cache_locs_contiguous_cpu", "fill_bonus_tokens_cpu", "fill_accept_out_cache_loc_cpu")


def cpu_overlap_supported() -> bool:
    """Whether this release's overlap scheduler runs on the CPU (releases' `cpu_overlap`): 0.5.17's records CUDA
    streams on the speculative inputs it resolves (`Tensor.record_stream` fails on a CPU tensor); 0.5.23's does not."""
    return releases.supports("cpu_overlap")


def cpu_serving_gaps(environ=None) -> list[str]:
    """What this process lacks for SGLang's CPU engine to serve a DFlash-family algorithm ([]: nothing), each in
    words a user can act on. Checked at argument validation, before any model loads."""
    import os

    environ = os.environ if environ is None else environ
    gaps = []
    if environ.get("SGLANG_USE_CPU_ENGINE", "0") != "1":
        gaps.append("SGLANG_USE_CPU_ENGINE=1 in the environment (SGLang's CPU engine)")
    try:
        kernel = _needs().module("sgl_kernel")
    except Exception as e:  # noqa: BLE001 — absent, or a CUDA build that cannot load here
        cause = e.__cause__ or e
        gaps.append(f"an importable sgl_kernel with its CPU ops ({type(cause).__name__}: {cause})")
    else:
        missing = [name for name in CPU_KERNEL_OPS if not callable(getattr(kernel, name, None))]
        if missing:
            gaps.append(f"sgl_kernel's CPU ops {', '.join(missing)}")
    return gaps


# --- hooks -----------------------------------------------------------------------------------------------------
def install_backend_default_hook(choose) -> None:
    """Run `choose(view) -> {field: value} | None` right before SGLang fills the attention-backend default, and
    apply a non-None answer's fields (the attention backends, the speculative attention mode, the drafter's
    backend: only when the user gave no --attention-backend)."""
    if releases.supports("pipeline_resolution"):
        declare = need("sglang.srt.arg_groups.overrides", "declare_resolution")
        resolving_view = need("sglang.srt.arg_groups.overrides", "resolving_view")
        register_resolution_hook = need("sglang.srt.arg_groups.resolution_hooks", "register_resolution_hook")

        @register_resolution_hook("handle_attention_backend_compatibility")
        def _ddtree_attention_default(server_args, previous):
            fields = choose(resolving_view(server_args))
            if fields:
                declare(server_args, "ddtree.attention_backend_default", **fields)
            previous(server_args)
        return

    registry = need("sglang.srt.plugins.hook_registry", "HookRegistry")
    hook_type = need("sglang.srt.plugins.hook_registry", "HookType")

    def _before(self, *args, **kwargs):
        for field, value in (choose(self) or {}).items():
            setattr(self, field, value)
        return None

    registry.register("sglang.srt.server_args.ServerArgs._handle_attention_backend_compatibility",
                      _before, hook_type.BEFORE)
    registry.apply_hooks()


def top_logprobs_num(req) -> int:
    """The top log-probs a request asks for a token (0.5.23 keeps it in req.logprob, 0.5.17 on the request)."""
    logprob = getattr(req, "logprob", None)
    return int(getattr(logprob, "top_logprobs_num", None) or getattr(req, "top_logprobs_num", 0) or 0)


def install_request_hooks(is_ddtree, refusal, row_headroom, tokenizer_refusal, unreadable) -> None:
    """Through SGLang's plugin hook registry, in a DDTREE server only (is_ddtree(view)): the scheduler's
    DFlash-family request check answers `refusal(req)` (requests.py), the tokenizer's check of one request first
    raises ValueError (an HTTP 400) with `tokenizer_refusal(obj, input_ids, vocab)`'s message, the tokenizer's
    entry turns an exception `unreadable(e)` names (SGLang's request handling failing on a malformed field, before
    the request has an answer) into ValueError, and the req_to_token row headroom becomes
    `row_headroom(SGLang's, verify width, page size)`. 0.5.17 hands the headroom function the server arguments;
    0.5.23 reads them from its runtime context."""
    registry = need("sglang.srt.plugins.hook_registry", "HookRegistry")
    hook_type = need("sglang.srt.plugins.hook_registry", "HookType")
    try:  # a process that cannot import the scheduler (a tool without SGLang's GPU dependencies) admits no request
        for module in (REQUEST_CHECK[0], ROW_HEADROOM[0], TOKENIZER_CHECK[0]):
            _needs().module(module)
    except MissingSGLangSymbol as e:
        logging.getLogger("sglang_ddtree").warning("sglang-ddtree: request hooks not installed in this process (%s)",
                                                   e.__cause__)
        return

    def check(original, req, *args, **kwargs):
        view = serving_view()
        return refusal(req) if view is not None and is_ddtree(view) else original(req, *args, **kwargs)

    def headroom(extra, *args, **kwargs):
        view = read_view(args[0]) if args else serving_view()
        if view is None or not is_ddtree(view):
            return None  # SGLang's own
        return row_headroom(extra, draft_tokens(flag_budget(view)), int(getattr(view, "page_size", 1) or 1))

    def check_one(original, manager, obj, input_ids, *args, **kwargs):
        view = serving_view()
        if view is not None and is_ddtree(view):
            why = tokenizer_refusal(obj, input_ids, getattr(getattr(manager, "model_config", None), "vocab_size",
                                                            None))
            if why is not None:
                raise ValueError(why)
        return original(manager, obj, input_ids, *args, **kwargs)

    async def entry(original, manager, obj, *args, **kwargs):
        responses = original(manager, obj, *args, **kwargs)
        view = serving_view()
        if view is None or not is_ddtree(view):
            async for response in responses:
                yield response
            return
        answered = False
        try:
            async for response in responses:
                answered = True
                yield response
        except Exception as e:  # noqa: BLE001 — sorted by `unreadable`; anything else goes on as it was
            why = None if answered else unreadable(e)
            if why is None:
                raise
            raise ValueError(why) from e
        finally:
            await responses.aclose()

    registry.register(f"{REQUEST_CHECK[0]}.{REQUEST_CHECK[1]}", check, hook_type.AROUND)
    registry.register(f"{TOKENIZER_CHECK[0]}.{TOKENIZER_CHECK[1]}", check_one, hook_type.AROUND)
    registry.register(f"{TOKENIZER_ENTRY[0]}.{TOKENIZER_ENTRY[1]}", entry, hook_type.AROUND)
    registry.register(f"{ROW_HEADROOM[0]}.{ROW_HEADROOM[1]}", headroom, hook_type.AFTER)
    registry.apply_hooks()


# Every SGLang symbol this module and spec_algo.py use: (module, attribute), those of every release and those of each
# way of resolving arguments (`symbols` picks by the release's capability); the conformance test imports each (they
# are looked up only when a function runs).
SYMBOLS = {
    "common": [
        ("sglang.srt.speculative.dflash_utils", "parse_dflash_draft_config"),
        ("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm"),
        ("sglang.srt.speculative.spec_registry", "CustomSpecAlgo"),
        ("sglang.srt.speculative.spec_registry", "get_spec"),
        ("sglang.srt.runtime_context", "get_spec"),
        ("sglang.srt.managers.overlap_utils", "FutureMap"),
        ("sglang.srt.plugins", "load_plugins"),
        ("sglang.srt.plugins.hook_registry", "HookRegistry"),
        ("sglang.srt.plugins.hook_registry", "HookType"),
        ("sglang.srt.utils.hf_transformers_utils", "get_config"),
        ("sglang.srt.runtime_context", "get_server_args"),
        ("sglang.srt.server_args", "ServerArgs"),
        ("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend"),
        REQUEST_CHECK,
        TOKENIZER_CHECK,
        TOKENIZER_ENTRY,
        ROW_HEADROOM,
    ],
    "post_init_resolution": [
        ("sglang.srt.arg_groups.overrides", "resolved_view"),
    ],
    "pipeline_resolution": [
        ("sglang.srt.arg_groups.resolution_hooks", "register_resolution_hook"),
        ("sglang.srt.arg_groups.overrides", "declare_resolution"),
        ("sglang.srt.arg_groups.overrides", "resolving_view"),
    ],
}


def symbols(rel: str | None = None) -> list:
    """SYMBOLS of the release (default: the installed one)."""
    way = "pipeline_resolution" if releases.supports("pipeline_resolution", rel) else "post_init_resolution"
    return SYMBOLS["common"] + SYMBOLS[way]
