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

    from .args import ALGORITHM, choose_attention_backend, validate_server_args
    from .spec_algo import DDTreeSpecAlgo

    if get_spec(ALGORITHM) is not None:  # load_plugins is idempotent, but register() may be called directly too
        return
    SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=True, validate_server_args=validate_server_args,
                                  spec_class=DDTreeSpecAlgo)(_factory)
    compat.install_backend_default_hook(choose_attention_backend)


def register() -> None:
    """Entry point `sglang.srt.plugins: ddtree`."""
    if _state["registered"]:
        return
    try:
        _register()
    except Exception as e:
        _state["error"] = "".join(traceback.format_exception(e))
        logger.error("sglang-ddtree: registering --speculative-algorithm DDTREE FAILED: %s: %s\n"
                     "Run `python -m sglang_ddtree.check` for details.", type(e).__name__, e)
        raise
    _state["registered"] = True
    _state["error"] = None


def last_error() -> str | None:
    return _state["error"]
