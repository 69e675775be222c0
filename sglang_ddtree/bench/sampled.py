"""Sampled traffic on the CPU engine: the served default, each request's tree under its own law, against the paper's
tree, the chain and the keys served before (issue 40's measurements).

    python -m sglang_ddtree bench sampled [--out-dir docs/benchmarks] [--stem NAME] [--prompts 64] [--seeds 3]

On held-out prompts the calibrations were not fitted on (after the first 100), the shipped tiny pair, for each law
(T 1; T 0.6 with top-p 0.95):
1. τ per seed (mean, sample sd, min and max over seeds): the chain; at budgets 15 and 31 the paper's tree, the served
   default at that fixed budget (law keys, the sampling calibration, no anchor for sampled requests, children drawn
   and verified by recursive rejection sampling: docs/DESIGN.md §3.12), the same keys with the top children (the
   default before drawn trees), the paper's keys and the law keys without calibration with drawn children; the
   served default with the auto budget (the H200 round costs, as the demo) and the budgets it ran.
2. Trees of top children scored exactly on the rounds of one run (engine/round_contexts.py: the paper's tree's run
   at budget 15, the first seed): each round's expected commit, paired across trees, so differences of a percent
   are resolved (which keys rank best; a drawn tree's commit is random, so it has no such score).
3. Greedy, the same prompts: the keys served before and the served default (greedy keys are unchanged).
"""
from __future__ import annotations

import statistics

import torch

from .. import _cli
from ..engine import Engine, summarize
from ..engine import round_contexts
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, heldout_prompts
from ..engine.demo import h200_costs, served_default
from ..keys import Calibration, DraftKeys
from ..calibration import load_calibration
from ..sampling import NodeLaw
from ..tree import build_tree_from_topk
from .common import md_table, metadata, write_outputs

LAWS = {"T=1": {"temperature": 1.0}, "T=0.6 top-p 0.95": {"temperature": 0.6, "top_p": 0.95}}
BUDGETS = (15, 31)
FIT_PROMPTS = 100  # the calibration command fits on the first 100 held-out prompts


def fixed(engine, budget: int) -> dict:
    """Engine.generate arguments of the fixed-budget variants."""
    served = {k: v for k, v in served_default(engine, "here").items() if k not in ("budget", "auto_budgets",
                                                                                  "round_cost")}
    return {"paper's tree": {"method": "ddtree", "budget": budget},
            "served default": {**served, "budget": budget},
            "served default's keys, top children (before drawn)": {**served, "budget": budget, "children": "top"},
            "paper's keys, drawn children": {"method": "ddtree", "budget": budget, "children": "drawn"},
            "law keys, raw, drawn children": {"method": "ddtree", "budget": budget, "keys": "law",
                                              "children": "drawn"}}


def spread(values) -> dict:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "per_seed": values}


def tau_runs(engine, prompts, max_new, law: dict, seeds) -> dict:
    """Section 1 for one law: {variant: spread of τ over seeds}, and the auto budget's chosen budgets."""
    out = {}

    def run(name, kwargs):
        taus, chosen = [], {}
        for s in seeds:
            res = engine.generate(prompts, max_new, seed=s, **law, **kwargs)
            taus.append(summarize(res)["tau"])
            for r in res:
                for b in r.round_budgets:
                    chosen[b] = chosen.get(b, 0) + 1
        out[name] = spread(taus)
        if kwargs.get("budget") == "auto":
            out[name]["budgets_chosen"] = dict(sorted(chosen.items()))
        print(law, name, f"tau {out[name]['mean']:.3f} ± {out[name]['sd']:.3f}", flush=True)

    run("chain", {"method": "chain"})
    for b in BUDGETS:
        for name, kwargs in fixed(engine, b).items():
            run(f"{name}, B={b}", kwargs)
    auto = served_default(engine, "h200")
    auto["round_cost"] = h200_costs(len(prompts), auto["auto_budgets"])
    run("served default, auto budget", auto)
    return out


def exact_runs(engine, prompts, max_new, law: dict, seed: int) -> dict:
    """Section 2 for one law: mean exact expected commit per round of each tree on one run's rounds."""
    L = engine.block_size - 1
    rounds = round_contexts.collect(engine, prompts, max_new, method="ddtree", budget=BUDGETS[0], seed=seed, **law)
    N = rounds.tokens.shape[0]
    node_law = NodeLaw(torch.full((N,), law["temperature"]), torch.zeros(N, dtype=torch.int64),
                       torch.full((N,), law.get("top_p", 1.0)), torch.zeros(N), filtered=True)
    cal = load_calibration(engine.draft_dir, L)
    trees = {"paper's tree": (Calibration(), None, None),
             "keys served before (anchored, greedy calibration)": (Calibration(cal.greedy), None, "chain"),
             "served default (law keys, sampling calibration)": (Calibration(cal.greedy, cal.sampling), node_law, None),
             "served default with the anchor": (Calibration(cal.greedy, cal.sampling), node_law, "chain"),
             "law keys, raw": (Calibration(), node_law, None),
             "law keys, raw, with the anchor": (Calibration(), node_law, "chain")}
    out = {"rounds": N}
    for b in BUDGETS:
        built = []
        for keys, by, anchor in trees.values():
            lp, ids = DraftKeys(L, keys)(rounds.draft, b, "cpu", by)
            built.append(build_tree_from_topk(lp, ids, b, root_tokens=rounds.roots(), seq_lens=rounds.lens - 1,
                                              anchor=anchor))
        e = round_contexts.expected_commit(engine, rounds, built, law)
        base = e[:, 0]
        out[f"B={b}"] = {name: {"mean": float(e[:, j].mean()), "vs_paper": float(e[:, j].mean() / base.mean()),
                                "paired_se": float((e[:, j] - base).std() / N ** 0.5)}
                         for j, name in enumerate(trees)}
        print(law, f"B={b}", {k: round(v["vs_paper"], 3) for k, v in out[f"B={b}"].items()}, flush=True)
    return out


def markdown(result: dict) -> str:
    lines = [f"# Sampled traffic, CPU engine ({result['meta']['date'][:10]})\n",
             f"The shipped tiny pair, held-out prompts {FIT_PROMPTS}..{FIT_PROMPTS + result['prompts'] - 1} "
             f"(not used to fit either calibration), {result['max_new_tokens']} new tokens, seeds "
             f"{result['seeds']}; `python -m sglang_ddtree.bench sampled`. τ = tokens committed per target "
             "forward; mean ± sample sd over seeds [min, max].\n"]
    for law, rows in result["tau"].items():
        lines.append(f"\n## {law}: τ\n")
        paper = {b: rows[f"paper's tree, B={b}"]["mean"] for b in BUDGETS}
        table = []
        for name, r in rows.items():
            b = next((b for b in BUDGETS if name.endswith(f"B={b}")), None)
            ratio = f"{r['mean'] / paper[b]:.3f}" if b else ""
            table.append([name, f"{r['mean']:.3f} ± {r['sd']:.3f}", f"[{r['min']:.2f}, {r['max']:.2f}]", ratio,
                          str(r.get("budgets_chosen", ""))])
        lines.append(md_table(["tree", "τ", "range", "× paper's tree (same B)", "budgets auto ran (rounds)"], table))
        ex = result["exact"][law]
        lines.append(f"\n{law}: exact expected commit per round on {ex['rounds']} rounds of one run (paired; "
                     "× the paper's tree, ± paired standard error)\n")
        names = list(ex[f"B={BUDGETS[0]}"])
        lines.append(md_table(["tree"] + [f"B={b}" for b in BUDGETS],
                              [[n] + [f"{ex[f'B={b}'][n]['mean']:.3f} ({ex[f'B={b}'][n]['vs_paper']:.3f}× "
                                      f"± {ex[f'B={b}'][n]['paired_se'] / ex[f'B={b}'][names[0]]['mean']:.3f})"
                                      for b in BUDGETS] for n in names]))
    g = result["greedy"]
    lines.append("\n## Greedy, same prompts\n")
    lines.append(md_table(["tree", "τ"], [[k, f"{v:.3f}"] for k, v in g.items()]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "sampled"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out-dir", type=_cli.output_dir, default=".", help="the folder the JSON and markdown go to")
    ap.add_argument("--stem", default="sampled-cpu", help="the output files' name, without the suffix")
    left = len(heldout_prompts()) - FIT_PROMPTS
    ap.add_argument("--prompts", type=_cli.int_at_most(left, f"{left} held-out prompts follow the calibrations' "
                    "fit prompts"), default=64, help=f"held-out prompts after the first {FIT_PROMPTS} (the "
                    "calibrations' fit prompts; default 64)")
    ap.add_argument("--seeds", type=_cli.positive_int, default=3, help="seeds per variant (default 3)")
    ap.add_argument("--max-new", type=_cli.int_at_most(MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY), default=96,
                    help="tokens generated per prompt (default 96)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    engine = Engine.from_pretrained(device="cpu")
    prompts = heldout_prompts()[FIT_PROMPTS:FIT_PROMPTS + a.prompts]
    seeds = [1000 * s for s in range(a.seeds)]
    result = {"meta": metadata(engine.device), "prompts": len(prompts), "max_new_tokens": a.max_new, "seeds": seeds,
              "tau": {}, "exact": {}}
    for name, law in LAWS.items():
        result["tau"][name] = tau_runs(engine, prompts, a.max_new, law, seeds)
        result["exact"][name] = exact_runs(engine, prompts, a.max_new, law, seeds[0])
    served = served_default(engine, "h200")
    served["round_cost"] = h200_costs(len(prompts), served["auto_budgets"])
    result["greedy"] = {
        "keys served before, auto": summarize(engine.generate(prompts, a.max_new, **{
            **served, "keys": "draft", "sampling_temperature": None}))["tau"],
        "served default, auto": summarize(engine.generate(prompts, a.max_new, **served))["tau"],
        "paper's tree, B=31": summarize(engine.generate(prompts, a.max_new, method="ddtree", budget=31))["tau"]}
    for path in write_outputs(a.out_dir, a.stem, result, markdown(result)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
