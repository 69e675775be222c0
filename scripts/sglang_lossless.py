"""Greedy losslessness across running SGLang servers, with every divergence explained or not.

usage: python scripts/sglang_lossless.py --ref base=URL --server ddtree=URL [--server ...] --prompts-file F --out FILE.json
Every server gets every prompt as its own /generate request (temperature 0, ignore_eos), `--concurrency` at a
time, so batches of varying size form on the server. The reference (a server without speculation) also returns
its top-2 log-probabilities at every output position. For each prompt where a server's tokens differ, the first
divergent position k is examined: the divergence is *explained* when the server's token there is the
reference's second choice and the reference's top-2 gap is within `--tie-tol` nats (the two logits are equal
up to fp16/bf16 rounding, so which one wins depends on the kernel's summation order, not on the algorithm).
Exit status 1 on any unexplained divergence.
"""
import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from ab_bench import load_prompts  # noqa: E402


def generate(base, prompt, max_new_tokens, logprobs):
    sp = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}
    payload = {"text": prompt, "sampling_params": sp}
    if logprobs:
        payload.update(return_logprob=True, top_logprobs_num=2)
    req = urllib.request.Request(base + "/generate", json.dumps(payload).encode(), {"Content-Type": "application/json"})
    out = json.loads(urllib.request.urlopen(req, timeout=600).read())
    meta = out.get("meta_info", {})
    top = [[(lp, tid) for lp, tid, *_ in pos] for pos in meta.get("output_top_logprobs") or []] if logprobs else None
    return {"ids": out.get("output_ids"), "tokens": meta.get("completion_tokens"),
            "rounds": meta.get("spec_verify_ct"), "top2": top}


def run(base, prompts, max_new_tokens, concurrency, logprobs=False):
    t0 = time.time()
    with cf.ThreadPoolExecutor(concurrency) as pool:
        outs = list(pool.map(lambda p: generate(base, p, max_new_tokens, logprobs), prompts))
    return outs, time.time() - t0


def explain(ref, got, tol):
    k = next(i for i, (a, b) in enumerate(zip(ref["ids"], got["ids"])) if a != b)
    top = ref["top2"][k] if ref["top2"] and k < len(ref["top2"]) else []
    if len(top) < 2:
        return {"position": k, "explained": False, "why": "no top-2 log-probs at that position"}
    (lp1, t1), (lp2, t2) = top[0], top[1]
    gap = lp1 - lp2
    second = got["ids"][k] == t2
    return {"position": k, "ref_token": ref["ids"][k], "got_token": got["ids"][k], "top1": [t1, lp1],
            "top2": [t2, lp2], "gap_nats": gap, "got_is_second": second, "explained": bool(second and gap <= tol)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--server", action="append", default=[])
    ap.add_argument("--prompts-file", required=True)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tie-tol", type=float, default=0.05, help="top-2 gap (nats) that counts as a rounding tie")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    prompts = load_prompts(a.prompts_file)[: a.num_prompts]
    ref_name, ref_url = a.ref.split("=", 1)
    servers = dict(s.split("=", 1) for s in a.server)
    ref, ref_wall = run(ref_url.rstrip("/"), prompts, a.max_new_tokens, a.concurrency, logprobs=True)
    # the compared servers one after another (each is measured alone), all against the same reference run
    results = {n: run(u.rstrip("/"), prompts, a.max_new_tokens, a.concurrency) for n, u in servers.items()}
    report = {"prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "reference": ref_name,
              "tie_tol_nats": a.tie_tol, "servers": {}}
    ok = True
    for name, (outs, wall) in results.items():
        same = [o["ids"] == r["ids"] for o, r in zip(outs, ref)]
        div = {i: explain(ref[i], outs[i], a.tie_tol) for i, s in enumerate(same) if not s}
        rounds = [o["rounds"] for o in outs if o["rounds"]]
        toks = sum(o["tokens"] or 0 for o in outs if o["rounds"])
        unexplained = [i for i, d in div.items() if not d["explained"]]
        report["servers"][name] = {"identical": sum(same), "of": len(same), "explained": len(div) - len(unexplained),
                                   "unexplained": len(unexplained), "wall_s": round(wall, 2),
                                   "accept_len": round(toks / sum(rounds), 3) if rounds else None,
                                   "divergences": {str(i): d for i, d in div.items()}}
        ok &= not unexplained
        gaps = ", ".join(f"{d.get('gap_nats', float('nan')):.4f}" for d in div.values())
        print(f"{name}: {sum(same)}/{len(same)} identical to {ref_name}; {len(div) - len(unexplained)} divergences "
              f"explained by near-ties, {len(unexplained)} not (gaps: {gaps or '-'}); accept_len "
              f"{report['servers'][name]['accept_len']}", flush=True)
    json.dump(report, open(a.out, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
