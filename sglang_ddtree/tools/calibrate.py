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
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    torch.manual_seed(0)
    eng = Engine.from_pretrained(device="cpu")
    prompts = heldout_prompts()
    fit_p, test_p = prompts[:a.fit_prompts], prompts[a.fit_prompts:]
    if a.ship_sampling:
        return ship_sampling(eng, fit_p, a.max_new)
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
    return {**law, "method": "ddtree", "budget": SAMPLED_BUDGETS[0], "seed": seed}


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


if __name__ == "__main__":
    raise SystemExit(main())
