"""Random requests built from every field SGLang 0.5.23's /generate and /v1/completions take, for the request fuzzer
(test_served_fuzz.py). Deterministic for a seed.

Each request starts valid (a prompt, a few sampling options, sometimes log-probs or a stream) and then has fields
mutated: values of the right type at the edges of their range or past them, wrong types, unicode, empty and huge
lists, token ids outside the vocabulary (in input_ids, prompts, logit_bias, stop ids, logprob ids), absurd regexes,
grammars and JSON schemas; a streamed request may be dropped after its first chunks. The first mutation of request i
is field i of the installed SGLang's own field lists (`api_fields`), in turn, so every field is mutated once the
count passes the number of fields; a field with no generator below gets a value of every JSON type.
"""
from __future__ import annotations

import json
import random

VOCAB = 259  # the shipped tiny target's
CONTEXT = 1024  # the served tests' --context-length
# text the byte tokenizer and the JSON layers meet rarely: combining marks, right-to-left and bidi controls, CJK,
# emoji with joiners, NUL and control characters, a lone surrogate (JSON allows its escape, UTF-8 does not)
UNICODE = ["def f(x):\n    return x", "héllo wörld ", "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
           "\u6f22\u5b57\u304b\u306a\u30ab\u30ca", "\U0001f469\u200d\U0001f4bb\U0001f1fa\U0001f1f8", "a\u0301\u0327" * 5,
           "\x00\x01\x1b[31m\x7f", "\ud800 lone surrogate", "\ufeff\u202e\u2066reversed", " ", "\n\n\n", "\t"]
PROMPTS = ["def f(x):", "class A:\n    def __init__(self", "import os\n", "for i in range(", "return ", "# "]
REGEXES = [r"[a-z]{1,8}", r"def [a-z_]+\(\):", r"(a|b)*c", r"(", r"[z-a]", r"(a+)+$", r"\d{5000}", r"",
           r"(?=lookahead)x", r"\p{L}+", r"[^\x00-\uffff]", "(" * 200 + ")" * 200, r".{0,3}", r"x{2,1}",
           "\U0001f600+", r"\n"]
EBNFS = ['root ::= "return " name\nname ::= [a-z_]+', "root ::= root", "root ::=", "not a grammar",
         'root ::= "a" | "b" | ' + " | ".join(f'"{i}"' for i in range(300)), 'root ::= [\u4e00-\u9fff]+']
GOOD_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}


def _schema(rng: random.Random):
    """A JSON schema: ordinary, or absurd (deep nesting, a huge enum, contradictions, bad patterns, not a schema)."""
    deep = {"type": "integer"}
    for _ in range(rng.choice([20, 80])):
        deep = {"type": "object", "properties": {"a": deep}, "required": ["a"]}
    return rng.choice([GOOD_SCHEMA, deep, {"enum": [f"v{i}" for i in range(rng.choice([1, 3000]))]},
                       {"type": "integer", "minimum": 10, "maximum": 1}, {"type": "string", "pattern": rng.choice(REGEXES)},
                       {"type": "array", "items": {"type": "number"}, "minItems": 1000}, {"$ref": "#/definitions/none"},
                       {"type": ["string", "null", "boolean"], "format": "date-time"}, [], 3, "schema",
                       {"type": "nonsense"}])


def _ids(rng: random.Random, oov: bool = False, n: int | None = None):
    n = n or rng.choice([1, 2, rng.randrange(1, 40)])
    ids = [rng.randrange(32, 127) for _ in range(n)]
    if oov:
        ids[rng.randrange(n)] = rng.choice([VOCAB, 100000, -3, -1, 2 ** 31, 2 ** 63 - 1])
    return ids


def generic(rng: random.Random):
    """Any JSON value: a field with no generator of its own gets one of these."""
    return rng.choice([None, True, False, 0, 1, -1, 7, 2 ** 40, 0.5, -1e30, "", "x", rng.choice(UNICODE), [], [1, 2],
                       ["a"], {}, {"k": 1}, {"": None}])


# --- edge values per field (a mutation draws from these or, one time in five, generic) ---------------------------
SAMPLING_EDGES = {
    "max_new_tokens": [0, 1, -1, 10 ** 9, CONTEXT, 3.5, None, "8"],
    "max_tokens": [0, 1, -1, 10 ** 9, CONTEXT, 3.5, None],
    "min_new_tokens": [1, 12, -2, 10 ** 6], "min_tokens": [1, 12, -2, 10 ** 6],
    "temperature": [0.0, 1e-9, 1.5, 100.0, -0.5, 1e30, 1e-45],
    "top_p": [1e-9, 0.0, 1.5, -0.1, 0.999999], "top_k": [0, 1, 2, VOCAB, VOCAB + 1, 10 ** 9, -7],
    "min_p": [0.9999, 1.0, 2.0, -1.0, 1e-9],
    "frequency_penalty": [2.0, -2.0, 100.0, 1e30], "presence_penalty": [2.0, -2.0, 100.0, -1e30],
    "repetition_penalty": [0.0, 1e-9, 2.0, -1.0, 1e9],
    "n": [2, 8, 0, -1, 1000], "best_of": [2, 0, -1], "beam_width": [1, 2, 4, 0, -1],
    "stop": ["", [], [""], ["x"] * 500, ["\U0001f600", "\u0301"], "\n"],
    "stop_token_ids": [[], [VOCAB], [100000, -1], list(range(VOCAB)), [2 ** 63 - 1], [None]],
    "stop_regex": REGEXES, "regex": REGEXES, "ebnf": EBNFS,
    "structural_tag": ['{"type": "structural_tag", "structures": [], "triggers": []}', "junk",
                       json.dumps({"structures": [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}],
                                   "triggers": ["<a>"]})],
    "logit_bias": [{str(VOCAB): 5.0}, {"100000": 1.0}, {"-1": 1.0}, {"abc": 1.0}, {"32": 1e30}, {"32": -1e30},
                   {}, {str(i): 0.1 for i in range(VOCAB)}, {"32": "x"}],
    "sampling_seed": [0, -5, 2 ** 63 - 1, 2 ** 63, 2 ** 70, "7"], "seed": [0, -5, 2 ** 63, 2 ** 70],
    "ignore_eos": [True], "skip_special_tokens": [False], "spaces_between_special_tokens": [False],
    "no_stop_trim": [True], "stream_interval": [1, 0, -1, 1000],
    "custom_params": [{"a": 1}, {"__class__": "x"}, {}], "watermark": [{"key": 1}, {"enabled": True}, {}],
}
TOP_EDGES = {
    "return_logprob": [True], "logprob_start_len": [-1, 0, 3, -5, CONTEXT, 10 ** 6, "x"],
    "top_logprobs_num": [0, 5, VOCAB, VOCAB + 1, 10 ** 6, -1], "logprobs": [0, 5, VOCAB, VOCAB + 1, 10 ** 6, -1],
    "token_ids_logprob": [[32, 101], [], [VOCAB, 100000], [-1], [[1, 2]], list(range(VOCAB))],
    "rid": ["fuzz-dup", "", "x" * 3000, ["a", "b"], 5], "stream": [True],
    "lora_path": ["/no/such/lora", ""], "custom_logit_processor": ["not a processor", '{"callable": "os.system"}'],
    "image_data": ["data:image/png;base64,AAAA", "not an image", []],
    "stream_options": [{"include_usage": True}, {"continuous_usage_stats": True}, {}],
    "response_format": [{"type": "json_object"}, {"type": "text"}, {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
        {"type": "json_schema"}, {"type": "nonsense"}],
    "suffix": ["", "end"], "echo": [True], "model": ["", "no-such-model"],
    "session_params": [{"id": "nope"}, {"id": "x", "offset": -1, "replace": True}],
    "priority": [0, -1, 2 ** 62], "data_parallel_rank": [0, 5], "routed_dp_rank": [0, 3],
}
for _name in ("return_text_in_logprobs", "return_hidden_states", "return_token_ids", "return_cached_tokens_details",
              "return_spec_tokens_details", "return_prompt_token_ids", "return_entropy", "return_bytes",
              "log_metrics", "background", "return_routed_experts", "return_indexer_topk", "return_sampling_mask",
              "require_reasoning", "no_logs", "return_flat_raw_top_logprobs", "return_flat_raw_output_top_logprobs",
              "return_flat_raw_top_logprobs_b64", "use_audio_in_video"):
    TOP_EDGES[_name] = [True]


def edge(rng: random.Random, name: str, table: dict):
    values = table.get(name)
    if name in ("json_schema",):
        s = _schema(rng)
        return json.dumps(s) if rng.random() < 0.8 else rng.choice(["{not json", "", json.dumps(s)[:-1]])
    return rng.choice(values) if values and rng.random() < 0.8 else generic(rng)


# --- a valid request ----------------------------------------------------------------------------------------------
def valid_sampling(rng: random.Random, completions: bool) -> dict:
    names = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "sampling_seed": "seed"}
    n_tokens = rng.randrange(1, 13)
    sp = {"max_new_tokens": n_tokens}
    menu = {
        "temperature": lambda: rng.choice([0.0, 0.0, 0.6, 1.0]), "top_p": lambda: rng.choice([0.9, 0.5]),
        "top_k": lambda: rng.choice([1, 5, 40]), "min_p": lambda: rng.choice([0.05, 0.3]),
        "frequency_penalty": lambda: rng.choice([0.5, -0.5]), "presence_penalty": lambda: 0.8,
        "repetition_penalty": lambda: rng.choice([1.3, 0.8]), "n": lambda: rng.choice([2, 3]),
        "stop": lambda: rng.choice(["\n", ["):", "x"]]), "regex": lambda: rng.choice(REGEXES[:3]),
        "json_schema": lambda: json.dumps(GOOD_SCHEMA), "ebnf": lambda: EBNFS[0],
        "logit_bias": lambda: {"32": 3.0, "10": -100.0}, "sampling_seed": lambda: rng.randrange(10 ** 6),
        "ignore_eos": lambda: True, "min_new_tokens": lambda: rng.randrange(0, n_tokens + 1),
        "stop_token_ids": lambda: [10],
    }
    grammar = False
    for name in rng.sample(sorted(menu), rng.choice([0, 1, 2, 3])):
        if name in ("regex", "json_schema", "ebnf"):
            if grammar:
                continue
            grammar = True
        sp[name] = menu[name]()
    return {names.get(k, k) if completions else k: v for k, v in sp.items()}


def valid_generate(rng: random.Random) -> dict:
    req = {"sampling_params": valid_sampling(rng, False)}
    if rng.random() < 0.25:
        req["input_ids"] = _ids(rng)
    else:
        req["text"] = rng.choice(PROMPTS + UNICODE[:6])
    if rng.random() < 0.2:
        req.update(return_logprob=True, top_logprobs_num=rng.choice([0, 2]), logprob_start_len=rng.choice([-1, 0]))
    req["stream"] = rng.random() < 0.2
    return req


def valid_completions(rng: random.Random) -> dict:
    req = {"model": "default", **valid_sampling(rng, True)}
    req["prompt"] = _ids(rng) if rng.random() < 0.25 else rng.choice(PROMPTS + UNICODE[:6])
    if rng.random() < 0.15:
        req["logprobs"] = rng.choice([0, 2])
    req["stream"] = rng.random() < 0.2
    return req


# --- mutations ----------------------------------------------------------------------------------------------------
PROMPT_EDGES_GENERATE = [
    ("text", ""), ("text", [""]), ("text", ["def a():", ""]), ("text", []), ("text", 5), ("text", None),
    ("text", "x" * 5000), ("text", "\ud800"), ("input_ids", []), ("input_ids", [[]]), ("input_ids", [[40], [41, 42]]),
    ("input_ids", [1.5, 2]), ("input_ids", ["a"]), ("input_ids", [True, 40]), ("input_ids", "oov"),
    ("input_ids", "oov"), ("input_ids", "oov"),
    ("input_ids", list(range(32, 127)) * 12), ("input_embeds", [[0.1] * 128] * 3), ("input_embeds", [[]]),
    ("input_embeds", []), ("both", None)]
PROMPT_EDGES_COMPLETIONS = ["", [], [""], [[]], [[40, 41], [42, 43]], ["a", "b"], 7, None, [1.5], "y" * 5000, "oov",
                            "oov", [[40], "oov"], "\ud800"]


def mutate_prompt(rng: random.Random, req: dict, completions: bool) -> None:
    if completions:
        value = rng.choice(PROMPT_EDGES_COMPLETIONS)
        req["prompt"] = _ids(rng, oov=True) if value == "oov" else \
            [[40], _ids(rng, oov=True)] if value == [[40], "oov"] else value
        return
    name, value = rng.choice(PROMPT_EDGES_GENERATE)
    for k in ("text", "input_ids", "input_embeds"):
        req.pop(k, None)
    if name == "both":
        req["text"], req["input_ids"] = "both", [40, 41]
    else:
        req[name] = _ids(rng, oov=True) if value == "oov" else value


def mutate(rng: random.Random, req: dict, field: str, completions: bool) -> None:
    """Set one field of req to an edge value ("prompt": the prompt; "sp:NAME": a sampling parameter of /generate)."""
    if field in ("prompt", "text", "input_ids", "input_embeds"):
        mutate_prompt(rng, req, completions)
    elif field.startswith("sp:"):
        name = field[3:]
        sp = req["sampling_params"]
        if not isinstance(sp, dict):
            return
        sp[name] = edge(rng, name, SAMPLING_EDGES)
    elif field == "sampling_params":
        req["sampling_params"] = rng.choice([generic(rng), [req["sampling_params"]] * 2, {"unknown_field": 1}])
    elif completions and field in SAMPLING_EDGES:
        req[field] = edge(rng, field, SAMPLING_EDGES)
    else:
        req[field] = edge(rng, field, TOP_EDGES)


def api_fields():
    """(GenerateReqInput's fields, SamplingParams' API fields, CompletionRequest's fields) of the installed SGLang."""
    import dataclasses

    from sglang.srt.entrypoints.openai.protocol import CompletionRequest
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    internal = {"stop_strs", "stop_regex_strs", "stop_str_max_len", "stop_regex_max_len", "is_normalized",
                "ebnf_full_assistant"}  # SamplingParams' own bookkeeping, below its "internal fields" line
    sp = [f for f in SamplingParams.__struct_fields__ if f not in internal]
    return [f.name for f in dataclasses.fields(GenerateReqInput)], sp, list(CompletionRequest.model_fields)


def served_fields():
    """api_fields() of the servers' SGLang, read in a process of their environment (fleet.environment: SGLang's
    import needs the CPU site's stand-ins, which this process does not load)."""
    import os
    import subprocess
    import sys

    import fleet

    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", "import json, fuzz; print(json.dumps(fuzz.api_fields()))"],
                         cwd=here, env=fleet.environment(fleet.SGLANG), capture_output=True, text=True, check=True)
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def requests(seed: int, count: int, fields=None) -> list[tuple[str, dict, int | None, list[str]]]:
    """[(path, payload, chunks to read before dropping a stream (None: read it all), fields mutated)] for a seed."""
    gen_fields, sp_fields, cmp_fields = fields or served_fields()
    every = [("/generate", f) for f in gen_fields] + [("/generate", "sp:" + f) for f in sp_fields] + \
            [("/v1/completions", f) for f in cmp_fields]
    rng = random.Random(seed)
    out = []
    for i in range(count):
        path, first = every[i % len(every)] if i < len(every) else (None, None)
        if path is None:
            path = "/generate" if rng.random() < 0.6 else "/v1/completions"
        completions = path == "/v1/completions"
        req = valid_completions(rng) if completions else valid_generate(rng)
        pool = ["prompt"] + (cmp_fields if completions else gen_fields + ["sp:" + f for f in sp_fields])
        mutated = ([first] if first else []) + rng.sample(pool, rng.choice([0, 0, 1, 1, 2]))
        if rng.random() < 0.15:  # the prompt, where stock SGLang's crashes live, more often than one field in ~100
            mutated.append("prompt")
        for field in mutated:
            mutate(rng, req, field, completions)
        drop = rng.choice([1, 2, 3]) if req.get("stream") is True and rng.random() < 0.5 else None
        out.append((path, req, drop, mutated))
    return out
