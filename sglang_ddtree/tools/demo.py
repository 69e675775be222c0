"""`python -m sglang_ddtree demo`: DDTree as served by default vs the DFlash chain vs plain autoregressive decoding.

Decodes held-out prompts (stdlib files the shipped tiny models never saw) in one process with AR, the DFlash chain,
DDTree as the SGLang plugin serves it by default (chain-anchored tree, the drafter's calibration, the budget chosen
every round) and, labelled as a comparison, the paper's tree at fixed budgets. Prints tau (tokens committed per
target forward), rounds, tokens/s and whether each greedy output is token-identical to AR, one prompt's
continuation, and a one-line verdict; with the shipped pair, one more line: its DFlash2 drafter (greedy), DDTree over
the selector's lattice against the selector's walk (stock DFLASH's decode). Writes the numbers as JSON. The default run takes well under a minute on 2
CPU cores once the native kernels are built; --full runs more prompts and budgets.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import textwrap
import time

import torch

from .. import _cli
from ..sizes import MAX_CUDA_BUDGET, verify_width
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, heldout_prompts
from ..engine.engine import Engine, summarize
from ..engine.served import h200_costs, served_default

PROG = _cli.prog("demo")
QUICK = {"prompts": 16, "budgets": [31, 63]}
FULL = {"prompts": 64, "budgets": [15, 31, 63]}
SERVED = "served"
# the second sampled law the demo runs next to --sampled-temperature: chat traffic's T 0.6 with top-p 0.95
SAMPLED_FILTERED = (0.6, 0.95)
# the shipped DFlash2 drafter, greedy: the served default's tree for greedy requests is the chain-anchored lattice
# tree (auto is not defined over a lattice: a fixed budget), against the selector's walk, stock DFLASH's decode
DFLASH2_RUNS = (("walk", {"method": "walk"}), ("lattice", {"method": "lattice", "budget": 31, "anchor": "chain"}))


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
    return {"ar": "AR", "chain": "DFlash chain", SERVED: "DDTree"}.get(method, f"paper's tree B={budget}")


def configs(engine: Engine, budgets, costs: str) -> list[tuple[str, object, dict]]:
    """(method label key, budget shown, Engine.generate arguments): AR, the chain, the served default, the paper's
    tree at each budget."""
    return ([("ar", 0, {"method": "ar"}), ("chain", engine.block_size - 1, {"method": "chain"}),
             (SERVED, "auto", served_default(engine, costs))]
            + [("ddtree", b, {"method": "ddtree", "budget": b, "paper": True}) for b in budgets])


def run(engine: Engine, prompts, max_new, budgets, batch_size, temperature=0.0, seed=0, progress=None,
        costs: str = "here", top_p: float = 1.0):
    """Rows for each method of configs() on the same prompts and batches; each row keeps its per-prompt results."""
    chunks = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]
    rows, ref = [], None
    for method, shown, kwargs in configs(engine, budgets, costs):
        def args(n):
            if kwargs.get("round_cost") == "h200":
                return {**kwargs, "round_cost": h200_costs(n, kwargs["auto_budgets"])}
            return kwargs

        engine.generate(prompts[:1], 4, **args(1))          # warm-up
        results, wall, stages = [], 0.0, {}
        for ch in chunks:
            if progress:
                progress.start(f"{method_label(method, shown)} T={temperature:g}")
            t0 = time.perf_counter()
            res = engine.generate(ch, max_new, temperature=temperature, top_p=top_p, seed=seed + len(results),
                                  on_round=progress.round if progress else None, **args(len(ch)))
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
        hist, chosen = {}, {}
        for r in results:
            for a in r.accept_lengths:
                hist[a] = hist.get(a, 0) + 1
            if method == SERVED:
                for b in r.round_budgets:
                    chosen[b] = chosen.get(b, 0) + 1
        rows.append({"method": method, "temperature": temperature, "top_p": top_p, "budget": shown, **s,
                     "tokens_per_s": s["tokens"] / wall, "wall_s": wall,
                     "identical_to_ar": ids == ref if temperature == 0 else None,
                     "requests_identical": sum(a == b for a, b in zip(ids, ref)),
                     "stage_times_s": stages, "accept_length_hist": dict(sorted(hist.items())),
                     "budgets_chosen": dict(sorted(chosen.items())) or None,
                     "per_prompt": [{"tau": sum(r.accept_lengths) / max(1, r.rounds), "rounds": r.rounds,
                                     "text": r.text, "token_ids": r.token_ids} for r in results],
                     "generate_args": {k: v for k, v in args(batch_size).items() if k != "method"}})
    return rows


def table(rows) -> str:
    head = f"{'method':<20} {'T':>5} {'budget':>6} {'tau':>6} {'rounds':>7} {'tok/s':>8}  identical to AR"
    lines = [head, "-" * len(head)]
    for r in rows:
        same = "yes" if r["identical_to_ar"] else f"NO ({r['requests_identical']} requests identical)"
        if r["identical_to_ar"] is None:
            same = "n/a (sampled; distribution-tested in CI)"
        lines.append(f"{method_label(r['method'], r['budget']):<20} {r['temperature']:>5g} {r['budget']!s:>6} "
                     f"{r['tau']:>6.2f} {r['rounds']:>7} {r['tokens_per_s']:>8.0f}  {same}")
    return "\n".join(lines)


def _chosen(rows) -> str:
    counts = {}
    for r in rows:
        for b, n in (r["budgets_chosen"] or {}).items():
            counts[b] = counts.get(b, 0) + n
    total = sum(counts.values()) or 1
    return ", ".join(f"{b}: {100 * n / total:.0f}%" for b, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def legend(engine: Engine, rows, costs: str) -> str:
    params = sum(p.numel() for p in engine.target.parameters()) / 1e6
    served = next(r for r in rows if r["method"] == SERVED)
    widest = verify_width(max(served["generate_args"]["auto_budgets"]))
    where = (f"Each round verifies every tree node in one forward of this {params:.2f}M-parameter target (DDTree up "
             f"to {widest} a round, the chain {engine.block_size}), whose cost on a CPU grows with the node count; "
             "speculation pays most where the forward is memory-bound (a large model on a GPU)."
             if engine.device.type == "cpu" else "The tiny model's wall clock; docs/benchmarks has the served runs.")
    cost_src = ("the round costs the tiny pair's SGLang server measured on the H200 (the CPU's own would pick the "
                "chain's width every round; --auto-costs here uses them)" if costs == "h200"
                else "round costs measured here at the start of each run")
    calib = ("the drafter's calibration file" if served["generate_args"].get("draft_temperature")
             else "no calibration (the drafter directory has no ddtree_calibration.json)")
    items = [
        ("DDTree", "the SGLang plugin's default: the tree always holds the drafter's greedy chain (chain-anchored), "
                   f"ranked with {calib}, and each round's budget chosen among "
                   f"{', '.join(map(str, served['generate_args']['auto_budgets']))} from the previous round's tree and "
                   f"{cost_src}. Budgets it ran: {_chosen([r for r in rows if r['method'] == SERVED])} of rounds."),
        ("paper", "the paper's tree (Ringel & Romano): best-first from the uncalibrated draft, no anchor, fixed budget."),
        ("tau", "tokens committed per target forward (accepted tree nodes + the bonus token) over all rounds of "
                f"all prompts: AR is 1.00 by definition, the drafter's block size ({engine.block_size}) the ceiling."),
        ("rounds", "target forwards, summed over prompts. budget: tree nodes per round (the chain: the block's "
                   "draft positions, one candidate each)."),
        ("tok/s", f"wall-clock tokens per second; greedy, in this run, {speed_vs_ar(rows)}. " + where),
    ]
    sampled = [r for r in rows if r["temperature"] > 0]
    paper_best = max((r["tau"] for r in sampled if r["method"] == "ddtree"), default=None)
    served_sampled = next((r["tau"] for r in sampled if r["method"] == SERVED), None)
    if paper_best and paper_best > served_sampled:
        items.append(("note", "sampled, the paper's tree at a fixed budget accepted more than the served default's "
                              "auto budget in this run: auto trades tokens a round for the round's cost "
                              "(docs/DESIGN.md §3.9)."))
    return "\n".join(textwrap.fill(text, 108, initial_indent=f"{name:<7}= " if name != "note" else "note:    ",
                                   subsequent_indent=" " * 9) for name, text in items)


def speed_vs_ar(rows) -> str:
    """The served default's and the chain's greedy tokens/s over AR's, as measured in these rows."""
    speed = {r["method"]: r["tokens_per_s"] for r in rows if r["temperature"] == 0}
    ddtree, chain = (speed[m] / speed["ar"] for m in (SERVED, "chain"))
    return f"DDTree {ddtree:.2f}× and the chain {chain:.2f}× AR's speed"


def _loop_share(text: str) -> float:
    """Share of repeated 4-byte substrings: near 1 for a degenerate loop ("the string the string ..."), low for code."""
    grams = [text[i:i + 4] for i in range(len(text) - 3)]
    return 1 - len(set(grams)) / len(grams) if grams else 1.0


def example(rows) -> int:
    """The greedy prompt that shows the point: among continuations that are not a loop, the one where the served
    tree needed the fewest rounds relative to the chain (then the least repetitive)."""
    greedy = {r["method"]: r for r in rows if r["temperature"] == 0}
    served, chain = greedy[SERVED]["per_prompt"], greedy["chain"]["per_prompt"]
    order = sorted(range(len(served)), key=lambda i: (_loop_share(served[i]["text"]) > 0.5,
                                                       served[i]["rounds"] - chain[i]["rounds"],
                                                       _loop_share(served[i]["text"])))
    return order[0]


def law_name(row) -> str:
    """'T=1', 'T=0.6 top-p 0.95': a sampled row's law."""
    p = row.get("top_p", 1.0)
    return f"T={row['temperature']:g}" + (f" top-p {p:g}" if p < 1 else "")


def verdict(rows, n_prompts: int) -> tuple[bool, str]:
    """(every greedy row identical to AR, the one-line summary: the served default against the chain and AR, the
    paper's tree in brackets, how many greedy continuations are loops; sampled, against the paper's tree at the
    budget the served default's auto budget ran most and the chain)."""
    greedy = [r for r in rows if r["temperature"] == 0]
    lossless = all(r["identical_to_ar"] for r in greedy)

    def taus(at):
        pick = {m: next(r for r in at if r["method"] == m) for m in (SERVED, "chain", "ar")}
        paper = {r["budget"]: r["tau"] for r in at if r["method"] == "ddtree"}
        chosen = pick[SERVED].get("budgets_chosen") or {}
        most = max(chosen, key=chosen.get) if chosen else None
        served = f"tau {pick[SERVED]['tau']:.2f}"
        if at[0]["temperature"] > 0 and most in paper:
            return (f"{served} vs paper's tree {paper[most]:.2f} at B={most}, the budget auto ran most "
                    f"({pick[SERVED]['tau'] / paper[most]:.2f}x), vs chain {pick['chain']['tau']:.2f}")
        listed = ", ".join(f"B={b} {t:.2f}" for b, t in paper.items())
        return (f"{served} vs chain {pick['chain']['tau']:.2f} vs AR {pick['ar']['tau']:.2f}"
                + (f" (paper's tree {listed})" if listed else ""))

    if lossless:
        same = f"identical to AR on {n_prompts}/{n_prompts} prompts, as is every greedy method"
    else:
        worst = min((r for r in greedy if not r["identical_to_ar"]), key=lambda r: r["requests_identical"])
        same = (f"DIFFERS from AR: {method_label(worst['method'], worst['budget'])} identical on "
                f"{worst['requests_identical']}/{n_prompts} prompts")
    texts = [p["text"] for p in next(r for r in greedy if r["method"] == SERVED).get("per_prompt", [])]
    loops = f" ({sum(_loop_share(t) > 0.5 for t in texts)} of {len(texts)} greedy continuations are loops)" \
        if texts else ""
    text = f"VERDICT: DDTree (served default) greedy output {same}; greedy {taus(greedy)}{loops}"
    for law in dict.fromkeys(law_name(r) for r in rows if r["temperature"] > 0):
        text += f"; sampled {law} {taus([r for r in rows if r['temperature'] > 0 and law_name(r) == law])}"
    return lossless, text


def dflash2_rows(prompts, max_new, batch_size, device, dtype, ar_ids) -> list[dict]:
    """Greedy rows of the shipped tiny DFlash2 pair (the same tiny target, tiny-dflash2) on the demo's prompts: the
    selector's walk and DDTree over its lattice, each checked against AR's output (ar_ids, the same target's)."""
    eng = Engine.from_pretrained(device=device, dtype=dtype, pair="dflash2")
    rows = []
    for method, kwargs in DFLASH2_RUNS:
        res = []
        for i in range(0, len(prompts), batch_size):
            res += eng.generate(prompts[i:i + batch_size], max_new, **kwargs)
        ids = [r.token_ids for r in res]
        rows.append({"method": method, "budget": kwargs.get("budget", eng.block_size - 1), **summarize(res),
                     "identical_to_ar": ids == ar_ids, "requests_identical": sum(a == b for a, b in zip(ids, ar_ids))})
    return rows


def dflash2_line(rows) -> str:
    tau = {r["method"]: r["tau"] for r in rows}
    same = all(r["identical_to_ar"] for r in rows)
    return (f"DFlash2 drafter (tiny-dflash2, greedy, the same prompts): DDTree over the selector's lattice tau "
            f"{tau['lattice']:.2f} vs the selector's walk (stock DFLASH's decode) {tau['walk']:.2f} "
            f"({tau['lattice'] / tau['walk']:.2f}x); " + ("both identical to AR" if same else "DIFFERS from AR"))


def parse_args(argv):
    ap = _cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--full", action="store_true",
                    help=f"the larger grid ({FULL['prompts']} prompts, the paper's tree at budgets "
                         f"{','.join(map(str, FULL['budgets']))})")
    ap.add_argument("--prompts", type=_cli.positive_int, default=None,
                    help=f"held-out prompts to decode (default {QUICK['prompts']}; --full: {FULL['prompts']})")
    ap.add_argument("--max-new-tokens", type=_cli.int_at_most(MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY), default=64,
                    help=f"tokens to generate per prompt (default 64, at most {MAX_NEW_TOKENS})")
    ap.add_argument("--budgets", type=_cli.int_list_at_most(MAX_CUDA_BUDGET, "the largest budget SGLang serves"),
                    default=None,
                    help=f"the paper's tree's node budgets, comma-separated, at most {MAX_CUDA_BUDGET} (default "
                         f"{','.join(map(str, QUICK['budgets']))}; --full: {','.join(map(str, FULL['budgets']))})")
    ap.add_argument("--auto-costs", choices=("h200", "here"), default=None,
                    help="round costs the served default's auto budget weighs: the tiny pair's H200 measurements "
                         "(default on a CPU) or measured here (default on a GPU)")
    ap.add_argument("--batch-size", type=_cli.positive_int, default=None, help="requests per batch (default: all)")
    ap.add_argument("--device", type=_cli.device, default=None, help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                    help="the models' compute dtype (default float32)")
    ap.add_argument("--target-dir", default=None, help="a target model directory (default: the shipped tiny one)")
    ap.add_argument("--draft-dir", default=None, help="its DFlash drafter's directory (needed with --target-dir)")
    ap.add_argument("--threads", type=_cli.positive_int, default=None,
                    help="torch CPU threads (default 1 on the CPU: the tiny model's ops are too small to share, "
                         "and on a loaded machine every extra thread stalls at each op's barrier)")
    ap.add_argument("--sampled-temperature", type=_cli.nonnegative_float, default=1.0,
                    help="also run every method sampled at this temperature (0: greedy only)")
    ap.add_argument("--json", type=_cli.output_file, default="ddtree_demo.json",
                    help="where to write the results (checked before the run)")
    a = ap.parse_args(argv)
    grid = FULL if a.full else QUICK
    a.prompts = a.prompts or grid["prompts"]
    a.budgets = a.budgets or grid["budgets"]
    available = len(heldout_prompts())
    if a.prompts > available:
        ap.error(f"argument --prompts: at most {available} held-out prompts are shipped, got {a.prompts}")
    for flag, path in (("--target-dir", a.target_dir), ("--draft-dir", a.draft_dir)):
        if path is not None and not os.path.isfile(os.path.join(path, "config.json")):
            ap.error(f"argument {flag}: no config.json in {path!r}")
    if (a.target_dir is None) != (a.draft_dir is None):
        ap.error("argument --draft-dir: the demo compares speculative methods: give --target-dir and --draft-dir "
                 "together")
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
    costs = a.auto_costs or ("here" if engine.device.type == "cuda" else "h200")
    threads = torch.get_num_threads()
    print(f"DDTree demo: {len(prompts)} held-out prompts, {a.max_new_tokens} new tokens each, "
          f"device {engine.device} ({a.dtype}, {threads} CPU thread{'s' if threads > 1 else ''}), "
          f"block size {engine.block_size}, "
          f"batch {bs}{'' if a.full else '  (--full: the larger grid)'}", flush=True)
    nchunks = -(-len(prompts) // bs)
    laws = [(0.0, 1.0)] + ([(a.sampled_temperature, 1.0), SAMPLED_FILTERED] if a.sampled_temperature > 0 else [])
    progress = Progress(len(laws) * (3 + len(a.budgets)) * nchunks, max(1, a.max_new_tokens - 1))
    rows = []
    for t, p in laws:
        rows += run(engine, prompts, a.max_new_tokens, a.budgets, bs, temperature=t, progress=progress, costs=costs,
                    top_p=p)
    lossless, line = verdict(rows, len(prompts))
    d2 = None
    if a.target_dir is None:  # the shipped pair: its DFlash2 drafter too
        ar_ids = [p["token_ids"] for p in next(r for r in rows if r["method"] == "ar" and r["temperature"] == 0)
                  ["per_prompt"]]
        d2 = dflash2_rows(prompts, a.max_new_tokens, bs, engine.device, getattr(torch, a.dtype), ar_ids)
        lossless &= all(r["identical_to_ar"] for r in d2)
    print(table(rows))
    print(legend(engine, rows, costs))
    i = example(rows)
    greedy = {r["method"]: r for r in rows if r["temperature"] == 0}
    s, c = greedy[SERVED]["per_prompt"][i], greedy["chain"]["per_prompt"][i]
    print(f"prompt {i} (…its end): {prompts[i][-70:]!r}\ncontinued greedily:   {s['text']!r}\n"
          f"on this prompt DDTree took {s['rounds']} target forwards (tau {s['tau']:.2f}), the chain {c['rounds']} "
          f"(tau {c['tau']:.2f}), AR {greedy['ar']['per_prompt'][i]['rounds']}; "
          + ("the three texts are identical" if s["text"] == c["text"] == greedy["ar"]["per_prompt"][i]["text"]
             else "the texts DIFFER"))
    wall = time.perf_counter() - t_start
    out = {"device": str(engine.device), "dtype": a.dtype, "torch": torch.__version__,
           "platform": platform.platform(), "prompts": len(prompts), "max_new_tokens": a.max_new_tokens,
           "batch_size": bs, "block_size": engine.block_size, "full": a.full, "threads": torch.get_num_threads(),
           "auto_costs": costs, "example_prompt": i, "wall_s": wall, "verdict": line, "rows": rows}
    if d2 is not None:
        out["dflash2"] = {"rows": d2, "line": dflash2_line(d2)}
        print(out["dflash2"]["line"])
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.json} ({wall:.0f} s in all)")
    print(line)
    return 0 if lossless else 1


if __name__ == "__main__":
    sys.exit(main())
