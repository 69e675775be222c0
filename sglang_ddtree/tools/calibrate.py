"""Fit the drafter's per-depth temperatures on the shipped tiny pair and check them on prompts they were not
fitted on: reliability per depth, raw and calibrated, and held-out τ of the trees they rank.

Two calibrations (calibration.py has the fits and the file format): the greedy one on the engine's greedy DDTree
rounds, and the sampling one on sampled rounds (SAMPLED_LAWS) against the target's distribution; the sampled
trees are scored by their exact expected commit on the held-out rounds (engine/round_contexts.py), raw and calibrated.
"""
from __future__ import annotations

import json
import os

import torch

from .. import _cli
from ..calibration import FILE, SAMPLING_KEY, collect, fit_sampling_temperatures, fit_temperature, reliability
from ..calibration import SHAPE_KEY, fit_shape_table, shape_entry
from ..keys import Calibration, DraftKeys
from ..sampling import NodeLaw
from ..sizes import MAX_CUDA_BUDGET
from ..tree import build_tree_from_topk
from ..engine import round_contexts
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, MODELS_DIR, heldout_prompts
from ..engine.engine import Engine, summarize

# the laws sampled rounds are collected under (the chat traffic: T = 1, and T = 0.6 with top-p 0.95), and the
# budgets their trees are scored at
SAMPLED_LAWS = ({"temperature": 1.0}, {"temperature": 0.6, "top_p": 0.95})
SAMPLED_BUDGETS = (15, 31)


def parse_args(argv):
    """The options, every value checked here (before the models load): one line naming the option otherwise."""
    available = len(heldout_prompts())
    ap = _cli.Parser(prog=_cli.prog("calibration"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=_cli.output_file, default="calibration.json",
                    help="the JSON to write: temperatures, reliability and tau on the test prompts")
    ap.add_argument("--fit-prompts", type=_cli.int_at_most(available - 1, f"{available} held-out prompts are "
                    "shipped and at least one must test"), default=100,
                    help="the first N held-out prompts fit; the rest test (default 100)")
    ap.add_argument("--max-new", type=_cli.int_at_most(MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY), default=48,
                    help="tokens generated per prompt (default 48)")
    ap.add_argument("--budgets", type=_cli.int_list_at_most(MAX_CUDA_BUDGET, "the largest budget SGLang serves"),
                    default=[8, 16, 32, 64], help="tree budgets the test tau is measured at, comma-separated "
                    "(default 8,16,32,64)")
    ap.add_argument("--ship", action="store_true", help=f"also write {FILE} into the shipped drafter's directory")
    ap.add_argument("--ship-sampling", action="store_true",
                    help=f"only fit the sampling calibration on the fit prompts and write it into the shipped "
                         f"{FILE}, keeping its greedy entries as they are (no held-out evaluation, no --out)")
    ap.add_argument("--ship-shape", action="store_true",
                    help=f"only fit the drawn trees' shape table and weight on the fit prompts (the table on the "
                         f"first half, the weight on the second) and write them into the shipped {FILE}, keeping its "
                         f"other entries as they are")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    torch.manual_seed(0)
    eng = Engine.from_pretrained(device="cpu")
    prompts = heldout_prompts()
    fit_p, test_p = prompts[:a.fit_prompts], prompts[a.fit_prompts:]
    if a.ship_sampling:
        return ship_sampling(eng, fit_p, a.max_new)
    if a.ship_shape:
        return ship_shape(eng, fit_p, a.max_new)
    pairs = collect(eng, fit_p, a.max_new)
    temps = [fit_temperature(x, y) for x, y in pairs]
    test_pairs = collect(eng, test_p, a.max_new)
    out = {"fit_prompts": len(fit_p), "test_prompts": len(test_p), "max_new_tokens": a.max_new,
           "depth_temperature": temps,
           "reliability_test": [{"depth": d + 1, "raw": reliability(x, y), "calibrated": reliability(x, y, t)}
                                for d, ((x, y), t) in enumerate(zip(test_pairs, temps))],
           "tau_test": {}}
    print("depth temperatures:", ", ".join(f"{t:.3f}" for t in temps), flush=True)
    ar = eng.generate(test_p, a.max_new, method="ar")
    out["tau_test"]["chain"] = summarize(eng.generate(test_p, a.max_new, method="chain"))["tau"]
    for b in a.budgets:
        for anchor in (None, "chain"):
            for name, cal in (("raw", None), ("calibrated", temps)):
                r = eng.generate(test_p, a.max_new, method="ddtree", budget=b, anchor=anchor, draft_temperature=cal)
                key = f"b{b}_{'anchored' if anchor else 'paper'}_{name}"
                out["tau_test"][key] = {"tau": summarize(r)["tau"],
                                        "identical_to_ar": sum(x.token_ids == y.token_ids for x, y in zip(r, ar))}
                print(key, out["tau_test"][key], flush=True)
    sampling = sampled_fit(eng, fit_p, test_p, a.max_new, temps, out)
    _cli.write_json(a.out, out)
    print(f"wrote {a.out}")
    if a.ship:
        dst = os.path.join(MODELS_DIR, "tiny-dflash", FILE)
        with open(dst, "w") as f:
            json.dump({"depth_temperature": temps, SAMPLING_KEY: sampling,
                       "fitted_by": "python -m sglang_ddtree calibration",
                       "fit": f"greedy DDTree (budget 16, chain-anchored) on the first {len(fit_p)} held-out "
                              f"prompts, {a.max_new} tokens each; per-depth temperature scaling (NLL)",
                       "sampling_fit": _sampling_fit_note(len(fit_p), a.max_new)}, f, indent=1)
        print(f"wrote {dst}")
    return 0


def _sampling_fit_note(prompts: int, max_new: int) -> str:
    return (f"sampled rounds ({'; '.join(map(_law_name, SAMPLED_LAWS))}; DDTree budget {SAMPLED_BUDGETS[0]}, "
            f"seed 11) on the first {prompts} held-out prompts (the greedy fit's), {max_new} tokens each; "
            "per-depth temperature minimising the cross-entropy of the target's distribution "
            "(calibration.fit_sampling_temperatures)")


def ship_sampling(eng, fit_p, max_new: int) -> int:
    """Fit only the sampling calibration (fit_sampling) and add it to the shipped file, its greedy entries and
    their metadata left as they are."""
    dst = os.path.join(MODELS_DIR, "tiny-dflash", FILE)
    with open(dst) as f:
        shipped = json.load(f)
    temps = fit_sampling(eng, fit_p, max_new)
    shipped[SAMPLING_KEY] = temps
    shipped["sampling_fitted_by"] = (f"python -m sglang_ddtree calibration --ship-sampling --fit-prompts "
                                     f"{len(fit_p)} --max-new {max_new}")
    shipped["sampling_fit"] = _sampling_fit_note(len(fit_p), max_new)
    with open(dst, "w") as f:
        json.dump(shipped, f, indent=1)
    print(f"wrote {dst}")
    return 0


def fit_sampling(eng, fit_p, max_new: int) -> list[float]:
    """The sampling calibration's temperatures, fitted on sampled rounds of fit_p under each of SAMPLED_LAWS."""
    fit = [round_contexts.collect(eng, fit_p, max_new, **_seeded(law, 11)) for law in SAMPLED_LAWS]
    temps = fit_sampling_temperatures(torch.cat([r.draft for r in fit]), torch.cat([r.target for r in fit]))
    print("sampling depth temperatures:", ", ".join(f"{t:.3f}" for t in temps), flush=True)
    return temps


def _seeded(law: dict, seed: int) -> dict:
    return {**law, "method": "ddtree", "budget": SAMPLED_BUDGETS[0], "seed": seed, "paper": True}


def _law_name(law: dict) -> str:
    return ", ".join(f"{k.replace('temperature', 'T')} {v:g}" for k, v in law.items())


def sampled_fit(eng, fit_p, test_p, max_new: int, greedy, out: dict) -> list[float]:
    """The sampling calibration fitted on sampled rounds of fit_p; on test_p's rounds, per law: its reliability
    (the drafter's top-1 under the target's law, raw and calibrated) and every scored tree's mean exact expected
    commit per round. Writes both into out; returns the temperatures."""
    L = eng.block_size - 1
    temps = fit_sampling(eng, fit_p, max_new)
    out[SAMPLING_KEY] = temps
    out["sampling_test"] = []
    trees = {"paper": (Calibration(), False, None), "today's default (greedy keys, anchored)":
             (Calibration(tuple(greedy)), False, "chain"), "law, raw": (Calibration(), True, None),
             "law, calibrated": (Calibration(sampling=tuple(temps)), True, None),
             "law, calibrated, anchored": (Calibration(sampling=tuple(temps)), True, "chain")}
    for law in SAMPLED_LAWS:
        rounds = round_contexts.collect(eng, test_p, max_new, **_seeded(law, 12))
        N, T = rounds.tokens.shape[0], law["temperature"]
        node_law = NodeLaw(torch.full((N,), T), torch.zeros(N, dtype=torch.int64),
                           torch.full((N,), law.get("top_p", 1.0)),
                           torch.zeros(N), filtered=True)
        entry = {"law": law, "rounds": N, "reliability": [], "expected_commit": {}}
        for d in range(L):
            y = rounds.target[:, d]
            ok = ~torch.isnan(y).any(-1)
            q, x = round_contexts.node_laws(y[ok], **law), rounds.draft[ok, d] / T
            entry["reliability"].append({"depth": d + 1, "raw": reliability(x, q),
                                         "calibrated": reliability(x, q, temps[d])})
        for b in SAMPLED_BUDGETS:
            built = []
            for cal, by_law, anchor in trees.values():
                lp, ids = DraftKeys(L, cal)(rounds.draft, b, "cpu", node_law if by_law else None)
                built.append(build_tree_from_topk(lp, ids, b, root_tokens=rounds.roots(), seq_lens=rounds.lens - 1,
                                                  anchor=anchor))
            e = round_contexts.expected_commit(eng, rounds, built, law)
            entry["expected_commit"][b] = {name: float(e[:, j].mean()) for j, name in enumerate(trees)}
            print(_law_name(law), f"budget {b}: expected commit per round", entry["expected_commit"][b], flush=True)
        out["sampling_test"].append(entry)
    return temps


# drawn trees' shape table (docs/DESIGN.md §3.12): fitted on the served default's drawn tree of SHAPE_FIT_BUDGET,
# SHAPE_DRAWS draws a round; the weight chosen among SHAPE_WEIGHTS on other prompts by the paired exact score
SHAPE_FIT_BUDGET, SHAPE_SLOTS, SHAPE_DRAWS = 63, 32, 4
SHAPE_WEIGHTS = (0.25, 0.5, 0.75, 1.0)


def _node_law(law: dict, N: int) -> NodeLaw:
    return NodeLaw(torch.full((N,), law["temperature"]), torch.zeros(N, dtype=torch.int64),
                   torch.full((N,), law.get("top_p", 1.0)), torch.zeros(N), filtered=True)


def _drawn(rounds, shape_lp, lp, ids, budget: int, node_law, draws: int = SHAPE_DRAWS):
    """[(tree, draft)] draws of the served default's drawn tree, its shape built from shape_lp."""
    from ..rejection import DRAW_SHARPNESS, draw_children
    from ..round import RoundOps

    N = rounds.tokens.shape[0]
    tree = build_tree_from_topk(shape_lp, ids, budget, root_tokens=rounds.roots(), seq_lens=rounds.lens - 1)
    out = []
    for m in range(draws):
        seeds = torch.arange(N, dtype=torch.int64) + 7919 * (m + 1)
        out.append(draw_children(RoundOps("cpu"), tree, lp, ids, node_law, seeds, torch.zeros_like(seeds),
                                 DRAW_SHARPNESS))
    return out


def shape_alpha(eng, prompts, max_new: int, law: dict) -> list[list[float]]:
    """alpha [L][SHAPE_SLOTS] of one law (calibration.fit_shape_table) on sampled rounds of prompts (the paper's
    tree's run, seed 11): every node of the served default's drawn tree (law keys, budget SHAPE_FIT_BUDGET), its
    exact chance to be taken given its parent reached, over SHAPE_DRAWS draws."""
    from ..rejection import sibling_index

    L = eng.block_size - 1
    rounds = round_contexts.collect(eng, prompts, max_new, **_seeded(law, 11))
    nl = _node_law(law, rounds.tokens.shape[0])
    lp, ids = DraftKeys(L, Calibration())(rounds.draft, SHAPE_FIT_BUDGET, "cpu", nl)
    drawn = _drawn(rounds, lp, lp, ids, SHAPE_FIT_BUDGET, nl)
    steps = round_contexts.node_steps(eng, rounds, [t for t, _ in drawn], law, drafts=[d for _, d in drawn])
    taken, depth, slot = [], [], []
    for (t, _), step in zip(drawn, steps):
        par, sib = sibling_index(t, t.n)
        real = (torch.arange(t.n)[None, :] < t.num_nodes[:, None]) & (par >= 0)
        taken.append(step[real]), depth.append(t.depths.long()[real]), slot.append(sib[real])
    alpha = fit_shape_table(torch.cat(taken), torch.cat(depth), torch.cat(slot), L, SHAPE_SLOTS)
    print(_law_name(law), f"{rounds.tokens.shape[0]} rounds; alpha[:, :4]", [[round(a, 3) for a in row[:4]]
                                                                             for row in alpha], flush=True)
    return alpha


def shape_scores(eng, prompts, max_new: int, tables: dict, weights=SHAPE_WEIGHTS) -> dict:
    """The paired exact expected commit (× the paper's tree, and its paired SE) of the served default's drawn tree
    shaped by each rule and weight, per law and budget, on sampled rounds of prompts (seed 12). tables: rule name ->
    keys.ShapeTable factory of a weight."""
    L = eng.block_size - 1
    out = {}
    for law in SAMPLED_LAWS:
        rounds = round_contexts.collect(eng, prompts, max_new, **_seeded(law, 12))
        N = rounds.tokens.shape[0]
        nl = _node_law(law, N)
        out[_law_name(law)] = entry = {"rounds": N}
        for b in SAMPLED_BUDGETS:
            lp, ids = DraftKeys(L, Calibration())(rounds.draft, b, "cpu", nl)
            pp, pi = DraftKeys(L, Calibration())(rounds.draft, b, "cpu", None)
            trees, drafts, cols = [build_tree_from_topk(pp, pi, b, root_tokens=rounds.roots(),
                                                        seq_lens=rounds.lens - 1)], [None], ["paper"]
            variants, same = {"law keys": lp}, {}
            for rule, table in tables.items():
                for w in weights:
                    shp = DraftKeys(L, Calibration(shape=table(w))).shape_keys(lp, nl)
                    name = f"{rule}, w {w}"
                    twin = next((k for k, x in variants.items() if torch.equal(x, shp)), None)
                    same[name] = twin or name  # equal keys (both rules' table at this law): scored once
                    if twin is None:
                        variants[name] = shp
            for name, shp in variants.items():
                for t, d in _drawn(rounds, shp, lp, ids, b, nl):
                    trees.append(t), drafts.append(d), cols.append(name)
            e = round_contexts.expected_commit(eng, rounds, trees, law, drafts=drafts)
            base = e[:, 0]
            entry[b] = {}
            for name in ["law keys", *same]:
                v = e[:, [j for j, c in enumerate(cols) if c == same.get(name, name)]].mean(1)
                entry[b][name] = {"vs_paper": float(v.mean() / base.mean()),
                                  "paired_se": float((v - base).std() / N ** 0.5 / base.mean()), "per_round": v}
            print(_law_name(law), f"budget {b}:", {k: round(x["vs_paper"], 4) for k, x in entry[b].items()},
                  flush=True)
    return out


def choose_shape(scores: dict, rules, weights=SHAPE_WEIGHTS) -> tuple[str, float, dict]:
    """(rule, weight, summary): per rule the weight with the best mean ratio over laws and budgets; the first rule
    (the simplest) unless a later one's best beats it by more than 2 paired SEs of their per-round difference at
    some law and budget without losing more than that at another."""
    cells = [(law, b) for law in scores for b in SAMPLED_BUDGETS]
    best = {}
    for rule in rules:
        mean = {w: sum(scores[law][b][f"{rule}, w {w}"]["vs_paper"] for law, b in cells) / len(cells) for w in weights}
        best[rule] = max(weights, key=lambda w: mean[w])
    chosen = rules[0]
    for rule in rules[1:]:
        diffs = []
        for law, b in cells:
            x = scores[law][b][f"{rule}, w {best[rule]}"]["per_round"]
            y = scores[law][b][f"{chosen}, w {best[chosen]}"]["per_round"]
            d = x - y
            diffs.append((float(d.mean()), float(d.std() / len(d) ** 0.5)))
        if any(m > 2 * se for m, se in diffs) and not any(m < -2 * se for m, se in diffs):
            chosen = rule
    summary = {law: {b: {k: {"vs_paper": v["vs_paper"], "paired_se": v["paired_se"]} for k, v in e[b].items()}
                     for b in SAMPLED_BUDGETS} | {"rounds": e["rounds"]} for law, e in scores.items()}
    return chosen, best[chosen], summary


def fit_shape(eng, fit_p, max_new: int) -> tuple[dict, dict]:
    """(the file's SHAPE_KEY entry, the fit's record): alpha per law of SAMPLED_LAWS on the first half of fit_p,
    the rule (one table, T = 1's, or one per law interpolated in temperature) and the weight on the second half."""
    from ..keys import ShapeTable

    half = len(fit_p) // 2
    alphas = [(law, shape_alpha(eng, fit_p[:half], max_new, law)) for law in SAMPLED_LAWS]
    one = [(law, a) for law, a in alphas if law["temperature"] == 1.0]
    rules = {"one table (T 1's)": one, "one table per law, interpolated in temperature": alphas}

    def factory(tabs):
        tabs = sorted(tabs, key=lambda x: x[0]["temperature"])
        return lambda w: ShapeTable(w, tuple(law["temperature"] for law, _ in tabs), tuple(a for _, a in tabs))

    scores = shape_scores(eng, fit_p[half:], max_new, {rule: factory(t) for rule, t in rules.items()})
    rule, w, summary = choose_shape(scores, list(rules))
    print(f"shape: {rule}, weight {w}", flush=True)
    record = {"rule": rule, "weight": w, "scores": summary, "alpha_prompts": half, "weight_prompts": len(fit_p) - half}
    return shape_entry(w, rules[rule]), record


def ship_shape(eng, fit_p, max_new: int) -> int:
    """Fit only the drawn trees' shape (fit_shape) and add it to the shipped file with its scores, its other
    entries as they are."""
    dst = os.path.join(MODELS_DIR, "tiny-dflash", FILE)
    with open(dst) as f:
        shipped = json.load(f)
    entry, record = fit_shape(eng, fit_p, max_new)
    half = record["alpha_prompts"]
    shipped[SHAPE_KEY] = entry
    shipped[SHAPE_KEY + "_fitted_by"] = (f"python -m sglang_ddtree calibration --ship-shape --fit-prompts "
                                         f"{len(fit_p)} --max-new {max_new}")
    shipped[SHAPE_KEY + "_fit"] = (
        f"alpha, per law, on sampled rounds ({'; '.join(map(_law_name, SAMPLED_LAWS))}; the paper's tree, budget "
        f"{SAMPLED_BUDGETS[0]}, seed 11) on held-out prompts 0..{half - 1}, {max_new} tokens each; per (depth, "
        f"sibling slot) the mean exact chance that a node of the served default's drawn tree (law keys, budget "
        f"{SHAPE_FIT_BUDGET}, {SHAPE_DRAWS} draws) is taken given its parent reached (calibration.fit_shape_table). "
        f"Rule and weight: the paired exact expected commit against the paper's tree (budgets "
        f"{', '.join(map(str, SAMPLED_BUDGETS))}, seed 12) on held-out prompts {half}..{len(fit_p) - 1}: "
        f"{record['rule']}, weight {record['weight']} of {list(SHAPE_WEIGHTS)} (tools/calibrate.choose_shape); "
        f"the file holds the chosen rule's tables")
    shipped[SHAPE_KEY + "_scores"] = record["scores"]
    with open(dst, "w") as f:
        json.dump(shipped, f, indent=1)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
