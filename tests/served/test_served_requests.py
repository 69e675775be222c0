"""Every request option a plain SGLang server takes, sent to DDTree served on the CPU as a user sends it.

Greedy requests must come back token for token as the plain server's (penalties: as the plain server's synchronous
path, `--disable-overlap-schedule`: its overlap path penalises each token by the output up to the one before the
last, the synchronous one by all of it, which is the definition DDTree serves); sampled ones must honour the
option. After each test the DDTree server must still generate (`/health_generate`): a request that takes the
server down is the failure these tests exist to find.
"""
import json
import time

import pytest

from fleet import CONTEXT, generate, generate_many, healthy, post
from killers import each_is_refused_and_the_server_serves_on

N = 8  # prompts a check
GREEDY = {"temperature": 0.0, "max_new_tokens": 32}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "count": {"type": "integer"}}, "required": ["name", "count"]}
REGEX = r"def [a-z_]{1,12}\(self(, [a-z_]{1,8}){0,3}\):"
EBNF = 'root ::= "return " name ("." name)*\nname ::= [a-z_]+'


@pytest.fixture(scope="module")
def ddtree(fleet):
    url = fleet.url("ddtree")
    yield url
    assert healthy(url), "the DDTree server stopped answering"


@pytest.fixture
def check_health(ddtree):
    yield
    assert healthy(ddtree), "the DDTree server stopped answering after this test's requests"


def outputs(results):
    errors = [r for r in results if "output_ids" not in r]
    assert not errors, errors[:2]
    return [r["output_ids"] for r in results]


def same_as(fleet, ddtree, prompts, sampling, reference="plain", **extra):
    got = outputs(generate_many(ddtree, prompts, sampling, **extra))
    want = outputs(generate_many(fleet.url(reference), prompts, sampling, **extra))
    diverged = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert diverged == [], f"{len(diverged)}/{len(prompts)} outputs differ from the {reference} server's"
    return got


@pytest.mark.parametrize("kind,value", [("json_schema", json.dumps(SCHEMA)), ("regex", REGEX), ("ebnf", EBNF)])
def test_structured_output_is_the_plain_servers(fleet, ddtree, prompts, check_health, kind, value):
    got = same_as(fleet, ddtree, prompts[:N], {**GREEDY, kind: value})
    assert any(len(g) > 3 for g in got)


@pytest.mark.parametrize("name,sampling", [
    ("top_p", {"temperature": 1.5, "top_p": 1e-6}), ("top_k", {"temperature": 1.5, "top_k": 1}),
    ("min_p", {"temperature": 1.5, "min_p": 0.9999})])
def test_a_filter_that_leaves_one_token_is_greedy(fleet, ddtree, prompts, check_health, name, sampling):
    """A filter keeping only the most likely token makes a sampled request greedy: its output must be the plain
    server's greedy output (so the filter reached every tree node's draw)."""
    got = outputs(generate_many(ddtree, prompts[:N], {**sampling, "max_new_tokens": 32}))
    want = outputs(generate_many(fleet.url("plain"), prompts[:N], GREEDY))
    assert got == want


def test_n_samples_and_concurrent_copies_are_distinct(ddtree, prompts, check_health):
    sampling = {"temperature": 1.0, "max_new_tokens": 24}
    one = generate(ddtree, prompts[0], {**sampling, "n": 8})
    assert isinstance(one, list) and len(one) == 8, one
    assert len({o["text"] for o in one}) == 8
    copies = generate_many(ddtree, [prompts[1]] * 8, sampling, concurrency=8)
    assert len({o["text"] for o in copies}) == 8


def test_a_sampling_seed_reproduces_its_text_alone_and_among_others(ddtree, prompts, check_health):
    """A request with `sampling_seed` draws its first token (the prefill's, sglang/seeded_prefill.py) and every later
    one (the rounds') from its own stream: its seed and position. So the same seeded sampled request gives one text
    run 3 times alone and 3 times among 7 other requests (other prompts, seeds, laws and lengths, some unseeded);
    another seed gives another text. Fails if any draw of the request comes from a stream its batch shares."""
    import concurrent.futures as cf

    def seeded(seed):
        return {"temperature": 1.0, "top_p": 0.95, "max_new_tokens": 32, "sampling_seed": seed}

    texts = [outputs([generate(ddtree, prompts[5], seeded(1234))])[0] for _ in range(3)]
    for rep in range(3):
        others = [(prompts[10 + 7 * rep + k], {"temperature": [1.0, 0.6][k % 2], "max_new_tokens": 24 + 4 * k,
                                                **({"sampling_seed": 77 + k} if k % 3 else {})}) for k in range(7)]
        jobs = others[:rep + 2] + [(prompts[5], seeded(1234))] + others[rep + 2:]
        with cf.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda job: generate(ddtree, *job), jobs))
        texts.append(outputs(got)[rep + 2])
    assert all(t == texts[0] for t in texts), f"{len({tuple(t) for t in texts})} texts from one seeded request"
    assert outputs([generate(ddtree, prompts[5], seeded(99))])[0] != texts[0], "another seed gave the same text"


@pytest.mark.parametrize("sampling", [{"frequency_penalty": 0.8}, {"presence_penalty": 0.8},
                                      {"repetition_penalty": 1.3}, {"min_new_tokens": 40, "max_new_tokens": 48}],
                         ids=lambda s: next(iter(s)))
def test_penalties_are_the_plain_servers(fleet, ddtree, prompts, check_health, sampling):
    same_as(fleet, ddtree, prompts[:N], {**GREEDY, **sampling}, reference="plain_sync")


def test_logit_bias_is_the_plain_servers(fleet, ddtree, prompts, check_health):
    bias = {"logit_bias": {"32": 4.0, "101": 2.5, "10": -100.0}}  # space, 'e' up; newline banned
    got = same_as(fleet, ddtree, prompts[:N], {**GREEDY, **bias})
    assert not any(10 in g for g in got)


def test_stop_strings_are_the_plain_servers(fleet, ddtree, prompts, check_health):
    got = same_as(fleet, ddtree, prompts[:N], {**GREEDY, "max_new_tokens": 48, "stop": ["\n", "):"]})
    assert any(len(g) < 48 for g in got)  # a stop string really ended some


@pytest.mark.parametrize("tokens", [0, 1, 2])
def test_tiny_max_new_tokens_are_the_plain_servers(fleet, ddtree, prompts, check_health, tokens):
    got = same_as(fleet, ddtree, prompts[:N], {**GREEDY, "max_new_tokens": tokens, "ignore_eos": True})
    assert all(len(g) == tokens for g in got)


def test_logprobs_are_the_plain_servers(fleet, ddtree, prompts, check_health):
    extra = {"return_logprob": True, "top_logprobs_num": 3}
    got = generate_many(ddtree, prompts[:N], GREEDY, **extra)
    want = generate_many(fleet.url("plain"), prompts[:N], GREEDY, **extra)
    assert outputs(got) == outputs(want)
    for g, w in zip(got, want):
        a, b = g["meta_info"]["output_token_logprobs"], w["meta_info"]["output_token_logprobs"]
        assert [x[1] for x in a] == [y[1] for y in b]
        assert max(abs(x[0] - y[0]) for x, y in zip(a, b)) < 1e-3
        tops = g["meta_info"]["output_top_logprobs"]
        assert len(tops) == len(a) and all(len(t) == 3 for t in tops)
        assert tops[0][0][1] == a[0][1]  # the greedy token heads its own top list


def test_requests_at_the_context_limit_next_to_short_ones_then_idle(fleet, ddtree, prompts, check_health):
    """Two requests run to the context length while short ones come and go; then the server idles (SGLang's
    idle check counts the pool's free slots: a leaked slot stops the server)."""
    import concurrent.futures as cf
    import random

    rng = random.Random(0)
    long = [[rng.randrange(32, 127) for _ in range(CONTEXT - 200)] for _ in range(2)]
    to_the_limit = {"temperature": 0.0, "max_new_tokens": 200, "ignore_eos": True}
    short = prompts[:12]
    with cf.ThreadPoolExecutor(14) as pool:
        fl = [pool.submit(generate, ddtree, p, to_the_limit) for p in long]
        fs = [pool.submit(generate, ddtree, p, {**GREEDY, "ignore_eos": True}) for p in short]
        got_long, got_short = [f.result() for f in fl], [f.result() for f in fs]
    want_short = generate_many(fleet.url("plain"), short, {**GREEDY, "ignore_eos": True})
    assert all(len(o.get("output_ids") or []) > 0 for o in got_long), [o.get("body") for o in got_long]
    assert outputs(got_short) == outputs(want_short)
    time.sleep(15)


def test_requests_that_kill_stock_sglang_get_a_400(ddtree):
    """killers.py: each an HTTP 400 naming the problem and the fix, the server serving on."""
    each_is_refused_and_the_server_serves_on(ddtree)


def test_return_hidden_states_is_refused_naming_ddtree(fleet):
    """On a server that returns hidden states (--enable-return-hidden-states), a request asking for them gets a
    400 naming DDTree and the fix; the server stays up."""
    url = fleet.url("ddtree_edge")
    out = post(url, {"text": "def f(x):", "sampling_params": GREEDY, "return_hidden_states": True})
    assert out.get("error") == 400, out
    assert "DDTREE" in out["body"] and "return_hidden_states" in out["body"], out["body"]
    assert healthy(url)
