"""`python -m sglang_ddtree demo`: AR vs the DFlash chain vs DDTree on held-out prompts, one process.

Runs the shipped tiny pair (or --target-dir/--draft-dir) on prompts from stdlib files the models never
saw, prints tau (tokens committed per target forward), rounds, tokens/s and whether each method's
output is token-identical to plain autoregressive decoding, and writes the numbers as JSON.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

from .data import heldout_prompts
from .engine import Engine, summarize


class Progress:
    """A one-line text progress bar on stderr (no dependency)."""

    def __init__(self, total: int, width: int = 30):
        self.total, self.done, self.width, self.t0 = total, 0, width, time.time()

    def step(self, label: str) -> None:
        self.done += 1
        k = int(self.width * self.done / self.total)
        sys.stderr.write(f"\r[{'#' * k}{'.' * (self.width - k)}] {self.done}/{self.total} "
                         f"{time.time() - self.t0:5.1f}s {label:<24}")
        if self.done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run(engine: Engine, prompts, max_new, budgets, batch_size, temperature=0.0, seed=0, progress=None):
    """Rows for AR, chain and DDTree at each budget (same prompts, same batching)."""
    configs = [("ar", None), ("chain", None)] + [("ddtree", b) for b in budgets]
    chunks = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]
    rows, ref = [], None
    for method, budget in configs:
        engine.generate(prompts[:1], 4, method=method, budget=budget)          # warm-up
        results, wall, stages = [], 0.0, {}
        for ch in chunks:
            t0 = time.perf_counter()
            res = engine.generate(ch, max_new, method=method, budget=budget, temperature=temperature,
                                  seed=seed + len(results))
            if engine.device.type == "cuda":
                torch.cuda.synchronize()
            wall += time.perf_counter() - t0
            results += res
            for k, v in res[0].stage_times.items():  # stage times are per batch
                stages[k] = stages.get(k, 0.0) + v
            if progress:
                progress.step(f"{method}{'' if budget is None else f' B={budget}'}")
        ids = [r.token_ids for r in results]
        if ref is None:
            ref = ids
        s = summarize(results)
        hist = {}
        for r in results:
            for a in r.accept_lengths:
                hist[a] = hist.get(a, 0) + 1
        rows.append({"method": method, "temperature": temperature,
                     "budget": budget if method == "ddtree" else
                     ({"chain": engine.block_size - 1, "ar": 0}[method]), **s,
                     "tokens_per_s": s["tokens"] / wall, "wall_s": wall,
                     "identical_to_ar": ids == ref if temperature == 0 else None,
                     "requests_identical": sum(a == b for a, b in zip(ids, ref)),
                     "stage_times_s": stages, "accept_length_hist": dict(sorted(hist.items())),
                     "sample": results[0].text})
    return rows


def table(rows) -> str:
    head = f"{'method':<8} {'T':>4} {'budget':>6} {'tau':>6} {'rounds':>7} {'tokens/s':>9}  identical to AR"
    lines = [head, "-" * len(head)]
    for r in rows:
        same = "yes" if r["identical_to_ar"] else f"NO ({r['requests_identical']} requests identical)"
        if r["identical_to_ar"] is None:
            same = "n/a (sampled; distribution-tested)"
        lines.append(f"{r['method']:<8} {r['temperature']:>4.1f} {r['budget']:>6} {r['tau']:>6.2f} {r['rounds']:>7} "
                     f"{r['tokens_per_s']:>9.1f}  {same}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_ddtree demo", description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64, help="held-out prompts to decode")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--budgets", default="8,16,32,64", help="DDTree node budgets, comma-separated")
    ap.add_argument("--batch-size", type=int, default=None, help="requests per batch (default: all)")
    ap.add_argument("--device", default=None, help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--target-dir", default=None)
    ap.add_argument("--draft-dir", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--sampled-temperature", type=float, default=1.0,
                    help="also run every method sampled at this temperature (0: greedy only)")
    ap.add_argument("--json", default="ddtree_demo.json", help="where to write the results")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    engine = Engine.from_pretrained(a.target_dir, a.draft_dir, device=a.device, dtype=getattr(torch, a.dtype))
    prompts = heldout_prompts(a.prompts)
    budgets = [int(b) for b in a.budgets.split(",") if b]
    bs = a.batch_size or len(prompts)
    print(f"DDTree demo: {len(prompts)} held-out prompts, {a.max_new_tokens} new tokens each, "
          f"device {engine.device} ({a.dtype}), block size {engine.block_size}, batch {bs}")
    nchunks = -(-len(prompts) // bs)
    temps = [0.0] + ([a.sampled_temperature] if a.sampled_temperature > 0 else [])
    progress = Progress(len(temps) * (2 + len(budgets)) * nchunks)
    rows = []
    for t in temps:
        rows += run(engine, prompts, a.max_new_tokens, budgets, bs, temperature=t, progress=progress)
    print(table(rows))
    greedy = [r for r in rows if r["temperature"] == 0]
    lossless = all(r["identical_to_ar"] for r in greedy)
    for t in temps:
        best = max((r for r in rows if r["method"] == "ddtree" and r["temperature"] == t), key=lambda r: r["tau"])
        chain = next(r for r in rows if r["method"] == "chain" and r["temperature"] == t)
        print(f"T={t}: tau DDTree {best['tau']:.2f} (budget {best['budget']}) vs DFlash chain {chain['tau']:.2f}")
    print(f"greedy outputs identical to AR: {'yes' if lossless else 'NO'}")
    print(f"prompt  : {prompts[0]!r}\ncontinue: {greedy[-1]['sample']!r}")
    out = {"device": str(engine.device), "dtype": a.dtype, "torch": torch.__version__,
           "platform": platform.platform(), "prompts": len(prompts), "max_new_tokens": a.max_new_tokens,
           "batch_size": bs, "block_size": engine.block_size, "rows": rows}
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.json}")
    return 0 if lossless else 1


if __name__ == "__main__":
    sys.exit(main())
