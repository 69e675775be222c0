"""Requests that take stock SGLang down (the plain server and DFLASH alike: its scheduler raises in its loop) get an
HTTP 400 from a DDTree server, naming the problem and the fix, and the server keeps serving: an empty prompt, a
token id past the vocabulary or below 0, and what the request fuzzer found (stop ids outside the vocabulary, more
top log-probs than the vocabulary, a logprob_start_len below -1, a positional_embed_overrides JSON cannot carry),
through /generate and /v1/completions (requests.crashes_sglang, tokenizer_refusal). Run at TP 1 by
test_served_requests.py and at TP 2 by test_served_tp.py, on the servers those tests share."""
from fleet import healthy, post

PROMPT = "def f(x):"
GEN = {"max_new_tokens": 4}
KILLERS = [  # (name, path, payload, words the refusal must hold)
    ("empty text", "/generate", {"text": "", "sampling_params": GEN}, "prompt is empty"),
    ("id past the vocabulary", "/generate", {"input_ids": [40, 100000, 41], "sampling_params": GEN}, "100000"),
    ("negative id", "/generate", {"input_ids": [-3, 40], "sampling_params": GEN}, "-3"),
    ("batch with an empty text", "/generate", {"text": ["def a():", ""], "sampling_params": GEN}, "prompt is empty"),
    ("completions id past the vocabulary", "/v1/completions", {"model": "default", "prompt": [40, 100000],
                                                               "max_tokens": 4}, "100000"),
    ("top log-probs past the vocabulary", "/generate", {"text": PROMPT, "sampling_params": GEN,
                                                        "return_logprob": True, "top_logprobs_num": 300}, "300"),
    ("completions logprobs past the vocabulary", "/v1/completions", {"model": "default", "prompt": PROMPT,
                                                                     "max_tokens": 4, "logprobs": 300}, "300"),
    ("logprob_start_len below -1", "/generate", {"text": PROMPT, "sampling_params": GEN, "return_logprob": True,
                                                 "logprob_start_len": -5}, "-5"),
    ("stop id past the vocabulary", "/generate", {"text": PROMPT, "sampling_params": {
        **GEN, "min_new_tokens": 2, "stop_token_ids": [100000]}}, "100000"),
    ("positional_embed_overrides from JSON", "/generate", {"text": PROMPT, "sampling_params": GEN,
                                                           "positional_embed_overrides": -1e30},
     "positional_embed_overrides"),
]


def each_is_refused_and_the_server_serves_on(url: str, stock_refuses=()) -> None:
    """Each killer answered with a 400 naming the problem: DDTree's, with its fix, but for the names in
    `stock_refuses` (a release whose own request checks refuse them: any 400 then)."""
    for name, path, payload, words in KILLERS:
        out = post(url, payload, path=path)
        assert out.get("error") == 400, (name, out)
        if name not in stock_refuses:
            assert "DDTREE" in out["body"] and words in out["body"] and "Fix:" in out["body"], (name, out["body"])
    assert healthy(url), "the server stopped answering"
    ok = post(url, {"text": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
    assert len(ok.get("output_ids", [])) == 4, ok
