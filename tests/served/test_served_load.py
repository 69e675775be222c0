"""DDTree served on the CPU under load: 64 concurrent streams through a pool small enough to force SGLang to retract
requests, a tenth of the clients going away mid-stream. The server must stay healthy, and every stream that
completes must carry the plain server's greedy output."""
import concurrent.futures as cf
import json
import random
import urllib.request

from fleet import generate_many, healthy

STREAMS, DROPPED, TOKENS = 64, 6, 96


def stream(base, prompt, sampling, drop_after=None):
    """The last event of a streamed /generate (None: the client went away after `drop_after` events)."""
    payload = {"text": prompt, "sampling_params": sampling, "stream": True}
    req = urllib.request.Request(base + "/generate", json.dumps(payload).encode(), {"Content-Type": "application/json"})
    last = None
    with urllib.request.urlopen(req, timeout=900) as r:
        for k, line in enumerate(r):
            if drop_after is not None and k >= drop_after:
                return None
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                last = json.loads(line[6:])
    return last


def test_streams_with_disconnects_under_retraction(fleet, prompts):
    url = fleet.url("ddtree_edge")
    sampling = {"temperature": 0.0, "max_new_tokens": TOKENS, "ignore_eos": True}
    ps = [prompts[i % len(prompts)] for i in range(STREAMS)]
    drop = set(random.Random(1).sample(range(STREAMS), DROPPED))
    with cf.ThreadPoolExecutor(STREAMS) as pool:
        outs = list(pool.map(lambda i: stream(url, ps[i], sampling, 3 if i in drop else None), range(STREAMS)))
    assert healthy(url), "the DDTree server stopped answering"
    kept = [i for i in range(STREAMS) if i not in drop]
    done = [outs[i] for i in kept]
    assert all(o is not None and len(o["output_ids"]) == TOKENS for o in done)
    assert sum(o["meta_info"].get("num_retractions", 0) for o in done) > 0, "the pool never forced a retraction"
    want = generate_many(fleet.url("plain"), [ps[i] for i in kept], sampling, concurrency=32)
    assert [o["output_ids"] for o in done] == [w["output_ids"] for w in want]
