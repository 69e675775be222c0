"""Greedy losslessness across running SGLang servers, with every divergence explained or not.

usage: python scripts/sglang_lossless.py --ref base=URL --server ddtree=URL [--server ...] --prompts-file F --out FILE.json
Every server gets every prompt as its own /generate request (temperature 0, ignore_eos), `--concurrency` at a
time, so batches of varying size form on the server. The reference (a server without speculation) also returns
its top-2 log-probabilities at every output position. For each prompt where a server's tokens differ, the first
divergent position k is examined: the divergence is *explained* when the server's token and the reference's
are the reference's top two (in either order: an exact tie may be listed either way) and their gap is within
`--tie-tol` nats (the two logits are equal up to fp16/bf16 rounding, so which one wins depends on the kernel's
summation order, not on the algorithm). Exit status 1 on any unexplained divergence.
`--reexplain REPORT.json [TOL]` re-judges a stored report with this rule (its raw tokens and log-probs kept).
"""
import argparse
import concurrent.futures as cf
import json
import sys
import time
import urllib.request

from sglang_ddtree.bench.ab import load_prompts


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


def rounding_tie(ref_token, got_token, top1, top2, tol) -> bool:
    """The two tokens are the reference's top two, in either order (at an exact tie the reference's own argmax
    and its top-k listing may order them differently), and their log-probabilities are within `tol` nats."""
    return {ref_token, got_token} == {top1[0], top2[0]} and top1[1] - top2[1] <= tol


def explain(ref, got, tol):
    k = next(i for i, (a, b) in enumerate(zip(ref["ids"], got["ids"])) if a != b)
    top = ref["top2"][k] if ref["top2"] and k < len(ref["top2"]) else []
    if len(top) < 2:
        return {"position": k, "explained": False, "why": "no top-2 log-probs at that position"}
    (lp1, t1), (lp2, t2) = top[0], top[1]
    d = {"position": k, "ref_token": ref["ids"][k], "got_token": got["ids"][k], "top1": [t1, lp1],
         "top2": [t2, lp2], "gap_nats": lp1 - lp2, "got_is_second": got["ids"][k] == t2}
    d["explained"] = rounding_tie(d["ref_token"], d["got_token"], d["top1"], d["top2"], tol)
    return d


def summarize(report) -> bool:
    """Counts per server from its divergences (printed); False when any divergence is unexplained."""
    ok = True
    for name, r in report["servers"].items():
        div = r["divergences"].values()
        r["unexplained"] = sum(not d["explained"] for d in div)
        r["explained"] = len(div) - r["unexplained"]
        ok &= not r["unexplained"]
        gaps = ", ".join(f"{d.get('gap_nats', float('nan')):.4f}" for d in div)
        print(f"{name}: {r['identical']}/{r['of']} identical to {report['reference']}; {r['explained']} divergences "
              f"explained by near-ties, {r['unexplained']} not (gaps: {gaps or '-'}); accept_len {r['accept_len']}",
              flush=True)
    return ok


def reexplain(path, tol=None) -> bool:
    """Re-judge a stored report's divergences with the current rule (its raw tokens and log-probs kept)."""
    report = json.load(open(path))
    tol = report["tie_tol_nats"] if tol is None else tol
    for r in report["servers"].values():
        for d in r["divergences"].values():
            if "top1" in d:
                d["explained"] = rounding_tie(d["ref_token"], d["got_token"], d["top1"], d["top2"], tol)
    report["tie_tol_nats"] = tol
    ok = summarize(report)
    json.dump(report, open(path, "w"), indent=1)
    return ok


def main():
    if sys.argv[1:2] == ["--reexplain"]:  # python sglang_lossless.py --reexplain REPORT.json [TOL]
        return 0 if reexplain(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None) else 1
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
    for name, (outs, wall) in results.items():
        same = [o["ids"] == r["ids"] for o, r in zip(outs, ref)]
        div = {i: explain(ref[i], outs[i], a.tie_tol) for i, s in enumerate(same) if not s}
        rounds = [o["rounds"] for o in outs if o["rounds"]]
        toks = sum(o["tokens"] or 0 for o in outs if o["rounds"])
        report["servers"][name] = {"identical": sum(same), "of": len(same), "wall_s": round(wall, 2),
                                   "accept_len": round(toks / sum(rounds), 3) if rounds else None,
                                   "divergences": {str(i): d for i, d in div.items()}}
    ok = summarize(report)
    json.dump(report, open(a.out, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
