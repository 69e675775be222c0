"""DDTree at --tp-size 2 on the CPU server (two ranks over gloo), with SGLANG_DDTREE_TP_CHECK=1: every round the
ranks' trees and commit plans are hashed and compared, and a disagreement stops the server (so any test here would
fail). Greedy output and every request option as at TP 1; sampled output distributed as at TP 1."""
import pytest

from fleet import generate, generate_many, healthy
from killers import each_is_refused_and_the_server_serves_on
from test_served_law import ALPHA, PROMPT_IDS, homogeneity_p, samples
from test_served_requests import GREEDY, REGEX, outputs

PROMPTS = 32


@pytest.fixture(scope="module")
def tp2(fleet):
    url = fleet.url("ddtree_tp2")
    yield url
    assert healthy(url), "the TP-2 server stopped (a TP check failure stops it)"


def test_greedy_output_at_tp2_is_the_plain_servers(fleet, prompts, tp2):
    sampling = {**GREEDY, "max_new_tokens": 48, "ignore_eos": True}
    got = generate_many(tp2, prompts[:PROMPTS], sampling)
    want = generate_many(fleet.url("plain"), prompts[:PROMPTS], sampling)
    assert outputs(got) == outputs(want)
    assert all(g["meta_info"]["spec_accept_length"] > 1.0 for g in got)


@pytest.mark.parametrize("name,sampling,reference", [
    ("regex", {**GREEDY, "regex": REGEX}, "plain"),
    ("frequency_penalty", {**GREEDY, "frequency_penalty": 0.8}, "plain_sync"),
    ("min_new_tokens", {**GREEDY, "min_new_tokens": 40, "max_new_tokens": 48}, "plain_sync")])
def test_request_options_at_tp2_are_the_plain_servers(fleet, prompts, tp2, name, sampling, reference):
    got = generate_many(tp2, prompts[:8], sampling)
    assert outputs(got) == outputs(generate_many(fleet.url(reference), prompts[:8], sampling))


def test_logprobs_and_n_at_tp2(fleet, prompts, tp2):
    extra = {"return_logprob": True, "top_logprobs_num": 3}
    got = generate_many(tp2, prompts[:4], GREEDY, **extra)
    want = generate_many(fleet.url("plain"), prompts[:4], GREEDY, **extra)
    for g, w in zip(got, want):
        a, b = g["meta_info"]["output_token_logprobs"], w["meta_info"]["output_token_logprobs"]
        assert [x[1] for x in a] == [y[1] for y in b]
        assert max(abs(x[0] - y[0]) for x, y in zip(a, b)) < 1e-3
    many = generate(tp2, prompts[0], {"temperature": 1.0, "max_new_tokens": 24, "n": 8})
    assert len({o["text"] for o in many}) == 8


def test_sampled_output_at_tp2_is_distributed_as_at_tp1(fleet, prompts, tp2):
    """As test_served_law (its statistic, its level): DDTree's samples at TP 2 against DDTree's at TP 1."""
    sampling = {"temperature": 1.0}
    a = samples(tp2, prompts[PROMPT_IDS[0]], sampling)
    b = samples(fleet.url("ddtree"), prompts[PROMPT_IDS[0]], sampling)
    p = homogeneity_p(a, b)
    assert p > ALPHA, p


def test_requests_that_kill_stock_sglang_get_a_400_at_tp2(tp2):
    """killers.py at TP 2: each rank's scheduler is kept from the crash; the server serves on."""
    each_is_refused_and_the_server_serves_on(tp2)
