#!/usr/bin/env python3
"""Streaming chat against an OpenAI-compatible SGLang server, printing the acceptance length at the end.

  python examples/client_chat.py "Write a haiku about trees" [--url http://127.0.0.1:30000] [--max-tokens 256]

A model without a chat template (the shipped tiny pair `make serve-cpu` serves) gets the prompt as a plain
completion instead (/v1/completions), and the client says so. The acceptance length (tokens committed per verify
round) comes from SGLang's per-request metadata,
meta_info.completion_tokens / meta_info.spec_verify_ct of a /generate response. The OpenAI chat stream does
not carry that metadata, so after streaming the chat answer the client sends the prompt text once more
through /generate (raw text, no chat template) and reports that request's acceptance length.
The standard library and this package's command-line checks (sglang_ddtree._cli: no torch, no SGLang import).
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from sglang_ddtree._cli import Parser, nonnegative_float, positive_int

PROG = "examples/client_chat.py"


def server_url(text):
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT, got {text!r}")
    return text.rstrip("/")


def reachable(base, timeout=5.0):
    """None when the server answers (any HTTP status), else why not: checked before the chat starts."""
    try:
        urllib.request.urlopen(base + "/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (urllib.error.URLError, OSError) as e:
        return str(getattr(e, "reason", e))
    return None


def post(url, payload):
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=600)


def stream(base, path, payload, piece):
    """POST a streaming OpenAI request and print each chunk's text (piece(choice)) as it comes: (seconds to the
    first text, seconds in all, the usage the last chunk carried)."""
    t0, first, usage = time.perf_counter(), None, None
    with post(base + path, payload) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                text = piece(choice)
                if text:
                    first = first or time.perf_counter() - t0
                    sys.stdout.write(text)
                    sys.stdout.flush()
    print()
    return first, time.perf_counter() - t0, usage


def body_of(error):
    """An HTTPError's body, read once (kept on the error for whoever reports it)."""
    if not hasattr(error, "body_text"):
        error.body_text = error.read().decode(errors="replace")
    return error.body_text


def no_chat_template(error):
    """Whether an HTTPError says the model has no chat template (SGLang's 400)."""
    return error.code == 400 and "chat_template" in body_of(error).replace(" ", "_")


def chat_stream(base, prompt, max_tokens, temperature):
    """The chat answer streamed; a model without a chat template (the shipped tiny pair of `make serve-cpu`) gets the
    prompt as a plain completion instead, said on stderr."""
    common = {"model": "default", "stream": True, "max_tokens": max_tokens, "temperature": temperature,
              "stream_options": {"include_usage": True}}
    try:
        return stream(base, "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}]},
                      lambda choice: choice.get("delta", {}).get("content"))
    except urllib.error.HTTPError as e:
        if not no_chat_template(e):
            raise
    sys.stderr.write(f"{PROG}: the server's model has no chat template: streaming the prompt as a plain "
                     "completion (/v1/completions) instead\n")
    return stream(base, "/v1/completions", {**common, "prompt": prompt}, lambda choice: choice.get("text"))


def acceptance(base, prompt, max_tokens, temperature):
    payload = {"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": temperature}}
    meta = json.loads(post(base + "/generate", payload).read()).get("meta_info", {})
    rounds, tokens = meta.get("spec_verify_ct"), meta.get("completion_tokens")
    return (tokens / rounds) if rounds else None, meta


def main(argv=None):
    ap = Parser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("prompt", nargs="?", default="Explain speculative decoding in three sentences.")
    ap.add_argument("--url", type=server_url, default="http://127.0.0.1:30000", help="the SGLang server")
    ap.add_argument("--max-tokens", type=positive_int, default=256)
    ap.add_argument("--temperature", type=nonnegative_float, default=0.0)
    a = ap.parse_args(argv)
    why = reachable(a.url)
    if why is not None:
        sys.stderr.write(f"{PROG}: error: argument --url: no server answers at {a.url} ({why}); start one with "
                         "bash examples/launch_ddtree.sh (a GPU) or make serve-cpu (this CPU)\n")
        return 1
    try:
        ttft, total, usage = chat_stream(a.url, a.prompt, a.max_tokens, a.temperature)
        accept, meta = acceptance(a.url, a.prompt, a.max_tokens, a.temperature)
    except urllib.error.HTTPError as e:
        detail = body_of(e).strip().splitlines()
        sys.stderr.write(f"{PROG}: error: the server at {a.url} answered {e.code} {e.reason}"
                         f"{': ' + detail[0][:300] if detail else ''}\n")
        return 1
    except (urllib.error.URLError, OSError) as e:
        sys.stderr.write(f"{PROG}: error: lost the server at {a.url}: {getattr(e, 'reason', e)}\n")
        return 1
    n = (usage or {}).get("completion_tokens") or meta.get("completion_tokens")
    print(f"--- {n} tokens, TTFT {1e3 * (ttft or total):.0f} ms, {total:.2f} s total; acceptance length "
          f"{'n/a (no speculative rounds reported)' if accept is None else format(accept, '.2f')}"
          f" ({meta.get('spec_verify_ct')} verify rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
