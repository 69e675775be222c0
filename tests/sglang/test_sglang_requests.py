"""The requests a DDTREE server admits, and the KV rows it reserves, through SGLang's real code (both releases).

The scheduler's admission path (`Scheduler.handle_generate_request`) asks `validate_dflash_request` of every
request of a DFlash-family server; the plugin's hook answers in a DDTREE server (requests.refusal) and leaves
other servers to SGLang. The KV configurator sizes req_to_token rows with `get_req_to_token_extra_context_len`;
in a DDTREE server the rows must hold the reservation of a request at the context limit.
"""
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


def test_a_ddtree_server_answers_the_request_check(publish, sglang_release):
    from sglang.srt.managers import scheduler

    publish("ddtree", "--speculative-num-draft-tokens", "17")
    check = scheduler.validate_dflash_request
    assert check(make_req(), True) is None
    assert check(make_req(return_logprob=True, top_logprobs_num=3), True) is None  # served by the round
    why = check(make_req(return_hidden_states=True), False)
    assert "DDTREE" in why and "return_hidden_states" in why and "Fix:" in why

    publish("dflash")  # another server: SGLang's own answer
    want = "DFLASH speculative decoding does not support return_logprob yet." if sglang_release == "0.5.17" else None
    assert check(make_req(return_logprob=True), True) == want


@pytest.mark.parametrize("page", [1, 16, 64])
def test_rows_hold_the_reservation_at_the_context_limit(publish, sglang_release, page):
    """DFlash's reservation for the next round: committed + 2 × width, whole pages (dflash_info_v2); a request
    commits at most the context length. Its columns must fit the row SGLang sizes as context + headroom."""
    from sglang.srt.mem_cache import kv_cache_configurator

    sizing = kv_cache_configurator.get_req_to_token_extra_context_len
    for algorithm, width in (("ddtree", 64), ("ddtree", 17), ("dflash", None)):
        extra_args = ["--speculative-num-draft-tokens", str(width)] if width else []
        sa = publish(algorithm, "--page-size", str(page), *extra_args)
        headroom = sizing(sa) if sglang_release == "0.5.17" else sizing()
        if algorithm == "dflash":
            from sglang_ddtree.sglang.adapters import registration

            n = int(registration.read_view(sa).speculative_num_draft_tokens)
            assert headroom < 2 * n + page - 1 + 4 or page > 1  # SGLang's own sizing, left alone
            continue
        context = 2048
        for committed in range(context - 3 * width, context + 1):
            reserved = -(-(committed + 2 * width) // page) * page
            assert reserved <= context + headroom, (committed, reserved, headroom)
