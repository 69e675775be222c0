"""Every per-request feature against a DDTree server and servers without speculation, as a user sends them.

usage: python scripts/robust_check.py --ddtree URL --plain URL --plain-sync URL --prompts-file F --out FILE.json
  --plain: the same model without speculation; --plain-sync: the same with --disable-overlap-schedule (SGLang's
  overlap path penalises each token by the output up to the one before the last; the synchronous path by all
  of it, which is the definition DDTree serves). Each check is one JSON record; after each, the DDTree server's
  /health_generate must answer (a request that killed it is the failure this script exists to find).
Checks: grammar (json_schema, regex, ebnf) greedy identity; top_p 1e-6 / min_p 0.9999 at T 1.5 equal greedy;
frequency / presence / repetition penalties and min_new_tokens greedy identity; n = 8 and 8 concurrent copies
at T 1 are 8 distinct samples; logprobs next to the plain server's; requests that run to the context limit
next to short ones, then idle (the pool's leak check); load with disconnects and retraction.
Divergences from the plain server are judged as scripts/sglang_lossless.py judges them (near-ties explained).
Exit status 1 when the DDTree server stopped answering or a check failed.
"""
import argparse
import concurrent.futures as cf
import json
import random
import sys
import time
import urllib.request

from sglang_ddtree.bench.ab import load_prompts
from sglang_lossless import rounding_tie  # scripts/sglang_lossless.py: this script's folder is first on sys.path

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "count": {"type": "integer"}}, "required": ["name", "count"]}
REGEX = r"def [a-z_]{1,12}\(self(, [a-z_]{1,8}){0,3}\):"
EBNF = 'root ::= "return " name ("." name)*\nname ::= [a-z_]+'


def post(base, payload, timeout=600):
    req = urllib.request.Request(base + "/generate", json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        return json.loads(urllib.request.urlopen(req, timeout=timeout).read())
    except urllib.error.HTTPError as e:
        return {"error": e.code, "body": e.read().decode(errors="replace")[:400]}


def healthy(base) -> bool:
    try:
        urllib.request.urlopen(base + "/health_generate", timeout=60)
        return True
    except Exception:
        return False


def gen(base, prompt, sp, **extra):
    payload = {"sampling_params": sp, **extra}
    payload["input_ids" if isinstance(prompt, list) else "text"] = prompt
    return post(base, payload)


def many(base, prompts, sp, concurrency=16, **extra):
    with cf.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda p: gen(base, p, sp, **extra), prompts))


def compare(got, ref, ref_top=None, tol=0.02):
    """Per prompt: identical, or the first divergence and whether it is a near-tie of the reference's top two."""
    out = {"identical": 0, "of": len(got), "divergences": []}
    for i, (g, r) in enumerate(zip(got, ref)):
        a, b = g.get("output_ids"), r.get("output_ids")
        if a == b:
            out["identical"] += 1
            continue
        if a is None or b is None:
            out["divergences"].append({"prompt": i, "error": g.get("error") or r.get("error")})
            continue
        k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        d = {"prompt": i, "position": k, "lengths": [len(a), len(b)]}
        top = (ref_top[i] if ref_top else None) or []
        if k < len(top) and len(top[k]) >= 2 and k < min(len(a), len(b)):
            (l1, t1), (l2, t2) = top[k][0][:2], top[k][1][:2]
            d["explained"] = rounding_tie(b[k], a[k], (t1, l1), (t2, l2), tol)
            d["gap_nats"] = l1 - l2
        out["divergences"].append(d)
    out["unexplained"] = sum(not d.get("explained", False) for d in out["divergences"])
    return out


def top2(outs):
    return [[[(lp, tid) for lp, tid, *_ in pos] for pos in (o.get("meta_info", {}).get("output_top_logprobs") or [])]
            for o in outs]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ddtree", required=True)
    ap.add_argument("--plain", required=True)
    ap.add_argument("--plain-sync", required=True)
    ap.add_argument("--prompts-file", required=True)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--context", type=int, default=2048, help="the servers' --context-length")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    prompts = load_prompts(args.prompts_file)[: args.num_prompts]
    dd, plain, sync = args.ddtree, args.plain, args.plain_sync
    greedy = {"temperature": 0.0, "max_new_tokens": 48}
    report = {"checks": {}, "alive": True}

    def record(name, fn):
        t0 = time.time()
        try:
            res = fn()
        except Exception as e:  # the check's own failure, reported (the server's health is judged below)
            res = {"ok": False, "exception": f"{type(e).__name__}: {e}"}
        res["seconds"] = round(time.time() - t0, 1)
        res["healthy_after"] = healthy(dd)
        report["checks"][name] = res
        report["alive"] &= res["healthy_after"]
        print(name, json.dumps({k: v for k, v in res.items() if k != "divergences"}), flush=True)
        json.dump(report, open(args.out, "w"), indent=1)

    def identity(sp, ref_server, n=None, **extra):
        ps = prompts[: n or len(prompts)]
        ref = many(ref_server, ps, sp, return_logprob=True, top_logprobs_num=2, **extra)
        got = many(dd, ps, sp, **extra)
        res = compare(got, ref, top2(ref))
        res["errors"] = [o.get("body") for o in got if "error" in o][:3]
        res["accept_length"] = [o.get("meta_info", {}).get("spec_accept_length") for o in got][:4]
        res["ok"] = not res["errors"] and res["unexplained"] == 0
        return res

    for kind, value in (("json_schema", json.dumps(SCHEMA)), ("regex", REGEX), ("ebnf", EBNF)):
        record(f"grammar_{kind}", lambda kind=kind, value=value: identity({**greedy, kind: value}, plain, 8))
    for name, sp in (("top_p_1e-6", {"temperature": 1.5, "top_p": 1e-6}), ("min_p_0.9999", {"temperature": 1.5,
                                                                                             "min_p": 0.9999})):
        record(name, lambda sp=sp: identity({**sp, "max_new_tokens": 48}, plain, 8))
    for name, sp in (("frequency_penalty", {"frequency_penalty": 0.8}), ("presence_penalty", {"presence_penalty": 0.8}),
                     ("repetition_penalty", {"repetition_penalty": 1.3}),
                     ("min_new_tokens", {"min_new_tokens": 40, "max_new_tokens": 56})):
        record(name, lambda sp=sp: identity({**greedy, **sp}, sync, 8))
        if name == "frequency_penalty":  # SGLang's overlap path, for the record (one token of lag): not judged
            record(name + "_vs_plain_overlap",
                   lambda sp=sp: {**identity({**greedy, **sp}, plain, 8), "ok": None, "informational": True})

    def independent():
        sp = {"temperature": 1.0, "max_new_tokens": 24}
        one = gen(dd, prompts[0], {**sp, "n": 8})
        texts = [o.get("text") for o in one] if isinstance(one, list) else [one.get("error"), one.get("body")]
        copies = [o.get("text") for o in many(dd, [prompts[1]] * 8, sp, concurrency=8)]
        return {"n8_distinct": len(set(texts)), "copies8_distinct": len(set(copies)),
                "ok": len(set(texts)) == 8 and len(set(copies)) == 8}
    record("independent_samples", independent)

    def logprobs():
        sp = {**greedy, "max_new_tokens": 32}
        ref = many(plain, prompts[:8], sp, return_logprob=True, top_logprobs_num=3)
        got = many(dd, prompts[:8], sp, return_logprob=True, top_logprobs_num=3)
        diffs, same, errors = [], 0, [o.get("body") for o in got if "error" in o]
        for g, r in zip(got, ref):
            if "error" in g:
                continue
            a = g["meta_info"]["output_token_logprobs"]
            b = r["meta_info"]["output_token_logprobs"]
            same += g["output_ids"] == r["output_ids"]
            k = next((j for j, (x, y) in enumerate(zip(a, b)) if x[1] != y[1]), min(len(a), len(b)))
            diffs += [abs(x[0] - y[0]) for x, y in zip(a[:k], b[:k])]
            tops = g["meta_info"].get("output_top_logprobs") or []
            if len(tops) != len(a) or any(len(t) != 3 for t in tops):
                errors.append("top_logprobs missing or of the wrong length")
        return {"identical_tokens": same, "of": len(got), "max_abs_logprob_diff": max(diffs) if diffs else None,
                "errors": errors[:3], "ok": not errors and bool(diffs) and max(diffs) < 0.05}
    record("logprobs", logprobs)

    def context_edge():
        rng = random.Random(0)
        long = [[rng.randrange(32, 200) for _ in range(args.context - 300)] for _ in range(2)]
        sp_long = {"temperature": 0.0, "max_new_tokens": 300, "ignore_eos": True}  # prompt + output = the context
        short = prompts[:20]
        with cf.ThreadPoolExecutor(22) as pool:
            fl = [pool.submit(gen, dd, p, sp_long) for p in long]
            fs = [pool.submit(gen, dd, p, {**greedy, "ignore_eos": True}) for p in short]
            outs_long, outs_short = [f.result() for f in fl], [f.result() for f in fs]
        ref_short = many(plain, short, {**greedy, "ignore_eos": True})
        time.sleep(20)  # idle: SGLang's self-check counts the pool's free slots
        lens = [len(o.get("output_ids") or []) for o in outs_long]
        return {"long_output_lens": lens, "long_errors": [o.get("body") for o in outs_long if "error" in o],
                "short_identical": sum(a.get("output_ids") == b.get("output_ids") for a, b in zip(outs_short, ref_short)),
                "short_of": len(short), "ok": healthy(dd) and all(n > 0 for n in lens)}
    record("context_limit_then_idle", context_edge)

    def load_with_disconnects():
        sp = {"temperature": 0.0, "max_new_tokens": 128, "ignore_eos": True}
        ps = [prompts[i % len(prompts)] for i in range(256)]
        drop = set(random.Random(1).sample(range(256), 26))

        def stream(i):
            payload = {"text": ps[i], "sampling_params": sp, "stream": True}
            req = urllib.request.Request(dd + "/generate", json.dumps(payload).encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=900) as r:
                last = None
                for k, line in enumerate(r):
                    if i in drop and k >= 3:
                        return None  # the client goes away mid-stream
                    if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                        last = json.loads(line[6:])
                return last
        with cf.ThreadPoolExecutor(256) as pool:
            outs = list(pool.map(stream, range(256)))
        kept = [i for i in range(256) if i not in drop]
        ref = many(plain, [ps[i] for i in kept], sp, concurrency=64)
        done = [outs[i] for i in kept]
        same = sum(o is not None and o.get("output_ids") == r.get("output_ids") for o, r in zip(done, ref))
        return {"completed": sum(o is not None for o in done), "of": len(kept), "identical": same,
                "ok": healthy(dd) and all(o is not None for o in done)}
    record("load_256_with_disconnects", load_with_disconnects)

    report["ok"] = report["alive"] and all(c.get("ok", False) for c in report["checks"].values()
                                           if not c.get("informational"))
    json.dump(report, open(args.out, "w"), indent=1)
    print("alive" if report["alive"] else "THE DDTREE SERVER STOPPED ANSWERING", "ok" if report["ok"] else "NOT OK")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
