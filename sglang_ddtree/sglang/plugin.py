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
    from .adapters import registration as sgl
    from .adapters.releases import check_version

    check_version()
    from .args import ALGORITHM, ALTERNATIVE_ALGORITHM, default_backends, is_ddtree, set_active_algorithm, \
        validate_server_args
    from .spec_algo import DDTreeSpecAlgo

    name = ALGORITHM
    if sgl.name_is_reserved(ALGORITHM, DDTreeSpecAlgo):
        name = ALTERNATIVE_ALGORITHM
        logger.warning("sglang-ddtree: this SGLang already defines --speculative-algorithm %s (not this plugin's); "
                       "the plugin registers as --speculative-algorithm %s", ALGORITHM, name)
    set_active_algorithm(name)
    if sgl.is_registered(name, DDTreeSpecAlgo):  # load_plugins is idempotent; register() may be called again
        return
    sgl.register_algorithm(name, DDTreeSpecAlgo, validate_server_args, _factory)
    sgl.install_backend_default_hook(default_backends)
    from . import requests

    sgl.install_request_hooks(is_ddtree, requests.refusal, requests.row_headroom, requests.tokenizer_refusal,
                              requests.unreadable)


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
