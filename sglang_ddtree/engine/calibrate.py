"""Fit the drafter's per-depth temperatures on the shipped tiny pair and check them on prompts they were not
fitted on: reliability per depth, raw and calibrated, and held-out τ of the trees they rank.

The fit and the file format are calibration.py's; this command runs them on the engine's greedy DDTree rounds.
"""
from __future__ import annotations

import json
import os

import torch

from .. import _cli
from ..calibration import FILE, collect, fit_temperature, reliability
from ..sizes import MAX_CUDA_BUDGET
from .data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, MODELS_DIR, heldout_prompts
from .engine import Engine, summarize


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
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    torch.manual_seed(0)
    eng = Engine.from_pretrained(device="cpu")
    prompts = heldout_prompts()
    fit_p, test_p = prompts[:a.fit_prompts], prompts[a.fit_prompts:]
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
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.out}")
    if a.ship:
        dst = os.path.join(MODELS_DIR, "tiny-dflash", FILE)
        with open(dst, "w") as f:
            json.dump({"depth_temperature": temps, "fitted_by": "python -m sglang_ddtree calibration",
                       "fit": f"greedy DDTree (budget 16, chain-anchored) on the first {len(fit_p)} held-out "
                              f"prompts, {a.max_new} tokens each; per-depth temperature scaling (NLL)"}, f, indent=1)
        print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
