#!/usr/bin/env python3
"""A/B benchmark: stock DFLASH vs DDTree (several budgets) on SGLang servers, at several concurrencies.

Measures per configuration and concurrency: output tok/s, TPOT P50/P99, TTFT P50/P99 (streaming /generate)
and the acceptance length (committed tokens per verify round, from the response's meta_info). Writes a
markdown table, a JSON file and (with matplotlib) a PNG.

Either point it at running servers:
  python examples/ab_bench.py --server DFLASH=http://127.0.0.1:30001 --server ddtree-b32=http://127.0.0.1:30002
or let it launch them one after another (same model, same flags apart from the speculative ones):
  python examples/ab_bench.py --model-path Qwen/Qwen3-8B --draft-model-path z-lab/Qwen3-8B-DFlash-b16 \\
      --budgets 16 32 64 --concurrency 1 8 32 --extra-server-args "--attention-backend triton"
Standard library only (matplotlib optional).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

WORDS = ("the quick brown fox jumps over lazy dog hello world this is a tiny test model for speculative "
         "decoding with draft trees and target verification of many tokens at once").split()


def make_prompts(n: int, words: int, seed: int) -> list[str]:
    """n prompts: random word salad, or (AB_PROMPTS_FILE=path) texts from a JSON list of strings or of
    {"text": ...} records (e.g. the engine's held-out prompts), rotated by seed."""
    path = os.environ.get("AB_PROMPTS_FILE")
    if path:
        data = json.load(open(path))
        pool = [x["text"] if isinstance(x, dict) else x for x in (data["prompts"] if isinstance(data, dict) else data)]
        return [pool[(seed + i) % len(pool)] for i in range(n)]
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words + rng.randint(0, words // 2))) for _ in range(n)]


def _post(url: str, payload: dict, timeout: float = 600):
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def one_request(base: str, prompt: str, max_new_tokens: int, temperature: float) -> dict:
    """Streamed /generate: time to first chunk, end time, tokens, verify rounds."""
    t0 = time.perf_counter()
    ttft, meta = None, {}
    payload = {"text": prompt, "stream": True, "sampling_params": {
        "max_new_tokens": max_new_tokens, "temperature": temperature, "ignore_eos": True}}
    with _post(base + "/generate", payload) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            if ttft is None:
                ttft = time.perf_counter() - t0
            meta = json.loads(line[5:]).get("meta_info", meta)
    end = time.perf_counter() - t0
    tokens = int(meta.get("completion_tokens", max_new_tokens))
    rounds = meta.get("spec_verify_ct")
    return {"ttft": ttft or end, "latency": end, "tokens": tokens,
            "rounds": int(rounds) if rounds is not None else None}


def pct(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def bench(base: str, prompts: list[str], concurrency: int, max_new_tokens: int, temperature: float) -> dict:
    one_request(base, prompts[0], 8, temperature)  # warm-up
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda p: one_request(base, p, max_new_tokens, temperature), prompts))
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    tpot = [(r["latency"] - r["ttft"]) / max(r["tokens"] - 1, 1) for r in results]
    rounds = [r["rounds"] for r in results if r["rounds"]]
    accept = (sum(r["tokens"] for r in results if r["rounds"]) / sum(rounds)) if rounds else None
    return {"concurrency": concurrency, "requests": len(results), "output_tokens": tokens, "wall_s": wall,
            "output_tok_s": tokens / wall, "tpot_ms_p50": 1e3 * pct(tpot, 50), "tpot_ms_p99": 1e3 * pct(tpot, 99),
            "ttft_ms_p50": 1e3 * pct([r["ttft"] for r in results], 50),
            "ttft_ms_p99": 1e3 * pct([r["ttft"] for r in results], 99), "accept_len": accept}


def wait_ready(base: str, proc=None, timeout: float = 900) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(base + "/health_generate", timeout=10)
            return
        except Exception:
            time.sleep(2)
    raise TimeoutError(base)


def markdown(rows: list[dict]) -> str:
    head = ("| config | conc | output tok/s | TPOT P50 (ms) | TPOT P99 (ms) | TTFT P50 (ms) | accept len |\n"
            "|---|---:|---:|---:|---:|---:|---:|\n")
    body = "".join(
        f"| {r['config']} | {r['concurrency']} | {r['output_tok_s']:.1f} | {r['tpot_ms_p50']:.2f} | "
        f"{r['tpot_ms_p99']:.2f} | {r['ttft_ms_p50']:.1f} | "
        f"{'-' if r['accept_len'] is None else format(r['accept_len'], '.2f')} |\n" for r in rows)
    return head + body


def plot(rows: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for cfg in dict.fromkeys(r["config"] for r in rows):
        pts = [(r["concurrency"], r["output_tok_s"]) for r in rows if r["config"] == cfg]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=cfg)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def launch(model, draft, algo, budget, port, extra, log_dir):
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--port", str(port),
           "--host", "127.0.0.1", "--speculative-algorithm", algo, "--speculative-draft-model-path", draft]
    if budget is not None:
        cmd += ["--speculative-num-draft-tokens", str(budget + 1)]
    cmd += shlex.split(extra)
    log = open(os.path.join(log_dir, f"server_{algo.lower()}_{budget}.log"), "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", default=[], metavar="NAME=URL")
    ap.add_argument("--model-path")
    ap.add_argument("--draft-model-path")
    ap.add_argument("--budgets", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--extra-server-args", default="--attention-backend triton")
    ap.add_argument("--port", type=int, default=30100)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--num-prompts", type=int, default=64, help="per concurrency level (at least 2x concurrency)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--out", default="ab_bench")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = []

    def run_all(name, base):
        for c in args.concurrency:
            prompts = make_prompts(max(args.num_prompts, 2 * c), args.prompt_words, seed=c)
            row = {"config": name, **bench(base, prompts, c, args.max_new_tokens, args.temperature)}
            print(json.dumps(row), flush=True)
            rows.append(row)

    if args.server:
        for spec in args.server:
            name, url = spec.split("=", 1)
            run_all(name, url.rstrip("/"))
    else:
        if not (args.model_path and args.draft_model_path):
            ap.error("give --server NAME=URL, or --model-path and --draft-model-path")
        for algo, budget in [("DFLASH", None)] + [("DDTREE", b) for b in args.budgets]:
            proc = launch(args.model_path, args.draft_model_path, algo, budget, args.port, args.extra_server_args,
                          args.out)
            base = f"http://127.0.0.1:{args.port}"
            try:
                wait_ready(base, proc)
                run_all("DFLASH" if budget is None else f"DDTREE b={budget}", base)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
    json.dump({"settings": vars(args), "rows": rows}, open(os.path.join(args.out, "ab_bench.json"), "w"), indent=1)
    table = markdown(rows)
    open(os.path.join(args.out, "ab_bench.md"), "w").write(table)
    print(table)
    if plot(rows, os.path.join(args.out, "ab_bench.png")):
        print("plot:", os.path.join(args.out, "ab_bench.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
