"""The request fuzzer: COUNT requests from every field SGLang's /generate and /v1/completions take (fuzz.py, seed
SEED), each sent to the DDTree server and then to the plain server, one at a time, as a user sends them (a streamed
one may be dropped after its first chunks).

What it catches: a request that takes the DDTree server down or leaves it unanswering (a death), an answer that is
neither a 200 nor a 4xx, and an answer of another class than the plain server's. Allowed, and counted apart: the
plain server dies where DDTree refuses (stock SGLang's crashes, requests.crashes_sglang; after the plain server's
first death of a kind, that kind is no longer sent to it), answers 500 where DDTree answers 400 (SGLang's tokenizer
failing on a malformed field, requests.unreadable), answers 200 where DDTree refuses by its documented rules
(SERVING.md's Requests) or refuses what crashes stock SGLang only in some batches (stop ids outside the vocabulary),
or both answer the same 500 from SGLang's scheduler (a grammar that ends where min_new_tokens still holds the end
of text).
"""
from __future__ import annotations

import collections
import http.client
import json
import re
import urllib.parse

import fuzz
from fleet import healthy

SEED, COUNT = 56, 300
REFUSED = "DDTREE server refused the request: "  # requests.py's refusals of what stock SGLang fails on
DOCUMENTED = "DDTREE speculative decoding does not"  # DDTree's own refusals (SERVING.md)
# refusals of what crashes stock SGLang only next to some other request (a batch with min_new_tokens), so that the
# plain server, asked alone, may answer 200
BATCH_KILLERS = ("stop_token_ids holds",)


def send(url: str, path: str, payload, drop, timeout: float = 120) -> tuple[str, str]:
    """(answer class: '200' / '4xx' / '5xx' / 'lost' (no answer: a dead or hung server), the body's start). A stream
    is read to its end, or dropped (the socket closed) after `drop` chunks; one whose first chunk is an error is
    classed by the error's code (SGLang streams a refusal that way, after its 200), one that ends without its
    [DONE] as a 5xx (the server failed after its 200)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(payload).encode("utf-8", "surrogatepass"),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status == 200 and isinstance(payload, dict) and payload.get("stream") is True:
            chunks = 0
            for line in iter(r.readline, b""):
                if not line.startswith(b"data:"):
                    continue
                if line.strip() == b"data: [DONE]":
                    return "200", ""
                chunks += 1
                if chunks == 1:
                    code = stream_error(line[5:])
                    if code is not None:
                        return f"{code // 100}xx", line.decode(errors="replace")[:400]
                if drop is not None and chunks >= drop:
                    conn.sock.close()  # the client goes away mid-stream
                    return "200", "dropped"
            return "5xx", f"the stream broke off after {chunks} chunks"  # the server failed after its 200
        body = r.read().decode(errors="replace")[:400]
        return ("200" if r.status == 200 else f"{r.status // 100}xx"), body
    except (OSError, http.client.HTTPException) as e:
        return "lost", repr(e)
    finally:
        conn.close()


def stream_error(data: bytes) -> int | None:
    """The HTTP code of a stream chunk that is an error ({"error": {..., "code"}} or {"object": "error", "code"}),
    else None."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return None
    if not isinstance(chunk, dict):
        return None
    error = chunk.get("error") if isinstance(chunk.get("error"), dict) else chunk if chunk.get("object") == "error" \
        else None
    return None if error is None else int(error.get("code") or 400)


def refused_kind(body: str) -> str | None:
    """The crash kind a DDTree refusal names (the words after REFUSED up to the first comma, numbers as N), else
    None."""
    i = body.find(REFUSED)
    return None if i < 0 else re.sub(r"-?\d+", "N", body[i + len(REFUSED):].split(",")[0].split("(")[0][:40])


def restart(fleet, server):
    """The server started again (its dying processes stopped first, so the fleet does not hand them back)."""
    server.stop()
    return fleet.server(server.name)


def error_kind(body: str) -> str:
    """An error answer's message up to its first colon (the rest may name the sampled tokens)."""
    try:
        message = json.loads(body).get("message", body)
    except (ValueError, AttributeError):
        message = body
    return str(message).split(":")[0]


def test_fuzzed_requests_never_take_the_ddtree_server_down(fleet, report):
    gen, sp, cmp = fuzz.served_fields()
    requests = fuzz.requests(SEED, COUNT, (gen, sp, cmp))
    fields = {f for *_, mutated in requests for f in mutated}
    every = set(gen) | {"sp:" + f for f in sp} | set(cmp)
    assert every <= fields | {"prompt"}, f"fields no request mutated: {sorted(every - fields)}"

    ddtree, plain = fleet.server("ddtree"), fleet.server("plain")
    counts = collections.Counter({"sent": 0, "200": 0, "4xx": 0, "deaths": 0})
    plain_killed_by = set()  # kinds of refusal the plain server died of
    failures = []
    last = None  # the request the plain server answered last, and DDTree's answer to it

    def plain_died(i, path, mutated, got, body, kind):
        counts["plain deaths"] += 1
        report.append(f"request fuzzer: #{i} {path} {mutated} took the plain server down; DDTree answered {got}: "
                      f"{body[:100]}")
        if got == "4xx" and kind is not None:
            plain_killed_by.add(kind)
        else:
            failures.append(f"#{i} {path} {mutated}: the plain server died, DDTree answered {got} ({body[:160]})")

    for i, (path, payload, drop, mutated) in enumerate(requests):
        if not ddtree.alive():  # it died after answering the last request
            counts["deaths"] += 1
            failures.append(f"#{i - 1}: the DDTree server died after answering")
            ddtree = restart(fleet, ddtree)
        got, body = send(ddtree.url, path, payload, drop)
        counts["sent"] += 1
        if not ddtree.alive() or (got == "lost" or i % 50 == 49) and not healthy(ddtree.url):
            counts["deaths"] += 1
            failures.append(f"#{i} {path} {mutated}: the DDTree server died: {json.dumps(payload)[:300]}")
            ddtree = restart(fleet, ddtree)  # the rest still runs
            continue
        counts[got] += 1
        counts["dropped mid-stream"] += body == "dropped"
        if got not in ("200", "4xx", "5xx"):
            failures.append(f"#{i} {path} {mutated}: no answer ({body})")
            continue
        kind = refused_kind(body)
        counts["refused as stock SGLang fails on it"] += kind is not None
        if kind is not None and kind in plain_killed_by:
            counts["not sent to plain (it died of this kind)"] += 1
            continue
        if not plain.alive():  # it died after answering the last request it was sent
            plain_died(*last)
            plain = restart(fleet, plain)
        want, plain_body = send(plain.url, path, payload, drop)
        last = (i, path, mutated, got, body, kind)
        if not plain.alive() or want == "lost" and not healthy(plain.url):
            plain_died(*last)
            plain = restart(fleet, plain)
            continue
        if got == want == "5xx" and error_kind(body) == error_kind(plain_body):
            counts["5xx, as the plain server"] += 1
        elif got == "5xx":
            failures.append(f"#{i} {path} {mutated}: DDTree answered {body[:200]}; plain {want} ({plain_body[:120]})")
        elif got == want:
            continue
        elif got == "4xx" and want == "5xx" and kind is not None:
            counts["4xx where the plain server answers 5xx"] += 1
        elif got == "4xx" and want == "200" and DOCUMENTED in body:
            counts["refused by DDTree's documented rules"] += 1
        elif got == "4xx" and want == "200" and kind is not None and kind.startswith(BATCH_KILLERS):
            counts["refused: stock SGLang fails on it in some batches"] += 1
        else:
            failures.append(f"#{i} {path} {mutated}: DDTree {got} ({body[:160]}), plain {want} ({plain_body[:160]})")
    report.append(f"request fuzzer (seed {SEED}): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert healthy(ddtree.url), "the DDTree server stopped answering after the fuzzer"
    assert failures == [], "\n".join(failures)
