"""SGLang plugin entry point: registers the DDTREE speculative algorithm.

SGLang's `load_plugins()` calls `register()` in every process (launcher, scheduler, detokenizer) and
swallows exceptions, so a failure here would only surface later as "Unknown speculative algorithm name".
`register()` therefore logs failures loudly (and keeps them for `python -m sglang_ddtree.check`) before
re-raising. It stays import-light: no CUDA, no scheduler or worker imports.
"""
from __future__ import annotations

import logging
import traceback

logger = logging.getLogger("sglang_ddtree")

_state = {"registered": False, "error": None}


def _factory(server_args):
    """Worker factory: runs in the scheduler process before attention backends and graphs are built (the
    worker installs its run-time fixes itself, once it knows which verify path it takes)."""
    from .worker import DDTreeWorkerV2

    return DDTreeWorkerV2


def _register() -> None:
    from . import compat

    compat.check_version()
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    from .args import ALGORITHM, ALTERNATIVE_ALGORITHM, choose_attention_backend, is_ddtree, set_active_algorithm, \
        validate_server_args
    from .spec_algo import DDTreeSpecAlgo

    name = ALGORITHM
    if name_is_reserved(ALGORITHM, SpeculativeAlgorithm, get_spec):
        name = ALTERNATIVE_ALGORITHM
        logger.warning("sglang-ddtree: this SGLang already defines --speculative-algorithm %s (not this plugin's); "
                       "the plugin registers as --speculative-algorithm %s", ALGORITHM, name)
    set_active_algorithm(name)
    if isinstance(get_spec(name), DDTreeSpecAlgo):  # load_plugins is idempotent; register() may be called again
        return
    SpeculativeAlgorithm.register(name, supports_overlap=True, validate_server_args=validate_server_args,
                                  spec_class=DDTreeSpecAlgo)(_factory)
    compat.install_backend_default_hook(choose_attention_backend)
    from . import requests

    compat.install_request_hooks(is_ddtree, requests.refusal, requests.row_headroom)


def name_is_reserved(name: str, algorithms, get_spec) -> bool:
    """True if SGLang already has `name` as a builtin algorithm or another plugin's registration."""
    from .spec_algo import DDTreeSpecAlgo

    if name.upper() in getattr(algorithms, "__members__", {}):
        return True
    spec = get_spec(name)
    return spec is not None and not isinstance(spec, DDTreeSpecAlgo)


def register() -> None:
    """Entry point `sglang.srt.plugins: ddtree`."""
    if _state["registered"]:
        return
    try:
        _register()
    except Exception as e:
        _state["error"] = "".join(traceback.format_exception(e))
        logger.error("sglang-ddtree: registering --speculative-algorithm ddtree FAILED: %s: %s\n"
                     "Run `python -m sglang_ddtree.check` for details.", type(e).__name__, e)
        raise
    _state["registered"] = True
    _state["error"] = None


def last_error() -> str | None:
    return _state["error"]
