"""Greedy losslessness across running SGLang servers: the same prompts, token ids compared with a reference.

usage: python scripts/sglang_lossless.py --ref base=URL --server ddtree=URL [--server ...] --out FILE.json
Each server gets every prompt as its own /generate request (temperature 0, ignore_eos), `--concurrency` at a
time, so batches of varying size form on the server. Exit status 1 on any mismatch.
"""
import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from ab_bench import make_prompts  # noqa: E402


def generate(base, prompt, max_new_tokens):
    payload = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                                   "ignore_eos": True}}
    req = urllib.request.Request(base + "/generate", json.dumps(payload).encode(),
                                 {"Content-Type": "application/json"})
    out = json.loads(urllib.request.urlopen(req, timeout=600).read())
    meta = out.get("meta_info", {})
    return {"ids": out.get("output_ids"), "text": out.get("text"), "tokens": meta.get("completion_tokens"),
            "rounds": meta.get("spec_verify_ct")}


def run(base, prompts, max_new_tokens, concurrency):
    t0 = time.time()
    with cf.ThreadPoolExecutor(concurrency) as pool:
        outs = list(pool.map(lambda p: generate(base, p, max_new_tokens), prompts))
    return outs, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--server", action="append", default=[])
    ap.add_argument("--num-prompts", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    prompts = make_prompts(a.num_prompts, 24, seed=1234)
    servers = dict(s.split("=", 1) for s in [a.ref] + a.server)
    ref_name = a.ref.split("=", 1)[0]
    with cf.ThreadPoolExecutor(len(servers)) as pool:
        futs = {name: pool.submit(run, url.rstrip("/"), prompts, a.max_new_tokens, a.concurrency)
                for name, url in servers.items()}
        results = {name: f.result() for name, f in futs.items()}
    ref = results[ref_name][0]
    key = "ids" if ref[0]["ids"] is not None else "text"
    report = {"prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "compared_on": key,
              "reference": ref_name, "servers": {}}
    ok = True
    for name, (outs, wall) in results.items():
        same = [o[key] == r[key] for o, r in zip(outs, ref)]
        rounds = [o["rounds"] for o in outs if o["rounds"]]
        toks = sum(o["tokens"] or 0 for o in outs if o["rounds"])
        first_bad = next((i for i, s in enumerate(same) if not s), None)
        report["servers"][name] = {
            "identical": sum(same), "of": len(same), "wall_s": round(wall, 2),
            "accept_len": round(toks / sum(rounds), 3) if rounds else None,
            "first_mismatch": None if first_bad is None else {
                "prompt": prompts[first_bad], "ref": ref[first_bad][key], "got": outs[first_bad][key]}}
        ok &= all(same)
        print(f"{name}: {sum(same)}/{len(same)} identical to {ref_name}; accept_len "
              f"{report['servers'][name]['accept_len']}; {wall:.1f}s", flush=True)
    json.dump(report, open(a.out, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
