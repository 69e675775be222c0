"""`python -m sglang_ddtree demo`: AR vs the DFlash chain vs DDTree on held-out prompts, one process.

Runs the shipped tiny pair (or --target-dir/--draft-dir) on prompts from stdlib files the models never
saw, prints tau (tokens committed per target forward), rounds, tokens/s and whether each method's
output is token-identical to plain autoregressive decoding, ends with a one-line verdict, and writes the
numbers as JSON. The default run is small (well under a minute of decoding on 2 CPU cores); --full runs
the grid of docs/benchmarks/engine-cpu.md.
"""
from __future__ import annotations

import json
import platform
import sys
import textwrap
import time

import torch

from .. import _cli
from .data import heldout_prompts
from .engine import Engine, summarize

PROG = "python -m sglang_ddtree demo"
QUICK = {"prompts": 16, "budgets": [8, 32]}
FULL = {"prompts": 64, "budgets": [8, 16, 32, 64]}


class Progress:
    """A text progress bar on stderr with an ETA (no dependency).

    Work is counted in decode rounds: each (method, temperature, batch) job is given `max_new - 1` rounds
    (exactly AR's count); a speculative job ends early and its remaining share is counted done then, so
    the ETA errs on the long side until the last jobs. On a terminal the bar redraws in place; otherwise
    one line per finished job (logs stay readable). The clock for the ETA starts at the first round
    (model loading and warm-up are not work the bar counts) and the ETA shows once 5% is done.
    """

    def __init__(self, jobs: int, rounds_per_job: int, width: int = 28, stream=None):
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.per_job, self.total = rounds_per_job, jobs * rounds_per_job
        self.done, self.job_rounds, self.width = 0, 0, width
        self.t0 = time.perf_counter()
        self.t_work, self.last_draw, self.label = None, 0.0, ""

    def start(self, label: str) -> None:
        self.label, self.job_rounds = label, 0
        self._draw(force=True)

    def round(self, *_args) -> None:
        """Engine.generate's on_round callback: one decode round of the current job is done."""
        if self.t_work is None:
            self.t_work = time.perf_counter()
        if self.job_rounds < self.per_job:
            self.job_rounds += 1
            self.done += 1
        self._draw()

    def finish_job(self) -> None:
        self.done += self.per_job - self.job_rounds
        self.job_rounds = self.per_job
        self._draw(force=True, job_end=True)
        if self.done >= self.total and self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        now = time.perf_counter()
        elapsed, working = now - self.t0, now - (self.t_work or now)
        eta = f"ETA {working * (1 - frac) / frac:4.0f}s" if frac >= 0.05 else "ETA   ?s"
        k = int(self.width * frac)
        return (f"[{'#' * k}{'.' * (self.width - k)}] {100 * frac:3.0f}%  {elapsed:4.0f}s elapsed  {eta}  "
                f"{self.label:<22}")

    def _draw(self, force: bool = False, job_end: bool = False) -> None:
        now = time.perf_counter()
        if self.tty and (force or now - self.last_draw > 0.1):
            self.stream.write("\r" + self.line())
            self.stream.flush()
            self.last_draw = now
        elif not self.tty and job_end:
            self.stream.write(self.line().rstrip() + "\n")
            self.stream.flush()


def method_label(method: str, budget) -> str:
    return {"ar": "AR", "chain": "DFlash chain"}.get(method, f"DDTree B={budget}")


def run(engine: Engine, prompts, max_new, budgets, batch_size, temperature=0.0, seed=0, progress=None):
    """Rows for AR, chain and DDTree at each budget (same prompts, same batching)."""
    configs = [("ar", None), ("chain", None)] + [("ddtree", b) for b in budgets]
    chunks = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]
    rows, ref = [], None
    for method, budget in configs:
        engine.generate(prompts[:1], 4, method=method, budget=budget)          # warm-up
        results, wall, stages = [], 0.0, {}
        for ch in chunks:
            if progress:
                progress.start(f"{method_label(method, budget)} T={temperature:g}")
            t0 = time.perf_counter()
            res = engine.generate(ch, max_new, method=method, budget=budget, temperature=temperature,
                                  seed=seed + len(results), on_round=progress.round if progress else None)
            if engine.device.type == "cuda":
                torch.cuda.synchronize()
            wall += time.perf_counter() - t0
            results += res
            for k, v in res[0].stage_times.items():  # stage times are per batch
                stages[k] = stages.get(k, 0.0) + v
            if progress:
                progress.finish_job()
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
    head = f"{'method':<13} {'T':>4} {'budget':>6} {'tau':>6} {'rounds':>7} {'tok/s':>8}  identical to AR"
    lines = [head, "-" * len(head)]
    for r in rows:
        same = "yes" if r["identical_to_ar"] else f"NO ({r['requests_identical']} requests identical)"
        if r["identical_to_ar"] is None:
            same = "n/a (sampled; distribution-tested in CI)"
        lines.append(f"{method_label(r['method'], r['budget']):<13} {r['temperature']:>4.1f} {r['budget']:>6} "
                     f"{r['tau']:>6.2f} {r['rounds']:>7} {r['tokens_per_s']:>8.0f}  {same}")
    return "\n".join(lines)


def legend(engine: Engine) -> str:
    params = sum(p.numel() for p in engine.target.parameters()) / 1e6
    where = (f"On a CPU it favours AR: this {params:.2f}M-parameter target's forward is compute-bound here, so "
             "verifying n tree nodes costs about n one-token forwards; speculation pays where the target's "
             "forward is memory-bound (a large model on a GPU)."
             if engine.device.type == "cpu" else "The tiny model's wall clock; docs/benchmarks has the GPU runs.")
    items = [
        ("tau", "tokens committed per target forward (accepted tree nodes + the bonus token) over all rounds of "
                f"all prompts: AR is 1.00 by definition, the drafter's block size ({engine.block_size}) the ceiling."),
        ("rounds", "target forwards, summed over prompts. budget: tree nodes per round (the chain: the block's "
                   "draft positions, one candidate each)."),
        ("tok/s", "wall-clock tokens per second. " + where),
        ("note", "greedy text of a model this small falls into loops that any drafter predicts, so the greedy "
                 "chain already sits near the ceiling; sampled text varies, and there the tree's extra branches "
                 "pay (the T > 0 rows)."),
    ]
    return "\n".join(textwrap.fill(text, 104, initial_indent=f"{name:<7}= " if name != "note" else "note:    ",
                                   subsequent_indent=" " * 9) for name, text in items)


def verdict(rows, n_prompts: int) -> tuple[bool, str]:
    """(every greedy speculative row identical to AR, the one-line summary)."""
    greedy = [r for r in rows if r["temperature"] == 0]
    tree = [r for r in greedy if r["method"] == "ddtree"]
    worst = min(tree, key=lambda r: r["requests_identical"])
    lossless = all(r["identical_to_ar"] for r in greedy)

    def taus(t):
        at = [r for r in rows if r["temperature"] == t]
        best = max((r for r in at if r["method"] == "ddtree"), key=lambda r: r["tau"])
        chain = next(r for r in at if r["method"] == "chain")
        ar = next(r for r in at if r["method"] == "ar")
        return f"tau {best['tau']:.2f} (budget {best['budget']}) vs chain {chain['tau']:.2f} vs AR {ar['tau']:.2f}"

    same = ("identical to AR on %d/%d prompts at every budget" % (n_prompts, n_prompts) if lossless else
            "DIFFERS from AR: %d/%d prompts identical at budget %s" % (worst["requests_identical"], n_prompts,
                                                                       worst["budget"]))
    text = f"VERDICT: DDTree greedy output {same}; greedy {taus(0.0)}"
    sampled = sorted({r["temperature"] for r in rows} - {0.0})
    for t in sampled:
        text += f"; sampled T={t:g} {taus(t)}"
    return lossless, text


def parse_args(argv):
    ap = _cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--full", action="store_true",
                    help=f"the full grid ({FULL['prompts']} prompts, budgets "
                         f"{','.join(map(str, FULL['budgets']))}; about 1.5 min on 2 shared cores)")
    ap.add_argument("--prompts", type=_cli.positive_int, default=None,
                    help=f"held-out prompts to decode (default {QUICK['prompts']}; --full: {FULL['prompts']})")
    ap.add_argument("--max-new-tokens", type=_cli.positive_int, default=64)
    ap.add_argument("--budgets", type=_cli.positive_int_list, default=None,
                    help=f"DDTree node budgets, comma-separated (default {','.join(map(str, QUICK['budgets']))}; "
                         f"--full: {','.join(map(str, FULL['budgets']))})")
    ap.add_argument("--batch-size", type=_cli.positive_int, default=None, help="requests per batch (default: all)")
    ap.add_argument("--device", type=_cli.device, default=None, help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--target-dir", default=None)
    ap.add_argument("--draft-dir", default=None)
    ap.add_argument("--threads", type=_cli.positive_int, default=None,
                    help="torch CPU threads (default 1 on the CPU: the tiny model's ops are too small to share, "
                         "and on a loaded machine every extra thread stalls at each op's barrier)")
    ap.add_argument("--sampled-temperature", type=_cli.nonnegative_float, default=1.0,
                    help="also run every method sampled at this temperature (0: greedy only)")
    ap.add_argument("--json", default="ddtree_demo.json", help="where to write the results")
    a = ap.parse_args(argv)
    grid = FULL if a.full else QUICK
    a.prompts = a.prompts or grid["prompts"]
    a.budgets = a.budgets or grid["budgets"]
    available = len(heldout_prompts())
    if a.prompts > available:
        ap.error(f"argument --prompts: at most {available} held-out prompts are shipped, got {a.prompts}")
    return a


def main(argv=None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    t_start = time.perf_counter()
    try:
        engine = Engine.from_pretrained(a.target_dir, a.draft_dir, device=a.device, dtype=getattr(torch, a.dtype))
    except (OSError, ValueError) as e:
        _cli.fail(PROG, f"cannot load the models: {e}", 1)
    if engine.drafter is None:
        _cli.fail(PROG, "the demo compares speculative methods: pass --draft-dir with --target-dir")
    threads = torch.get_num_threads()
    # One thread by default on the CPU: on a 2-core VM with two other busy processes the default run took
    # 18 s with 1 thread and 235 s with 2 (every op's OpenMP barrier waits for a descheduled thread).
    torch.set_num_threads(a.threads or (1 if engine.device.type == "cpu" else threads))
    try:
        return _demo(a, engine, t_start)
    finally:
        torch.set_num_threads(threads)  # in-process callers (tests) keep their setting


def _demo(a, engine: Engine, t_start: float) -> int:
    from .. import ops

    ops.ensure_backend("cuda" if engine.device.type == "cuda" else "cpu")  # a first use builds it (notice)
    prompts = heldout_prompts(a.prompts)
    bs = a.batch_size or len(prompts)
    threads = torch.get_num_threads()
    print(f"DDTree demo: {len(prompts)} held-out prompts, {a.max_new_tokens} new tokens each, "
          f"device {engine.device} ({a.dtype}, {threads} CPU thread{'s' if threads > 1 else ''}), "
          f"block size {engine.block_size}, "
          f"batch {bs}{'' if a.full else '  (--full: the larger grid)'}", flush=True)
    nchunks = -(-len(prompts) // bs)
    temps = [0.0] + ([a.sampled_temperature] if a.sampled_temperature > 0 else [])
    progress = Progress(len(temps) * (2 + len(a.budgets)) * nchunks, max(1, a.max_new_tokens - 1))
    rows = []
    for t in temps:
        rows += run(engine, prompts, a.max_new_tokens, a.budgets, bs, temperature=t, progress=progress)
    lossless, line = verdict(rows, len(prompts))
    print(table(rows))
    print(legend(engine))
    greedy = [r for r in rows if r["temperature"] == 0]
    print(f"prompt  : {prompts[0]!r}\ncontinue: {greedy[-1]['sample']!r}")
    wall = time.perf_counter() - t_start
    out = {"device": str(engine.device), "dtype": a.dtype, "torch": torch.__version__,
           "platform": platform.platform(), "prompts": len(prompts), "max_new_tokens": a.max_new_tokens,
           "batch_size": bs, "block_size": engine.block_size, "full": a.full, "threads": torch.get_num_threads(),
           "wall_s": wall, "verdict": line, "rows": rows}
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.json} ({wall:.0f} s in all)")
    print(line)
    return 0 if lossless else 1


if __name__ == "__main__":
    sys.exit(main())
