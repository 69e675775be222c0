"""The requests a DDTREE server admits, and the KV rows it reserves, through SGLang's real code (both releases).

The scheduler's admission path (`Scheduler.handle_generate_request`) asks `validate_dflash_request` of every
request of a DFlash-family server; the plugin's hook answers in a DDTREE server (requests.refusal) and leaves
other servers to SGLang. The KV configurator sizes req_to_token rows with `get_req_to_token_extra_context_len`;
in a DDTREE server the rows must hold the reservation of a request at the context limit.
"""
import inspect
import os

import pytest
from conftest import FIXTURES


@pytest.fixture
def publish(plugins_loaded, monkeypatch):
    """Publish a server's arguments in this process as SGLang's launcher does (restored after the test)."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.server_args import prepare_server_args

    for name in ("_server_args", "_config_bags", "_publish_role"):
        if hasattr(rc._CONTEXT, name):
            monkeypatch.setattr(rc._CONTEXT, name, getattr(rc._CONTEXT, name))
    monkeypatch.delenv("SGLANG_DDTREE_BUDGET", raising=False)

    def run(algorithm, *extra):
        argv = ["--model-path", os.path.join(FIXTURES, "tiny_target"), "--device", "cuda", "--skip-tokenizer-init",
                "--speculative-algorithm", algorithm,
                "--speculative-draft-model-path", os.path.join(FIXTURES, "tiny_drafter"), *extra]
        sa = prepare_server_args(argv)
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        rc.publish(sa, role="test")
        return sa

    return run


def make_req(**kw):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=8)
    sp.normalize(None)
    req = Req("r", "", [1, 2, 3], sp, vocab_size=64)
    for k, v in kw.items():
        setattr(req, k, v)
    return req


def test_the_schedulers_admission_path_asks_the_hooked_check():
    from sglang.srt.managers import scheduler

    # 0.5.17 checks in handle_generate_request itself, 0.5.23 in the _handle_generate_request it calls
    path = [getattr(scheduler.Scheduler, m) for m in ("handle_generate_request", "_handle_generate_request")
            if hasattr(scheduler.Scheduler, m)]
    assert any("validate_dflash_request" in f.__code__.co_names for f in path)


def test_a_ddtree_server_answers_the_request_check(publish):
    from sglang.srt.managers import scheduler

    publish("ddtree", "--speculative-num-draft-tokens", "17")
    check = scheduler.validate_dflash_request
    assert check(make_req(), True) is None
    assert check(make_req(return_logprob=True, top_logprobs_num=3), True) is None  # served by the round
    for field in ("return_hidden_states", "return_sampling_mask"):
        why = check(make_req(**{field: True}), False)
        assert "DDTREE" in why and field in why and "Fix:" in why

    publish("dflash")  # another server: SGLang's own answer
    from sglang_ddtree.sglang.adapters import releases

    want = None if releases.supports("dflash_logprobs") else \
        "DFLASH speculative decoding does not support return_logprob yet."
    assert check(make_req(return_logprob=True), True) == want


@pytest.mark.parametrize("ids,top,stop,names", [([], 0, None, "empty"), ([1, 64, 2], 0, None, "64"),
                                                ([5, -3], 0, None, "-3"), ([1], 65, None, "65"),
                                                ([1], 0, {10, 100000}, "100000"), ([1], 0, {-1}, "-1"),
                                                ([63, 0], 64, {0, 63}, None)])
def test_a_ddtree_server_refuses_requests_stock_sglang_crashes_on(publish, ids, top, stop, names):
    """An empty prompt, ids outside [0, vocab), more top log-probs than the vocabulary and stop ids outside it raise
    in SGLang's scheduler (the logits processor, the embedding, the sampler, the min_new_tokens penalty), which takes
    the server down: a DDTREE server refuses them at admission, naming the problem and the fix."""
    from sglang.srt.managers import scheduler

    publish("ddtree", "--speculative-num-draft-tokens", "17")
    req = make_req(origin_input_ids=ids, return_logprob=True)
    req.sampling_params.stop_token_ids = stop
    if getattr(req, "logprob", None) is None:  # the release keeps it on the request (0.5.17), else in req.logprob
        req.top_logprobs_num = top
    else:
        req.logprob.top_logprobs_num = top
    why = scheduler.validate_dflash_request(req, True)
    if stop is not None and names is not None:  # its answer rides a prefill batch, whose penalty reads stop ids
        assert not req.sampling_params.stop_token_ids
    if names is None:
        assert why is None  # the vocabulary's own ids are served
    else:
        assert "DDTREE" in why and names in why and "Fix:" in why, why


def test_a_ddtree_servers_tokenizer_refuses_them_before_the_scheduler(publish):
    """The tokenizer's check of one request (TokenizerManager._validate_one_request) raises ValueError (an HTTP
    400) in a DDTREE server for each crash, a logprob_start_len below -1 included (the scheduler never sees it);
    another server's check is SGLang's own."""
    import types

    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    manager = types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=64))

    def obj(sampling=None, **kw):
        o = GenerateReqInput(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 4, **(sampling or {})}, **kw)
        o.normalize_batch_and_arguments()
        return o

    publish("ddtree", "--speculative-num-draft-tokens", "17")
    for o, ids, names in ((obj(), [], "empty"), (obj(), [1, 64], "64"),
                          (obj(return_logprob=True, top_logprobs_num=65), [1], "65"),
                          (obj(return_logprob=True, logprob_start_len=-5), [1, 2], "-5"),
                          (obj(positional_embed_overrides=-1e30), [1], "positional_embed_overrides"),
                          (obj({"stop_token_ids": [3, 100000]}), [1], "100000")):
        with pytest.raises(ValueError, match=f"DDTREE.*{names}.*Fix:"):
            TokenizerManager._validate_one_request(manager, o, ids)
    with pytest.raises(AttributeError):  # a servable request goes on to SGLang's own check (this manager lacks it)
        TokenizerManager._validate_one_request(manager, obj(logprob_start_len=-5), [1, 2])
    publish("dflash")
    with pytest.raises(AttributeError):
        TokenizerManager._validate_one_request(manager, obj(), [])


def test_a_ddtree_servers_tokenizer_answers_400_where_sglang_fails_on_a_field(publish):
    """SGLang's tokenizer raises Python's own TypeError / IndexError / re.error on some malformed fields (a list as a
    single request's rid, ...), which stock SGLang answers with HTTP 500; in a DDTREE server its entry turns them
    into ValueError (HTTP 400) naming the cause. Other errors, and other servers, keep SGLang's answer."""
    import asyncio
    import re
    import types

    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    def first(error):
        def fail():
            raise error

        manager = types.SimpleNamespace(auto_create_handle_loop=fail)
        return asyncio.run(TokenizerManager.generate_request(manager, types.SimpleNamespace()).__anext__())

    publish("ddtree", "--speculative-num-draft-tokens", "17")
    for error in (TypeError("unhashable type: 'list'"), IndexError("list index out of range"),
                  re.error("bad character range z-a")):
        with pytest.raises(ValueError, match=rf"DDTREE.*{type(error).__name__}.*Fix:"):
            first(error)
    with pytest.raises(RuntimeError):
        first(RuntimeError("not a field's fault"))
    publish("dflash")
    with pytest.raises(TypeError):
        first(TypeError("unhashable type: 'list'"))


@pytest.mark.parametrize("page", [1, 16, 64])
def test_rows_hold_the_reservation_at_the_context_limit(publish, page):
    """DFlash's reservation for the next round: committed + 2 × width, whole pages (dflash_info_v2); a request
    commits at most the context length. Its columns must fit the row SGLang sizes as context + headroom."""
    from sglang.srt.mem_cache import kv_cache_configurator

    sizing = kv_cache_configurator.get_req_to_token_extra_context_len
    for algorithm, width in (("ddtree", 64), ("ddtree", 17), ("dflash", None)):
        extra_args = ["--speculative-num-draft-tokens", str(width)] if width else []
        sa = publish(algorithm, "--page-size", str(page), *extra_args)
        headroom = sizing(sa) if inspect.signature(sizing).parameters else sizing()  # else: the runtime context
        if algorithm == "dflash":
            from sglang_ddtree.sglang.adapters import registration

            n = int(registration.read_view(sa).speculative_num_draft_tokens)
            assert headroom < 2 * n + page - 1 + 4 or page > 1  # SGLang's own sizing, left alone
            continue
        context = 2048
        for committed in range(context - 3 * width, context + 1):
            reserved = -(-(committed + 2 * width) // page) * page
            assert reserved <= context + headroom, (committed, reserved, headroom)
