"""Sampled traffic on the CPU engine: the served default, each request's tree under its own law, against the paper's
tree, the chain and the keys served before (issue 40's measurements).

    python -m sglang_ddtree bench sampled [--out-dir docs/benchmarks] [--stem NAME] [--prompts 64] [--seeds 3]
        [--tau-rows all|headline]

On held-out prompts the calibrations were not fitted on (after the first 100), the shipped tiny pair, for each law
(T 1; T 0.6 with top-p 0.95):
1. τ per seed (mean, sample sd, min and max over seeds): the chain; at budgets 15 and 31 the paper's tree, the served
   default at that fixed budget (a sampled request's tree under its law's raw draft, no anchor, its children drawn
   and verified by recursive rejection sampling: docs/DESIGN.md §3.12), the default before drawn trees (the sampling
   calibration, the top children), drawn trees over the sampling calibration's keys and over the paper's keys; the
   served default with the auto budget (the H200 round costs, as the demo) and the budgets it ran.
2. The same trees scored exactly on the rounds of one run (engine/round_contexts.py: the paper's tree's run at
   budget 15, the first seed): each round's expected commit, paired across trees, so differences of a percent are
   resolved; a drawn tree's is exact for its draw (the verify's rule, rejection.outcome_law), averaged over DRAWS
   draws a round; the drawn tree's shape (keys.DraftKeys.shape_keys): the shipped table at its weight, the law keys
   alone (the default before the table), the table alone (section 4 has the weights compared on fit prompts).
3. Greedy, the same prompts: the keys served before and the served default (greedy keys are unchanged).
4. The draw's sharpness (rejection.DRAW_SHARPNESS) for the served default's drawn tree (its shape table), scored as
   section 2 on the calibration's fit prompts (the first --prompts of them), on prompts the sections above do not
   use; and the shape table's rule and weight as the calibration chose them (its paired scores on its own fit
   prompts, read from the shipped calibration file: tools/calibrate.fit_shape).
--sections picks which of 1-4 run (the rest are left out of the outputs); --tau-rows headline keeps section 1 to the
chain, the paper's tree, the served default at each budget and its auto budget (so that many seeds fit in an hour).
"""
from __future__ import annotations

import statistics

import torch

from .. import _cli
from ..engine import Engine, summarize
from ..engine import round_contexts
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, heldout_prompts
from ..engine.served import h200_costs, served_default
from ..keys import Calibration, DraftKeys, ShapeTable
from ..calibration import FILE, SHAPE_KEY, load_calibration
from ..rejection import DRAW_SHARPNESS, draw_children
from ..round import RoundOps
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
    return {"paper's tree": {"method": "ddtree", "budget": budget, "paper": True},
            "served default": {**served, "budget": budget},
            "served default shaped by its law keys (before the shape table)": {**served, "budget": budget,
                                                                               "drawn_shape": None},
            "the default before drawn trees (sampling calibration, top children)": {
                **served, "budget": budget, "children": "top", "sampling_temperature": "drafter"},
            "law keys with the sampling calibration, drawn children": {**served, "budget": budget,
                                                                       "sampling_temperature": "drafter"},
            "paper's keys, drawn children": {"method": "ddtree", "budget": budget, "children": "drawn", "paper": True}}


def spread(values) -> dict:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "per_seed": values}


HEADLINE = ("paper's tree", "served default")  # --tau-rows headline: section 1's fixed-budget rows


def tau_runs(engine, prompts, max_new, law: dict, seeds, rows: str = "all") -> dict:
    """Section 1 for one law: {variant: spread of τ over seeds}, and the auto budget's chosen budgets; rows 'all' or
    'headline' (HEADLINE at each budget, the chain and the auto budget)."""
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
            if rows == "all" or name in HEADLINE:
                run(f"{name}, B={b}", kwargs)
    auto = served_default(engine, "h200")
    auto["round_cost"] = h200_costs(len(prompts), auto["auto_budgets"])
    run("served default, auto budget", auto)
    return out


DRAWS = 4  # draws of each drawn tree per round in section 2 (their mean is the tree's paired score)
SHARPNESS = (1.0, 1.25, 1.5, 1.75, 2.0)  # section 4: the draw sharpnesses compared on the calibration's fit prompts


WEIGHTS = (0.0,)  # section 2: the shape table at other weights (0: the table alone; 1, the law keys alone, is a row)


def compared_trees(engine, node_law) -> dict:
    """Section 2's trees: name -> (calibration, keys' law, anchor, the draw's sharpness; None: the top children).
    A drawn tree's shape is built from its calibration's shape keys (keys.DraftKeys.shape_keys)."""
    cal = load_calibration(engine.draft_dir, engine.block_size - 1)
    served = Calibration(cal.greedy, cal.sampling)
    shape = cal.shape
    shaped = {}
    if shape is not None:
        shaped = {f"shape table, weight {w}": (Calibration(shape=ShapeTable(w, shape.temperatures, shape.alpha)),
                                               node_law, None, DRAW_SHARPNESS)
                  for w in WEIGHTS if w != shape.weight}
    return {"paper's tree": (Calibration(), None, None, None),
             f"served default (shape table, weight {None if shape is None else shape.weight}; drawn children)": (
                 Calibration(shape=shape), node_law, None, DRAW_SHARPNESS),
             "drawn, shaped by the law keys (the default before the shape table)": (Calibration(), node_law, None,
                                                                                    DRAW_SHARPNESS),
             **shaped,
             "drawn from the keys' own law (sharpness 1)": (Calibration(), node_law, None, 1.0),
             "law keys with the sampling calibration, drawn": (served, node_law, None, DRAW_SHARPNESS),
             "paper's keys, drawn": (Calibration(), None, None, DRAW_SHARPNESS),
             "the default before drawn trees (sampling calibration, top children)": (served, node_law, None, None),
             "the same with the anchor": (served, node_law, "chain", None),
             "law keys, top children": (Calibration(), node_law, None, None),
             "keys served before those (anchored, greedy calibration)": (Calibration(cal.greedy), None, "chain",
                                                                         None)}


def sharpness_trees(engine, node_law) -> dict:
    """Section 4's trees: the served default's drawn tree (its shape table) at each draw sharpness, against the
    paper's tree."""
    shape = load_calibration(engine.draft_dir, engine.block_size - 1).shape
    return {"paper's tree": (Calibration(), None, None, None),
            **{f"drawn, sharpness {s}": (Calibration(shape=shape), node_law, None, s) for s in SHARPNESS}}


def exact_runs(engine, prompts, max_new, law: dict, seed: int, which=compared_trees) -> dict:
    """Section 2 for one law: mean exact expected commit per round of each of which(engine, the rounds' law)'s
    trees on one run's rounds; a drawn tree's the mean over DRAWS draws (each scored exactly for its draw:
    round_contexts.expected_commit's drafts)."""
    L = engine.block_size - 1
    rounds = round_contexts.collect(engine, prompts, max_new, method="ddtree", budget=BUDGETS[0], seed=seed, paper=True,
                                    **law)
    N = rounds.tokens.shape[0]
    node_law = NodeLaw(torch.full((N,), law["temperature"]), torch.zeros(N, dtype=torch.int64),
                       torch.full((N,), law.get("top_p", 1.0)), torch.zeros(N), filtered=True)
    trees = which(engine, node_law)
    ops = RoundOps("cpu")
    out = {"rounds": N, "draws": DRAWS}
    for b in BUDGETS:
        built, drafts, columns = [], [], []
        for name, (keys, by, anchor, sharpness) in trees.items():
            dk = DraftKeys(L, keys)
            lp, ids = dk(rounds.draft, b, "cpu", by)
            shape = lp if sharpness is None else dk.shape_keys(lp, by)  # a drawn tree: its shape keys
            tree = build_tree_from_topk(shape, ids, b, root_tokens=rounds.roots(), seq_lens=rounds.lens - 1,
                                        anchor=anchor)
            for m in range(1 if sharpness is None else DRAWS):
                if sharpness is not None:
                    seeds = torch.arange(N, dtype=torch.int64) + 7919 * (m + 1)
                    t, draft = draw_children(ops, tree, lp, ids, node_law, seeds, torch.zeros_like(seeds), sharpness)
                else:
                    t, draft = tree, None
                built.append(t)
                drafts.append(draft)
                columns.append(name)
        e = round_contexts.expected_commit(engine, rounds, built, law, drafts=drafts)
        per = {name: e[:, [j for j, c in enumerate(columns) if c == name]].mean(1) for name in trees}
        base = per["paper's tree"]
        out[f"B={b}"] = {name: {"mean": float(v.mean()), "vs_paper": float(v.mean() / base.mean()),
                                "paired_se": float((v - base).std() / N ** 0.5)} for name, v in per.items()}
        print(law, f"B={b}", {k: round(v["vs_paper"], 3) for k, v in out[f"B={b}"].items()}, flush=True)
    return out


def markdown(result: dict) -> str:
    # the held-out prompts and seeds are sections 1-3's; section 4 names its own (the calibration's fit prompts)
    where = (f"held-out prompts {FIT_PROMPTS}..{FIT_PROMPTS + result['prompts'] - 1} (not used to fit either "
             f"calibration), " if set(result["sections"]) & {1, 2, 3} else "")
    lines = [f"# Sampled traffic, CPU engine ({result['meta']['date'][:10]})\n",
             f"The shipped tiny pair, {where}{result['max_new_tokens']} new tokens, seeds "
             f"{result['seeds']}; `python -m sglang_ddtree bench sampled --prompts {result['prompts']} --seeds "
             f"{len(result['seeds'])} --sections {','.join(map(str, result['sections']))}"
             f"{' --tau-rows headline' if 1 in result['sections'] and result.get('tau_rows') == 'headline' else ''}`"
             ". τ = tokens committed per target forward; mean ± sample sd over seeds [min, max].\n"]
    for law in LAWS:
        rows = result["tau"].get(law)
        if rows:
            lines.append(f"\n## {law}: τ\n")
            paper = {b: rows[f"paper's tree, B={b}"]["mean"] for b in BUDGETS}
            table = []
            for name, r in rows.items():
                b = next((b for b in BUDGETS if name.endswith(f"B={b}")), None)
                ratio = f"{r['mean'] / paper[b]:.3f}" if b else ""
                table.append([name, f"{r['mean']:.3f} ± {r['sd']:.3f}", f"[{r['min']:.2f}, {r['max']:.2f}]", ratio,
                              str(r.get("budgets_chosen", ""))])
            lines.append(md_table(["tree", "τ", "range", "× paper's tree (same B)", "budgets auto ran (rounds)"],
                                  table))
            lines.append(seed_ratios(rows))
        if law in result["exact"]:
            lines.append(f"\n{law}: exact expected commit per round on {result['exact'][law]['rounds']} rounds of "
                         f"one run (paired; × the paper's tree, ± paired standard error; a drawn tree's over "
                         f"{result['exact'][law]['draws']} draws a round)\n")
            lines.append(exact_table(result["exact"][law]))
    if "greedy" in result:
        lines.append("\n## Greedy, same prompts\n")
        lines.append(md_table(["tree", "τ"], [[k, f"{v:.3f}"] for k, v in result["greedy"].items()]))
    if "sharpness" in result:
        lines.append(f"\n## The draw's sharpness, on the calibration's fit prompts 0..{result['fit_prompts'] - 1}\n")
        lines.append(f"Exact expected commit per round, paired, as above; the shipped sharpness is {DRAW_SHARPNESS}."
                     "\n")
        for law, ex in result["sharpness"].items():
            lines.append(f"\n{law} ({ex['rounds']} rounds)\n")
            lines.append(exact_table(ex))
    if result.get("shape_choice"):
        lines.append(weight_section(result["shape_choice"]))
    return "\n".join(lines)


def seed_ratios(rows: dict) -> str:
    """The served default's τ over the paper's tree's, seed by seed (the same seed and prompts), at each budget: the
    spread of the ratio the table gives by the means."""
    out = []
    for b in BUDGETS:
        mine, paper = rows.get(f"served default, B={b}"), rows.get(f"paper's tree, B={b}")
        if mine and paper:
            r = [x / y for x, y in zip(mine["per_seed"], paper["per_seed"])]
            sd = statistics.stdev(r) if len(r) > 1 else 0.0
            out.append(f"B={b}: mean {statistics.mean(r):.3f}, sd {sd:.3f}, [{min(r):.3f}, {max(r):.3f}], "
                       f"{sum(x >= 1.05 for x in r)} of {len(r)} seeds ≥ 1.05")
    return ("\nThe served default's τ ÷ the paper's tree's, seed by seed: " + "; ".join(out) + ".\n") if out else ""


def shape_choice(engine) -> dict | None:
    """Section 4's shape record: the shipped calibration's shape rule, weight and the paired scores it chose them by
    (tools/calibrate.fit_shape, on its own fit prompts), as the file holds them."""
    import json
    import os

    with open(os.path.join(engine.draft_dir, FILE)) as f:
        data = json.load(f)
    if SHAPE_KEY not in data:
        return None
    return {"weight": data[SHAPE_KEY]["weight"], "fit": data.get(SHAPE_KEY + "_fit"),
            "fitted_by": data.get(SHAPE_KEY + "_fitted_by"), "scores": data.get(SHAPE_KEY + "_scores")}


def weight_section(choice: dict) -> str:
    lines = ["\n## The shape table's rule and weight, as the calibration chose them (its own fit prompts)\n",
             f"{choice['fit']} (`{choice['fitted_by']}`). Paired exact expected commit per round × the paper's tree "
             "(± paired SE), from the shipped calibration file.\n"]
    for law, entry in (choice["scores"] or {}).items():
        budgets = [b for b in entry if b != "rounds"]
        names = list(entry[budgets[0]])
        lines.append(f"\n{law} ({entry['rounds']} rounds)\n")
        lines.append(md_table(["shape"] + [f"B={b}" for b in budgets],
                              [[n] + [f"{entry[b][n]['vs_paper']:.3f}× ± {entry[b][n]['paired_se']:.3f}"
                                      for b in budgets] for n in names]))
    return "\n".join(lines)


def exact_table(ex: dict) -> str:
    names = list(ex[f"B={BUDGETS[0]}"])
    return md_table(["tree"] + [f"B={b}" for b in BUDGETS],
                    [[n] + [f"{ex[f'B={b}'][n]['mean']:.3f} ({ex[f'B={b}'][n]['vs_paper']:.3f}× "
                            f"± {ex[f'B={b}'][n]['paired_se'] / ex[f'B={b}'][names[0]]['mean']:.3f})"
                            for b in BUDGETS] for n in names])


def _sections(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",")})
    except ValueError:
        out = []
    if not out or not set(out) <= {1, 2, 3, 4}:
        raise _cli.argparse.ArgumentTypeError(f"must be some of 1,2,3,4 comma-separated, got {text!r}")
    return out


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
    ap.add_argument("--sections", type=_sections, default=[1, 2, 3, 4],
                    help="which of the sections (module docstring) run, comma-separated (default 1,2,3,4)")
    ap.add_argument("--tau-rows", choices=("all", "headline"), default="all",
                    help="section 1's rows: all, or the chain, the paper's tree and the served default (default all)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    engine = Engine.from_pretrained(device="cpu")
    prompts = heldout_prompts()[FIT_PROMPTS:FIT_PROMPTS + a.prompts]
    seeds = [1000 * s for s in range(a.seeds)]
    result = {"meta": metadata(engine.device), "prompts": len(prompts), "max_new_tokens": a.max_new, "seeds": seeds,
              "sections": a.sections, "tau_rows": a.tau_rows, "tau": {}, "exact": {}}
    for name, law in LAWS.items():
        if 1 in a.sections:
            result["tau"][name] = tau_runs(engine, prompts, a.max_new, law, seeds, a.tau_rows)
        if 2 in a.sections:
            result["exact"][name] = exact_runs(engine, prompts, a.max_new, law, seeds[0])
    if 3 in a.sections:
        served = served_default(engine, "h200")
        served["round_cost"] = h200_costs(len(prompts), served["auto_budgets"])
        result["greedy"] = {
            "keys served before, auto": summarize(engine.generate(prompts, a.max_new, **{
                **served, "keys": "draft", "sampling_temperature": None}))["tau"],
            "served default, auto": summarize(engine.generate(prompts, a.max_new, **served))["tau"],
            "paper's tree, B=31": summarize(engine.generate(prompts, a.max_new, method="ddtree", budget=31,
                                                            paper=True))["tau"]}
    if 4 in a.sections:
        fit = heldout_prompts()[:min(a.prompts, FIT_PROMPTS)]
        result["fit_prompts"] = len(fit)
        result["sharpness"] = {name: exact_runs(engine, fit, a.max_new, law, seeds[0], sharpness_trees)
                               for name, law in LAWS.items()}
        result["shape_choice"] = shape_choice(engine)
    for path in write_outputs(a.out_dir, a.stem, result, markdown(result)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
