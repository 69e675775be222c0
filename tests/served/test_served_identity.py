"""Greedy output of DDTree served on the CPU is the plain server's, token for token (held-out prompts): the default
(budget 32 on this backend), a small budget (7: most trees cut short) and the auto budget (a width every round)."""
import pytest

from fleet import generate_many

PROMPTS, TOKENS = 32, 48
GREEDY = {"temperature": 0.0, "max_new_tokens": TOKENS, "ignore_eos": True}


@pytest.fixture(scope="module")
def reference(fleet, prompts):
    return generate_many(fleet.url("plain"), prompts[:PROMPTS], GREEDY)


@pytest.mark.parametrize("server", ["ddtree", "ddtree_b7", "ddtree_auto"])
def test_greedy_output_is_the_plain_servers(fleet, prompts, reference, server):
    got = generate_many(fleet.url(server), prompts[:PROMPTS], GREEDY)
    errors = [o for o in got if "output_ids" not in o]
    assert not errors, errors[:2]
    diverged = [i for i, (g, r) in enumerate(zip(got, reference)) if g["output_ids"] != r["output_ids"]]
    assert diverged == [], f"{server}: {len(diverged)}/{PROMPTS} prompts diverge from the plain server: {diverged}"
    accept = [o["meta_info"].get("spec_accept_length") for o in got]
    assert all(a is not None and a > 1.0 for a in accept), accept  # the tree was really used


def test_greedy_output_on_sglang_0517_is_its_plain_servers(fleet, prompts):
    """SGLang 0.5.17 (the release served on the H200) on the CPU too: DDTree's default against 0.5.17's plain
    server (its overlap scheduler is off there: it records CUDA streams)."""
    want = generate_many(fleet.url("plain_0517"), prompts[:PROMPTS], GREEDY)
    got = generate_many(fleet.url("ddtree_0517"), prompts[:PROMPTS], GREEDY)
    assert [g["output_ids"] for g in got] == [w["output_ids"] for w in want]
    assert all(g["meta_info"].get("spec_accept_length", 0) > 1.0 for g in got)


def test_requests_that_kill_stock_sglang_get_a_400_on_sglang_0517(fleet):
    """killers.py on 0.5.17's DDTree server (each an HTTP 400, the server serving on; 0.5.17's tokenizer refuses an
    empty text and ids past the vocabulary itself)."""
    from killers import each_is_refused_and_the_server_serves_on

    each_is_refused_and_the_server_serves_on(fleet.url("ddtree_0517"), stock_refuses=(
        "empty text", "batch with an empty text", "id past the vocabulary", "completions id past the vocabulary"))
